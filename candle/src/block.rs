//! [`MoeBlock`]: one moegen `MoeLayer` with its workspace and weights on the backend of a
//! candle device, and the conversion of candle tensors into its `ForwardIo`.

use std::sync::Mutex;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use moegen_dsl::epilogue_math::ActivationParams;
use moegen_dsl::options::EpilogueSpec;
use moegen_runtime::checkpoint_files::{GptOssExperts, ModelOptNvfp4Experts};
use moegen_runtime::prelude::*;
use moegen_runtime::reference::Sm90Weights;

use crate::error::MoeBlockError;
use crate::mode::Kernels;
use crate::source::VarBuilderSource;

/// The checkpoint layouts a block loads (docs/formats.md, "Checkpoint files").
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CheckpointLayout {
    /// gpt-oss's MXFP4 experts (`gate_up_proj_blocks/scales/bias`, `down_proj_*`), run with
    /// gpt-oss's epilogue: clamped SwiGLU with these parameters (`ActivationParams::GPT_OSS`
    /// for the published models) and both biases; activations `Bf16` (Hopper's A16 kernels)
    /// or `Mxfp8` (SM100's `kind::mxf8f6f4` kernels, the weights kept MXFP4).
    GptOssMxfp4(ActivationParams),
    /// NVIDIA ModelOpt's NVFP4 experts (`{e}.{gate,up,down}_proj.weight/weight_scale/
    /// weight_scale_2/input_scale`), plain SwiGLU, activations `Nvfp4` quantized with the
    /// checkpoint's calibrated `input_scale`s.
    ModelOptNvfp4,
}

/// What the layer needs beyond the checkpoint.
#[derive(Clone, Copy, Debug)]
pub struct MoeBlockConfig {
    /// The layer in the checkpoint (`model.layers.{layer}.mlp.experts.`).
    pub layer: usize,
    /// Hidden and intermediate size and the expert window (all experts, or an
    /// expert-parallel rank's).
    pub shape: MoeShape,
    /// The most tokens one `forward` takes (the workspace and dispatch table are sized for
    /// it once).
    pub max_tokens: usize,
    /// Which layout the experts are stored in.
    pub layout: CheckpointLayout,
    /// What GEMM1 multiplies the experts by, quantized by the layer from the bf16 `xs`; it
    /// picks the kernels' generation. `GptOssMxfp4`: `Bf16` (Hopper's kernels) or `Mxfp8`
    /// (SM100's, E4M3 with a power-of-two scale per 32; a GPU other than SM100 is refused
    /// with `MoeBlockError::Generation`). `ModelOptNvfp4`: `Nvfp4`. Any other pair is
    /// `MoeBlockError::Activations`.
    pub activations: ActivationFormat,
    /// How routes are summed: `BulkReduceAdd` (fastest; with more than two routes per
    /// token the GPU's add order, and so the last bf16 bit, can change from call to call)
    /// or `Deterministic` (a fixed-order reduction: the same bits every call).
    pub finalize: FinalizeMode,
}

struct Inner {
    backend: Box<dyn Backend + Send>,
    layer: MoeLayer,
    workspace: Workspace,
}

/// A MoE block run by moegen: built once from a candle `VarBuilder`, then
/// [`Self::forward`] over candle tensors on the VarBuilder's device.
///
/// - `Device::Cpu`: moegen's simulator runs the generated kernels of the generation the
///   activations pick: gpt-oss's MXFP4 with `Bf16` runs the Hopper kernels
///   (`SimBackend::hopper()`: the only generation with bf16 activations), with `Mxfp8` the
///   SM100 `kind::mxf8f6f4` kernels (`SimBackend::new()`); ModelOpt NVFP4 runs the SM100
///   kernels.
/// - `Device::Cuda` (feature `cuda`): moegen's CUDA backend on candle's own stream, reading
///   and writing candle's device memory directly; the GPU's generation picks the kernels,
///   and `Mxfp8` on a GPU other than SM100 is refused.
pub struct MoeBlock {
    device: Device,
    config: MoeBlockConfig,
    inner: Mutex<Inner>,
}

fn backend_for(
    device: &Device,
    kernels: Kernels,
) -> Result<Box<dyn Backend + Send>, MoeBlockError> {
    match device {
        Device::Cpu => Ok(Box::new(kernels.simulator())),
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            Ok(Box::new(CudaBackend::on_stream(d.cuda_stream()).map_err(LayerError::from)?))
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(MoeBlockError::UnsupportedDevice {
            device: format!("{device:?}"),
            reason: "moegen-candle was built without its `cuda` feature",
        }),
        Device::Metal(_) => Err(MoeBlockError::UnsupportedDevice {
            device: format!("{device:?}"),
            reason: "moegen has CUDA and simulator backends only",
        }),
    }
}

