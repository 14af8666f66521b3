//! The product path checked end to end: a [`MoeLayer`] built from uploaded weights, run on a
//! backend with every tactic its kernel set resolves, each output compared with the CPU
//! reference of the device's generation (bytes and bf16 ulps) and with the unquantized f64
//! oracle. `gpu-check` runs it on the H200; the tests run it on the simulator.

use half::bf16;
use moegen_codegen::kernel_set::GenerateError;
use moegen_dsl::abi::KernelInfo;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::formats::{MxScaleRule, block_amax, nvfp4_global_scale, quantize_mxfp4};
use moegen_dsl::{
    ActivationFormat, Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode, MoeTactic, SwigluInput,
    TileSize,
};
use moegen_runtime::backend::{Backend, BackendError, DevicePtr};
use moegen_runtime::layer::{
    DeviceModel, DeviceSlice, DispatchTable, ForwardIo, KernelSet, LayerConfig, LayerError,
    LayerWeights, MoeLayer, Workspace, WorkspaceSpec, arch_of,
};
use moegen_runtime::reference::{
    CheckpointScales, ExpertEpilogue, ExpertTensors, MoeShape, Mxfp4Tensor, PreparedWeights,
    Routing, Sm90A8Weights, Sm90Tiling, Sm90Weights, SplitK, finalize, gemm1_reference,
    gemm2_contributions, oracle_moe_epilogue, prepare_relu2_weights, prepare_weights,
    quantize_activations, relative_l2_error, sm90_a8_gemm2_contributions, sm90_activations,
    sm90_gemm2_contributions,
};
use moegen_runtime::routing::moe_sort;

mod error;
mod fast_recipe;
mod problem;

pub use error::LayerCheckError;

pub use fast_recipe::{
    FAST_ABS, FAST_D_EX2, FAST_D_RCP, FastHCheck, compare_fast_h, fast_epsilon_h, fast_h_candidates,
};
pub use problem::{FC2_INPUT_SCALE, Problem, problem};

/// The GEMM kernel `desc` describes, generated as a build script would and kept for the
/// process's life (a `KernelSet` holds `'static` kernels): what the tests of epilogues the
/// default set does not ship add to a set.
pub fn generated_kernel(
    desc: &moegen_dsl::KernelDesc,
    ptx_target: &'static str,
) -> Result<&'static moegen_dsl::abi::KernelInfo, moegen_codegen::kernel_set::GenerateError> {
    let g = moegen_codegen::kernel_set::gemm_kernel(desc)?;
    Ok(Box::leak(Box::new(moegen_dsl::abi::KernelInfo {
        id: g.id,
        name: Box::leak(g.name.into_boxed_str()),
        ptx_target,
        ptx: Box::leak(g.ptx.into_boxed_str()),
        params: g.params,
        launch: g.launch,
    })))
}

/// The built-in set plus the kernels of epilogue `spec` for `gemms`, generated as a build
/// script would (each builder first passed through `base`: target, format, activations):
/// GEMM1 with `spec`'s activation and GEMM1 bias, GEMM2 with the deterministic finalize and
/// `spec`'s GEMM2 bias. The set the tests of epilogues the default set does not ship run.
pub fn builtin_with_epilogue(
    gemms: &[moegen_dsl::GemmTactic],
    spec: EpilogueSpec,
    ptx_target: &'static str,
    base: impl Fn(moegen_dsl::KernelDescBuilder) -> moegen_dsl::KernelDescBuilder,
) -> Result<KernelSet, moegen_codegen::kernel_set::GenerateError> {
    let mut extra = Vec::with_capacity(gemms.len());
    for g in gemms {
        let b = base(moegen_dsl::KernelDescBuilder::new(*g));
        let b = match g.kind() {
            moegen_dsl::GemmKind::Gemm1 => b.activation(spec.activation).bias(spec.gemm1_bias),
            moegen_dsl::GemmKind::Gemm2 => {
                b.finalize(FinalizeMode::Deterministic).bias(spec.gemm2_bias)
            }
        };
        let desc = b.build().map_err(moegen_codegen::kernel_set::GenerateError::from)?;
        extra.push(generated_kernel(&desc, ptx_target)?);
    }
    Ok(KernelSet::new(KernelSet::builtin().kernels().iter().copied().chain(extra)))
}

