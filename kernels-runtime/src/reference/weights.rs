//! Converting a checkpoint's expert weights and a batch's activations into the NVFP4
//! tensors the kernels read.

use moegen_dsl::formats::{
    Nvfp4Matrix, Scale128x4, block_amax, nvfp4_global_scale, quantize_nvfp4,
};

use super::epilogue::ExpertEpilogue;
use crate::error::{Result, RuntimeError, check_len};
use moegen_dsl::Activation;
use moegen_dsl::plan::{MoeShape, SWIGLU_INTERLEAVE};

/// NVFP4 activations `[tokens, hidden]` with linear per-token scales.
#[derive(Clone, Debug, PartialEq)]
pub struct Nvfp4Activations {
    /// Tokens.
    pub tokens: usize,
    /// Hidden size.
    pub hidden: usize,
    /// `[tokens, hidden/2]` packed E2M1.
    pub packed: Vec<u8>,
    /// `[tokens, hidden/16]` E4M3 scale codes, row-major.
    pub scales: Vec<u8>,
    /// Global scale the activations were quantized with.
    pub global_scale: f32,
}

/// Quantizes `[tokens, hidden]` activations (f32, or bf16 via `Into<f32>`).
pub fn quantize_activations<T: Copy + Into<f32>>(
    x: &[T],
    tokens: usize,
    hidden: usize,
    global_scale: f32,
) -> Result<Nvfp4Activations> {
    let f: Vec<f32> = x.iter().map(|&v| v.into()).collect();
    let m = quantize_nvfp4(&f, tokens, hidden, global_scale)?;
    Ok(Nvfp4Activations { tokens, hidden, packed: m.packed, scales: m.scales, global_scale })
}

/// Expert weights in kernel layout, with their dequantization factors.
#[derive(Clone, Debug, PartialEq)]
pub struct PreparedWeights {
    /// `[L, 2I, H/2]`: up and gate rows interleaved in blocks of 64 (an ungated activation,
    /// ReLU²: `[L, I, H/2]`, rows in h column order; `Activation::w1_rows`).
    pub w1: Vec<u8>,
    /// L consecutive 128x4 scale blocks of `[2I, H/16]` (ungated: `[I, H/16]`).
    pub w1_scales: Vec<u8>,
    /// `[L, H, I/2]`.
    pub w2: Vec<u8>,
    /// L consecutive 128x4 scale blocks of `[H, I/16]`.
    pub w2_scales: Vec<u8>,
    /// Per-expert global scale of W1.
    pub w1_global_scale: Vec<f32>,
    /// Per-expert global scale of W2.
    pub w2_global_scale: Vec<f32>,
    /// `α1[e] = 1 / (gs_x · gs_w1[e])`.
    pub alpha1: Vec<f32>,
    /// `α2[e] = 1 / (gs_h · gs_w2[e])`.
    pub alpha2: Vec<f32>,
    /// Global scale GEMM1 requantizes its output with (`fc2_input_scale`).
    pub fc2_input_scale: f32,
    /// The activation's per-expert parameters and the biases (plain SwiGLU, none, by
    /// default; [`PreparedWeights::with_epilogue`]).
    pub epilogue: ExpertEpilogue,
}

impl PreparedWeights {
    /// The same weights with the epilogue data `epilogue` (checked against `shape`, and
    /// W1's rows against its activation: gated weights cannot serve ReLU², nor the reverse).
    pub fn with_epilogue(mut self, shape: &MoeShape, epilogue: ExpertEpilogue) -> Result<Self> {
        epilogue.validate(shape)?;
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        check_len("W1", self.w1.len(), l * epilogue.w1_rows(i) * h / 2)?;
        self.epilogue = epilogue;
        Ok(self)
    }
}

/// The 128x4 layout of one expert's W1 scales for a gated activation (2I rows).
pub fn w1_scale_layout(shape: &MoeShape) -> Result<Scale128x4> {
    w1_scale_layout_for(shape, Activation::Swiglu)
}

/// The 128x4 layout of one expert's W1 scales for `activation` (`Activation::w1_rows`).
pub fn w1_scale_layout_for(shape: &MoeShape, activation: Activation) -> Result<Scale128x4> {
    Ok(Scale128x4::new(activation.w1_rows(shape.intermediate), shape.hidden / 16)?)
}

/// The 128x4 layout of one expert's W2 scales.
pub fn w2_scale_layout(shape: &MoeShape) -> Result<Scale128x4> {
    Ok(Scale128x4::new(shape.hidden, shape.intermediate / 16)?)
}

fn positive(what: &'static str, v: f32) -> Result<f32> {
    if v.is_finite() && v > 0.0 { Ok(v) } else { Err(RuntimeError::BadScale { what, value: v }) }
}

fn quantize_expert(rows: &[f32], n: usize, k: usize) -> Result<(Nvfp4Matrix, f32)> {
    let gs = nvfp4_global_scale(block_amax(rows))?;
    Ok((quantize_nvfp4(rows, n, k, gs)?, gs))
}

