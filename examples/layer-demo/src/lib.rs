//! One small MoE layer run through `moegen_runtime::layer` on the simulator backend, beside
//! the CPU reference and the unquantized f64 oracle of the same layer.

use std::error::Error;

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::{Arch, FinalizeMode, MoeTactic, SwigluInput, Target};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::{
    DeviceModel, DispatchTable, ForwardIo, HostBuffers, KernelSet, LayerConfig, LayerWeights,
    MoeLayer, Workspace, WorkspaceSpec,
};
use moegen_runtime::reference::{
    MoeShape, ReferenceOptions, Routing, moe_reference, oracle_moe, prepare_weights,
    quantize_activations, relative_l2_error,
};
use moegen_runtime::routing::ExpertWindow;

/// Hidden size H.
pub const HIDDEN: usize = 512;
/// Intermediate size I.
pub const INTERMEDIATE: usize = 256;
/// Experts 2..6 of 8 are this rank's; each token picks 2.
const EXPERTS: usize = 8;
const FIRST_LOCAL: usize = 2;
const LOCAL: usize = 4;
const TOP_K: usize = 2;
/// The workspace serves forward passes of up to this many tokens.
pub const MAX_TOKENS: usize = 8;
/// GEMM1's output global scale, 448·6 / amax(h), from a calibration (amax(h) ≈ 8 here).
const FC2_INPUT_SCALE: f32 = 336.0;

/// What one forward pass gave, beside what it should give.
#[derive(Clone, Debug)]
pub struct LayerRun {
    /// The tactic the dispatch table chose.
    pub tactic: MoeTactic,
    /// bf16 `[tokens, H]` from the simulated kernels.
    pub output: Vec<bf16>,
    /// The CPU reference's bf16 output for the same tile size (bit-exact expected).
    pub reference: Vec<bf16>,
    /// The unquantized f64 oracle.
    pub oracle: Vec<f64>,
}

impl LayerRun {
    /// ‖output − oracle‖₂ / ‖oracle‖₂: what NVFP4 costs.
    pub fn error_vs_oracle(&self) -> f64 {
        let out: Vec<f64> = self.output.iter().map(|v| f64::from(v.to_f32())).collect();
        relative_l2_error(&out, &self.oracle)
    }
}

/// A deterministic xorshift generator: reproducible data without an RNG crate.
struct Rng(u64);

impl Rng {
    /// Roughly normal: a scaled sum of four uniforms.
    fn normal(&mut self) -> f32 {
        let mut uniform = || {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        (0..4).map(|_| uniform()).sum::<f32>() * 1.7
    }
}

/// The layer's kernel options.
fn config(shape: MoeShape, finalize: FinalizeMode) -> LayerConfig {
    LayerConfig { swiglu_input: SwigluInput::F32, finalize, ..LayerConfig::new(shape) }
}

fn shape() -> Result<MoeShape, Box<dyn Error>> {
    let window = ExpertWindow::new(EXPERTS, FIRST_LOCAL, LOCAL, TOP_K)?;
    Ok(MoeShape::new(HIDDEN, INTERMEDIATE, window)?)
}

/// The tactics `kernels` can run for this layer.
pub fn candidates(
    kernels: &KernelSet,
    finalize: FinalizeMode,
) -> Result<Vec<MoeTactic>, Box<dyn Error>> {
    let config = config(shape()?, finalize);
    Ok(MoeLayer::candidates(&config, kernels, MAX_TOKENS as u64, Arch::Sm100, WeightFormat::Nvfp4)?)
}

/// Runs `tokens` (1..=[`MAX_TOKENS`]) random tokens through a layer built from `kernels`,
/// with the tactic the analytic dispatch table picks, or with `only`.
pub fn run(
    kernels: &KernelSet,
    finalize: FinalizeMode,
    tokens: usize,
    only: Option<MoeTactic>,
) -> Result<LayerRun, Box<dyn Error>> {
    let (h, i, shape) = (HIDDEN, INTERMEDIATE, shape()?);
    let mut rng = Rng(7);
    let x: Vec<bf16> = (0..tokens * h).map(|_| bf16::from_f32(rng.normal())).collect();
    let mut weights = |fan_in: usize| -> Vec<f32> {
        (0..LOCAL * i * h).map(|_| rng.normal() / (fan_in as f32).sqrt()).collect()
    };
    let (up, gate, down) = (weights(h), weights(h), weights(i));
    let routing = Routing {
        tokens,
        experts: (0..tokens * TOP_K).map(|j| ((j * 5 + j / 2) % EXPERTS) as i32).collect(),
        weights: (0..tokens * TOP_K).map(|j| 0.25 + (j % 2) as f32 * 0.5).collect(),
    };
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    // The static activation scale a calibration would give for this batch.
    let input_scale = nvfp4_global_scale(block_amax(&xf))?;
    let prepared = prepare_weights(&shape, &up, &gate, &down, input_scale, FC2_INPUT_SCALE)?;

    let mut sim = SimBackend::new().with_sm_count(4);
    let config = config(shape, finalize);
    let max = MAX_TOKENS as u64;
    let tactics = match only {
        Some(t) => vec![t],
        None => MoeLayer::candidates(&config, kernels, max, Arch::Sm100, WeightFormat::Nvfp4)?,
    };
    let device = DeviceModel::b200().with_sms(sim.sm_count());
    let table = DispatchTable::analytic(&shape, max, &tactics, &device)?;
    let workspace = Workspace::new(
        &mut sim,
        kernels,
        WorkspaceSpec {
            max_tokens: MAX_TOKENS,
            top_k: TOP_K,
            max_local_experts: LOCAL,
            max_hidden: h,
            max_intermediate: i,
            tile_sizes: table.tile_sizes(),
            deterministic: finalize == FinalizeMode::Deterministic,
            arch: Arch::Sm100,
            activations: config.activations,
        },
    )?;
    let layer_weights = LayerWeights::upload(&mut sim, &shape, &prepared, input_scale)?;
    let recipe = config.recipe_on(Target::Sm100f);
    let layer = MoeLayer::new(&sim, config, layer_weights, kernels, table)?;

    let io = ForwardIo {
        tokens,
        activations: sim.upload_slice(&x)?,
        expert_ids: sim.upload_slice(&routing.experts)?,
        expert_weights: sim.upload_slice(&routing.weights)?,
        output: sim.alloc_slice::<bf16>(tokens * h)?,
    };
    let tactic = layer.forward(&mut sim, &workspace, &io)?;
    layer.check_errors(&mut sim, &workspace)?;
    let output = sim.download_slice::<bf16>(io.output)?;
    // When the model is unloaded, what moegen allocated goes back (the engine's buffers,
    // here the `io` slices, are its own to free).
    layer.release(&mut sim)?;
    workspace.release(&mut sim)?;

    let acts = quantize_activations(&xf, tokens, h, input_scale)?;
    let options = ReferenceOptions { swiglu_input: SwigluInput::F32, recipe, finalize };
    let reference = moe_reference(&shape, &acts, &prepared, &routing, tactic.tile(), options)?;
    let oracle = oracle_moe(&shape, &xf, &up, &gate, &down, &routing)?;
    Ok(LayerRun { tactic, output, reference: reference.output, oracle })
}