/// Hopper's Fast-recipe GEMM1s of the MXFP4 tactics moegen ships (A16 and A8; plain SwiGLU
/// and gpt-oss's epilogue), generated in this process as a build script would: the default
/// set holds the Exact ones only. Each is generated once per process.
pub fn hopper_fast_gemm1s() -> Result<Vec<&'static KernelInfo>, GenerateError> {
    use moegen_codegen::kernel_set::{KernelSetSpec, Sm90Gemms, gemm_descs, sm90_mxfp4_tactics};
    // One generation per process even when tests call this at once (the kernels are leaked:
    // a `KernelSet` holds `'static` kernels).
    static MADE: std::sync::Mutex<Vec<&'static KernelInfo>> = std::sync::Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !made.is_empty() {
        return Ok(made.clone());
    }
    let spec = KernelSetSpec {
        tactics: Vec::new(),
        simt: Vec::new(),
        corpus: false,
        sm90: vec![Sm90Gemms {
            format: WeightFormat::Mxfp4,
            activations: vec![ActivationFormat::Bf16, ActivationFormat::Fp8],
            tactics: sm90_mxfp4_tactics(),
            epilogues: vec![EpilogueSpec::PLAIN, EpilogueSpec::GPT_OSS],
            recipes: vec![EpilogueRecipe::Fast],
        }],
        ..KernelSetSpec::full(moegen_dsl::Target::Sm100f)
    };
    let mut fresh = Vec::new();
    for d in gemm_descs(&spec)? {
        if d.key().gemm == moegen_dsl::GemmKind::Gemm1 {
            fresh.push(generated_kernel(&d, "sm_90a")?);
        }
    }
    *made = fresh;
    Ok(made.clone())
}

/// The built-in set plus [`hopper_fast_gemm1s`].
pub fn builtin_with_hopper_fast() -> Result<KernelSet, GenerateError> {
    let extra = hopper_fast_gemm1s()?;
    Ok(KernelSet::new(KernelSet::builtin().kernels().iter().copied().chain(extra)))
}

/// How the synthetic routing spreads routes over experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum RoutePattern {
    /// Distinct random experts per token over the whole model (some non-local).
    Spread,
    /// Every token's first slot on local expert 0, the others non-local: every local route
    /// lands on one expert and the others are empty.
    OneExpert,
    /// Only the even local experts (and non-local ones) get routes: empty experts between
    /// busy ones.
    SomeEmpty,
    /// Every route non-local: no tile at all, the output is zero.
    NoneLocal,
}

/// One layer configuration to check.
#[derive(Clone, Copy, Debug)]
pub struct LayerCase {
    /// Shape and expert window.
    pub shape: MoeShape,
    /// Tokens of the forward pass.
    pub tokens: usize,
    /// The most tokens the workspace and the dispatch table are planned for (at least
    /// `tokens`): an engine plans for its largest batch and runs smaller ones.
    pub planned_tokens: usize,
    /// Activations entering GEMM1 (SM100: NVFP4 only).
    pub activations: ActivationFormat,
    /// Weight format (MXFP4 is kept MXFP4 on Hopper; SM100 takes NVFP4).
    pub format: WeightFormat,
    /// How routes are summed.
    pub finalize: FinalizeMode,
    /// Seed of the synthetic data.
    pub seed: u64,
    /// How routes spread over experts.
    pub routes: RoutePattern,
    /// GEMM1's activation and the biases (the built-in set has gpt-oss's for Hopper MXFP4
    /// only; other cases need kernels from `check_tactics_in`).
    pub epilogue: EpilogueSpec,
    /// GEMM1's epilogue recipe; `None`: the target's default (Fast on SM100, Exact on
    /// Hopper). Hopper's Fast GEMM1s are not in the built-in set (`check_tactics_in`).
    pub recipe: Option<EpilogueRecipe>,
}