/// Quantizes unquantized expert weights: `up`, `gate` `[L, I, H]` and `down` `[L, H, I]`
/// (f32 or bf16), given the activation global scale `input_scale` (gs_x) and the global
/// scale GEMM1's output is requantized with (`fc2_input_scale`, gs_h). Each expert gets
/// its own global scale 448·6/amax.
pub fn prepare_weights<T: Copy + Into<f32>>(
    shape: &MoeShape,
    up: &[T],
    gate: &[T],
    down: &[T],
    input_scale: f32,
    fc2_input_scale: f32,
) -> Result<PreparedWeights> {
    let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
    let per = i * h;
    check_len("up weights", up.len(), l * per)?;
    check_len("gate weights", gate.len(), l * per)?;
    // Per expert, up and gate rows interleaved in blocks of 64 (what the kernels pair).
    let w1_of = |e: usize| {
        let (u, g) = (&up[e * per..(e + 1) * per], &gate[e * per..(e + 1) * per]);
        let mut w1 = Vec::with_capacity(2 * per);
        for b in 0..i / SWIGLU_INTERLEAVE {
            for src in [u, g] {
                let rows = &src[b * SWIGLU_INTERLEAVE * h..(b + 1) * SWIGLU_INTERLEAVE * h];
                w1.extend(rows.iter().map(|&v| v.into()));
            }
        }
        w1
    };
    prepare_with(shape, ExpertEpilogue::default(), &w1_of, down, input_scale, fc2_input_scale)
}

/// [`prepare_weights`] for ReLU², which is not gated: `w1` `[L, I, H]` (one row per h
/// column, no gate) and `down` `[L, H, I]`. The weights carry a bias-free ReLU² epilogue;
/// [`PreparedWeights::with_epilogue`] adds biases.
pub fn prepare_relu2_weights<T: Copy + Into<f32>>(
    shape: &MoeShape,
    w1: &[T],
    down: &[T],
    input_scale: f32,
    fc2_input_scale: f32,
) -> Result<PreparedWeights> {
    let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
    let per = i * h;
    check_len("W1 weights", w1.len(), l * per)?;
    let epilogue = ExpertEpilogue::new(shape, Activation::Relu2, vec![], None, None)?;
    let w1_of = |e: usize| w1[e * per..(e + 1) * per].iter().map(|&v| v.into()).collect();
    prepare_with(shape, epilogue, &w1_of, down, input_scale, fc2_input_scale)
}

/// Quantizes each expert's W1 rows (`w1_of(e)`, `epilogue.w1_rows(I)` × H) and W2.
fn prepare_with<T: Copy + Into<f32>>(
    shape: &MoeShape,
    epilogue: ExpertEpilogue,
    w1_of: &dyn Fn(usize) -> Vec<f32>,
    down: &[T],
    input_scale: f32,
    fc2_input_scale: f32,
) -> Result<PreparedWeights> {
    let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
    let per = i * h;
    let rows = epilogue.w1_rows(i);
    check_len("down weights", down.len(), l * per)?;
    let gs_x = positive("input scale", input_scale)?;
    let gs_h = positive("fc2 input scale", fc2_input_scale)?;
    let activation = epilogue.spec().activation;
    let (l1, l2) = (w1_scale_layout_for(shape, activation)?, w2_scale_layout(shape)?);
    let mut out = PreparedWeights {
        w1: Vec::with_capacity(l * rows * h / 2),
        w1_scales: Vec::with_capacity(l * l1.bytes()),
        w2: Vec::with_capacity(l * per / 2),
        w2_scales: Vec::with_capacity(l * l2.bytes()),
        w1_global_scale: Vec::with_capacity(l),
        w2_global_scale: Vec::with_capacity(l),
        alpha1: Vec::with_capacity(l),
        alpha2: Vec::with_capacity(l),
        fc2_input_scale: gs_h,
        epilogue,
    };
    for e in 0..l {
        let (q1, gs1) = quantize_expert(&w1_of(e), rows, h)?;
        let d: Vec<f32> = down[e * per..(e + 1) * per].iter().map(|&v| v.into()).collect();
        let (q2, gs2) = quantize_expert(&d, h, i)?;
        out.w1.extend_from_slice(&q1.packed);
        out.w1_scales.extend(l1.swizzle(&q1.scales)?);
        out.w2.extend_from_slice(&q2.packed);
        out.w2_scales.extend(l2.swizzle(&q2.scales)?);
        out.w1_global_scale.push(gs1);
        out.w2_global_scale.push(gs2);
        out.alpha1.push(1.0 / (gs_x * gs1));
        out.alpha2.push(1.0 / (gs_h * gs2));
    }
    Ok(out)
}

/// NVFP4 block scales are UE4M3: no NaN code (0x7F) and no sign bit.
pub(crate) fn check_ue4m3_codes(what: &'static str, codes: &[u8]) -> Result<()> {
    if let Some(offset) = codes.iter().position(|&c| c & 0x7F == 0x7F) {
        return Err(RuntimeError::NanScaleCode { what, offset });
    }
    if let Some(offset) = codes.iter().position(|&c| c & 0x80 != 0) {
        return Err(RuntimeError::NegativeScaleCode { what, offset });
    }
    Ok(())
}

/// Checks that prepared weights match `shape` and hold no NaN scales or bad factors.
pub fn validate_weights(shape: &MoeShape, w: &PreparedWeights) -> Result<()> {
    let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
    let activation = w.epilogue.spec().activation;
    check_len("W1", w.w1.len(), l * activation.w1_rows(i) * h / 2)?;
    check_len("W2", w.w2.len(), l * h * i / 2)?;
    let l1 = w1_scale_layout_for(shape, activation)?;
    check_len("W1 scales", w.w1_scales.len(), l * l1.bytes())?;
    check_len("W2 scales", w.w2_scales.len(), l * w2_scale_layout(shape)?.bytes())?;
    check_len("alpha1", w.alpha1.len(), l)?;
    check_len("alpha2", w.alpha2.len(), l)?;
    for (what, s) in [("W1 scales", &w.w1_scales), ("W2 scales", &w.w2_scales)] {
        check_ue4m3_codes(what, s)?;
    }
    if w.alpha1.iter().chain(&w.alpha2).any(|a| !a.is_finite()) {
        return Err(RuntimeError::NonFinite { what: "alpha" });
    }
    positive("fc2 input scale", w.fc2_input_scale)?;
    w.epilogue.validate(shape)
}
