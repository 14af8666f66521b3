//! Importing expert weights that are already 4-bit (NVFP4 or MXFP4 checkpoints) into the
//! kernels' layout, on the host and exactly: packed values are copied, rows of `up` and
//! `gate` are interleaved in blocks of 64 into W1, scales are re-laid into the 128x4 layout.
//!
//! Global scales follow moegen's convention, `value = e2m1 · scale / global_scale` (the
//! reciprocal of ModelOpt's `weight_scale_2`). GEMM1 applies one factor per expert to both
//! halves of W1, so an expert's `up` and `gate` must share a global scale.
//!
//! MXFP4 (power-of-two UE8M0 scales per 32) becomes NVFP4 exactly: each 32-block gives two
//! 16-blocks with the scale 2^(k − k_max + 8) in E4M3 and the tensor's global scale
//! 2^(8 − k_max), where k_max is the expert's largest exponent. That is exact while every
//! non-zero block's exponent is within 17 of k_max (E4M3 reaches down to 2^-9); a block
//! further below cannot be represented and is reported, never rounded away.

use moegen_dsl::formats::{
    MXFP4_BLOCK, NVFP4_BLOCK, Scale128x4, UE8M0_NAN, e4m3_to_f32, f32_to_e4m3,
};

use super::epilogue::ExpertEpilogue;
use super::weights::{PreparedWeights, w1_scale_layout, w2_scale_layout};
use crate::error::{Result, RuntimeError, check_len};
use moegen_dsl::plan::{MoeShape, SWIGLU_INTERLEAVE};

/// How a checkpoint stores a tensor's block scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointScales {
    /// Row-major `[rows, cols / block]`.
    Linear,
    /// The 128x4 tensor-core layout of `[rows, cols / block]` (rows padded to 128).
    Swizzled128x4,
}

/// One NVFP4 tensor `[rows, cols]` of a checkpoint.
#[derive(Clone, Copy, Debug)]
pub struct Nvfp4Tensor<'a> {
    /// `[rows, cols / 2]` packed E2M1, element 2i in the low nibble.
    pub packed: &'a [u8],
    /// E4M3 scale codes, one per 16 elements.
    pub scales: &'a [u8],
    /// Their layout.
    pub layout: CheckpointScales,
    /// `value = e2m1 · scale / global_scale`.
    pub global_scale: f32,
}

/// One MXFP4 tensor `[rows, cols]` of a checkpoint.
#[derive(Clone, Copy, Debug)]
pub struct Mxfp4Tensor<'a> {
    /// `[rows, cols / 2]` packed E2M1.
    pub packed: &'a [u8],
    /// UE8M0 scale codes, one per 32 elements.
    pub scales: &'a [u8],
    /// Their layout.
    pub layout: CheckpointScales,
}

/// One expert's three projections: `up` and `gate` `[I, H]`, `down` `[H, I]`.
#[derive(Clone, Copy, Debug)]
pub struct ExpertTensors<T> {
    /// Up projection.
    pub up: T,
    /// Gate projection.
    pub gate: T,
    /// Down projection.
    pub down: T,
}

/// A tensor in NVFP4 terms: packed values, linear E4M3 scales, global scale.
struct Linear {
    packed: Vec<u8>,
    scales: Vec<u8>,
    global_scale: f32,
}

fn linear_scales(
    what: &'static str,
    scales: &[u8],
    layout: CheckpointScales,
    rows: usize,
    cols: usize,
) -> Result<Vec<u8>> {
    match layout {
        CheckpointScales::Linear => {
            check_len(what, scales.len(), rows * cols)?;
            Ok(scales.to_vec())
        }
        CheckpointScales::Swizzled128x4 => {
            let l = Scale128x4::new(rows, cols)?;
            check_len(what, scales.len(), l.bytes())?;
            Ok(l.unswizzle(scales)?)
        }
    }
}

fn positive(what: &'static str, v: f32) -> Result<f32> {
    if v.is_finite() && v > 0.0 { Ok(v) } else { Err(RuntimeError::BadScale { what, value: v }) }
}

fn nvfp4(what: &'static str, t: &Nvfp4Tensor<'_>, rows: usize, cols: usize) -> Result<Linear> {
    check_len(what, t.packed.len(), rows * cols / 2)?;
    let scales = linear_scales(what, t.scales, t.layout, rows, cols / NVFP4_BLOCK)?;
    super::weights::check_ue4m3_codes(what, &scales)?;
    Ok(Linear {
        packed: t.packed.to_vec(),
        scales,
        global_scale: positive("checkpoint global scale", t.global_scale)?,
    })
}

