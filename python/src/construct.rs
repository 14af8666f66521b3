//! Building a layer: the backend, the upload, the tactic table (the analytic model's or
//! moegen's autotuner's), the workspace and the `MoeLayer`, all moegen-runtime's; this only
//! sequences them as moegen-candle does.

use moegen_dsl::options::EpilogueSpec;
use moegen_runtime::prelude::*;
use moegen_runtime::reference::Sm90Weights;

use crate::activations::{Mxfp4Activations, check_generation};
use crate::device::{Gpu, SimGeneration};
use crate::errors::Result;
use crate::reference::HostWeights;

/// The weights, prepared on the host, before the upload.
pub(crate) enum Prepared {
    /// NVFP4 (SM100 kernels on the simulator).
    Nvfp4(PreparedWeights),
    /// gpt-oss's MXFP4 with its epilogue.
    GptOss(Sm90Weights),
    /// MXFP4 with bf16 activations and plain SwiGLU.
    Mxfp4(Sm90Weights),
    /// MXFP4 kept MXFP4 for SM100's MXFP8 kernels, with its epilogue (gpt-oss's or plain).
    Sm100Mx(Sm100MxWeights),
}

/// How the layer is built beyond its weights.
#[derive(Clone, Copy)]
pub(crate) struct Options {
    /// The most tokens one pass takes.
    pub(crate) max_tokens: usize,
    /// moegen's deterministic finalize.
    pub(crate) deterministic: bool,
    /// Keep the weights on the host for the CPU reference.
    pub(crate) keep_host_weights: bool,
    /// Tune with moegen's autotuner: (warm-up runs, timed runs) per bucket and tactic.
    pub(crate) autotune: Option<(u32, u32)>,
}

/// A built layer and what its passes and reference need.
pub(crate) struct Built {
    pub(crate) gpu: Gpu,
    pub(crate) layer: MoeLayer,
    pub(crate) workspace: Workspace,
    pub(crate) config: LayerConfig,
    pub(crate) arch: Arch,
    pub(crate) host_weights: Option<HostWeights>,
}

/// What a constructor's weights will need, known before they are prepared: the simulator's
/// generation on `cpu`, and whether only an SM100 GPU runs them.
#[derive(Clone, Copy)]
pub(crate) struct Needs {
    sim: SimGeneration,
    mxfp8: bool,
}

impl Needs {
    /// NVFP4 experts (SM100's kernels on the simulator; a GPU's own generation).
    pub(crate) const NVFP4: Needs = Needs { sim: SimGeneration::Sm100, mxfp8: false };

    /// MXFP4 experts multiplied by `activations` (what `prepare` then makes of them:
    /// Hopper's layouts for bf16, SM100's for MXFP8).
    pub(crate) fn mxfp4(activations: Mxfp4Activations) -> Needs {
        match activations {
            Mxfp4Activations::Bf16 => Needs { sim: SimGeneration::Hopper, mxfp8: false },
            Mxfp4Activations::Mxfp8 => Needs { sim: SimGeneration::Sm100, mxfp8: true },
        }
    }
}

/// Opens `device` (`cpu`: moegen's simulator of the generation `needs` names; `cuda:N`:
/// moegen's CUDA backend), refuses a GPU of another generation than the layer needs, then
/// prepares the weights (`prepare`: nothing is re-laid for a layer the device refuses) and
/// builds the layer, uploads on the backend's own stream, finished before this returns.
pub(crate) fn construct(
    device: &str,
    shape: MoeShape,
    options: Options,
    needs: Needs,
    prepare: impl FnOnce() -> Result<Prepared>,
    input_scale: f32,
) -> Result<Built> {
    let Options { max_tokens, deterministic, keep_host_weights, autotune } = options;
    let mut gpu = Gpu::open(device, needs.sim)?;
    let arch = arch_of(gpu.backend());
    if needs.mxfp8 {
        check_generation(ActivationFormat::Mxfp8, arch, device)?;
    }
    let prepared = prepare()?;
    let b = gpu.backend();
    let mut config = LayerConfig::new(shape);
    if deterministic {
        config.finalize = FinalizeMode::Deterministic;
    }
    let (weights, format, host_weights) = match prepared {
        Prepared::Nvfp4(w) => {
            let uploaded = LayerWeights::upload(b, &shape, &w, input_scale)?;
            let kept = match (keep_host_weights, arch) {
                (false, _) => None,
                (true, Arch::Sm90) => Some(HostWeights::Sm90(Sm90Weights::from_prepared(
                    &shape,
                    &w,
                    ActivationFormat::Nvfp4,
                )?)),
                (true, _) => Some(HostWeights::Sm100(w)),
            };
            (uploaded, WeightFormat::Nvfp4, kept)
        }
        Prepared::GptOss(w) => {
            config.activations = ActivationFormat::Bf16;
            config.epilogue = EpilogueSpec::GPT_OSS;
            let uploaded = LayerWeights::upload_sm90(b, &shape, &w, 1.0)?;
            (uploaded, WeightFormat::Mxfp4, keep_host_weights.then_some(HostWeights::Sm90(w)))
        }
        Prepared::Mxfp4(w) => {
            config.activations = ActivationFormat::Bf16;
            let uploaded = LayerWeights::upload_sm90(b, &shape, &w, 1.0)?;
            (uploaded, WeightFormat::Mxfp4, keep_host_weights.then_some(HostWeights::Sm90(w)))
        }
        Prepared::Sm100Mx(w) => {
            config.activations = ActivationFormat::Mxfp8;
            config.epilogue = w.epilogue.spec();
            let uploaded = LayerWeights::upload_sm100_mx(b, &shape, &w)?;
            (uploaded, WeightFormat::Mxfp4, keep_host_weights.then_some(HostWeights::Sm100Mx(w)))
        }
    };
    let kernels = crate::kernels::for_layer(&config);
    let tokens = max_tokens as u64;
    let tactics = MoeLayer::candidates(&config, &kernels, tokens, arch, format)?;
    let model = DeviceModel::for_layer(arch, config.activations).with_sms(b.sm_count());
    let table = DispatchTable::analytic(&shape, tokens, &tactics, &model)?;
    // Tuning times every candidate, so the workspace serves every candidate's tile.
    let mut tile_sizes = table.tile_sizes();
    if autotune.is_some() {
        for t in &tactics {
            if !tile_sizes.contains(&t.tile()) {
                tile_sizes.push(t.tile());
            }
        }
    }
    let spec = WorkspaceSpec {
        max_tokens,
        top_k: shape.top_k(),
        max_local_experts: shape.local_experts(),
        max_hidden: shape.hidden,
        max_intermediate: shape.intermediate,
        tile_sizes,
        deterministic,
        arch,
        activations: config.activations,
    };
    let workspace = Workspace::new(b, &kernels, spec)?;
    let mut layer = MoeLayer::new(b, config, weights, &kernels, table)?;
    if let Some((warmup, iterations)) = autotune {
        // moegen's tuner on the backend's own stream (it waits for its timings), with
        // its cache file when MOEGEN_TUNE_CACHE names one.
        let options = TuneOptions { warmup, iterations, progress: false, ..TuneOptions::default() };
        moegen_runtime::layer::autotune(b, &mut layer, kernels.checksum(), &workspace, &options)?;
    }
    // The workspace's zeroing and the uploads were queued on the backend's own stream;
    // passes run on the caller's: finish them here, once.
    b.synchronize().map_err(LayerError::from)?;
    Ok(Built { gpu, layer, workspace, config, arch, host_weights })
}