impl LayerCase {
    /// A case planned for exactly `tokens`, with the plain epilogue and the target's default
    /// recipe. Most cases differ only in the arguments, so they are written without the three
    /// defaults; [`planned`](Self::planned), [`with_epilogue`](Self::with_epilogue) and
    /// [`with_recipe`](Self::with_recipe) change those where a case needs it.
    pub fn new(
        shape: MoeShape,
        tokens: usize,
        activations: ActivationFormat,
        format: WeightFormat,
        finalize: FinalizeMode,
        seed: u64,
        routes: RoutePattern,
    ) -> Self {
        LayerCase {
            shape,
            tokens,
            planned_tokens: tokens,
            activations,
            format,
            finalize,
            seed,
            routes,
            epilogue: EpilogueSpec::PLAIN,
            recipe: None,
        }
    }

    /// Plans for `planned_tokens`, as an engine plans for its largest batch and runs this one.
    pub fn planned(self, planned_tokens: usize) -> Self {
        LayerCase { planned_tokens, ..self }
    }

    /// Uses `epilogue`, whose kernels the built-in set may lack (see [`LayerCase::epilogue`]).
    pub fn with_epilogue(self, epilogue: EpilogueSpec) -> Self {
        LayerCase { epilogue, ..self }
    }

    /// Uses `recipe` rather than the target's default (see [`LayerCase::recipe`]).
    pub fn with_recipe(self, recipe: EpilogueRecipe) -> Self {
        LayerCase { recipe: Some(recipe), ..self }
    }

    /// A short label: `a16 mxfp4 det N=5`.
    pub fn label(&self) -> String {
        let a = self.activations.tag();
        let f = match self.format {
            WeightFormat::Nvfp4 => "nvfp4",
            WeightFormat::Mxfp4 => "mxfp4",
        };
        let fin = match self.finalize {
            FinalizeMode::BulkReduceAdd => "bulk",
            FinalizeMode::Deterministic => "det",
        };
        let s = &self.shape;
        let r = match self.routes {
            RoutePattern::Spread => "",
            RoutePattern::OneExpert => " one-expert",
            RoutePattern::SomeEmpty => " some-empty",
            RoutePattern::NoneLocal => " none-local",
        };
        let planned = if self.planned_tokens > self.tokens {
            format!(" (planned {})", self.planned_tokens)
        } else {
            String::new()
        };
        let e = &self.epilogue;
        let ep = if *e == EpilogueSpec::PLAIN {
            String::new()
        } else {
            let bias = |on: bool, tag: &'static str| if on { tag } else { "" };
            format!(
                " {}{}{}",
                e.activation.tag(),
                bias(e.gemm1_bias, "+b1"),
                bias(e.gemm2_bias, "+b2")
            )
        };
        let recipe = match self.recipe {
            None => "",
            Some(EpilogueRecipe::Fast) => " fast",
            Some(EpilogueRecipe::Exact) => " exact",
        };
        format!(
            "H{} I{} E{} L{} k{} {a} {f} {fin} N={}{planned}{r}{ep}{recipe}",
            s.hidden,
            s.intermediate,
            s.window.num_experts(),
            s.window.local(),
            s.top_k(),
            self.tokens
        )
    }
}

