//! `gen check` and `gen stats`: assemble every generated kernel with ptxas for each
//! architecture it must run on, and read resource use and SASS instruction counts.

use crate::perf::anchors::{ReferenceKernel, reference_kernel};
use crate::perf::reference::{MeasuredRoles, measured_roles};
use crate::perf::role_stats::{KernelRoleStats, RoleStatsFile, fnv1a64_hex};
use moegen_dsl::abi::KernelId;

use crate::kernel_set::GeneratedKernel;
use crate::ptxas::{PtxasError, PtxasReport, SassCounts, assemble, count_sass, disassemble};

/// The architectures a kernel is assembled for, each with the PTX text to feed ptxas:
/// sm_100f PTX for sm_100f and sm_103f (the family), and retargeted to sm_100a; sm_90a PTX
/// for sm_90a.
pub fn assembly_targets(k: &GeneratedKernel) -> Vec<(&'static str, String)> {
    match k.id.ptx_target() {
        "sm_100f" => vec![
            ("sm_100f", k.ptx.clone()),
            ("sm_103f", k.ptx.clone()),
            ("sm_100a", k.ptx.replacen(".target sm_100f", ".target sm_100a", 1)),
        ],
        "sm_90a" => vec![("sm_90a", k.ptx.clone())],
        _ => Vec::new(),
    }
}

/// One ptxas run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Assembled {
    /// Kernel.
    pub kernel: String,
    /// `-arch`.
    pub arch: String,
    /// ptxas's report.
    pub report: PtxasReport,
}

/// A kernel that failed the assembly check.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// ptxas or nvdisasm failed on it.
    #[error("{kernel}: {source}")]
    Tool {
        /// The kernel.
        kernel: String,
        /// What failed.
        #[source]
        source: PtxasError,
    },
    /// It spills or uses a stack frame.
    #[error(
        "{kernel} for {arch}: {} B spill stores, {} B spill loads, {} B stack frame",
        report.spill_stores,
        report.spill_loads,
        report.stack_frame
    )]
    Spills {
        /// The kernel.
        kernel: String,
        /// The architecture.
        arch: &'static str,
        /// ptxas's report.
        report: PtxasReport,
    },
    /// ptxas serialized its wgmmas.
    #[error("{kernel} for {arch}: ptxas serialized the wgmmas: {advisory}")]
    WgmmaSerialized {
        /// The kernel.
        kernel: String,
        /// The architecture.
        arch: &'static str,
        /// ptxas's advisory line.
        advisory: String,
    },
}

fn tool(kernel: &str) -> impl FnOnce(PtxasError) -> CheckError {
    let kernel = kernel.to_owned();
    move |source| CheckError::Tool { kernel, source }
}

/// Assembles every kernel for every architecture; an error names the first kernel (in the
/// set's order) that fails to assemble, spills, uses a stack frame or has its wgmmas
/// serialized by ptxas. ptxas runs on every core ([`parallel_map`]).
pub fn assemble_all(kernels: &[GeneratedKernel]) -> Result<Vec<Assembled>, CheckError> {
    let jobs: Vec<(&GeneratedKernel, &'static str, String)> = kernels
        .iter()
        .flat_map(|k| assembly_targets(k).into_iter().map(move |(arch, ptx)| (k, arch, ptx)))
        .collect();
    let reports = parallel_map(&jobs, |(k, arch, ptx)| {
        assemble(ptx, arch).map(|(report, _)| report).map_err(tool(&k.name))
    });
    let mut out = Vec::with_capacity(jobs.len());
    for ((k, arch, _), report) in jobs.iter().zip(reports) {
        let (k, arch, report) = (*k, *arch, report?);
        if report.spill_stores + report.spill_loads + report.stack_frame > 0 {
            return Err(CheckError::Spills { kernel: k.name.clone(), arch, report });
        }
        if let Some(advisory) = report.wgmma_serialized.clone() {
            return Err(CheckError::WgmmaSerialized { kernel: k.name.clone(), arch, advisory });
        }
        out.push(Assembled { kernel: k.name.clone(), arch: arch.to_owned(), report });
    }
    Ok(out)
}

/// `f` over `items` on up to `available_parallelism` threads, results in `items`' order:
/// each item is one ptxas (and nvdisasm) process, so a sweep of the set takes about
/// 1 / cores of its one-at-a-time time.
pub fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.len());
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
            });
        }
    });
    // Every index below `items.len()` was taken by exactly one thread, which filled its
    // slot before taking another (a panicking `f` propagates out of the scope above).
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("parallel_map: every slot is filled")
        })
        .collect()
}

