//! Kernel sets: which kernels to generate, each rendered to PTX with its ABI facts.

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::{
    CorpusKernel, KernelId, LaunchFacts, Param, SimtFamily, SimtTarget, launch_facts, params,
};
use moegen_dsl::{
    ActivationFormat, Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode, GemmKind, GemmTactic,
    KernelDesc, KernelDescBuilder, MoeTactic, Schedule, SwigluInput, Target,
};

use crate::kernels::{
    corpus, corpus_mufu, corpus_wgmma, ep_copy, ep_pack, finalize_reduce, moe_sort,
    moe_sort_single, qdq, quant_fp8, quantize, quantize_mxfp8, sm90, sm100,
};
use crate::ptx::{KernelBuilder, ModuleHeader, RenderError, render_module};

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
        KernelId::Gemm(k) if k.target.arch() == Arch::Sm90 => "sm90",
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
    /// The builder's kernel name or parameter list differs from what its ABI declares.
    #[error("{kernel}: the builder's name or parameters differ from the ABI")]
    AbiMismatch {
        /// Kernel.
        kernel: String,
    },
    /// The kernel recorded build errors, or the module template failed.
    #[error("rendering {kernel}: {source}")]
    Render {
        /// Kernel.
        kernel: String,
        /// What failed.
        source: RenderError,
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
    if k.name != name || k.params != params(&id) {
        return Err(GenerateError::AbiMismatch { kernel: name });
    }
    // The launch facts' directives first, then any the builder needs (`.maxnreg`).
    let own = std::mem::take(&mut k.directives);
    k.directives = vec![format!(".reqntid {}, 1, 1", launch.threads)];
    if launch.cluster > 1 {
        k.directives.push(format!(".reqnctapercluster {}, 1, 1", launch.cluster));
    }
    k.directives.extend(own);
    let header = ModuleHeader { ptx_version: PTX_VERSION, target: id.ptx_target(), description };
    let ptx = render_module(&k, &header)
        .map_err(|source| GenerateError::Render { kernel: name.clone(), source })?;
    Ok(GeneratedKernel { id, name, ptx, params: params(&id), launch })
}