/// How one tactic's output compares.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TacticRow {
    /// The case's label.
    pub case: String,
    /// The tactic.
    pub tactic: String,
    /// Output elements equal to the reference's bit for bit.
    pub identical: usize,
    /// Output elements.
    pub elements: usize,
    /// Largest distance from the reference in bf16 ulps (NaN against a number: `u32::MAX`).
    pub max_ulp: u32,
    /// Relative L2 error against the reference.
    pub rel_l2_vs_reference: f64,
    /// Elements further from the reference than the finalize's order slack
    /// ([`finalize_slack`]: zero unless a bulk reduce sums more than two routes).
    pub beyond_slack: usize,
    /// Relative L2 error against the unquantized f64 oracle.
    pub rel_l2_vs_oracle: f64,
    /// The reference's own relative L2 error against the oracle (what quantization costs).
    pub reference_vs_oracle: f64,
    /// Hopper's Fast recipe: the device's GEMM1 output against the model within the
    /// recipe's tolerance ([`FastHCheck`]); `identical`, `max_ulp` and `beyond_slack` then
    /// compare with the reference's GEMM2 and finalize run on the device's own h, and
    /// `rel_l2_vs_reference` with the model's output. `None` for every other tactic.
    pub fast_h: Option<FastHCheck>,
    /// The forward pass between two events on the stream: milliseconds on a GPU (one eager
    /// pass, not a benchmark; a case's first pass includes the driver's loading of the
    /// kernels), simulated thread-instructions / 10⁹ on the simulator (exact, so tests
    /// compare the work of tactics).
    pub forward_ms: f64,
    /// The raw output bytes (bf16, little endian) for comparing backends.
    #[serde(skip)]
    pub output: Vec<bf16>,
}

/// The largest difference a bulk reduce-add may leave between two summation orders, per
/// output element (docs/reference.md): each of the k − 1 bf16 adds of either order is off by
/// at most half an ulp of a partial sum, and every partial sum is at most Σ|c|, so two orders
/// differ by at most 2·(k − 1)·2^-8·Σ|c| (bf16 keeps 8 significant bits, so half an ulp is
/// at most 2^-8 of the value). The deterministic finalize and k ≤ 2 have no slack.
pub fn finalize_slack(
    contrib: &[f32],
    tokens: usize,
    k: usize,
    hidden: usize,
    mode: FinalizeMode,
) -> Vec<f64> {
    if mode == FinalizeMode::Deterministic || k <= 2 {
        return vec![0.0; tokens * hidden];
    }
    let mut out = vec![0f64; tokens * hidden];
    for t in 0..tokens {
        for slot in 0..k {
            let row = &contrib[(t * k + slot) * hidden..(t * k + slot + 1) * hidden];
            for (o, c) in out[t * hidden..(t + 1) * hidden].iter_mut().zip(row) {
                *o += f64::from(c.abs());
            }
        }
    }
    let f = 2.0 * (k - 1) as f64 * 2f64.powi(-8);
    out.iter_mut().for_each(|o| *o *= f);
    out
}

/// The distance between two bf16 values in ulps (on the ordered integer line; ±0 are one
/// point). NaN against NaN is 0, NaN against a number `u32::MAX`.
pub fn bf16_ulps(a: bf16, b: bf16) -> u32 {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => return 0,
        (true, false) | (false, true) => return u32::MAX,
        _ => {}
    }
    let ord = |v: bf16| {
        let bits = i32::from(v.to_bits());
        if bits & 0x8000 != 0 { -(bits & 0x7FFF) } else { bits }
    };
    (ord(a) - ord(b)).unsigned_abs()
}

/// Uploads `bytes` as a slice of the caller's memory.
fn slice(b: &mut dyn Backend, bytes: &[u8]) -> Result<DeviceSlice, BackendError> {
    let p = b.upload_new(bytes)?;
    Ok(DeviceSlice::new(p, bytes.len() as u64))
}

/// A case's layer on a backend: weights uploaded, one workspace, the caller's buffers.
struct Bench {
    layer: MoeLayer,
    ws: Workspace,
    io: ForwardIo,
    out: DevicePtr,
    out_bytes: usize,
    /// The tactics to run (at most `max_tactics`, spread over the candidates).
    tactics: Vec<MoeTactic>,
}

