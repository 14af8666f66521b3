//! The speed side of `gen stats`, `gen tactics` and `gen model`: the per-role figures measured
//! in the simulator (docs/role-stats.json, written by moegen-validation's `role-stats`),
//! checked against the PTX they were measured on, printed beside the production reference's
//! (§A2 of ../shared/anchors.md); and the analytic B200 model ([`model`]) over tactics.
//!
//! - [`anchors`]: the production reference kernels' resource figures.
//! - [`reference`](mod@reference): the production reference's per-role costs.
//! - [`role_stats`]: the schema of docs/role-stats.json.
//! - [`model`]: the analytic model.

pub mod anchors;
pub mod model;
pub mod reference;
pub mod role_stats;

use std::fmt::Write as _;
use std::path::PathBuf;

use moegen_dsl::abi::GemmKey;
use moegen_dsl::{DescError, FinalizeMode, KernelDescBuilder, MoeTactic, Target, nvfp4_tactics};
use serde::Serialize;

use crate::check::KernelStats;
use model::{GemmCosts, Machine, Overlap, TacticEstimate, Workload, estimate_tactic};
use reference::reference_costs;
use role_stats::{KernelRoleStats, Role, RoleStatsFile};

/// Where the measured per-role figures live.
pub fn role_stats_path() -> PathBuf {
    crate::tools::workspace_root().join("docs/role-stats.json")
}

/// Why the per-role figures or the model could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// docs/role-stats.json exists but cannot be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// docs/role-stats.json does not follow the schema.
    #[error("{}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// A tactic's GEMM has no valid description.
    #[error("{tactic}: {source}")]
    Desc {
        /// The GEMM tactic.
        tactic: String,
        /// Why it was refused.
        #[source]
        source: DescError,
    },
    /// A kernel the model needs was not measured.
    #[error("{kernel}: not in docs/role-stats.json")]
    NotMeasured {
        /// The kernel.
        kernel: String,
    },
}

/// Reads docs/role-stats.json (`None` when absent).
pub fn load_role_stats() -> Result<Option<RoleStatsFile>, PerfError> {
    let path = role_stats_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(PerfError::Read { path, source }),
    };
    serde_json::from_str(&text).map(Some).map_err(|source| PerfError::Parse { path, source })
}

fn cell(v: Option<f64>) -> String {
    // Marginal figures carry float noise around zero; print it as 0.
    v.map_or("-".to_owned(), |x| format!("{:.1}", if x.abs() < 0.05 { 0.0 } else { x }))
}

fn pair(ours: Option<f64>, reference: Option<f64>) -> String {
    match reference {
        Some(r) => format!("{} ({r:.0})", cell(ours)),
        None => cell(ours),
    }
}

/// The per-role table: dynamic PTX instructions per executing warp per K block (per thread
/// for the gather, per output element and thread for the epilogue), §A2's SASS figures in
/// parentheses, fences and barrier operations per K block of the MMA issuer, bulk operations
/// per tile and epilogue warp. (Memory barriers by scope are in the SASS facts: a release
/// at cluster scope is an mbarrier arrive in PTX and a `MEMBAR.ALL.GPU` in SASS.)
pub fn render_roles(rows: &[KernelStats]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "per warp role: dynamic PTX per K block (gather: per thread; epilogue: issue slots, the \
         PTX less its `mov`s (pair packing, copies, address conversions) as the B200 model \
         counts them, per output element and thread), from docs/role-stats.json; (§A2 \
         reference SASS)"
    );
    let _ = writeln!(
        s,
        "{:<46} {:>12} {:>12} {:>12} {:>6} {:>10} {:>7} {:>7} {:>7}",
        "kernel", "producer", "mma", "gather", "relay", "epilogue", "fence/K", "bar/K", "bulk/t"
    );
    for r in rows.iter().filter(|r| r.family.starts_with("gemm")) {
        let Some(st) = &r.roles else {
            let _ = writeln!(s, "{:<46} (not measured: run role-stats)", r.kernel);
            continue;
        };
        let fig = |role: Role| st.role(role).map(|f| f.total());
        let rf = r.role_reference;
        let mma = st.role(Role::Mma);
        let epi = st.role(Role::Epilogue);
        let _ = writeln!(
            s,
            "{:<46} {:>12} {:>12} {:>12} {:>6} {:>10} {:>7} {:>7} {:>7}{}",
            r.kernel,
            pair(fig(Role::Producer), rf.map(|x| x.producer_per_k_block)),
            pair(fig(Role::Mma), rf.map(|x| x.mma_per_k_block)),
            pair(fig(Role::Gather), rf.and_then(|x| x.gather_per_k_block)),
            cell(fig(Role::Relay)),
            // `.f32x2` pairs cost a pack and an unpack `mov` each in PTX, register pairs in
            // SASS: the epilogue is compared without them, as the model counts it.
            pair(
                epi.map(|f| f.total() - f.category("mov")),
                rf.and_then(|x| x.epilogue_per_element)
            ),
            cell(mma.map(|f| f.fences())),
            cell(mma.map(|f| f.barrier_ops())),
            cell(epi.map(|f| f.bulk_ops_per_tile())),
            if r.roles_fresh == Some(false) { "  STALE" } else { "" }
        );
    }
    s
}

