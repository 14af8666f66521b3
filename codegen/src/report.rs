//! The reports `gen` prints: the tactic table and the workspace plan, as text and JSON.

use std::fmt::Write as _;

use crate::perf::anchors::{ReferenceKernel, reference_kernel};
use moegen_dsl::plan::{PlanError, WorkspacePlan, WorkspaceRequest, plan_workspace};
use moegen_dsl::{GemmTactic, KernelBudget, MoeTactic, ResourceError, Target, TileSize, plan_gemm};
use serde::Serialize;

/// One GEMM kernel of a tactic, with its budget.
#[derive(Clone, Debug, Serialize)]
pub struct GemmReport {
    /// Kernel name fragment, e.g. `gemm1_m128n256_c1x1`.
    pub name: String,
    /// `[M, N]` of one MMA tile.
    pub mma_tiler: [u32; 2],
    /// `[M, N]` cluster shape.
    pub cluster: [u32; 2],
    /// CTAs of the cluster that split each unit's K (Hopper; 1: none).
    pub split_k: u32,
    /// A/B pipeline stages.
    pub stages: u32,
    /// Accumulator stages.
    pub acc_stages: u32,
    /// Dynamic shared memory requested.
    pub smem_bytes: u32,
    /// TMEM columns allocated.
    pub tmem_columns: u32,
    /// The full budget.
    pub budget: KernelBudget,
    /// The production kernel with the same GEMM, tile and N, if measured.
    pub reference: Option<ReferenceKernel>,
}

/// One tactic.
#[derive(Clone, Debug, Serialize)]
pub struct TacticReport {
    /// Position in the enumeration.
    pub index: usize,
    /// Tactic name.
    pub name: String,
    /// Routing tile rows.
    pub tile_size: u32,
    /// GEMM1.
    pub gemm1: GemmReport,
    /// The wider GEMM1 launched beside it, the live tiles choosing (`MoeTactic::gemm1_wide`).
    pub gemm1_wide: Option<GemmReport>,
    /// GEMM2.
    pub gemm2: GemmReport,
}

/// The whole tactic table.
#[derive(Clone, Debug, Serialize)]
pub struct TacticsReport {
    /// Target.
    pub target: Target,
    /// All tactics.
    pub tactics: Vec<TacticReport>,
}

fn gemm_report(
    target: Target,
    tile: TileSize,
    g: &GemmTactic,
) -> Result<GemmReport, ResourceError> {
    let budget = plan_gemm(target, g)?;
    let [_, n] = g.mma_tiler();
    Ok(GemmReport {
        name: g.to_string(),
        mma_tiler: g.mma_tiler(),
        cluster: g.cluster(),
        split_k: g.split_k(),
        stages: budget.ab_stages,
        acc_stages: budget.acc_stages,
        smem_bytes: budget.smem_bytes,
        tmem_columns: budget.tmem_alloc_columns,
        budget,
        // The reference only lists cluster-N-1 kernels.
        reference: (g.arch() == moegen_dsl::Arch::Sm100 && g.cluster()[1] == 1)
            .then(|| reference_kernel(g.kind(), tile, n).copied())
            .flatten(),
    })
}

/// Plans every NVFP4 tactic for `target`.
pub fn tactics_report(target: Target) -> Result<TacticsReport, ResourceError> {
    let tactics = moegen_dsl::tactics_for(target.arch())
        .iter()
        .enumerate()
        .map(|(index, t): (usize, &MoeTactic)| {
            Ok(TacticReport {
                index,
                name: t.to_string(),
                tile_size: t.tile().rows(),
                gemm1: gemm_report(target, t.tile(), t.gemm1())?,
                gemm1_wide: t.gemm1_wide().map(|w| gemm_report(target, t.tile(), w)).transpose()?,
                gemm2: gemm_report(target, t.tile(), t.gemm2())?,
            })
        })
        .collect::<Result<_, ResourceError>>()?;
    Ok(TacticsReport { target, tactics })
}

fn gemm_columns(
    mma: &str,
    cluster: &str,
    ab: &str,
    reference: &str,
    acc: &str,
    smem: &str,
    tmem: &str,
) -> String {
    format!("{mma:<7} {cluster:<7} {ab:>2} {reference:>5} {acc:>3} {smem:>7} {tmem:>4}")
}

fn gemm_cells(g: &GemmReport) -> String {
    let reference = g.reference.map_or("(-)".to_owned(), |r| format!("({})", r.ab_stages));
    gemm_columns(
        &format!("{}x{}", g.mma_tiler[0], g.mma_tiler[1]),
        &match g.split_k {
            1 => format!("{}x{}", g.cluster[0], g.cluster[1]),
            k => format!("{}x{}k{k}", g.cluster[0], g.cluster[1]),
        },
        &g.stages.to_string(),
        &reference,
        &g.acc_stages.to_string(),
        &g.smem_bytes.to_string(),
        &g.tmem_columns.to_string(),
    )
}

