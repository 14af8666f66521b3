//! The default kernel set: every NVFP4 tactic's GEMM kernels for sm_100f, the deterministic
//! GEMM2 variants, and the SIMT kernels for sm_100f and sm_90a, each rendered to PTX with
//! its manifest entry.

use moegen_dsl::{FinalizeMode, GemmKind, KernelDescBuilder, Target, nvfp4_tactics};

use crate::kernels::simt_target::SimtTarget;
use crate::kernels::{finalize_reduce, gemm, moe_sort, quantize};
use crate::manifest::{ManifestEntry, SmemRule, TacticInfo};
use crate::ptx::{KernelBuilder, ModuleHeader, render_module};

/// A kernel rendered to PTX.
#[derive(Clone, Debug)]
pub struct GeneratedKernel {
    /// PTX module text.
    pub ptx: String,
    /// Its manifest entry.
    pub entry: ManifestEntry,
}

/// A failure to generate.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A description the DSL rejected.
    #[error("kernel description: {0}")]
    Desc(#[from] moegen_dsl::DescError),
    /// The template engine failed.
    #[error("rendering {kernel}: {message}")]
    Render {
        /// Kernel.
        kernel: String,
        /// Message.
        message: String,
    },
}

fn render(k: &KernelBuilder, target: &str, description: &str) -> Result<String, GenerateError> {
    render_module(k, &ModuleHeader { ptx_version: "8.8", target, description })
        .map_err(|message| GenerateError::Render { kernel: k.name.clone(), message })
}

/// Launch facts of a kernel.
struct Launch<'a> {
    threads: u32,
    cluster: u32,
    smem: SmemRule,
    tmem_columns: u32,
    grid: &'a str,
}

fn entry(
    k: &KernelBuilder,
    family: &str,
    target: &str,
    tactic: Option<TacticInfo>,
    l: Launch<'_>,
) -> ManifestEntry {
    ManifestEntry {
        name: k.name.clone(),
        file: format!("{}.ptx", k.name),
        family: family.to_owned(),
        target: target.to_owned(),
        ptx_version: "8.8".to_owned(),
        tactic,
        params: k.params.clone(),
        threads: l.threads,
        cluster_dims: [l.cluster, 1, 1],
        dynamic_smem: l.smem,
        tmem_columns: l.tmem_columns,
        grid: l.grid.to_owned(),
    }
}

/// The GEMM kernels of every NVFP4 tactic for `target` (each distinct kernel once).
pub fn gemm_kernels(target: Target) -> Result<Vec<GeneratedKernel>, GenerateError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for t in nvfp4_tactics() {
        for (g, modes) in [
            (t.gemm1(), vec![FinalizeMode::BulkReduceAdd]),
            (t.gemm2(), vec![FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic]),
        ] {
            for mode in modes {
                let mut builder = KernelDescBuilder::new(*g).target(target);
                if g.kind() == GemmKind::Gemm2 {
                    builder = builder.finalize(mode);
                }
                let desc = builder.build()?;
                let (k, l) = gemm::build(&desc);
                if !seen.insert(k.name.clone()) {
                    continue;
                }
                let family = match (g.kind(), mode) {
                    (GemmKind::Gemm1, _) => "gemm1",
                    (GemmKind::Gemm2, FinalizeMode::BulkReduceAdd) => "gemm2",
                    (GemmKind::Gemm2, FinalizeMode::Deterministic) => "gemm2_deterministic",
                };
                let description = format!(
                    "{family} {g}, {} A/B stages, {} accumulator stages",
                    l.budget.ab_stages, l.budget.acc_stages
                );
                let ptx = render(&k, target.name(), &description)?;
                let tactic = TacticInfo {
                    gemm: g.kind().to_string(),
                    tile_size: l.tile,
                    mma_tiler: g.mma_tiler(),
                    cluster: g.cluster(),
                    ab_stages: l.budget.ab_stages,
                    acc_stages: l.budget.acc_stages,
                };
                let launch = Launch {
                    threads: l.threads(),
                    cluster: l.cm * l.cn,
                    smem: SmemRule { fixed: l.budget.smem_bytes, per_local_expert: 0 },
                    tmem_columns: l.budget.tmem_alloc_columns,
                    grid: "persistent: any multiple of the cluster size, typically one CTA per SM",
                };
                let e = entry(&k, family, target.name(), Some(tactic), launch);
                out.push(GeneratedKernel { ptx, entry: e });
            }
        }
    }
    Ok(out)
}