/// The SASS facts per GEMM kernel (static counts).
pub fn render_sass_facts(rows: &[KernelStats]) -> String {
    const FACTS: [&str; 11] = [
        "CALL",
        "BSSY",
        "MUFU",
        "FMUL2",
        "FFMA2",
        "MEMBAR.CTA",
        "MEMBAR.GPU",
        "FENCE.VIEW.ASYNC",
        "UBLKRED",
        "UBLKCP",
        "UTMACCTL.PF",
    ];
    let mut s = String::new();
    let _ = write!(s, "{:<46}", "SASS facts (static)");
    for f in FACTS {
        let _ = write!(s, " {:>w$}", f, w = f.len().max(5));
    }
    s.push('\n');
    for r in rows.iter().filter(|r| r.family.starts_with("gemm")) {
        let _ = write!(s, "{:<46}", r.kernel);
        for f in FACTS {
            let _ = write!(s, " {:>w$}", r.sass.get(f), w = f.len().max(5));
        }
        s.push('\n');
    }
    s
}

/// The fraction of moegen's epilogue that precedes an early release of overlapping
/// accumulators: the first half of the tile's columns (docs/kernels.md).
pub const EARLY_RELEASE_FRACTION: f64 = 0.5;

/// How a kernel's accumulators overlap the next tile's mainloop, from its budget: two
/// disjoint buffers overlap fully; two that share columns after the first half of the
/// epilogue; one not at all.
pub fn overlap_of(key: &GemmKey) -> Result<Overlap, PerfError> {
    let desc = key.desc().map_err(|source| PerfError::Desc { tactic: key.name(), source })?;
    let b = desc.budget();
    Ok(match (b.acc_stages, b.acc_overlap_columns) {
        (0 | 1, _) => Overlap::None,
        (_, 0) => Overlap::Full,
        _ => Overlap::EarlyRelease(EARLY_RELEASE_FRACTION),
    })
}

fn key_of(g: &moegen_dsl::GemmTactic) -> Result<GemmKey, PerfError> {
    let mut d = KernelDescBuilder::new(*g).target(Target::Sm100f);
    if g.kind() == moegen_dsl::GemmKind::Gemm2 {
        d = d.finalize(FinalizeMode::BulkReduceAdd);
    }
    d.build().map(|d| d.key()).map_err(|source| PerfError::Desc { tactic: g.to_string(), source })
}

fn costs_of(
    file: &RoleStatsFile,
    m: &Machine,
    g: &moegen_dsl::GemmTactic,
) -> Result<GemmCosts, PerfError> {
    let key = key_of(g)?;
    let s: &KernelRoleStats =
        file.kernel(&key.name()).ok_or_else(|| PerfError::NotMeasured { kernel: key.name() })?;
    Ok(GemmCosts::from_role_stats(s, m, overlap_of(&key)?))
}

/// One tactic under the model, both implementations.
#[derive(Clone, Debug, Serialize)]
pub struct TacticModel {
    /// Tactic.
    pub tactic: String,
    /// moegen.
    pub moegen: TacticEstimate,
    /// The reference with the same tiling.
    pub reference: TacticEstimate,
}

/// One batch size.
#[derive(Clone, Debug, Serialize)]
pub struct BatchModel {
    /// Workload.
    pub workload: Workload,
    /// Every tactic.
    pub tactics: Vec<TacticModel>,
    /// moegen's fastest tactic and its time (µs).
    pub moegen_best: (String, f64),
    /// The reference's fastest tactic and its time (µs).
    pub reference_best: (String, f64),
}

