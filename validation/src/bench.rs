//! moe-bench's engine: synthetic MXFP4 expert weights and routed inputs written in the folder
//! contract `bench/peers.py` reads (bench/README.md), and moegen's layer timed the way the
//! peers are timed: autotuned through the runtime's tuner, one CUDA graph per token count,
//! replays timed one by one with events, the median reported. Every variant runs the same
//! weights: MXFP4 kept MXFP4, or converted exactly to NVFP4 (`import_mxfp4`).

use std::path::Path;

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::{ActivationFormat, Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode, MoeTactic};
use moegen_runtime::backend::{Backend, BackendError, DevicePtr, GraphId};
use moegen_runtime::layer::{
    DeviceModel, DeviceSlice, DispatchTable, ForwardIo, KernelSet, LayerConfig, LayerWeights,
    MoeLayer, TuneOptions, Workspace, WorkspaceSpec, arch_of, autotune,
};
use moegen_runtime::reference::{
    CheckpointScales, ExpertEpilogue, ExpertTensors, MoeShape, Mxfp4Tensor, SWIGLU_INTERLEAVE,
    Sm90A8Weights, Sm90Weights, import_mxfp4,
};
use moegen_runtime::routing::ExpertWindow;

use crate::npy::{Array, Dtype, write_npy, write_npz};

mod error;
mod synth;

pub use error::BenchError;

use synth::bytes;
pub use synth::{Inputs, MxExpert, MxMatrix, Workload, synth_inputs, synth_weights, write_inputs};

/// A benchmarked layer shape and its token counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchShape {
    /// Folder and table name.
    pub name: &'static str,
    /// H.
    pub hidden: usize,
    /// I.
    pub intermediate: usize,
    /// Experts of the model.
    pub experts: usize,
    /// Experts on this rank.
    pub local_experts: usize,
    /// First local expert.
    pub expert_offset: usize,
    /// Routes per token.
    pub top_k: usize,
    /// Token counts.
    pub tokens: Vec<usize>,
}

impl BenchShape {
    /// One DeepSeek-V3 MoE layer's slice on one of 8 ranks: H 7168, I 2048, 256 experts,
    /// 32 local, top-8.
    pub fn deepseek() -> Self {
        Self {
            name: "deepseek",
            hidden: 7168,
            intermediate: 2048,
            experts: 256,
            local_experts: 32,
            expert_offset: 0,
            top_k: 8,
            tokens: vec![16, 128, 1024, 4096, 16384],
        }
    }
    /// gpt-oss-120b-like (bench/gpt_oss_shape.md): H = I = 2880, 32 experts on one rank,
    /// top-4, MXFP4 checkpoint.
    pub fn gpt_oss() -> Self {
        Self {
            name: "gpt-oss",
            hidden: 2880,
            intermediate: 2880,
            experts: 32,
            local_experts: 32,
            expert_offset: 0,
            top_k: 4,
            tokens: vec![1, 16, 128, 1024, 4096, 16384],
        }
    }
    /// The named shape.
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "deepseek" => Some(Self::deepseek()),
            "gpt-oss" => Some(Self::gpt_oss()),
            _ => None,
        }
    }
    /// The moegen shape.
    pub fn moe_shape(&self) -> Result<MoeShape, BenchError> {
        let e = |source| BenchError::Shape { shape: self.name, source };
        let w = ExpertWindow::new(self.experts, self.expert_offset, self.local_experts, self.top_k)
            .map_err(e)?;
        MoeShape::new(self.hidden, self.intermediate, w).map_err(e)
    }
}

/// A way of running the layer: weight format, activation format and GEMM1's epilogue recipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    /// `mxfp4-a16`, `mxfp4-a8`, `nvfp4-a16`, `nvfp4-a4`, `mxfp4-fast-a16`, `mxfp4-fast-a8`.
    pub name: &'static str,
    /// Weights.
    pub format: WeightFormat,
    /// Activations entering GEMM1.
    pub activations: ActivationFormat,
    /// GEMM1's epilogue recipe; `None`: the target's default (Exact on Hopper, Fast on
    /// SM100).
    pub recipe: Option<EpilogueRecipe>,
}

const fn variant(name: &'static str, format: WeightFormat, a: ActivationFormat) -> Variant {
    Variant { name, format, activations: a, recipe: None }
}