/// The SIMT kernels for one target.
pub fn simt_kernels(target: SimtTarget) -> Result<Vec<GeneratedKernel>, GenerateError> {
    let blocks = "ceil(tokens·top_k / 1024) blocks";
    let specs: Vec<(KernelBuilder, &str, u32, SmemRule, &str)> = vec![
        (
            moe_sort::build_histogram(target),
            "moe_sort_histogram",
            moe_sort::THREADS,
            SmemRule { fixed: 0, per_local_expert: 4 },
            blocks,
        ),
        (
            moe_sort::build_offsets(target),
            "moe_sort_offsets",
            moe_sort::OFFSET_THREADS,
            SmemRule { fixed: 4, per_local_expert: 8 },
            "1 block",
        ),
        (
            moe_sort::build_scatter(target),
            "moe_sort_scatter",
            moe_sort::THREADS,
            SmemRule { fixed: 4 * moe_sort::ROUTES_PER_BLOCK, per_local_expert: 0 },
            blocks,
        ),
        (
            quantize::build(target),
            "quantize_nvfp4",
            quantize::THREADS,
            SmemRule { fixed: 0, per_local_expert: 0 },
            "grid-stride: any",
        ),
        (
            finalize_reduce::build(target),
            "finalize_reduce",
            finalize_reduce::THREADS,
            SmemRule { fixed: 0, per_local_expert: 0 },
            "grid-stride: any",
        ),
    ];
    let specs = specs.into_iter().map(|(k, family, threads, smem, grid)| {
        (k, family, Launch { threads, cluster: 1, smem, tmem_columns: 0, grid })
    });
    render_all(specs, target.name())
}

/// Renders tactic-less kernels with their launch facts.
fn render_all<'a>(
    specs: impl Iterator<Item = (KernelBuilder, &'a str, Launch<'a>)>,
    target: &str,
) -> Result<Vec<GeneratedKernel>, GenerateError> {
    specs
        .map(|(k, family, launch)| {
            let ptx = render(&k, target, family)?;
            let e = entry(&k, family, target, None, launch);
            Ok(GeneratedKernel { ptx, entry: e })
        })
        .collect()
}

/// The differential corpus (sm_90a only).
pub fn corpus_kernels() -> Result<Vec<GeneratedKernel>, GenerateError> {
    use crate::kernels::corpus;
    let specs: Vec<(KernelBuilder, &str, u32, u32, u32)> = vec![
        (corpus::build_alu(), "corpus_alu", 64, 1, 0),
        (corpus::build_pipeline(), "corpus_pipeline", 96, 1, 2048),
        (corpus::build_tma(), "corpus_tma", 32, 1, 5120),
        (corpus::build_cluster(), "corpus_cluster", 32, 2, 2048),
        (corpus::build_warp(), "corpus_warp", 128, 1, 128),
    ];
    let specs = specs.into_iter().map(|(k, family, threads, cluster, smem)| {
        let smem = SmemRule { fixed: smem, per_local_expert: 0 };
        (k, family, Launch { threads, cluster, smem, tmem_columns: 0, grid: "one cluster" })
    });
    render_all(specs, "sm_90a")
}

/// The default set, in a fixed order.
pub fn default_kernel_set() -> Result<Vec<GeneratedKernel>, GenerateError> {
    kernel_set(Target::Sm100f)
}

/// The GEMM kernels for `target` (sm_100f or sm_100a) and the SIMT kernels for the SM100
/// family and sm_90a.
pub fn kernel_set(target: Target) -> Result<Vec<GeneratedKernel>, GenerateError> {
    let mut all = gemm_kernels(target)?;
    for t in SimtTarget::ALL {
        all.extend(simt_kernels(t)?);
    }
    all.extend(corpus_kernels()?);
    Ok(all)
}
