//! The layer's weights from Python's arrays, on the host: NVFP4 as FlashInfer's CuTe-DSL
//! MoE takes them (their bytes are moegen's layout already), and gpt-oss's MXFP4 tensors
//! through moegen-runtime's gpt-oss loader.

use moegen_dsl::epilogue_math::ActivationParams;
use moegen_runtime::checkpoint_files::GptOssExperts;
use moegen_runtime::prelude::*;
use moegen_runtime::reference::{Sm90Weights, validate_weights, w1_scale_layout, w2_scale_layout};

use crate::arrays::HostArray;
use crate::errors::{Error, Result};
use crate::source::ArraySource;

/// FlashInfer's NVFP4 expert tensors (`cute_dsl_fused_moe_nvfp4`'s weight arguments, in its
/// order), as host arrays, and the activations' global scale.
pub(crate) struct FlashInferNvfp4 {
    pub(crate) w1_weight: HostArray,
    pub(crate) w1_weight_sf: HostArray,
    pub(crate) w1_alpha: HostArray,
    pub(crate) fc2_input_scale: f32,
    pub(crate) w2_weight: HostArray,
    pub(crate) w2_weight_sf: HostArray,
    pub(crate) w2_alpha: HostArray,
    pub(crate) input_scale: f32,
}

const SCALE_DTYPES: [&str; 2] = ["uint8", "float8_e4m3fn"];

fn alphas(a: &HostArray, local: usize) -> Result<Vec<f32>> {
    a.dtype_in(&["float32"], "float32")?;
    a.shape_is(&[local], || format!("[{local}] (one per local expert)"))?;
    let v = a.f32s();
    // moegen keeps each expert's weight global scale beside α (the bf16-activation
    // conversion divides by it): 1/(α·gs) must be a positive finite number.
    if let Some(e) = v.iter().position(|x| !(x.is_finite() && *x > 0.0)) {
        return Err(Error::Value {
            input: if a.name == "w1_alpha" { "w1_alpha" } else { "w2_alpha" },
            reason: format!("expert {e}: {} is not a positive finite number", v[e]),
        });
    }
    Ok(v)
}

impl FlashInferNvfp4 {
    /// moegen's prepared weights: W1 and W2 bytes as given (FlashInfer's W1 interleaves the
    /// up ("linear") and gate rows in blocks of 64, moegen's does too), the scales' bytes as
    /// given (both are per expert 128x4 blocks of `[rows, K/16]`), α1 and α2 as given.
    pub(crate) fn prepare(self, shape: &MoeShape) -> Result<PreparedWeights> {
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        self.w1_weight.dtype_in(&["uint8"], "uint8 (two E2M1 per byte)")?;
        self.w1_weight.shape_is(&[l, 2 * i, h / 2], || format!("[{l}, {}, {}]", 2 * i, h / 2))?;
        self.w2_weight.dtype_in(&["uint8"], "uint8 (two E2M1 per byte)")?;
        self.w2_weight.shape_is(&[l, h, i / 2], || format!("[{l}, {h}, {}]", i / 2))?;
        let (l1, l2) = (w1_scale_layout(shape)?, w2_scale_layout(shape)?);
        for (sf, layout, rows, cols) in
            [(&self.w1_weight_sf, l1, 2 * i, h), (&self.w2_weight_sf, l2, h, i)]
        {
            sf.dtype_in(&SCALE_DTYPES, "uint8 or float8_e4m3fn (E4M3 codes)")?;
            if sf.data.len() != l * layout.bytes() {
                return Err(Error::Shape {
                    input: sf.name.clone(),
                    actual: sf.shape.clone(),
                    expected: format!(
                        "{} bytes: {l} experts × the 128x4 layout of [{rows}, {}]",
                        l * layout.bytes(),
                        cols / 16
                    ),
                });
            }
        }
        let alpha1 = alphas(&self.w1_alpha, l)?;
        let alpha2 = alphas(&self.w2_alpha, l)?;
        let (gs_x, gs_h) = (self.input_scale, self.fc2_input_scale);
        let prepared = PreparedWeights {
            w1: self.w1_weight.data,
            w1_scales: self.w1_weight_sf.data,
            w2: self.w2_weight.data,
            w2_scales: self.w2_weight_sf.data,
            // α = 1/(gs_x·gs_w), so gs_w = 1/(α·gs_x).
            w1_global_scale: alpha1.iter().map(|a| 1.0 / (a * gs_x)).collect(),
            w2_global_scale: alpha2.iter().map(|a| 1.0 / (a * gs_h)).collect(),
            alpha1,
            alpha2,
            fc2_input_scale: gs_h,
            epilogue: Default::default(),
        };
        validate_weights(shape, &prepared)?;
        Ok(prepared)
    }
}

/// gpt-oss's MXFP4 expert tensors (`gate_up_proj_blocks`, `…_scales`, `…_bias`,
/// `down_proj_*`), all experts of the layer, read by moegen's gpt-oss loader.
pub(crate) fn gpt_oss(
    shape: &MoeShape,
    tensors: Vec<(String, HostArray)>,
    params: ActivationParams,
) -> Result<Sm90Weights> {
    // The loader reads tensors by their checkpoint names (docs/formats.md, "Checkpoint
    // files"); layer 0 stands for "this layer", so errors name e.g.
    // `model.layers.0.mlp.experts.down_proj_scales`.
    let source = ArraySource::new(
        tensors.into_iter().map(|(k, v)| (format!("model.layers.0.mlp.experts.{k}"), v)),
    );
    let experts = GptOssExperts::load(&source, 0, shape)?;
    // A16: α = 1, so the activation scales are not used (1 stands for "none").
    let w = Sm90Weights::from_mxfp4(shape, &experts.tensors(), ActivationFormat::Bf16, 1.0, 1.0)?
        .with_epilogue(shape, experts.epilogue(shape, params)?)?;
    Ok(w)
}