const fn fast(name: &'static str, a: ActivationFormat) -> Variant {
    Variant {
        name,
        format: WeightFormat::Mxfp4,
        activations: a,
        recipe: Some(EpilogueRecipe::Fast),
    }
}

/// Every variant, by name. The `-fast-` ones run Hopper's Fast recipe (MUFU ex2/rcp in GEMM1's
/// activation, docs/reference.md), whose GEMM1s are generated at start-up.
pub const VARIANTS: [Variant; 6] = [
    variant("mxfp4-a16", WeightFormat::Mxfp4, ActivationFormat::Bf16),
    variant("mxfp4-a8", WeightFormat::Mxfp4, ActivationFormat::Fp8),
    variant("nvfp4-a16", WeightFormat::Nvfp4, ActivationFormat::Bf16),
    variant("nvfp4-a4", WeightFormat::Nvfp4, ActivationFormat::Nvfp4),
    fast("mxfp4-fast-a16", ActivationFormat::Bf16),
    fast("mxfp4-fast-a8", ActivationFormat::Fp8),
];

impl Variant {
    /// Whether a device of generation `arch` runs it (SM100: NVFP4 activations with the
    /// default recipe; Hopper: all).
    pub fn runs_on(&self, arch: Arch) -> bool {
        arch == Arch::Sm90 || (self.activations == ActivationFormat::Nvfp4 && self.recipe.is_none())
    }

    /// Whether a run that names no variants runs it: the ones `arch` runs, with its default
    /// recipe.
    pub fn by_default(&self, arch: Arch) -> bool {
        self.runs_on(arch) && self.recipe.is_none()
    }

    /// The variant called `name`, or an error listing them all.
    pub fn named(name: &str) -> Result<Variant, String> {
        VARIANTS.iter().copied().find(|v| v.name == name).ok_or_else(|| {
            let all: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
            format!("unknown variant {name:?} ({})", all.join(", "))
        })
    }

    /// The kernels it runs with: the built-in set, plus Hopper's Fast GEMM1s for a Fast
    /// variant.
    pub fn kernels(&self) -> Result<KernelSet, BenchError> {
        match self.recipe {
            Some(EpilogueRecipe::Fast) => crate::layer_check::builtin_with_hopper_fast()
                .map_err(|e| BenchError::Kernels { variant: self.name, source: Box::new(e) }),
            _ => Ok(KernelSet::builtin()),
        }
    }
}

/// How to time.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Untimed graph replays per token count.
    pub warmup: u32,
    /// Timed replays per token count (the median is reported).
    pub iters: u32,
    /// The tuner's runs per (bucket, tactic); `None`: keep the analytic table (no tuning,
    /// e.g. under a profiler, which would otherwise profile every trial).
    pub tune: Option<TuneOptions>,
    /// How routes are summed.
    pub finalize: FinalizeMode,
    /// Zero a buffer of this many bytes before each timed replay (outside the timed span),
    /// so no replay finds the previous one's weights in L2: what a layer meets inside a
    /// model, where the other layers run in between. `None`: back-to-back replays.
    pub flush_l2: Option<usize>,
    /// GEMM1's activation and the biases (`synth::synth_epilogue`'s data); the peers of
    /// bench/peers.py compute plain SwiGLU without biases.
    pub epilogue: EpilogueSpec,
    /// Milliseconds the GPU idles before each token count is timed (after the stream has
    /// drained): the tuner's heavy buckets or the previous token count raise the power draw,
    /// and an H100 near its power cap lowers its clocks for the next second or so; the
    /// peers (`bench/peers.py`, a fresh process per run) start cool. 0: no pause.
    pub settle_ms: u64,
    /// Time each of these tactics (their names, as `MoeTactic` prints them) on every input,
    /// one at a time as the only entry of the dispatch table, instead of the table's (or the
    /// tuner's) choice: how tactics compare draw by draw. `None`: the table's choice.
    pub tactics: Option<Vec<String>>,
}

/// The flush buffer's size with `--flush-l2`: 256 MiB, over five times the H200's L2 (and
/// what `bench/peers.py --flush-l2` zeroes).
pub const FLUSH_L2_BYTES: usize = 256 << 20;