/// One MXFP4 tensor's packed values and linear UE8M0 codes, checked.
pub(crate) fn mxfp4_linear(
    what: &'static str,
    t: &Mxfp4Tensor<'_>,
    rows: usize,
    cols: usize,
) -> Result<(Vec<u8>, Vec<u8>)> {
    if !cols.is_multiple_of(MXFP4_BLOCK) {
        return Err(moegen_dsl::plan::PlanError::Alignment {
            what,
            value: cols as u64,
            multiple: MXFP4_BLOCK as u64,
            why: " (MXFP4 scale blocks)",
        }
        .into());
    }
    check_len(what, t.packed.len(), rows * cols / 2)?;
    let s = linear_scales(what, t.scales, t.layout, rows, cols / MXFP4_BLOCK)?;
    if let Some(offset) = s.iter().position(|&c| c == UE8M0_NAN) {
        return Err(RuntimeError::NanScaleCode { what, offset });
    }
    Ok((t.packed.to_vec(), s))
}

/// MXFP4 tensors of one expert converted to NVFP4 with one shared global scale.
fn mxfp4_group(
    expert: usize,
    tensors: &[(&'static str, &Mxfp4Tensor<'_>, usize, usize)],
) -> Result<Vec<Linear>> {
    let mut linear = Vec::with_capacity(tensors.len());
    for &(what, t, rows, cols) in tensors {
        check_len(what, t.packed.len(), rows * cols / 2)?;
        let s = linear_scales(what, t.scales, t.layout, rows, cols / MXFP4_BLOCK)?;
        if let Some(offset) = s.iter().position(|&c| c == UE8M0_NAN) {
            return Err(RuntimeError::NanScaleCode { what, offset });
        }
        linear.push((what, t.packed, s, cols));
    }
    // The largest exponent over the group fixes the global scale 2^(8 − k_max).
    let k_max = linear.iter().flat_map(|(_, _, s, _)| s.iter()).copied().max().unwrap_or(127);
    let k_max = i32::from(k_max) - 127;
    let global_scale = 2f32.powi(8 - k_max);
    let mut out = Vec::with_capacity(linear.len());
    for (what, packed, scales, cols) in linear {
        let per_row = cols / MXFP4_BLOCK;
        let mut nv = Vec::with_capacity(scales.len() * 2);
        for (b, &code) in scales.iter().enumerate() {
            let exp = i32::from(code) - 127 - k_max + 8;
            let (row, block) = (b / per_row, b % per_row);
            let bytes = &packed[row * cols / 2 + block * 16..row * cols / 2 + block * 16 + 16];
            // A block of zeros (±0 codes) has no value to represent.
            let zero = bytes.iter().all(|&v| v & 0x77 == 0);
            let sf = if exp < -9 {
                if !zero {
                    return Err(RuntimeError::ScaleRange { what, expert, block: b, exponent: exp });
                }
                0
            } else {
                let c = f32_to_e4m3(2f32.powi(exp));
                // Exact by construction for exp in [-9, 8]; checked, not assumed.
                if e4m3_to_f32(c) != 2f32.powi(exp) {
                    return Err(RuntimeError::ScaleRange { what, expert, block: b, exponent: exp });
                }
                c
            };
            nv.extend([sf, sf]);
        }
        out.push(Linear { packed: packed.to_vec(), scales: nv, global_scale });
    }
    Ok(out)
}

/// Builds W1 (`up`/`gate` rows interleaved in blocks of 64) and its linear scales.
fn interleave(up: &Linear, gate: &Linear, i: usize, h: usize) -> (Vec<u8>, Vec<u8>) {
    let (row_bytes, row_scales) = (h / 2, h / NVFP4_BLOCK);
    let mut w1 = Vec::with_capacity(2 * i * row_bytes);
    let mut sf = Vec::with_capacity(2 * i * row_scales);
    for b in 0..i / SWIGLU_INTERLEAVE {
        for src in [up, gate] {
            let rows = b * SWIGLU_INTERLEAVE..(b + 1) * SWIGLU_INTERLEAVE;
            w1.extend_from_slice(&src.packed[rows.start * row_bytes..rows.end * row_bytes]);
            sf.extend_from_slice(&src.scales[rows.start * row_scales..rows.end * row_scales]);
        }
    }
    (w1, sf)
}