/// The tactic table as text.
pub fn render_tactics(r: &TacticsReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "NVFP4 MoE tactics for {} ({} tactics)", r.target, r.tactics.len());
    let _ = writeln!(
        s,
        "per GEMM: MMA tile, cluster (kS: K split over S CTAs), A/B stages (production \
         reference's), accumulator stages, dynamic shared memory (B), TMEM columns"
    );
    let head = gemm_columns("mma", "cluster", "ab", "(ref)", "acc", "smem", "tmem");
    let _ =
        writeln!(s, "{:>2} {:>4} | {:<w$} | {:<w$}", "#", "tile", "GEMM1", "GEMM2", w = head.len());
    let _ = writeln!(s, "{:>2} {:>4} | {head} | {head}", "", "");
    for t in &r.tactics {
        let _ = write!(
            s,
            "{:>2} {:>4} | {} | {}",
            t.index,
            t.tile_size,
            gemm_cells(&t.gemm1),
            gemm_cells(&t.gemm2)
        );
        // A paired GEMM1: the wider kernel launched beside it, the live tiles choosing.
        if let Some(w) = &t.gemm1_wide {
            let _ = write!(s, " | GEMM1 beside it, by live tiles: {}", gemm_cells(w));
        }
        s.push('\n');
    }
    s
}

/// The workspace plan plus the request it answers, shaped for JSON.
#[derive(Clone, Debug, Serialize)]
pub struct PlanReport {
    /// Tokens.
    pub tokens: u64,
    /// Routes per token.
    pub top_k: u64,
    /// Local experts.
    pub local_experts: u64,
    /// I, if given.
    pub intermediate: Option<u64>,
    /// H, if given.
    pub hidden: Option<u64>,
    /// N·k.
    pub expanded_rows: u64,
    /// Tile rows → max_tiles.
    pub max_tiles: std::collections::BTreeMap<String, u64>,
    /// Tile rows → max_permuted_rows.
    pub max_permuted_rows: std::collections::BTreeMap<String, u64>,
    /// Shared workspace bytes.
    pub workspace_bytes: u64,
    /// The full plan.
    pub plan: WorkspacePlan,
}

/// Plans the workspace for a request.
pub fn plan_report(req: &WorkspaceRequest) -> Result<PlanReport, PlanError> {
    let plan = plan_workspace(req)?;
    Ok(PlanReport {
        tokens: req.tokens,
        top_k: req.top_k,
        local_experts: req.local_experts,
        intermediate: req.intermediate,
        hidden: req.hidden,
        expanded_rows: plan.expanded_rows,
        max_tiles: plan.per_tile.iter().map(|p| (p.tile_size.to_string(), p.max_tiles)).collect(),
        max_permuted_rows: plan
            .per_tile
            .iter()
            .map(|p| (p.tile_size.to_string(), p.max_permuted_rows))
            .collect(),
        workspace_bytes: plan.workspace_bytes,
        plan,
    })
}

/// The plan as text.
pub fn render_plan(r: &PlanReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "workspace for {} tokens × top_k {} over {} local experts ({} routes)",
        r.tokens, r.top_k, r.local_experts, r.expanded_rows
    );
    for p in &r.plan.per_tile {
        let _ = writeln!(
            s,
            "tile {:>3}: max_tiles {:>9}  max_permuted_rows {:>11}  bytes {:>12}",
            p.tile_size, p.max_tiles, p.max_permuted_rows, p.workspace_bytes
        );
    }
    let _ = writeln!(
        s,
        "shared workspace (tile arrays at the most tiles, row arrays at the most rows):"
    );
    for b in &r.plan.shared {
        let _ = writeln!(
            s,
            "  {:<30} {:<14} {:>12} elems {:>12} B  @ {:>12}",
            b.buffer.name(),
            b.dtype,
            b.elements,
            b.bytes,
            b.offset
        );
    }
    let _ = writeln!(s, "  total {} B", r.workspace_bytes);
    if r.intermediate.is_none() {
        let _ = writeln!(s, "  (pass --intermediate I to include GEMM1's output and scales)");
    }
    match r.plan.deterministic_scratch_bytes {
        Some(b) => {
            let _ = writeln!(s, "deterministic finalize scratch [N·k, H] bf16: {b} B (separate)");
        }
        None => {
            let _ = writeln!(s, "(pass --hidden H to size the deterministic finalize scratch)");
        }
    }
    s
}