/// One timed (variant, token count).
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    /// Token count.
    pub tokens: usize,
    /// Median milliseconds per forward pass (graph replay).
    pub ms: f64,
    /// The tactic dispatch chose.
    pub tactic: String,
    /// The variant.
    pub variant: String,
    /// Every timed replay, in ms.
    pub samples: Vec<f64>,
    /// The mean of `iters` replays queued back to back between two events: the GPU's time
    /// per pass with the host's graph launch hidden behind the previous pass (as inside a
    /// model's graph); `ms` times each replay from an idle GPU, launch latency included.
    /// `None` with `--flush-l2` (the flush would run between the replays).
    pub burst_ms: Option<f64>,
    /// The tactic came from the autotuner (not the analytic table).
    pub tuned: bool,
    /// Routes to the rank's local experts in this input.
    pub local_routes: usize,
    /// Local experts with at least one route in this input.
    pub live_experts: usize,
}

/// The static NVFP4 global scale of the activations (calibrated on the largest case).
pub fn input_scale(inputs: &[Inputs]) -> Result<f32, BenchError> {
    let largest = inputs.iter().max_by_key(|i| i.tokens).ok_or(BenchError::NoInputs)?;
    let xf: Vec<f32> = largest.x.iter().map(|v| v.to_f32()).collect();
    Ok(nvfp4_global_scale(block_amax(&xf))?)
}

/// The static global scale of GEMM1's output for NVFP4 (room for |h| up to 64).
pub const FC2_INPUT_SCALE: f32 = 448.0 * 6.0 / 64.0;

/// Uploads MXFP4 experts as variant `v` runs them on `b`'s generation.
pub fn upload_weights(
    b: &mut dyn Backend,
    shape: &MoeShape,
    weights: &[MxExpert],
    v: Variant,
    gs_x: f32,
    epilogue: &ExpertEpilogue,
) -> Result<LayerWeights, BenchError> {
    fn t(m: &MxMatrix) -> Mxfp4Tensor<'_> {
        Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
    }
    let experts: Vec<_> = weights
        .iter()
        .map(|e| ExpertTensors { up: t(&e.up), gate: t(&e.gate), down: t(&e.down) })
        .collect();
    let weights_err = |e| BenchError::Weights { variant: v.name, source: Box::new(e) };
    let upload_err = |e| BenchError::Upload { variant: v.name, source: Box::new(e) };
    match arch_of(b) {
        Arch::Sm90 => {
            let w = match v.format {
                WeightFormat::Mxfp4 => {
                    Sm90Weights::from_mxfp4(shape, &experts, v.activations, gs_x, FC2_INPUT_SCALE)
                }
                WeightFormat::Nvfp4 => import_mxfp4(shape, &experts, gs_x, FC2_INPUT_SCALE)
                    .and_then(|p| Sm90Weights::from_prepared(shape, &p, v.activations)),
            }
            .and_then(|w| w.with_epilogue(shape, epilogue.clone()))
            .map_err(weights_err)?;
            if v.activations == ActivationFormat::Fp8 {
                let a8 = Sm90A8Weights::from_sm90(shape, &w).map_err(weights_err)?;
                return LayerWeights::upload_sm90_a8(b, shape, &a8).map_err(upload_err);
            }
            LayerWeights::upload_sm90(b, shape, &w, gs_x).map_err(upload_err)
        }
        Arch::Sm100 => {
            let p = import_mxfp4(shape, &experts, gs_x, FC2_INPUT_SCALE)
                .and_then(|p| p.with_epilogue(shape, epilogue.clone()))
                .map_err(weights_err)?;
            LayerWeights::upload(b, shape, &p, gs_x).map_err(upload_err)
        }
    }
}

/// The median (NaN for none).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    }
}