/// The model over batch sizes.
#[derive(Clone, Debug, Serialize)]
pub struct ModelReport {
    /// The machine.
    pub machine: Machine,
    /// Per batch size.
    pub batches: Vec<BatchModel>,
}

fn best<'a>(v: impl Iterator<Item = (&'a str, f64)>) -> (String, f64) {
    v.fold(
        (String::new(), f64::INFINITY),
        |acc, (n, t)| {
            if t < acc.1 { (n.to_owned(), t) } else { acc }
        },
    )
}

/// Estimates every NVFP4 tactic for each workload, moegen (its measured per-role figures)
/// beside the reference (§A2's) under the same model.
pub fn model_report(
    workloads: &[Workload],
    file: &RoleStatsFile,
) -> Result<ModelReport, PerfError> {
    let m = Machine::B200;
    let mut batches = Vec::with_capacity(workloads.len());
    for w in workloads {
        let mut tactics = Vec::new();
        for t in nvfp4_tactics() {
            let t: MoeTactic = t;
            let g = |g: &moegen_dsl::GemmTactic| {
                reference_costs(g.kind(), g.tile(), g.mma_tiler()[1], m.bulk_lane_slots)
            };
            let ours = estimate_tactic(
                &m,
                w,
                &t,
                &costs_of(file, &m, t.gemm1())?,
                &costs_of(file, &m, t.gemm2())?,
            );
            let theirs = estimate_tactic(&m, w, &t, &g(t.gemm1()), &g(t.gemm2()));
            tactics.push(TacticModel { tactic: t.to_string(), moegen: ours, reference: theirs });
        }
        let moegen_best = best(tactics.iter().map(|t| (t.tactic.as_str(), t.moegen.total_us)));
        let reference_best =
            best(tactics.iter().map(|t| (t.tactic.as_str(), t.reference.total_us)));
        batches.push(BatchModel { workload: *w, tactics, moegen_best, reference_best });
    }
    Ok(ModelReport { machine: m, batches })
}

/// The model as a table: per batch size, each side's fastest tactic and its time, with the
/// GEMM split and what bounds each GEMM.
pub fn render_model(r: &ModelReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "analytic B200 model (docs/perf.md): {} SMs, {} GHz, {} FP4 MAC/clk/SM, HBM {:.1} TB/s × {}, \
         {} µs fixed per kernel, CPI {}",
        r.machine.sms,
        r.machine.clock_ghz,
        r.machine.fp4_mac_per_clk_per_sm,
        r.machine.hbm_bytes_per_s / 1e12,
        r.machine.hbm_efficiency,
        r.machine.fixed_us,
        r.machine.cpi
    );
    let _ = writeln!(
        s,
        "{:>6} | {:<46} {:>7} {:>7} {:>7} {:<16} | {:<46} {:>7} {:>7} {:>7} {:<16} | {:>6}",
        "tokens",
        "moegen tactic",
        "G1 µs",
        "G2 µs",
        "total",
        "bound (G1/G2)",
        "reference tactic",
        "G1 µs",
        "G2 µs",
        "total",
        "bound (G1/G2)",
        "ratio"
    );
    for b in &r.batches {
        let find = |name: &str| b.tactics.iter().find(|t| t.tactic == name);
        let (Some(o), Some(t)) = (find(&b.moegen_best.0), find(&b.reference_best.0)) else {
            continue;
        };
        let (ours, theirs) = (&o.moegen, &t.reference);
        let _ = writeln!(
            s,
            "{:>6} | {:<46} {:>7.1} {:>7.1} {:>7.1} {:<16} | {:<46} {:>7.1} {:>7.1} {:>7.1} {:<16} | {:>6.3}",
            b.workload.tokens,
            o.tactic,
            ours.gemm1.total_us,
            ours.gemm2.total_us,
            ours.total_us,
            format!("{}/{}", ours.gemm1.bound, ours.gemm2.bound),
            t.tactic,
            theirs.gemm1.total_us,
            theirs.gemm2.total_us,
            theirs.total_us,
            format!("{}/{}", theirs.gemm1.bound, theirs.gemm2.bound),
            ours.total_us / theirs.total_us
        );
    }
    s
}