impl Bench {
    /// Frees everything [`setup`] allocated, so cases one after another do not pile up
    /// device memory (the gpt-oss-size cases hold up to about 0.9 GB).
    fn release(self, b: &mut dyn Backend, case: &LayerCase) -> Result<(), LayerCheckError> {
        // Everything is given back even when one part fails; the first error is reported.
        let io = &self.io;
        let ptrs = [io.activations.ptr, io.expert_ids.ptr, io.expert_weights.ptr, self.out];
        let buffers = b.free_all(&ptrs).map_err(|e| backend(case, e));
        let layer = self.layer.release(b).map_err(|e| layer_err(case, e));
        let ws = self.ws.release(b).map_err(|e| layer_err(case, e));
        buffers.and(layer).and(ws)
    }
}

/// The case's backend error.
fn backend(case: &LayerCase, source: BackendError) -> LayerCheckError {
    LayerCheckError::Backend { case: case.label(), source: Box::new(source) }
}

/// The case's layer error.
fn layer_err(case: &LayerCase, source: LayerError) -> LayerCheckError {
    LayerCheckError::Layer { case: case.label(), source: Box::new(source) }
}

fn setup(
    b: &mut dyn Backend,
    p: &Problem,
    max_tactics: Option<usize>,
    named: Option<&str>,
    kernels: &KernelSet,
) -> Result<Bench, LayerCheckError> {
    let c = &p.case;
    let arch = arch_of(b);
    let config = LayerConfig {
        finalize: c.finalize,
        activations: c.activations,
        epilogue: c.epilogue,
        recipe: c.recipe,
        ..LayerConfig::new(c.shape)
    };
    if c.planned_tokens < c.tokens {
        return Err(LayerCheckError::PlannedTooFew { case: c.label() });
    }
    let planned = c.planned_tokens;
    let candidates = MoeLayer::candidates(&config, kernels, planned as u64, arch, c.format)
        .map_err(|e| layer_err(c, e))?;
    // The layer dispatches over every candidate; only the named ones run.
    let mut tactics = candidates.clone();
    if let Some(text) = named {
        tactics.retain(|t| t.to_string().contains(text));
    }
    // A spread samples the kernels, and a paired GEMM1 (`MoeTactic::gemm1_wide`) runs two
    // that single-width tactics hold: it spreads over those, unless the name left only pairs.
    let singles = tactics.iter().filter(|t| t.gemm1_wide().is_none()).count();
    if max_tactics.is_some_and(|m| m > 0 && m < singles) {
        tactics.retain(|t| t.gemm1_wide().is_none());
    }
    if let Some(m) = max_tactics.filter(|&m| m > 0 && m < tactics.len()) {
        let n = tactics.len();
        tactics = (0..m).map(|j| tactics[j * n / m]).collect();
    }
    let weights = match arch {
        Arch::Sm100 if c.activations == ActivationFormat::Mxfp8 => {
            LayerWeights::upload_sm100_mx(b, &c.shape, &p.sm100_mx_weights()?)
        }
        Arch::Sm100 => LayerWeights::upload(b, &c.shape, &p.prepared, p.input_scale),
        Arch::Sm90 if c.activations == ActivationFormat::Fp8 => {
            LayerWeights::upload_sm90_a8(b, &c.shape, &p.sm90_a8_weights()?)
        }
        Arch::Sm90 => LayerWeights::upload_sm90(b, &c.shape, &p.sm90_weights()?, p.input_scale),
    }
    .map_err(|e| layer_err(c, e))?;
    let dev = DeviceModel::for_layer(arch, c.activations).with_sms(b.sm_count());
    let table = DispatchTable::analytic(&c.shape, planned as u64, &candidates, &dev)
        .map_err(|e| layer_err(c, e))?;
    let layer = MoeLayer::new(b, config, weights, kernels, table).map_err(|e| layer_err(c, e))?;
    let spec = WorkspaceSpec {
        max_tokens: planned,
        top_k: c.shape.top_k(),
        max_local_experts: c.shape.local_experts(),
        max_hidden: c.shape.hidden,
        max_intermediate: c.shape.intermediate,
        tile_sizes: candidates.iter().map(MoeTactic::tile).collect(),
        deterministic: c.finalize == FinalizeMode::Deterministic,
        arch,
        activations: c.activations,
    };
    let ws = Workspace::new(b, kernels, spec).map_err(|e| layer_err(c, e))?;
    let x: Vec<u8> = p.x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let ids: Vec<u8> = p.routing.experts.iter().flat_map(|v| v.to_le_bytes()).collect();
    let w: Vec<u8> = p.routing.weights.iter().flat_map(|v| v.to_le_bytes()).collect();
    let out_bytes = c.tokens * c.shape.hidden * 2;
    let out = b.alloc(out_bytes).map_err(|e| backend(c, e))?;
    let io = ForwardIo {
        tokens: c.tokens,
        activations: slice(b, &x).map_err(|e| backend(c, e))?,
        expert_ids: slice(b, &ids).map_err(|e| backend(c, e))?,
        expert_weights: slice(b, &w).map_err(|e| backend(c, e))?,
        output: DeviceSlice::new(out, out_bytes as u64),
    };
    Ok(Bench { layer, ws, io, out, out_bytes, tactics })
}

