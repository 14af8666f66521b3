//! The layer's weights from Python's arrays, on the host: NVFP4 as FlashInfer's CuTe-DSL
//! MoE takes them (their bytes are moegen's layout already), and gpt-oss's MXFP4 tensors
//! through moegen-runtime's gpt-oss loader, prepared for the kernels of the activations asked
//! for (Hopper's bf16 or SM100's MXFP8).

use moegen_dsl::epilogue_math::ActivationParams;
use moegen_runtime::checkpoint_files::GptOssExperts;
use moegen_runtime::prelude::*;
use moegen_runtime::reference::{
    CheckpointScales, ExpertTensors, Mxfp4Tensor, SWIGLU_INTERLEAVE, Sm90Weights, validate_weights,
    w1_scale_layout, w2_scale_layout,
};

use crate::activations::Mxfp4Activations;
use crate::arrays::HostArray;
use crate::construct::Prepared;
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
    activations: Mxfp4Activations,
) -> Result<Prepared> {
    // The loader reads tensors by their checkpoint names (docs/formats.md, "Checkpoint
    // files"); layer 0 stands for "this layer", so errors name e.g.
    // `model.layers.0.mlp.experts.down_proj_scales`.
    let source = ArraySource::new(
        tensors.into_iter().map(|(k, v)| (format!("model.layers.0.mlp.experts.{k}"), v)),
    );
    let experts = GptOssExperts::load(&source, 0, shape)?;
    Ok(match activations {
        Mxfp4Activations::Bf16 => {
            // A16: α = 1, so the activation scales are not used (1 stands for "none").
            let w = Sm90Weights::from_mxfp4(
                shape,
                &experts.tensors(),
                ActivationFormat::Bf16,
                1.0,
                1.0,
            )?;
            Prepared::GptOss(w.with_epilogue(shape, experts.epilogue(shape, params)?)?)
        }
        Mxfp4Activations::Mxfp8 => {
            // The checkpoint's codes and scale bytes as they are: re-laid, never requantized.
            let w = Sm100MxWeights::from_mxfp4(shape, &experts.tensors())?;
            Prepared::Sm100Mx(w.with_epilogue(shape, experts.epilogue(shape, params)?)?)
        }
    })
}

/// MXFP4 experts in moegen's W1 layout (`w1_values` `[L, 2I, H/2]` with up and gate rows
/// interleaved in blocks of 64, `w1_scales` `[L, 2I, H/32]` UE8M0; `w2_values` `[L, H,
/// I/2]`, `w2_scales` `[L, H, I/32]`), the layout moe-bench writes: plain SwiGLU, no
/// biases.
pub(crate) struct InterleavedMxfp4 {
    pub(crate) w1_values: HostArray,
    pub(crate) w1_scales: HostArray,
    pub(crate) w2_values: HostArray,
    pub(crate) w2_scales: HostArray,
}

/// Rows of `bytes` (`width` bytes each) of one interleaved W1: `parity` 0 takes the first 64
/// of every 128 (up), 1 the last 64 (gate).
fn half_rows(bytes: &[u8], width: usize, parity: usize) -> Vec<u8> {
    let block = SWIGLU_INTERLEAVE * width;
    bytes
        .chunks_exact(2 * block)
        .flat_map(|pair| &pair[parity * block..(parity + 1) * block])
        .copied()
        .collect()
}

fn linear_mxfp4((packed, scales): &(Vec<u8>, Vec<u8>)) -> Mxfp4Tensor<'_> {
    Mxfp4Tensor { packed, scales, layout: CheckpointScales::Linear }
}

impl InterleavedMxfp4 {
    /// The weights for moegen's Hopper kernels with bf16 activations or SM100's with MXFP8
    /// (`Sm90Weights::from_mxfp4`, `Sm100MxWeights::from_mxfp4`: both take up, gate and down
    /// apart).
    pub(crate) fn prepare(
        self,
        shape: &MoeShape,
        activations: Mxfp4Activations,
    ) -> Result<Prepared> {
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        let values: &[&str] = &["uint8"];
        let scales: &[&str] = &["uint8", "float8_e8m0fnu"];
        for (a, dtypes, expected, dims) in [
            (&self.w1_values, values, "uint8 (E2M1 pairs)", [l, 2 * i, h / 2]),
            (&self.w1_scales, scales, "uint8 or float8_e8m0fnu", [l, 2 * i, h / 32]),
            (&self.w2_values, values, "uint8 (E2M1 pairs)", [l, h, i / 2]),
            (&self.w2_scales, scales, "uint8 or float8_e8m0fnu", [l, h, i / 32]),
        ] {
            a.dtype_in(dtypes, expected)?;
            a.shape_is(&dims, || format!("{dims:?}"))?;
        }
        let per = |a: &HostArray| a.data.len() / l.max(1);
        let (v1, s1, v2, s2) = (
            per(&self.w1_values),
            per(&self.w1_scales),
            per(&self.w2_values),
            per(&self.w2_scales),
        );
        let mut parts = Vec::with_capacity(l);
        for e in 0..l {
            let w1 = &self.w1_values.data[e * v1..(e + 1) * v1];
            let sc1 = &self.w1_scales.data[e * s1..(e + 1) * s1];
            parts.push([
                (half_rows(w1, h / 2, 0), half_rows(sc1, h / 32, 0)),
                (half_rows(w1, h / 2, 1), half_rows(sc1, h / 32, 1)),
                (
                    self.w2_values.data[e * v2..(e + 1) * v2].to_vec(),
                    self.w2_scales.data[e * s2..(e + 1) * s2].to_vec(),
                ),
            ]);
        }
        let experts: Vec<ExpertTensors<Mxfp4Tensor<'_>>> = parts
            .iter()
            .map(|[up, gate, down]| ExpertTensors {
                up: linear_mxfp4(up),
                gate: linear_mxfp4(gate),
                down: linear_mxfp4(down),
            })
            .collect();
        Ok(match activations {
            Mxfp4Activations::Bf16 => Prepared::Mxfp4(Sm90Weights::from_mxfp4(
                shape,
                &experts,
                ActivationFormat::Bf16,
                1.0,
                1.0,
            )?),
            Mxfp4Activations::Mxfp8 => {
                Prepared::Sm100Mx(Sm100MxWeights::from_mxfp4(shape, &experts)?)
            }
        })
    }
}