/// Runs variant `v` for every input: builds the layer, autotunes it on one workspace, then per
/// token count captures a graph and times its replays. Writes moegen's output for each token
/// count as `out_{variant}_{N}.npy` (bf16 bits) into `dir` so the peer runner can check it.
pub fn bench_variant(
    b: &mut dyn Backend,
    dir: &Path,
    work: &Workload,
    v: Variant,
    opts: &BenchOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<BenchRow>, BenchError> {
    let (shape, weights, inputs) = (&work.shape, &work.weights, &work.inputs);
    let (sn, vn) = (shape.name, v.name);
    let s = |e| BenchError::Layer { shape: sn, variant: vn, source: Box::new(e) };
    let ms = shape.moe_shape()?;
    let arch = arch_of(b);
    if !v.runs_on(arch) {
        return Err(BenchError::WrongArch { variant: v.name, arch });
    }
    let max_tokens = inputs.iter().map(|i| i.tokens).max().ok_or(BenchError::NoInputs)?;
    let gs_x = input_scale(inputs)?;
    log(&format!("{} {}: preparing weights", shape.name, v.name));
    let epilogue = synth::synth_epilogue(&ms, opts.epilogue)
        .map_err(|e| BenchError::Weights { variant: v.name, source: Box::new(e) })?;
    let config = LayerConfig {
        finalize: opts.finalize,
        activations: v.activations,
        epilogue: opts.epilogue,
        recipe: v.recipe,
        ..LayerConfig::new(ms)
    };
    let kernels = v.kernels()?;
    let tactics =
        MoeLayer::candidates(&config, &kernels, max_tokens as u64, arch, v.format).map_err(s)?;
    let dev = DeviceModel::for_layer(arch, v.activations).with_sms(b.sm_count());
    let table = DispatchTable::analytic(&ms, max_tokens as u64, &tactics, &dev).map_err(s)?;
    let mut tile_sizes: Vec<_> = tactics.iter().map(MoeTactic::tile).collect();
    tile_sizes.sort_by_key(|t| t.rows());
    tile_sizes.dedup();
    let spec = WorkspaceSpec {
        max_tokens,
        top_k: shape.top_k,
        max_local_experts: shape.local_experts,
        max_hidden: shape.hidden,
        max_intermediate: shape.intermediate,
        tile_sizes,
        deterministic: opts.finalize == FinalizeMode::Deterministic,
        arch,
        activations: v.activations,
    };
    // The host-side work that can fail is done before the weights go up; from here each path
    // gives back what it made (the next variant uploads its own weights), reporting the first
    // error.
    let lw = upload_weights(b, &ms, weights, v, gs_x, &epilogue)?;
    let mut layer = match MoeLayer::try_new(b, config, lw, &kernels, table) {
        Ok(layer) => layer,
        Err(refused) => {
            let _ = refused.weights.release(b);
            return Err(s(refused.error));
        }
    };
    let ws = match Workspace::new(b, &kernels, spec).map_err(s) {
        Ok(ws) => ws,
        Err(e) => {
            let _ = layer.release(b);
            return Err(e);
        }
    };
    let run = VariantRun {
        w: (dir, work),
        v,
        opts,
        checksum: kernels.checksum(),
        tactics: &tactics,
        shape: &ms,
        max_tokens,
        dev: &dev,
    };
    let rows = tune_and_time(b, &mut layer, &ws, &run, log);
    let layer = layer.release(b).map_err(s);
    let ws = ws.release(b).map_err(s);
    rows.and_then(|rows| layer.and(ws).map(|()| rows))
}

/// What [`tune_and_time`] runs a variant's layer on.
struct VariantRun<'a> {
    w: (&'a Path, &'a Workload),
    v: Variant,
    opts: &'a BenchOptions,
    /// The kernel set's checksum (the tuner's cache key).
    checksum: u64,
    /// The layer's candidates.
    tactics: &'a [MoeTactic],
    shape: &'a MoeShape,
    max_tokens: usize,
    dev: &'a DeviceModel,
}