/// Eager forward against CUDA-graph replay of the same pass.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GraphCheck {
    /// The case's label.
    pub case: String,
    /// The tactic the dispatch table picked (the one captured).
    pub tactic: String,
    /// Output bytes.
    pub bytes: usize,
    /// Each of two replays, over a poisoned output, left exactly the eager run's bytes.
    pub identical: bool,
    /// Kernel launches the backend counted for the eager pass.
    pub eager_launches: u64,
    /// The counters agree with the graph: capturing counted no launch and no wait, and each
    /// replay counted the eager pass's launches.
    pub counted: bool,
}

/// Runs `p`'s layer eagerly with the dispatch table's tactic, then captures the same pass
/// into a graph and replays it twice, each time over a poisoned output; the bytes must be
/// equal. Only for the deterministic finalize, whose bytes do not depend on the order of
/// routes. Sets the layer up afresh (weights, workspace, buffers), so it can run on its
/// own.
pub fn check_graph_replay(b: &mut dyn Backend, p: &Problem) -> Result<GraphCheck, LayerCheckError> {
    check_graph_replay_in(b, p, &KernelSet::builtin())
}

/// [`check_graph_replay`] with the layer built from `kernels`.
pub fn check_graph_replay_in(
    b: &mut dyn Backend,
    p: &Problem,
    kernels: &KernelSet,
) -> Result<GraphCheck, LayerCheckError> {
    let c = &p.case;
    if c.finalize != FinalizeMode::Deterministic {
        return Err(LayerCheckError::NotDeterministic { case: c.label() });
    }
    let s = setup(b, p, None, None, kernels)?;
    b.memset(s.out, 0xFF, s.out_bytes).map_err(|e| backend(c, e))?;
    let before = b.stats();
    let tactic = s.layer.forward(b, &s.ws, &s.io).map_err(|e| layer_err(c, e))?;
    s.layer.check_errors(b, &s.ws).map_err(|e| layer_err(c, e))?;
    let eager = b.download(s.out, s.out_bytes).map_err(|e| backend(c, e))?;
    let before_capture = b.stats();
    let eager_launches = before_capture.launches - before.launches;
    let g = s.layer.capture(b, &s.ws, &s.io).map_err(|e| layer_err(c, e))?;
    let after_capture = b.stats();
    let mut counted = after_capture.launches == before_capture.launches
        && after_capture.synchronizations == before_capture.synchronizations;
    // Each replay over a freshly poisoned output, so a wrong first replay cannot hide
    // behind a right second one.
    let mut identical = true;
    for _ in 0..2 {
        b.memset(s.out, 0xAB, s.out_bytes).map_err(|e| backend(c, e))?;
        let launches = b.stats().launches;
        b.replay(g).map_err(|e| backend(c, e))?;
        counted &= b.stats().launches - launches == eager_launches;
        identical &= b.download(s.out, s.out_bytes).map_err(|e| backend(c, e))? == eager;
    }
    s.layer.check_errors(b, &s.ws).map_err(|e| layer_err(c, e))?;
    b.drop_graph(g).map_err(|e| backend(c, e))?;
    let bytes = s.out_bytes;
    s.release(b, c)?;
    Ok(GraphCheck {
        case: p.case.label(),
        tactic: tactic.to_string(),
        bytes,
        identical,
        eager_launches,
        counted,
    })
}