/// Generates the GEMM kernel of a validated description.
pub fn gemm_kernel(desc: &KernelDesc) -> Result<GeneratedKernel, GenerateError> {
    let key = desc.key();
    let (k, ab, acc) = match desc.target().arch() {
        Arch::Sm100 => {
            let (k, l) = sm100::build(desc);
            (k, l.budget.ab_stages, l.budget.acc_stages)
        }
        Arch::Sm90 => {
            let (k, l) = sm90::build(desc);
            (k, l.budget.ab_stages, l.budget.acc_stages)
        }
    };
    let description =
        format!("{} {}, {ab} A/B stages, {acc} accumulator stages", key.family(), desc.tactic());
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
        SimtFamily::MoeSortSingle => moe_sort_single::build_single(target),
        SimtFamily::QuantizeNvfp4 => quantize::build(target),
        SimtFamily::QuantizeMxfp8 => quantize_mxfp8::build(target),
        SimtFamily::FinalizeReduce => finalize_reduce::build(target),
        SimtFamily::QdqNvfp4 => qdq::build(target),
        SimtFamily::QuantFp8Tokens | SimtFamily::QuantFp8Rows => quant_fp8::build(family, target),
        SimtFamily::EpDispatchPack => ep_pack::build(target),
        SimtFamily::EpGatherRows => ep_copy::build_gather(target),
        SimtFamily::EpCombineUnpack => ep_copy::build_unpack(target),
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
        CorpusKernel::Wgmma => corpus_wgmma::build(),
        CorpusKernel::Mufu => corpus_mufu::build(),
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

/// The Hopper GEMMs of one weight format: every activation format of `activations` for
/// every tactic of `tactics` (each GEMM2 in every finalize mode of the spec).
#[derive(Clone, Debug, PartialEq)]
pub struct Sm90Gemms {
    /// Weight format (NVFP4 or MXFP4).
    pub format: WeightFormat,
    /// What the activations are (A4: NVFP4 dequantized exactly; A16: bf16).
    pub activations: Vec<ActivationFormat>,
    /// Whole-layer Hopper tactics whose GEMMs are generated.
    pub tactics: Vec<MoeTactic>,
    /// Epilogue functions, each generated for every tactic and activation format (GEMM1 per
    /// activation and GEMM1 bias, GEMM2 per GEMM2 bias).
    pub epilogues: Vec<EpilogueSpec>,
    /// GEMM1 epilogue recipes (empty: Hopper's default, Exact). Fast (MUFU `ex2`/`rcp` in
    /// the activation) exists for bf16 and FP8 activations only: a set asking for it with
    /// NVFP4 activations fails to generate, naming the option.
    pub recipes: Vec<EpilogueRecipe>,
}

impl Sm90Gemms {
    /// What generated/ holds: NVFP4 weights with both activation formats for all 24
    /// tactics with plain SwiGLU, and MXFP4 weights with bf16 (A16) and FP8 (A8) activations
    /// for the tactics of [`sm90_mxfp4_tactics`], with plain SwiGLU and with gpt-oss's
    /// epilogue (clamped SwiGLU, both biases) (docs/hopper.md, "What ships").
    pub fn default_set() -> Vec<Sm90Gemms> {
        vec![
            Sm90Gemms {
                format: WeightFormat::Nvfp4,
                activations: vec![ActivationFormat::Bf16, ActivationFormat::Nvfp4],
                tactics: moegen_dsl::sm90_tactics(),
                epilogues: vec![EpilogueSpec::PLAIN],
                recipes: Vec::new(),
            },
            Sm90Gemms {
                format: WeightFormat::Mxfp4,
                activations: vec![ActivationFormat::Bf16, ActivationFormat::Fp8],
                tactics: sm90_mxfp4_tactics(),
                epilogues: vec![EpilogueSpec::PLAIN, EpilogueSpec::GPT_OSS],
                recipes: Vec::new(),
            },
        ]
    }
}

/// The MXFP4 tactics shipped by default, at every tile size: GEMM1 N 256 and GEMM2 N 128
/// (the fast pair where H and I allow), and GEMM1 N 128 with GEMM2 N 64, which serve every H
/// and I that are multiples of 64 (gpt-oss's 2880); at T 128 also GEMM1 N 128 ping-pong with
/// either GEMM2 (no GEMM2 kernel of its own). MXFP4 checkpoints are served by A16 and A8.
/// The paired GEMM1 tactics (`MoeTactic::gemm1_wide`) are left out: they hold no kernel of
/// their own, and a layer offers every pair whose three GEMMs its set holds.
pub fn sm90_mxfp4_tactics() -> Vec<MoeTactic> {
    moegen_dsl::sm90_tactics()
        .into_iter()
        .filter(|t| t.gemm1_wide().is_none())
        .filter(|t| {
            let pp = t.gemm1().schedule() == Schedule::PingPong;
            matches!(
                (t.gemm1().mma_tiler()[1], pp, t.gemm2().mma_tiler()[1]),
                (256, false, 128) | (128, _, 64) | (128, true, 128)
            )
        })
        .collect()
}

/// Which kernels a set holds: what `gen`, a build script's [`crate::builder::Builder`] and
/// the `moe_kernels!` macro all describe.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelSetSpec {
    /// PTX target of the GEMMs of `tactics` (sm_100f or sm_100a; sm_90a for a Hopper-only
    /// set of A4 kernels).
    pub target: Target,
    /// Weight formats of those GEMMs, each with the activations its MMA takes on SM100:
    /// NVFP4 weights with NVFP4 activations, MXFP4 weights with MXFP8 activations
    /// (`kind::mxf8f6f4`; docs/sm100-mxf8f6f4.md). A Hopper-only set (`target` sm_90a)
    /// takes NVFP4 activations (A4) for its formats.
    pub formats: Vec<WeightFormat>,
    /// Whole-layer tactics of `target`'s generation whose GEMMs are generated.
    pub tactics: Vec<MoeTactic>,
    /// Hopper (sm_90a) GEMMs, per weight format; empty for none.
    pub sm90: Vec<Sm90Gemms>,
    /// GEMM2 finalize modes to generate.
    pub finalize: Vec<FinalizeMode>,
    /// GEMM1's SwiGLU input precision.
    pub swiglu_input: SwigluInput,
    /// Epilogue functions of the GEMMs of `tactics`, each generated for every tactic (GEMM1
    /// per activation and GEMM1 bias, GEMM2 per GEMM2 bias; Hopper sets carry their own in
    /// [`Sm90Gemms::epilogues`]).
    pub epilogues: Vec<EpilogueSpec>,
    /// GEMM1 epilogue recipes to generate (empty: the target's default).
    pub recipes: Vec<EpilogueRecipe>,
    /// Pipeline-depth overrides.
    pub depths: Vec<DepthOverride>,
    /// SIMT kernel flavours (routing sort, quantize, deterministic finalize; Hopper's also
    /// the A4 quantize-dequantize).
    pub simt: Vec<SimtTarget>,
    /// The simulator's differential corpus.
    pub corpus: bool,
}