/// The layer's weights, uploaded, and its configuration.
fn load_weights(
    vb: &VarBuilder,
    config: &MoeBlockConfig,
    b: &mut dyn Backend,
) -> Result<(LayerWeights, LayerConfig), MoeBlockError> {
    let source = VarBuilderSource::new(vb);
    let shape = config.shape;
    let mut layer_config = LayerConfig::new(shape);
    layer_config.finalize = config.finalize;
    layer_config.activations = config.activations;
    let weights = match config.layout {
        CheckpointLayout::GptOssMxfp4(params) if config.activations == ActivationFormat::Mxfp8 => {
            let experts = GptOssExperts::load(&source, config.layer, &shape)?;
            // The checkpoint's codes and scale bytes as they are: re-laid, never requantized.
            let w = Sm100MxWeights::from_mxfp4(&shape, &experts.tensors())?
                .with_epilogue(&shape, experts.epilogue(&shape, params)?)?;
            layer_config.epilogue = EpilogueSpec::GPT_OSS;
            LayerWeights::upload_sm100_mx(b, &shape, &w)?
        }
        CheckpointLayout::GptOssMxfp4(params) => {
            let experts = GptOssExperts::load(&source, config.layer, &shape)?;
            // A16: α = 1, so the activation scales are not used (1 stands for "none").
            let w = Sm90Weights::from_mxfp4(
                &shape,
                &experts.tensors(),
                ActivationFormat::Bf16,
                1.0,
                1.0,
            )?
            .with_epilogue(&shape, experts.epilogue(&shape, params)?)?;
            layer_config.epilogue = EpilogueSpec::GPT_OSS;
            LayerWeights::upload_sm90(b, &shape, &w, 1.0)?
        }
        CheckpointLayout::ModelOptNvfp4 => {
            let experts = ModelOptNvfp4Experts::load(&source, config.layer, &shape)?;
            let input_scale = experts.input_scale();
            let prepared =
                import_nvfp4(&shape, &experts.tensors(), input_scale, experts.fc2_input_scale())?;
            LayerWeights::upload(b, &shape, &prepared, input_scale)?
        }
    };
    Ok((weights, layer_config))
}

impl MoeBlock {
    /// Loads the experts of `config.layer` through `vb` (read on the CPU whatever `vb`'s
    /// device; every tensor checked by moegen's loader, errors naming it), prepares and
    /// uploads them, plans the workspace and the dispatch table for `config.max_tokens`,
    /// on `vb.device()`. A layout with activations it is not run with, or MXFP8 on a GPU
    /// other than SM100, is refused before anything is read.
    pub fn new(vb: &VarBuilder, config: MoeBlockConfig) -> Result<Self, MoeBlockError> {
        let device = vb.device().clone();
        let run = Kernels::of(config.layout, config.activations)?;
        let mut backend = backend_for(&device, run)?;
        let b: &mut dyn Backend = backend.as_mut();
        let arch = arch_of(b);
        run.check_arch(arch, &format!("{:?}", device.location()))?;
        let (weights, layer_config) = load_weights(vb, &config, b)?;
        let kernels = crate::kernels::for_layer(&layer_config);
        let format = match config.layout {
            CheckpointLayout::GptOssMxfp4(_) => WeightFormat::Mxfp4,
            CheckpointLayout::ModelOptNvfp4 => WeightFormat::Nvfp4,
        };
        let max_tokens = config.max_tokens as u64;
        let tactics = MoeLayer::candidates(&layer_config, &kernels, max_tokens, arch, format)?;
        let model = DeviceModel::for_layer(arch, layer_config.activations).with_sms(b.sm_count());
        let table = DispatchTable::analytic(&config.shape, max_tokens, &tactics, &model)?;
        let spec = WorkspaceSpec {
            max_tokens: config.max_tokens,
            top_k: config.shape.top_k(),
            max_local_experts: config.shape.local_experts(),
            max_hidden: config.shape.hidden,
            max_intermediate: config.shape.intermediate,
            tile_sizes: table.tile_sizes(),
            deterministic: layer_config.finalize == FinalizeMode::Deterministic,
            arch,
            activations: layer_config.activations,
        };
        let workspace = Workspace::new(b, &kernels, spec)?;
        let layer = MoeLayer::new(b, layer_config, weights, &kernels, table)?;
        Ok(Self { device, config, inner: Mutex::new(Inner { backend, layer, workspace }) })
    }

