//! The weights of the SM100 MXFP8 × MXFP4 layer (`kind::mxf8f6f4`) in the kernels' global
//! layout (docs/reference.md, "SM100 MXFP8 × MXFP4"): MXFP4 expert weights re-laid exactly
//! (codes copied, UE8M0 codes moved into the 128x4 layout, never requantized), K padded to
//! 128 with zero codes and zero scale bytes because the padding TMA type moves whole
//! 128-code rows.

use moegen_dsl::Activation;
use moegen_dsl::formats::{
    MXFP8_BLOCK, MxScaleRule, Mxfp4Matrix, Scale128x4, UE8M0_NAN, quantize_mxfp4,
};
use moegen_dsl::plan::{MoeShape, PlanError, SWIGLU_INTERLEAVE};

use super::checkpoint::{CheckpointScales, ExpertTensors, Mxfp4Tensor};
use super::epilogue::ExpertEpilogue;
use crate::error::{Result, RuntimeError, check_len};

/// The K multiple the kernels' operands are padded to: the padding TMA type
/// (`16U4_ALIGN16B`) moves exactly 128 codes per box row (docs/sm100-mxf8f6f4.md).
pub const MX_K_TILE: usize = 128;

/// Kp(K): `k` rounded up to [`MX_K_TILE`].
pub fn mx_padded_k(k: usize) -> Result<usize> {
    k.checked_next_multiple_of(MX_K_TILE).ok_or(PlanError::Overflow { what: "padded K" }.into())
}

/// The MX path's shape rule: H in whole 32-blocks (I is a multiple of 64 in every
/// `MoeShape`). The arithmetic reads no partial block, so none may exist.
pub(crate) fn check_mx_shape(shape: &MoeShape) -> Result<()> {
    for (what, value) in [("hidden size", shape.hidden), ("intermediate size", shape.intermediate)]
    {
        if !value.is_multiple_of(MXFP8_BLOCK) {
            return Err(PlanError::Alignment {
                what,
                value: value as u64,
                multiple: MXFP8_BLOCK as u64,
                why: " (MXFP8/MXFP4 scale blocks of 32)",
            }
            .into());
        }
    }
    Ok(())
}

pub(crate) fn mul(what: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(PlanError::Overflow { what }.into())
}

/// MXFP4 expert weights in the SM100 MX kernels' layout, with their per-expert factors and
/// epilogue data.
#[derive(Clone, Debug, PartialEq)]
pub struct Sm100MxWeights {
    /// `[L, R1, Kp(H)/2]` packed E2M1 (low nibble the lower K), codes past H zero. Rows in the
    /// NVFP4 SM100 order: gated, up and gate rows interleaved in blocks of 64 (kernel row r
    /// is up row (r/128)·64 + r%64 when r%128 < 64, else the gate row 64 further on); ReLU²,
    /// R1 = I rows in h column order.
    pub w1: Vec<u8>,
    /// Per expert one 128x4 block of `[R1, Kp(H)/32]` UE8M0 codes ([`sm100_mx_w1_scale_layout`]),
    /// padding bytes zero.
    pub w1_scales: Vec<u8>,
    /// `[L, H, Kp(I)/2]`, codes past I zero.
    pub w2: Vec<u8>,
    /// Per expert one 128x4 block of `[H, Kp(I)/32]` ([`sm100_mx_w2_scale_layout`]).
    pub w2_scales: Vec<u8>,
    /// GEMM1's factor per expert (1 unless set: MXFP4 has no global scale).
    pub alpha1: Vec<f32>,
    /// GEMM2's factor per expert.
    pub alpha2: Vec<f32>,
    /// The activation's per-expert parameters and the biases.
    pub epilogue: ExpertEpilogue,
}

/// The 128x4 layout of one expert's W1 scales under `activation`: `[R1, Kp(H)/32]`.
pub fn sm100_mx_w1_scale_layout(shape: &MoeShape, activation: Activation) -> Result<Scale128x4> {
    let cols = mx_padded_k(shape.hidden)? / MXFP8_BLOCK;
    Ok(Scale128x4::new(activation.w1_rows(shape.intermediate), cols)?)
}

/// The 128x4 layout of one expert's W2 scales: `[H, Kp(I)/32]`.
pub fn sm100_mx_w2_scale_layout(shape: &MoeShape) -> Result<Scale128x4> {
    Ok(Scale128x4::new(shape.hidden, mx_padded_k(shape.intermediate)? / MXFP8_BLOCK)?)
}