fn assemble(
    shape: &MoeShape,
    experts: Vec<[Linear; 3]>,
    input_scale: f32,
    fc2_input_scale: f32,
) -> Result<PreparedWeights> {
    let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
    check_len("experts", experts.len(), l)?;
    let gs_x = positive("input scale", input_scale)?;
    let gs_h = positive("fc2 input scale", fc2_input_scale)?;
    let (l1, l2) = (w1_scale_layout(shape)?, w2_scale_layout(shape)?);
    let mut out = PreparedWeights {
        w1: Vec::with_capacity(l * i * h),
        w1_scales: Vec::with_capacity(l * l1.bytes()),
        w2: Vec::with_capacity(l * h * i / 2),
        w2_scales: Vec::with_capacity(l * l2.bytes()),
        w1_global_scale: Vec::with_capacity(l),
        w2_global_scale: Vec::with_capacity(l),
        alpha1: Vec::with_capacity(l),
        alpha2: Vec::with_capacity(l),
        fc2_input_scale: gs_h,
        epilogue: ExpertEpilogue::default(),
    };
    for (e, [up, gate, down]) in experts.into_iter().enumerate() {
        if up.global_scale != gate.global_scale {
            return Err(RuntimeError::MismatchedGlobalScales {
                expert: e,
                up: up.global_scale,
                gate: gate.global_scale,
            });
        }
        let (w1, sf1) = interleave(&up, &gate, i, h);
        out.w1.extend(w1);
        out.w1_scales.extend(l1.swizzle(&sf1)?);
        out.w2.extend_from_slice(&down.packed);
        out.w2_scales.extend(l2.swizzle(&down.scales)?);
        out.w1_global_scale.push(up.global_scale);
        out.w2_global_scale.push(down.global_scale);
        out.alpha1.push(1.0 / (gs_x * up.global_scale));
        out.alpha2.push(1.0 / (gs_h * down.global_scale));
    }
    Ok(out)
}

/// Imports NVFP4 expert weights (one entry per local expert, in local order) given the
/// activation global scale `input_scale` and GEMM1's output scale `fc2_input_scale`.
pub fn import_nvfp4(
    shape: &MoeShape,
    experts: &[ExpertTensors<Nvfp4Tensor<'_>>],
    input_scale: f32,
    fc2_input_scale: f32,
) -> Result<PreparedWeights> {
    let (h, i) = (shape.hidden, shape.intermediate);
    let linear = experts
        .iter()
        .map(|x| {
            Ok([
                nvfp4("checkpoint up", &x.up, i, h)?,
                nvfp4("checkpoint gate", &x.gate, i, h)?,
                nvfp4("checkpoint down", &x.down, h, i)?,
            ])
        })
        .collect::<Result<Vec<_>>>()?;
    assemble(shape, linear, input_scale, fc2_input_scale)
}

/// Imports MXFP4 expert weights exactly as NVFP4 (see the module docs): H and I must be
/// multiples of 32.
pub fn import_mxfp4(
    shape: &MoeShape,
    experts: &[ExpertTensors<Mxfp4Tensor<'_>>],
    input_scale: f32,
    fc2_input_scale: f32,
) -> Result<PreparedWeights> {
    let (h, i) = (shape.hidden, shape.intermediate);
    for (what, v) in [("hidden size", h), ("intermediate size", i)] {
        if !v.is_multiple_of(MXFP4_BLOCK) {
            return Err(moegen_dsl::plan::PlanError::Alignment {
                what,
                value: v as u64,
                multiple: MXFP4_BLOCK as u64,
                why: " (MXFP4 scale blocks)",
            }
            .into());
        }
    }
    let mut linear = Vec::with_capacity(experts.len());
    for (e, x) in experts.iter().enumerate() {
        let w1 =
            mxfp4_group(e, &[("checkpoint up", &x.up, i, h), ("checkpoint gate", &x.gate, i, h)])?;
        let w2 = mxfp4_group(e, &[("checkpoint down", &x.down, h, i)])?;
        let mut it = w1.into_iter().chain(w2);
        let (Some(up), Some(gate), Some(down)) = (it.next(), it.next(), it.next()) else {
            return Err(RuntimeError::BufferLength { what: "experts", expected: 3, actual: 0 });
        };
        linear.push([up, gate, down]);
    }
    assemble(shape, linear, input_scale, fc2_input_scale)
}