    /// The block's configuration.
    pub fn config(&self) -> &MoeBlockConfig {
        &self.config
    }

    /// The device the block runs on (its VarBuilder's).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The MoE block over bf16 `xs` `[tokens, hidden]`, expert ids `topk_ids` `[tokens, k]`
    /// (global ids; U32, I32 or I64) and router weights `topk_weights` `[tokens, k]` (F32):
    /// bf16 `[tokens, hidden]` on the block's device. Errors are candle errors carrying
    /// moegen's messages; [`Self::try_forward`] returns them typed.
    pub fn forward(
        &self,
        xs: &Tensor,
        topk_ids: &Tensor,
        topk_weights: &Tensor,
    ) -> candle_core::Result<Tensor> {
        Ok(self.try_forward(xs, topk_ids, topk_weights)?)
    }

    /// [`Self::forward`] with moegen-candle's typed error.
    pub fn try_forward(
        &self,
        xs: &Tensor,
        topk_ids: &Tensor,
        topk_weights: &Tensor,
    ) -> Result<Tensor, MoeBlockError> {
        let (tokens, ids, weights) = self.check(xs, topk_ids, topk_weights)?;
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Inner { backend, layer, workspace } = &mut *inner;
        match &self.device {
            Device::Cpu => {
                crate::host::forward(backend.as_mut(), layer, workspace, xs, &ids, &weights, tokens)
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(d) => crate::cuda::forward(
                backend.as_mut(),
                layer,
                workspace,
                (xs, &ids, &weights),
                tokens,
                &d.cuda_stream(),
            ),
            other => Err(MoeBlockError::UnsupportedDevice {
                device: format!("{other:?}"),
                reason: "moegen-candle was built without its `cuda` feature",
            }),
        }
    }

    /// Decodes the errors the routing kernels record on the device (expert ids out of range,
    /// one expert twice in a token, non-finite router weights) into moegen's typed errors.
    /// On the CPU `forward` checks after every pass; on CUDA it does not (that would wait for
    /// the stream): call this where the engine may wait.
    pub fn check_errors(&self) -> Result<(), MoeBlockError> {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Inner { backend, layer, workspace } = &mut *inner;
        layer.check_errors(backend.as_mut(), workspace)?;
        Ok(())
    }

    /// Checks dtypes, shapes and devices; the ids as I32 and the weights as F32, both
    /// contiguous, on the block's device.
    fn check(
        &self,
        xs: &Tensor,
        topk_ids: &Tensor,
        topk_weights: &Tensor,
    ) -> Result<(usize, Tensor, Tensor), MoeBlockError> {
        let (h, k) = (self.config.shape.hidden, self.config.shape.top_k());
        for (input, t) in [("xs", xs), ("topk_ids", topk_ids), ("topk_weights", topk_weights)] {
            if !t.device().same_device(&self.device) {
                return Err(MoeBlockError::Device {
                    input,
                    actual: format!("{:?}", t.device().location()),
                    expected: format!("{:?}", self.device.location()),
                });
            }
        }
        if xs.dtype() != DType::BF16 {
            return Err(MoeBlockError::Dtype { input: "xs", actual: xs.dtype(), expected: "BF16" });
        }
        let tokens = match xs.dims() {
            &[n, hh] if hh == h => n,
            d => {
                return Err(MoeBlockError::Shape {
                    input: "xs",
                    actual: d.to_vec(),
                    expected: format!("[tokens, {h}]"),
                });
            }
        };
        for (input, t) in [("topk_ids", topk_ids), ("topk_weights", topk_weights)] {
            if t.dims() != [tokens, k] {
                return Err(MoeBlockError::Shape {
                    input,
                    actual: t.dims().to_vec(),
                    expected: format!("[{tokens}, {k}] (xs's tokens, top-k)"),
                });
            }
        }
        if topk_weights.dtype() != DType::F32 {
            return Err(MoeBlockError::Dtype {
                input: "topk_weights",
                actual: topk_weights.dtype(),
                expected: "F32",
            });
        }
        let ids = crate::ids::to_i32(topk_ids)?;
        let weights = topk_weights.contiguous().map_err(candle)?;
        Ok((tokens, ids, weights))
    }
}

/// A candle operation's failure during the conversion of the inputs.
pub(crate) fn candle(e: candle_core::Error) -> MoeBlockError {
    MoeBlockError::Candle(e.to_string())
}