/// Static figures of one kernel.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelStats {
    /// Kernel.
    pub kernel: String,
    /// Family.
    pub family: String,
    /// Architecture assembled for.
    pub arch: String,
    /// ptxas report.
    pub ptxas: PtxasReport,
    /// Dynamic shared memory bytes (GEMMs; SIMT kernels' depends on L).
    pub dynamic_smem: u32,
    /// A/B stages (GEMMs).
    pub ab_stages: Option<u32>,
    /// Accumulator stages (GEMMs).
    pub acc_stages: Option<u32>,
    /// SASS counts.
    pub sass: SassCounts,
    /// The production reference kernel of the same GEMM, tile and N.
    pub reference: Option<ReferenceKernel>,
    /// Per-role dynamic instruction counts measured in the simulator (docs/role-stats.json).
    pub roles: Option<KernelRoleStats>,
    /// Whether `roles` was measured on this PTX (`None` when there are no figures).
    pub roles_fresh: Option<bool>,
    /// The reference's per-role figures (anchors.md §A2), where measured.
    pub role_reference: Option<MeasuredRoles>,
}

/// Gathers [`KernelStats`] for every kernel (its first architecture), with the per-role
/// figures of `roles` where it has the kernel.
pub fn stats(
    kernels: &[GeneratedKernel],
    roles: Option<&RoleStatsFile>,
) -> Result<Vec<KernelStats>, CheckError> {
    let firsts: Vec<(&GeneratedKernel, &'static str, String)> = kernels
        .iter()
        .filter_map(|k| assembly_targets(k).into_iter().next().map(|(arch, ptx)| (k, arch, ptx)))
        .collect();
    let assembled = parallel_map(&firsts, |(k, arch, ptx)| {
        let (report, cubin) = assemble(ptx, arch).map_err(tool(&k.name))?;
        let sass = count_sass(&disassemble(&cubin).map_err(tool(&k.name))?);
        Ok::<_, CheckError>((report, sass))
    });
    let mut out = Vec::with_capacity(firsts.len());
    for ((k, arch, _), result) in firsts.iter().zip(assembled) {
        let (k, arch) = (*k, *arch);
        let (report, sass) = result?;
        let key = match k.id {
            KernelId::Gemm(key) => Some(key),
            _ => None,
        };
        // The reference's figures (anchors.md) are its NVFP4 kernels'.
        let nvfp4 =
            |key: &moegen_dsl::abi::GemmKey| key.activations == moegen_dsl::ActivationFormat::Nvfp4;
        let reference = key.and_then(|key| {
            (key.cluster_n == 1 && key.target.arch() == moegen_dsl::Arch::Sm100 && nvfp4(&key))
                .then(|| reference_kernel(key.gemm, key.tile, key.mma_n).copied())
                .flatten()
        });
        let measured = roles.and_then(|f| f.kernel(&k.name)).cloned();
        let roles_fresh = measured.as_ref().map(|m| m.ptx_fnv1a64 == fnv1a64_hex(&k.ptx));
        let role_reference =
            key.filter(nvfp4).and_then(|key| measured_roles(key.gemm, key.tile, key.mma_n));
        out.push(KernelStats {
            kernel: k.name.clone(),
            family: k.id.family().to_owned(),
            arch: arch.to_owned(),
            ptxas: report,
            dynamic_smem: k.launch.smem.fixed,
            ab_stages: key.map(|t| t.ab_stages),
            acc_stages: key.map(|t| t.acc_stages),
            sass,
            reference,
            roles: measured,
            roles_fresh,
            role_reference,
        });
    }
    Ok(out)
}

/// The stats as a text table.
pub fn render_stats(rows: &[KernelStats]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<46} {:>4} {:>5} {:>5} {:>7} {:>7} {:>4} {:>4} {:>5} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4} {:>5} {:>6}  reference (regs/spill/stages/SASS)",
        "kernel",
        "regs",
        "spill",
        "stack",
        "smem",
        "stages",
        "MMA",
        "CP",
        "wgmma",
        "MUFU",
        "CALL",
        "TMA",
        "GST",
        "BRED",
        "TSTG",
        "SYNCS",
        "SASS"
    );
    for r in rows {
        let stages = match (r.ab_stages, r.acc_stages) {
            (Some(a), Some(c)) => format!("{a}/{c}"),
            _ => "-".to_owned(),
        };
        let reference = r.reference.map_or(String::new(), |x| {
            format!("{}/{}/{}/{}", x.registers, x.spill_bytes, x.ab_stages, x.sass_instructions)
        });
        let _ = writeln!(
            s,
            "{:<46} {:>4} {:>5} {:>5} {:>7} {:>7} {:>4} {:>4} {:>5} {:>4} {:>4} {:>4} {:>4} {:>4} {:>4} {:>5} {:>6}  {}",
            r.kernel,
            r.ptxas.registers,
            r.ptxas.spill_stores + r.ptxas.spill_loads,
            r.ptxas.stack_frame,
            r.dynamic_smem,
            stages,
            r.sass.get("UTCOMMA") + r.sass.get("UTCQMMA"),
            r.sass.get("UTCCP"),
            r.sass.get("HGMMA") + r.sass.get("QGMMA"),
            r.sass.get("MUFU"),
            r.sass.get("CALL"),
            r.sass.get("UTMALDG"),
            r.sass.get("LDGSTS"),
            r.sass.get("UBLKRED"),
            r.sass.get("UTMASTG"),
            r.sass.get("SYNCS"),
            r.sass.total,
            reference
        );
    }
    s
}