/// Runs `p`'s layer once (the dispatch table's tactic) with its ids already on the device,
/// the way a caller's router leaves them, and returns what [`MoeLayer::check_errors`]
/// decodes from the device's record: the checks no host path made.
pub fn device_checked_errors(
    b: &mut dyn Backend,
    p: &Problem,
) -> Result<Result<(), LayerError>, LayerCheckError> {
    let c = &p.case;
    let s = setup(b, p, None, None, &KernelSet::builtin())?;
    s.layer.forward(b, &s.ws, &s.io).map_err(|e| layer_err(c, e))?;
    let errors = s.layer.check_errors(b, &s.ws);
    s.release(b, c)?;
    Ok(errors)
}

/// Runs `p` through a [`MoeLayer`] on `b` with every tactic of the built-in kernel set that
/// applies (at most `max_tactics`, spread over the list, when given), comparing each with the
/// reference of `b`'s generation.
pub fn check_tactics(
    b: &mut dyn Backend,
    p: &Problem,
    max_tactics: Option<usize>,
) -> Result<Vec<TacticRow>, LayerCheckError> {
    check_tactics_in(b, p, max_tactics, &KernelSet::builtin())
}

/// [`check_tactics`] with the kernels of `kernels` (a build script's or `moe_kernels!`'s set,
/// or kernels a test generates).
pub fn check_tactics_in(
    b: &mut dyn Backend,
    p: &Problem,
    max_tactics: Option<usize>,
    kernels: &KernelSet,
) -> Result<Vec<TacticRow>, LayerCheckError> {
    check_tactics_picked(b, p, max_tactics, None, kernels)
}

/// [`check_tactics_in`] over only the tactics whose name (`MoeTactic`'s `Display`) contains
/// `named` (e.g. `_pp`, the Hopper ping-pong GEMM1s), when given; none matching is an empty
/// list, not an error: a case may have no such tactic. With `max_tactics` the pick spreads
/// over the single-width tactics (a paired GEMM1 adds no kernel), unless `named` left only
/// pairs (e.g. `|n256`).
pub fn check_tactics_picked(
    b: &mut dyn Backend,
    p: &Problem,
    max_tactics: Option<usize>,
    named: Option<&str>,
    kernels: &KernelSet,
) -> Result<Vec<TacticRow>, LayerCheckError> {
    let bench = setup(b, p, max_tactics, named, kernels)?;
    let rows = run_tactics(b, p, &bench)?;
    bench.release(b, &p.case)?;
    Ok(rows)
}