/// One input tensor `[rows, cols]` as packed codes and linear UE8M0 codes, checked; errors
/// name the expert and the tensor (`name`).
fn linear_tensor(
    expert: usize,
    name: &str,
    t: &Mxfp4Tensor<'_>,
    rows: usize,
    cols: usize,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let tensor = |part: &str| format!("expert {expert} {name} {part}");
    let shape_err = |part: &str, expected: usize, actual: usize| RuntimeError::TensorShape {
        tensor: tensor(part),
        expected: vec![expected],
        actual: vec![actual],
    };
    let per_row = cols / MXFP8_BLOCK;
    let packed = mul("MXFP4 tensor", rows, cols)? / 2;
    if t.packed.len() != packed {
        return Err(shape_err("codes (bytes)", packed, t.packed.len()));
    }
    let scales = match t.layout {
        CheckpointScales::Linear => {
            let n = mul("MXFP4 scales", rows, per_row)?;
            if t.scales.len() != n {
                return Err(shape_err("scales (linear bytes)", n, t.scales.len()));
            }
            t.scales.to_vec()
        }
        CheckpointScales::Swizzled128x4 => {
            let l = Scale128x4::new(rows, per_row)?;
            if t.scales.len() != l.bytes() {
                return Err(shape_err("scales (128x4 bytes)", l.bytes(), t.scales.len()));
            }
            l.unswizzle(t.scales)?
        }
    };
    // Weights' NaN scales are refused, not carried: a NaN block would poison every output
    // it reaches, and no checkpoint means that.
    if let Some(offset) = scales.iter().position(|&c| c == UE8M0_NAN) {
        return Err(RuntimeError::TensorScaleCode {
            tensor: tensor("scales"),
            offset,
            code: UE8M0_NAN,
            reason: "NaN",
        });
    }
    Ok((t.packed.to_vec(), scales))
}

/// Appends one expert's matrix of `rows` kernel rows to `codes`/`scales`: kernel row r is
/// row `src(r).1` of tensor `src(r).0` (linear codes and scales of `k` columns).
fn place(
    codes: &mut Vec<u8>,
    scales: &mut Vec<u8>,
    layout: &Scale128x4,
    tensors: &[(Vec<u8>, Vec<u8>)],
    src: impl Fn(usize) -> (usize, usize),
    rows: usize,
    k: usize,
) -> Result<()> {
    let (row_bytes, blocks) = (mx_padded_k(k)? / 2, k / MXFP8_BLOCK);
    let mut block_scales = vec![0u8; layout.bytes()];
    for r in 0..rows {
        let (t, sr) = src(r);
        let (packed, linear) = &tensors[t];
        let start = codes.len();
        codes.extend_from_slice(&packed[sr * k / 2..(sr + 1) * k / 2]);
        codes.resize(start + row_bytes, 0);
        for c in 0..blocks {
            if let Some(o) = layout.offset(r, c) {
                block_scales[o] = linear[sr * blocks + c];
            }
        }
    }
    scales.extend(block_scales);
    Ok(())
}

