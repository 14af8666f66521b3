//! Kernel sets: which kernels to generate, each rendered to PTX with its ABI facts.

use moegen_dsl::abi::{
    CorpusKernel, KernelId, LaunchFacts, Param, SimtFamily, SimtTarget, launch_facts, params,
};
use moegen_dsl::{FinalizeMode, GemmKind, KernelDesc, KernelDescBuilder, Target, nvfp4_tactics};

use crate::kernels::{corpus, finalize_reduce, gemm, moe_sort, quantize};
use crate::ptx::{KernelBuilder, ModuleHeader, render_module};

/// The `.version` every module is emitted with (the `.block16` spelling needs 8.8).
pub const PTX_VERSION: &str = "8.8";

/// A kernel rendered to PTX, with the ABI facts it was generated against.
#[derive(Clone, Debug)]
pub struct GeneratedKernel {
    /// What it is.
    pub id: KernelId,
    /// Entry name (`id.name()`).
    pub name: String,
    /// PTX module text.
    pub ptx: String,
    /// Parameters in ABI order.
    pub params: &'static [Param],
    /// Launch facts.
    pub launch: LaunchFacts,
}

/// Which group of the generated crate a kernel belongs to: groups other than `sm100` are
/// behind the cargo feature of the same name, so a user's binary embeds only what it runs.
pub fn group(id: &KernelId) -> &'static str {
    match id {
        KernelId::Gemm(_) | KernelId::Simt { target: SimtTarget::Sm100f, .. } => "sm100",
        KernelId::Simt { target: SimtTarget::Sm90a, .. } => "sm90",
        KernelId::Corpus(_) => "corpus",
    }
}

/// A failure to generate.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A description the DSL rejected.
    #[error("kernel description: {0}")]
    Desc(#[from] moegen_dsl::DescError),
    /// The template engine failed, or a kernel is inconsistent with its ABI.
    #[error("rendering {kernel}: {message}")]
    Render {
        /// Kernel.
        kernel: String,
        /// Message.
        message: String,
    },
}

/// Renders a built kernel: directives from the launch facts, the module skeleton, and a
/// check that the builder declared exactly the ABI's parameters.
fn finish(
    mut k: KernelBuilder,
    id: KernelId,
    description: &str,
) -> Result<GeneratedKernel, GenerateError> {
    let launch = launch_facts(&id)?;
    let name = id.name();
    let fail = |message: String| GenerateError::Render { kernel: name.clone(), message };
    if k.name != name || k.params != params(&id) {
        return Err(fail("the builder's name or parameters differ from the ABI".into()));
    }
    k.directives = vec![format!(".reqntid {}, 1, 1", launch.threads)];
    if launch.cluster > 1 {
        k.directives.push(format!(".reqnctapercluster {}, 1, 1", launch.cluster));
    }
    let header = ModuleHeader { ptx_version: PTX_VERSION, target: id.ptx_target(), description };
    let ptx = render_module(&k, &header).map_err(fail)?;
    Ok(GeneratedKernel { id, name, ptx, params: params(&id), launch })
}

/// Generates the GEMM kernel of a validated description.
pub fn gemm_kernel(desc: &KernelDesc) -> Result<GeneratedKernel, GenerateError> {
    let (k, l) = gemm::build(desc);
    let key = desc.key();
    let description = format!(
        "{} {}, {} A/B stages, {} accumulator stages",
        key.family(),
        desc.tactic(),
        l.budget.ab_stages,
        l.budget.acc_stages
    );
    finish(k, KernelId::Gemm(key), &description)
}

/// Generates one SIMT kernel.
pub fn simt_kernel(
    family: SimtFamily,
    target: SimtTarget,
) -> Result<GeneratedKernel, GenerateError> {
    let k = match family {
        SimtFamily::MoeSortHistogram => moe_sort::build_histogram(target),
        SimtFamily::MoeSortOffsets => moe_sort::build_offsets(target),
        SimtFamily::MoeSortScatter => moe_sort::build_scatter(target),
        SimtFamily::QuantizeNvfp4 => quantize::build(target),
        SimtFamily::FinalizeReduce => finalize_reduce::build(target),
    };
    finish(k, KernelId::Simt { family, target }, family.name())
}

/// Generates one kernel of the differential corpus.
pub fn corpus_kernel(which: CorpusKernel) -> Result<GeneratedKernel, GenerateError> {
    let k = match which {
        CorpusKernel::Alu => corpus::build_alu(),
        CorpusKernel::Pipeline => corpus::build_pipeline(),
        CorpusKernel::Tma => corpus::build_tma(),
        CorpusKernel::Cluster => corpus::build_cluster(),
        CorpusKernel::Warp => corpus::build_warp(),
    };
    finish(k, KernelId::Corpus(which), which.name())
}

/// The GEMM kernels of every NVFP4 tactic for `target` (each distinct kernel once): GEMM1,
/// GEMM2 with the bulk reduce-add finalize and GEMM2 with the deterministic one.
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
                if seen.insert(desc.key().name()) {
                    out.push(gemm_kernel(&desc)?);
                }
            }
        }
    }
    Ok(out)
}

/// The SIMT kernels for one target.
pub fn simt_kernels(target: SimtTarget) -> Result<Vec<GeneratedKernel>, GenerateError> {
    SimtFamily::ALL.into_iter().map(|f| simt_kernel(f, target)).collect()
}

/// The differential corpus (sm_90a only).
pub fn corpus_kernels() -> Result<Vec<GeneratedKernel>, GenerateError> {
    CorpusKernel::ALL.into_iter().map(corpus_kernel).collect()
}

/// The default set (what generated/ holds), in a fixed order.
pub fn default_kernel_set() -> Result<Vec<GeneratedKernel>, GenerateError> {
    kernel_set(Target::Sm100f)
}

/// The GEMM kernels for `target` (sm_100f or sm_100a), the SIMT kernels for the SM100
/// family and sm_90a, and the differential corpus.
pub fn kernel_set(target: Target) -> Result<Vec<GeneratedKernel>, GenerateError> {
    let mut all = gemm_kernels(target)?;
    for t in SimtTarget::ALL {
        all.extend(simt_kernels(t)?);
    }
    all.extend(corpus_kernels()?);
    Ok(all)
}
