//! Kernel sets: which kernels to generate, each rendered to PTX with its ABI facts.

use moegen_dsl::abi::{
    CorpusKernel, KernelId, LaunchFacts, Param, SimtFamily, SimtTarget, launch_facts, params,
};
use moegen_dsl::kernel_desc::BlockScaledFormat;
use moegen_dsl::{
    EpilogueRecipe, FinalizeMode, GemmKind, GemmTactic, KernelDesc, KernelDescBuilder, MoeTactic,
    SwigluInput, Target,
};

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
    if desc.target().arch() != moegen_dsl::Arch::Sm100 {
        return Err(GenerateError::Render {
            kernel: desc.key().name(),
            message: format!("no GEMM builder for {} yet", desc.target()),
        });
    }
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
        SimtFamily::QdqNvfp4 => {
            return Err(GenerateError::Render {
                kernel: KernelId::Simt { family, target }.name(),
                message: "no builder for this family yet".into(),
            });
        }
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

/// A pipeline-depth override for one GEMM tactic (every finalize mode of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthOverride {
    /// The GEMM tactic.
    pub gemm: GemmTactic,
    /// A/B stages (2 ..= the resource model's).
    pub ab_stages: u32,
    /// Accumulator stages (1 ..= the resource model's).
    pub acc_stages: u32,
}

/// Which kernels a set holds: what `gen`, a build script's [`crate::builder::Builder`] and
/// the `moe_kernels!` macro all describe.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelSetSpec {
    /// PTX target of the GEMMs.
    pub target: Target,
    /// Operand format (NVFP4; others are refused by the description builder).
    pub format: BlockScaledFormat,
    /// Whole-layer tactics whose GEMMs are generated.
    pub tactics: Vec<MoeTactic>,
    /// GEMM2 finalize modes to generate.
    pub finalize: Vec<FinalizeMode>,
    /// GEMM1's SwiGLU input precision.
    pub swiglu_input: SwigluInput,
    /// GEMM1 epilogue recipes to generate (empty: the target's default).
    pub recipes: Vec<EpilogueRecipe>,
    /// Pipeline-depth overrides.
    pub depths: Vec<DepthOverride>,
    /// SIMT kernel flavours (routing sort, quantize, deterministic finalize).
    pub simt: Vec<SimtTarget>,
    /// The simulator's differential corpus.
    pub corpus: bool,
}

impl KernelSetSpec {
    /// Everything: what generated/ holds (GEMMs for `target`).
    pub fn full(target: Target) -> Self {
        Self {
            target,
            format: BlockScaledFormat::NVFP4,
            tactics: moegen_dsl::tactics_for(target.arch()),
            finalize: vec![FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic],
            swiglu_input: SwigluInput::F32,
            // The target's default recipe, and Exact (kept available and tested) beside it.
            recipes: {
                let mut r = vec![EpilogueRecipe::default_for(target)];
                if !r.contains(&EpilogueRecipe::Exact) {
                    r.push(EpilogueRecipe::Exact);
                }
                r
            },
            depths: Vec::new(),
            simt: SimtTarget::ALL.to_vec(),
            corpus: true,
        }
    }
}

/// The GEMM descriptions of a spec, each distinct kernel once, in a fixed order.
pub fn gemm_descs(spec: &KernelSetSpec) -> Result<Vec<KernelDesc>, GenerateError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let recipes = match spec.recipes.as_slice() {
        [] => vec![EpilogueRecipe::default_for(spec.target)],
        r => r.to_vec(),
    };
    for t in &spec.tactics {
        for g in [t.gemm1(), t.gemm2()] {
            let variants: Vec<(FinalizeMode, Option<EpilogueRecipe>)> = match g.kind() {
                GemmKind::Gemm1 => {
                    recipes.iter().map(|&r| (FinalizeMode::BulkReduceAdd, Some(r))).collect()
                }
                GemmKind::Gemm2 => spec.finalize.iter().map(|&m| (m, None)).collect(),
            };
            for (mode, recipe) in variants {
                let mut b = KernelDescBuilder::new(*g).target(spec.target).format(spec.format);
                b = match (g.kind(), recipe) {
                    (GemmKind::Gemm1, Some(r)) => b.swiglu_input(spec.swiglu_input).recipe(r),
                    _ => b.finalize(mode),
                };
                if let Some(d) = spec.depths.iter().find(|d| d.gemm == *g) {
                    b = b.depths(d.ab_stages, d.acc_stages);
                }
                let desc = b.build()?;
                if seen.insert(desc.key().name()) {
                    out.push(desc);
                }
            }
        }
    }
    Ok(out)
}

/// Generates every kernel of a spec: GEMMs, then SIMT kernels per flavour, then the corpus.
pub fn build_set(spec: &KernelSetSpec) -> Result<Vec<GeneratedKernel>, GenerateError> {
    let mut all = gemm_descs(spec)?.iter().map(gemm_kernel).collect::<Result<Vec<_>, _>>()?;
    for &t in &spec.simt {
        all.extend(simt_kernels(t)?);
    }
    if spec.corpus {
        all.extend(corpus_kernels()?);
    }
    Ok(all)
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

/// The full set with GEMMs for `target` (sm_100f or sm_100a).
pub fn kernel_set(target: Target) -> Result<Vec<GeneratedKernel>, GenerateError> {
    build_set(&KernelSetSpec::full(target))
}