impl Sm100MxWeights {
    /// From MXFP4 tensors (one `ExpertTensors` per local expert, in local order: `up` and
    /// `gate` `[I, H]`, `down` `[H, I]`, scales linear or 128x4), gated: plain SwiGLU without
    /// biases and α1 = α2 = 1 until [`Self::with_epilogue`] / [`Self::with_alphas`].
    pub fn from_mxfp4(
        shape: &MoeShape,
        experts: &[ExpertTensors<Mxfp4Tensor<'_>>],
    ) -> Result<Self> {
        let (h, i) = (shape.hidden, shape.intermediate);
        check_mx_shape(shape)?;
        check_len("experts", experts.len(), shape.local_experts())?;
        let mut out = Self::empty(ExpertEpilogue::default(), shape.local_experts());
        let l1 = sm100_mx_w1_scale_layout(shape, Activation::Swiglu)?;
        let l2 = sm100_mx_w2_scale_layout(shape)?;
        let il = SWIGLU_INTERLEAVE;
        for (e, x) in experts.iter().enumerate() {
            let w1 =
                [linear_tensor(e, "up", &x.up, i, h)?, linear_tensor(e, "gate", &x.gate, i, h)?];
            let interleaved = |r: usize| (r % (2 * il) / il, r / (2 * il) * il + r % il);
            place(&mut out.w1, &mut out.w1_scales, &l1, &w1, interleaved, 2 * i, h)?;
            let w2 = [linear_tensor(e, "down", &x.down, h, i)?];
            place(&mut out.w2, &mut out.w2_scales, &l2, &w2, |r| (0, r), h, i)?;
        }
        out.validate(shape)?;
        Ok(out)
    }

    /// [`Self::from_mxfp4`] for ReLU² (ungated): per local expert its W1 `[I, H]` (one row
    /// per h column) and down projection `[H, I]`; a bias-free ReLU² epilogue.
    pub fn from_mxfp4_relu2(
        shape: &MoeShape,
        experts: &[(Mxfp4Tensor<'_>, Mxfp4Tensor<'_>)],
    ) -> Result<Self> {
        let (h, i) = (shape.hidden, shape.intermediate);
        check_mx_shape(shape)?;
        check_len("experts", experts.len(), shape.local_experts())?;
        let ep = ExpertEpilogue::new(shape, Activation::Relu2, vec![], None, None)?;
        let mut out = Self::empty(ep, shape.local_experts());
        let l1 = sm100_mx_w1_scale_layout(shape, Activation::Relu2)?;
        let l2 = sm100_mx_w2_scale_layout(shape)?;
        for (e, (w1, down)) in experts.iter().enumerate() {
            let w1 = [linear_tensor(e, "W1", w1, i, h)?];
            place(&mut out.w1, &mut out.w1_scales, &l1, &w1, |r| (0, r), i, h)?;
            let w2 = [linear_tensor(e, "down", down, h, i)?];
            place(&mut out.w2, &mut out.w2_scales, &l2, &w2, |r| (0, r), h, i)?;
        }
        out.validate(shape)?;
        Ok(out)
    }

    fn empty(epilogue: ExpertEpilogue, experts: usize) -> Self {
        Self {
            w1: Vec::new(),
            w1_scales: Vec::new(),
            w2: Vec::new(),
            w2_scales: Vec::new(),
            alpha1: vec![1.0; experts],
            alpha2: vec![1.0; experts],
            epilogue,
        }
    }

    /// Quantizes unquantized weights (`up`, `gate` `[L, I, H]`, `down` `[L, H, I]`, f32 or
    /// bf16) to MXFP4 (`quantize_mxfp4`, `MxScaleRule::NoClip`) and lays them out: for tests
    /// and for models without an MXFP4 checkpoint. Returns the weights and the MXFP4 matrices
    /// per expert (up, gate, down), whose `dequantize` is exactly what the GEMMs multiply.
    pub fn quantize<T: Copy + Into<f32>>(
        shape: &MoeShape,
        up: &[T],
        gate: &[T],
        down: &[T],
    ) -> Result<(Self, Vec<[Mxfp4Matrix; 3]>)> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let inputs =
            [("up weights", up, i, h), ("gate weights", gate, i, h), ("down weights", down, h, i)];
        let mats = quantize_experts(shape, inputs)?;
        let experts: Vec<_> = mats
            .iter()
            .map(|[u, g, d]| ExpertTensors { up: linear(u), gate: linear(g), down: linear(d) })
            .collect();
        Ok((Self::from_mxfp4(shape, &experts)?, mats))
    }