fn run_tactics(
    b: &mut dyn Backend,
    p: &Problem,
    bench: &Bench,
) -> Result<Vec<TacticRow>, LayerCheckError> {
    let c = &p.case;
    let arch = arch_of(b);
    let Bench { layer, ws, io, out, out_bytes, tactics } = bench;
    let (io, out, out_bytes) = (*io, *out, *out_bytes);
    let mut rows = Vec::with_capacity(tactics.len());
    // The reference's output does not depend on the tile size (rows only move; tested in
    // moegen-runtime's reference tests) but does on each GEMM's K split (the ranks' partial
    // sums round on their own), so it is computed once per case and pair of splits.
    type Reference = (Vec<bf16>, Vec<f32>);
    let mut references: Vec<((SplitK, SplitK), Reference)> = Vec::new();
    // Likewise the Fast recipe's model h and the weights its check read, per GEMM1 split.
    let mut fast_models: Vec<(SplitK, fast_recipe::FastModel)> = Vec::new();
    for t in tactics {
        // Stale output must not pass for a result: poison it first.
        let tactic_err = |e| LayerCheckError::Tactic {
            case: c.label(),
            tactic: t.to_string(),
            source: Box::new(e),
        };
        b.memset(out, 0xFF, out_bytes).map_err(|e| backend(c, e))?;
        let start = b.record_event().map_err(|e| backend(c, e))?;
        layer.forward_with(b, ws, &io, t).map_err(tactic_err)?;
        let end = b.record_event().map_err(|e| backend(c, e))?;
        let forward_ms = f64::from(b.elapsed_ms(start, end).map_err(|e| backend(c, e))?);
        layer.check_errors(b, ws).map_err(tactic_err)?;
        let raw = b.download(out, out_bytes).map_err(|e| backend(c, e))?;
        let got: Vec<bf16> = raw
            .chunks_exact(2)
            .map(|h| bf16::from_bits(u16::from_le_bytes([h[0], h[1]])))
            .collect();
        // The tactic's tiling: its tile and (Hopper) its GEMMs' splits.
        let tiling = Sm90Tiling::of(t).map_err(|source| LayerCheckError::Reference {
            case: c.label(),
            source: Box::new(source),
        })?;
        let splits = (tiling.gemm1, tiling.gemm2);
        let (model, model_contrib) = match references.iter().find(|(k, _)| *k == splits) {
            Some((_, r)) => r.clone(),
            None => {
                let r = p.reference_and_contributions(arch, tiling)?;
                references.push((splits, r.clone()));
                r
            }
        };
        let fast = arch == Arch::Sm90 && c.recipe == Some(EpilogueRecipe::Fast);
        let (want, contrib, fast_h) = if fast {
            let at = match fast_models.iter().position(|(k, _)| *k == tiling.gemm1) {
                Some(at) => at,
                None => {
                    fast_models.push((tiling.gemm1, fast_recipe::fast_model(p, tiling.gemm1)?));
                    fast_models.len() - 1
                }
            };
            let f = fast_recipe::fast_pass(b, p, &fast_models[at].1, ws, tiling)?;
            (f.want, f.contrib, Some(f.check))
        } else {
            (model.clone(), model_contrib, None)
        };
        let slack = finalize_slack(&contrib, c.tokens, c.shape.top_k(), c.shape.hidden, c.finalize);
        let beyond_slack = got
            .iter()
            .zip(&want)
            .zip(&slack)
            .filter(|((a, b), s)| {
                // NaN differences count as beyond the slack.
                let d = f64::from((a.to_f32() - b.to_f32()).abs());
                a.to_bits() != b.to_bits()
                    && d.partial_cmp(*s) != Some(std::cmp::Ordering::Less)
                    && d != **s
            })
            .count();
        let f64s = |v: &[bf16]| v.iter().map(|x| f64::from(x.to_f32())).collect::<Vec<_>>();
        let (g, wv) = (f64s(&got), f64s(&model));
        rows.push(TacticRow {
            case: c.label(),
            tactic: t.to_string(),
            identical: got.iter().zip(&want).filter(|(a, b)| a.to_bits() == b.to_bits()).count(),
            elements: got.len(),
            max_ulp: got.iter().zip(&want).map(|(a, b)| bf16_ulps(*a, *b)).max().unwrap_or(0),
            rel_l2_vs_reference: relative_l2_error(&g, &wv),
            beyond_slack,
            rel_l2_vs_oracle: relative_l2_error(&g, &p.oracle),
            reference_vs_oracle: relative_l2_error(&wv, &p.oracle),
            fast_h,
            forward_ms,
            output: got,
        });
    }
    Ok(rows)
}