impl KernelSetSpec {
    /// Everything: what generated/ holds (SM100 GEMMs for `target` with NVFP4 and with MXFP4
    /// weights, the Hopper GEMMs of [`Sm90Gemms::default_set`]).
    pub fn full(target: Target) -> Self {
        Self {
            target,
            formats: match target.arch() {
                Arch::Sm100 => vec![WeightFormat::Nvfp4, WeightFormat::Mxfp4],
                Arch::Sm90 => vec![WeightFormat::Nvfp4],
            },
            tactics: moegen_dsl::tactics_for(target.arch()),
            sm90: if target.arch() == Arch::Sm100 { Sm90Gemms::default_set() } else { Vec::new() },
            finalize: vec![FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic],
            swiglu_input: SwigluInput::F32,
            epilogues: vec![EpilogueSpec::PLAIN],
            // The target's default recipe, and Exact (kept available and tested) beside it.
            recipes: {
                let mut r = vec![target.default_recipe()];
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

/// One GEMM of a tactic under the spec's options: GEMM1 in each recipe of `recipes`, GEMM2
/// in each finalize mode.
fn descs_of(
    spec: &KernelSetSpec,
    g: &GemmTactic,
    target: Target,
    format: WeightFormat,
    activations: ActivationFormat,
    recipes: &[EpilogueRecipe],
    epilogue: EpilogueSpec,
) -> Result<Vec<KernelDesc>, GenerateError> {
    let variants: Vec<(FinalizeMode, Option<EpilogueRecipe>)> = match g.kind() {
        GemmKind::Gemm1 => {
            recipes.iter().map(|&r| (FinalizeMode::BulkReduceAdd, Some(r))).collect()
        }
        GemmKind::Gemm2 => spec.finalize.iter().map(|&m| (m, None)).collect(),
    };
    let mut out = Vec::with_capacity(variants.len());
    for (mode, recipe) in variants {
        let mut b =
            KernelDescBuilder::new(*g).target(target).format(format).activations(activations);
        b = match (g.kind(), recipe) {
            (GemmKind::Gemm1, Some(r)) => b
                .swiglu_input(spec.swiglu_input)
                .recipe(r)
                .activation(epilogue.activation)
                .bias(epilogue.gemm1_bias),
            _ => b.finalize(mode).bias(epilogue.gemm2_bias),
        };
        if let Some(d) = spec.depths.iter().find(|d| d.gemm == *g) {
            b = b.depths(d.ab_stages, d.acc_stages);
        }
        out.push(b.build()?);
    }
    Ok(out)
}

/// The activations a set's GEMMs of `format` take on `target` ([`KernelSetSpec::formats`]):
/// SM100 multiplies MXFP4 weights by MXFP8 activations only, NVFP4 by NVFP4; a Hopper-only
/// set takes NVFP4 activations (A4).
pub fn set_activations(target: Target, format: WeightFormat) -> ActivationFormat {
    match (target.arch(), format) {
        (Arch::Sm100, WeightFormat::Mxfp4) => ActivationFormat::Mxfp8,
        _ => ActivationFormat::Nvfp4,
    }
}

/// The GEMM descriptions of a spec, each distinct kernel once, in a fixed order: the SM100
/// GEMMs, then the Hopper GEMMs per format, activation format and tactic.
pub fn gemm_descs(spec: &KernelSetSpec) -> Result<Vec<KernelDesc>, GenerateError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let mut add = |descs: Vec<KernelDesc>| {
        for desc in descs {
            if seen.insert(desc.key().name()) {
                out.push(desc);
            }
        }
    };
    let recipes = match spec.recipes.as_slice() {
        [] => vec![spec.target.default_recipe()],
        r => r.to_vec(),
    };
    for &f in &spec.formats {
        let a = set_activations(spec.target, f);
        for &e in &spec.epilogues {
            for t in &spec.tactics {
                for g in [t.gemm1(), t.gemm2()] {
                    add(descs_of(spec, g, spec.target, f, a, &recipes, e)?);
                }
            }
        }
    }
    for set in &spec.sm90 {
        for &a in &set.activations {
            let sm90_recipes: Vec<EpilogueRecipe> = match set.recipes.as_slice() {
                [] => vec![Target::Sm90a.default_recipe()],
                r => r.to_vec(),
            };
            // bf16 SwiGLU inputs exist for A4 only; A16 and A8 keep f32 (the description
            // builder refuses the other combinations).
            if a != ActivationFormat::Nvfp4 && spec.swiglu_input != SwigluInput::F32 {
                continue;
            }
            for &e in &set.epilogues {
                for t in &set.tactics {
                    for g in [t.gemm1(), t.gemm2()] {
                        add(descs_of(spec, g, Target::Sm90a, set.format, a, &sm90_recipes, e)?);
                    }
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

/// The SIMT kernels for one target (Hopper's include the A4 quantize-dequantize).
pub fn simt_kernels(target: SimtTarget) -> Result<Vec<GeneratedKernel>, GenerateError> {
    SimtFamily::of(target).into_iter().map(|f| simt_kernel(f, target)).collect()
}

/// The differential corpus (sm_90a only).
pub fn corpus_kernels() -> Result<Vec<GeneratedKernel>, GenerateError> {
    CorpusKernel::ALL.into_iter().map(corpus_kernel).collect()
}

/// The default set (what generated/ holds), in a fixed order.
pub fn default_kernel_set() -> Result<Vec<GeneratedKernel>, GenerateError> {
    kernel_set(Target::Sm100f)
}

/// The full set with SM100 GEMMs for `target` (sm_100f or sm_100a) and the default Hopper
/// GEMMs.
pub fn kernel_set(target: Target) -> Result<Vec<GeneratedKernel>, GenerateError> {
    build_set(&KernelSetSpec::full(target))
}