    /// [`Self::quantize`] for ReLU²: `w1` `[L, I, H]`, `down` `[L, H, I]`; the matrices per
    /// expert are (W1, down).
    pub fn quantize_relu2<T: Copy + Into<f32>>(
        shape: &MoeShape,
        w1: &[T],
        down: &[T],
    ) -> Result<(Self, Vec<[Mxfp4Matrix; 2]>)> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let mats =
            quantize_experts(shape, [("W1 weights", w1, i, h), ("down weights", down, h, i)])?;
        let experts: Vec<_> = mats.iter().map(|[w, d]| (linear(w), linear(d))).collect();
        Ok((Self::from_mxfp4_relu2(shape, &experts)?, mats))
    }

    /// The same weights with the epilogue data `epilogue` (checked against `shape`; W1's
    /// rows must be its activation's: gated weights cannot serve ReLU², nor the reverse).
    pub fn with_epilogue(mut self, shape: &MoeShape, epilogue: ExpertEpilogue) -> Result<Self> {
        epilogue.validate(shape)?;
        let rows = epilogue.w1_rows(shape.intermediate);
        let w1 =
            mul("W1", mul("W1", shape.local_experts(), rows)?, mx_padded_k(shape.hidden)? / 2)?;
        check_len("SM100 MX W1", self.w1.len(), w1)?;
        self.epilogue = epilogue;
        self.validate(shape)?;
        Ok(self)
    }

    /// The same weights with GEMM1's and GEMM2's factors per expert (finite).
    pub fn with_alphas(
        mut self,
        shape: &MoeShape,
        alpha1: Vec<f32>,
        alpha2: Vec<f32>,
    ) -> Result<Self> {
        self.alpha1 = alpha1;
        self.alpha2 = alpha2;
        self.validate(shape)?;
        Ok(self)
    }

    /// Checks the layout against `shape`: lengths, finite α, no NaN (0xFF) scale code, and
    /// zero codes and scale bytes wherever the layout pads.
    pub fn validate(&self, shape: &MoeShape) -> Result<()> {
        check_mx_shape(shape)?;
        self.epilogue.validate(shape)?;
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        let rows = self.epilogue.w1_rows(i);
        let (l1, l2) = (
            sm100_mx_w1_scale_layout(shape, self.epilogue.spec().activation)?,
            sm100_mx_w2_scale_layout(shape)?,
        );
        let (hp, ip) = (mx_padded_k(h)?, mx_padded_k(i)?);
        check_len("SM100 MX W1", self.w1.len(), mul("W1", mul("W1", l, rows)?, hp / 2)?)?;
        check_len("SM100 MX W1 scales", self.w1_scales.len(), mul("W1 scales", l, l1.bytes())?)?;
        check_len("SM100 MX W2", self.w2.len(), mul("W2", mul("W2", l, h)?, ip / 2)?)?;
        check_len("SM100 MX W2 scales", self.w2_scales.len(), mul("W2 scales", l, l2.bytes())?)?;
        check_len("alpha1", self.alpha1.len(), l)?;
        check_len("alpha2", self.alpha2.len(), l)?;
        for (what, a) in [("alpha1", &self.alpha1), ("alpha2", &self.alpha2)] {
            if a.iter().any(|v| !v.is_finite()) {
                return Err(RuntimeError::NonFinite { what });
            }
        }
        check_padding("SM100 MX W1", &self.w1, h, hp)?;
        check_padding("SM100 MX W2", &self.w2, i, ip)?;
        check_scales("SM100 MX W1 scales", &self.w1_scales, &l1, h)?;
        check_scales("SM100 MX W2 scales", &self.w2_scales, &l2, i)?;
        Ok(())
    }
}

/// Per local expert, each input `[L, rows, cols]` quantized to MXFP4 (NoClip).
fn quantize_experts<T: Copy + Into<f32>, const N: usize>(
    shape: &MoeShape,
    inputs: [(&'static str, &[T], usize, usize); N],
) -> Result<Vec<[Mxfp4Matrix; N]>> {
    check_mx_shape(shape)?;
    let l = shape.local_experts();
    for (what, v, rows, cols) in inputs {
        check_len(what, v.len(), mul(what, l, mul(what, rows, cols)?)?)?;
    }
    (0..l)
        .map(|e| {
            let mut mats = Vec::with_capacity(N);
            for (_, v, rows, cols) in inputs {
                let f: Vec<f32> =
                    v[e * rows * cols..(e + 1) * rows * cols].iter().map(|&x| x.into()).collect();
                mats.push(quantize_mxfp4(&f, rows, cols, MxScaleRule::NoClip)?);
            }
            // N pushes above: the conversion cannot fail, but is not unwrapped.
            mats.try_into().map_err(|m: Vec<Mxfp4Matrix>| RuntimeError::BufferLength {
                what: "expert matrices",
                expected: N,
                actual: m.len(),
            })
        })
        .collect()
}

fn linear(m: &Mxfp4Matrix) -> Mxfp4Tensor<'_> {
    Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
}

/// Codes past K in every row of `[·, Kp/2]` must be zero: the kernels' TMA reads them.
fn check_padding(what: &'static str, codes: &[u8], k: usize, kp: usize) -> Result<()> {
    if kp == k {
        return Ok(());
    }
    if codes.chunks_exact(kp / 2).any(|row| row[k / 2..].iter().any(|&b| b != 0)) {
        return Err(RuntimeError::UnsupportedWeights {
            what,
            reason: "a code past K (the padding to a multiple of 128) is not zero",
        });
    }
    Ok(())
}

/// Per expert's 128x4 block: no NaN code among the scales of blocks inside K, zero bytes
/// elsewhere (rows past the matrix, blocks past K).
fn check_scales(what: &'static str, scales: &[u8], layout: &Scale128x4, k: usize) -> Result<()> {
    let blocks = k / MXFP8_BLOCK;
    for (at, &b) in scales.iter().enumerate() {
        let inside = layout
            .coords(at % layout.bytes())
            .is_some_and(|(r, c)| r < layout.rows() && c < blocks);
        if inside && b == UE8M0_NAN {
            return Err(RuntimeError::NanScaleCode { what, offset: at });
        }
        if !inside && b != 0 {
            return Err(RuntimeError::UnsupportedWeights {
                what,
                reason: "a padding byte (a row past the matrix or a block past K) is not zero",
            });
        }
    }
    Ok(())
}