/// Autotunes the layer (where asked), then times every input with its table or, with
/// `--tactics`, with each named tactic alone; the L2 flush buffer goes back whatever fails.
fn tune_and_time(
    b: &mut dyn Backend,
    layer: &mut MoeLayer,
    ws: &Workspace,
    run: &VariantRun,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<BenchRow>, BenchError> {
    let (v, opts, (dir, work)) = (run.v, run.opts, run.w);
    let (sn, vn) = (work.shape.name, v.name);
    let s = |e| BenchError::Layer { shape: sn, variant: vn, source: Box::new(e) };
    let be = |e| BenchError::Backend { shape: sn, variant: vn, source: Box::new(e) };
    let tuned = match &opts.tune {
        Some(t) => {
            log(&format!("{sn} {vn}: tuning {} tactics", run.tactics.len()));
            let report = autotune(b, layer, run.checksum, ws, t).map_err(s)?;
            write_trials(&dir.join(format!("tune_{vn}.json")), &report.trials)?;
            report.from_cache || !report.trials.is_empty()
        }
        None => false,
    };
    let flush = match opts.flush_l2 {
        Some(bytes) => Some((b.alloc(bytes).map_err(be)?, bytes)),
        None => None,
    };
    let rows = match &opts.tactics {
        None => time_inputs(b, layer, ws, run.w, v, opts, flush, tuned, log),
        Some(names) => time_tactics(b, layer, ws, run, names, flush, log),
    };
    let flushed = flush.map_or(Ok(()), |(p, _)| b.free(p)).map_err(be);
    rows.and_then(|rows| flushed.map(|()| rows))
}

/// `--tactics`: each of `names` (among the layer's candidates) as the only entry of the
/// dispatch table in turn, every input timed with it.
fn time_tactics(
    b: &mut dyn Backend,
    layer: &mut MoeLayer,
    ws: &Workspace,
    run: &VariantRun,
    names: &[String],
    flush: Option<(DevicePtr, usize)>,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<BenchRow>, BenchError> {
    let (sn, vn) = (run.w.1.shape.name, run.v.name);
    let s = |e| BenchError::Layer { shape: sn, variant: vn, source: Box::new(e) };
    let mut rows = Vec::new();
    for name in names {
        let t = run.tactics.iter().find(|t| t.to_string() == *name).ok_or_else(|| {
            BenchError::UnknownTactic {
                shape: sn,
                variant: vn,
                name: name.clone(),
                candidates: run.tactics.iter().map(ToString::to_string).collect(),
            }
        })?;
        let one = DispatchTable::analytic(run.shape, run.max_tokens as u64, &[*t], run.dev);
        layer.set_dispatch(one.map_err(s)?).map_err(s)?;
        rows.extend(time_inputs(b, layer, ws, run.w, run.v, run.opts, flush, false, log)?);
    }
    Ok(rows)
}

/// Times every input of `work` with the layer's dispatch table: per token count a captured
/// graph's replays (median of `opts.iters` after `opts.warmup`), the output written as
/// `out_{variant}_{N}.npy`.
#[allow(clippy::too_many_arguments)]
fn time_inputs(
    b: &mut dyn Backend,
    layer: &mut MoeLayer,
    ws: &Workspace,
    (dir, work): (&Path, &Workload),
    v: Variant,
    opts: &BenchOptions,
    flush: Option<(DevicePtr, usize)>,
    tuned: bool,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<BenchRow>, BenchError> {
    let shape = &work.shape;
    let be = |e| BenchError::Backend { shape: shape.name, variant: v.name, source: Box::new(e) };
    let mut rows = Vec::new();
    for inp in &work.inputs {
        let n = inp.tokens;
        if opts.settle_ms > 0 {
            b.synchronize().map_err(be)?;
            std::thread::sleep(std::time::Duration::from_millis(opts.settle_ms));
        }
        let window = shape.expert_offset..shape.expert_offset + shape.local_experts;
        let local: Vec<i32> = inp
            .ids
            .iter()
            .copied()
            .filter(|&id| usize::try_from(id).is_ok_and(|id| window.contains(&id)))
            .collect();
        // The case's buffers go back whatever fails part-way; the first error is reported.
        let mut held = Vec::new();
        let timed = time_case(b, layer, ws, (shape, v.name), inp, opts, flush, &mut held);
        let freed = b.free_all(&held).map_err(be);
        let CaseTimes { tactic, samples, burst_ms, output } =
            timed.and_then(|t| freed.map(|()| t))?;
        let arr = Array { dtype: Dtype::U16, shape: vec![n, shape.hidden], bytes: output };
        write_npy(&dir.join(format!("out_{}_{n}.npy", v.name)), &arr)?;
        let row = BenchRow {
            tokens: n,
            ms: median(&samples),
            tactic: tactic.to_string(),
            variant: v.name.to_owned(),
            samples,
            burst_ms,
            tuned,
            local_routes: local.len(),
            live_experts: {
                let mut e = local;
                e.sort_unstable();
                e.dedup();
                e.len()
            },
        };
        log(&format!("{} {} N={n}: {:.4} ms ({})", shape.name, v.name, row.ms, row.tactic));
        rows.push(row);
    }
    Ok(rows)
}

/// What timing one token count gave.
struct CaseTimes {
    tactic: MoeTactic,
    /// Each timed replay, ms.
    samples: Vec<f64>,
    /// Per replay, back to back (none with an L2 flush).
    burst_ms: Option<f64>,
    /// The layer's output, bf16 bits.
    output: Vec<u8>,
}

/// One token count: uploads its inputs (each buffer pushed to `held` as it is made, for the
/// caller to free), runs the layer once and checks its error record, then times a captured
/// graph's replays.
#[allow(clippy::too_many_arguments)]
fn time_case(
    b: &mut dyn Backend,
    layer: &mut MoeLayer,
    ws: &Workspace,
    (shape, vn): (&BenchShape, &'static str),
    inp: &Inputs,
    opts: &BenchOptions,
    flush: Option<(DevicePtr, usize)>,
    held: &mut Vec<DevicePtr>,
) -> Result<CaseTimes, BenchError> {
    let s = |e| BenchError::Layer { shape: shape.name, variant: vn, source: Box::new(e) };
    let be = |e| BenchError::Backend { shape: shape.name, variant: vn, source: Box::new(e) };
    let n = inp.tokens;
    let mut up = |b: &mut dyn Backend, bytes: Vec<u8>| -> Result<DeviceSlice, BenchError> {
        let p = b.upload_new(&bytes).map_err(be)?;
        held.push(p);
        Ok(DeviceSlice::new(p, bytes.len() as u64))
    };
    let activations = up(b, bytes(&inp.x, |v| v.to_bits().to_le_bytes()))?;
    let expert_ids = up(b, bytes(&inp.ids, i32::to_le_bytes))?;
    let expert_weights = up(b, bytes(&inp.weights, f32::to_le_bytes))?;
    let out_bytes = n * shape.hidden * 2;
    let out = b.alloc(out_bytes).map_err(be)?;
    held.push(out);
    let io = ForwardIo {
        tokens: n,
        activations,
        expert_ids,
        expert_weights,
        output: DeviceSlice::new(out, out_bytes as u64),
    };
    let (_, tactic) = layer.dispatch().choose(n as u64).map_err(s)?;
    layer.forward(b, ws, &io).map_err(s)?;
    layer.check_errors(b, ws).map_err(s)?;
    let graph = layer.capture(b, ws, &io).map_err(s)?;
    // After the replays, the layer's error record (it says more than a failed drop) is
    // checked before the graph goes.
    let timed = replay_times(b, graph, opts, flush)
        .map_err(be)
        .and_then(|t| layer.check_errors(b, ws).map_err(s).map(|()| t));
    let dropped = b.drop_graph(graph).map_err(be);
    let (samples, burst_ms) = timed.and_then(|t| dropped.map(|()| t))?;
    let output = b.download(out, out_bytes).map_err(be)?;
    Ok(CaseTimes { tactic, samples, burst_ms, output })
}

/// `opts.warmup` untimed replays of `graph`, then `opts.iters` timed one by one (after an L2
/// flush where asked) and, without a flush, the same count back to back.
fn replay_times(
    b: &mut dyn Backend,
    graph: GraphId,
    opts: &BenchOptions,
    flush: Option<(DevicePtr, usize)>,
) -> Result<(Vec<f64>, Option<f64>), BackendError> {
    for _ in 0..opts.warmup {
        b.replay(graph)?;
    }
    let mut samples = Vec::with_capacity(opts.iters as usize);
    for _ in 0..opts.iters.max(1) {
        if let Some((p, bytes)) = flush {
            b.memset(p, 0, bytes)?;
        }
        let start = b.record_event()?;
        b.replay(graph)?;
        let end = b.record_event()?;
        samples.push(f64::from(b.elapsed_ms(start, end)?));
    }
    let burst_ms = match flush {
        Some(_) => None,
        None => {
            let start = b.record_event()?;
            for _ in 0..opts.iters.max(1) {
                b.replay(graph)?;
            }
            let end = b.record_event()?;
            let ms = f64::from(b.elapsed_ms(start, end)?);
            Some(ms / f64::from(opts.iters.max(1)))
        }
    };
    Ok((samples, burst_ms))
}

/// The tuner's trials (bucket, tactic, mean ms), so one tactic can be read against another
/// on the same run's inputs (e.g. the ping-pong GEMM1 beside the cooperative one).
fn write_trials(path: &Path, trials: &[moegen_runtime::layer::Trial]) -> Result<(), BenchError> {
    let rows: Vec<serde_json::Value> = trials
        .iter()
        .map(
            |t| serde_json::json!({"bucket": t.bucket, "tactic": t.tactic.to_string(), "ms": t.ms}),
        )
        .collect();
    let text = serde_json::to_string_pretty(&rows)?;
    std::fs::write(path, text + "\n")
        .map_err(|source| BenchError::Io { path: path.to_path_buf(), source })
}
