//! Block-scaled FP4: NVFP4 (16 elements share an E4M3 scale, plus an f32 global scale per
//! tensor) and MXFP4 (32 elements share a UE8M0 power-of-two scale).
//!
//! The NVFP4 recipe is moe-pipeline.md §1, written as the exact sequence of IEEE f32
//! operations the generated epilogues execute, so that the CPU reference, the simulator and
//! a GPU produce the same bits. One deliberate difference from the production CuTe-DSL
//! epilogue: the per-block factor is `g / sf` with a correctly rounded division
//! (`div.rn.f32`) instead of `g · rcp.approx(sf)`, because an approximate reciprocal has no
//! bit-exact specification to test against. See docs/formats.md.

use super::{
    FormatError, Ue8m0Rounding, e2m1_to_f32, e4m3_to_f32, f32_to_e2m1, f32_to_e4m3, f32_to_ue8m0,
    ue8m0_to_f32,
};

/// Elements per NVFP4 scale block.
pub const NVFP4_BLOCK: usize = 16;
/// Elements per MXFP4 scale block.
pub const MXFP4_BLOCK: usize = 32;

/// 1/6 rounded to f32 (0x3E2AAAAB), the constant the production epilogue multiplies by.
pub const RCP_E2M1_MAX: f32 = f32::from_bits(0x3E2A_AAAB);

/// Largest |x| in a block; NaN if any element is NaN (PTX `max.NaN.f32` semantics).
pub fn block_amax(v: &[f32]) -> f32 {
    v.iter().fold(0.0f32, |m, &x| if m.is_nan() || x.is_nan() { f32::NAN } else { m.max(x.abs()) })
}

/// The NVFP4 scale of one block: `e4m3_rn_satfinite((amax · (1/6)) · g)`.
pub fn nvfp4_scale_code(amax: f32, global_scale: f32) -> u8 {
    f32_to_e4m3((amax * RCP_E2M1_MAX) * global_scale)
}

/// The factor that maps block values onto E2M1: `min(g / sf, f32::MAX)`, or 0 when the
/// scale decodes to zero (the whole block then encodes as signed zeros).
///
/// `min` follows PTX `min.f32`: a NaN operand yields the other operand.
pub fn nvfp4_block_factor(scale_code: u8, global_scale: f32) -> f32 {
    let sf = e4m3_to_f32(scale_code);
    if sf == 0.0 { 0.0 } else { (global_scale / sf).min(f32::MAX) }
}

/// Quantizes one NVFP4 block (1..=16 values; a short tail block behaves as if padded with
/// zeros). Returns the E2M1 codes (one per input, low nibble) and the E4M3 scale code.
pub fn quantize_nvfp4_block(v: &[f32], global_scale: f32) -> (Vec<u8>, u8) {
    let sf = nvfp4_scale_code(block_amax(v), global_scale);
    let factor = nvfp4_block_factor(sf, global_scale);
    (v.iter().map(|&x| f32_to_e2m1(x * factor)).collect(), sf)
}

/// A row-major matrix quantized to NVFP4 with linear (row-major) scales.
#[derive(Clone, Debug, PartialEq)]
pub struct Nvfp4Matrix {
    /// Rows.
    pub rows: usize,
    /// Columns (elements along K).
    pub cols: usize,
    /// `[rows, cols/2]` packed E2M1, element 2i in the low nibble.
    pub packed: Vec<u8>,
    /// `[rows, cols/16]` E4M3 scale codes, row-major.
    pub scales: Vec<u8>,
    /// The global scale `g` the matrix was quantized with (value = e2m1 · sf / g).
    pub global_scale: f32,
}

fn check_matrix(len: usize, rows: usize, cols: usize, block: usize) -> Result<(), FormatError> {
    if rows == 0 || cols == 0 {
        return Err(FormatError::ZeroSize { rows, cols });
    }
    if !cols.is_multiple_of(block) {
        return Err(FormatError::ColsNotBlockMultiple { cols, block });
    }
    let expected = rows.checked_mul(cols).ok_or(FormatError::SizeOverflow { rows, cols })?;
    if len != expected {
        return Err(FormatError::LengthMismatch { expected, actual: len });
    }
    Ok(())
}

fn check_global_scale(g: f32) -> Result<(), FormatError> {
    if g.is_finite() && g > 0.0 { Ok(()) } else { Err(FormatError::BadGlobalScale { value: g }) }
}

/// The usual NVFP4 global scale for a tensor: `448 · 6 / amax`, so that the largest block
/// scale lands on E4M3's maximum. An all-zero tensor gets 1.
pub fn nvfp4_global_scale(amax: f32) -> Result<f32, FormatError> {
    if !amax.is_finite() || amax < 0.0 {
        return Err(FormatError::NonFinite { what: "tensor amax" });
    }
    if amax == 0.0 {
        return Ok(1.0);
    }
    let g = 448.0 * 6.0 / amax;
    if g.is_finite() { Ok(g) } else { Err(FormatError::BadGlobalScale { value: g }) }
}

/// Quantizes a `[rows, cols]` row-major f32 matrix to NVFP4 (cols a multiple of 16).
///
/// Non-finite inputs are rejected: they would poison whole blocks silently.
pub fn quantize_nvfp4(
    data: &[f32],
    rows: usize,
    cols: usize,
    global_scale: f32,
) -> Result<Nvfp4Matrix, FormatError> {
    check_matrix(data.len(), rows, cols, NVFP4_BLOCK)?;
    check_global_scale(global_scale)?;
    if data.iter().any(|x| !x.is_finite()) {
        return Err(FormatError::NonFinite { what: "NVFP4 input" });
    }
    let mut codes = Vec::with_capacity(data.len());
    let mut scales = Vec::with_capacity(data.len() / NVFP4_BLOCK);
    for block in data.chunks_exact(NVFP4_BLOCK) {
        let (q, sf) = quantize_nvfp4_block(block, global_scale);
        codes.extend(q);
        scales.push(sf);
    }
    Ok(Nvfp4Matrix { rows, cols, packed: super::pack_nibbles(&codes)?, scales, global_scale })
}

impl Nvfp4Matrix {
    /// Element (r, c) as the exact product e2m1 · sf (the global scale not applied);
    /// `None` outside the matrix.
    pub fn scaled_element(&self, r: usize, c: usize) -> Option<f32> {
        if r >= self.rows || c >= self.cols {
            return None;
        }
        let code = super::nibble_at(&self.packed, r * self.cols + c)?;
        let sf = e4m3_to_f32(*self.scales.get(r * (self.cols / NVFP4_BLOCK) + c / NVFP4_BLOCK)?);
        Some(e2m1_to_f32(code) * sf)
    }

    /// Dequantizes to f32: `(e2m1 · sf) / g`, one correctly rounded division per element.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            for c in 0..self.cols {
                let v = self.scaled_element(r, c).unwrap_or(f32::NAN);
                out.push(v / self.global_scale);
            }
        }
        out
    }
}

/// How an MXFP4 block chooses its power-of-two scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MxScaleRule {
    /// OCP MX v1.0: 2^(floor(log2 amax) − 2), i.e. `cvt.rz.satfinite.ue8m0(amax · 0.25)`.
    /// Blocks whose amax mantissa exceeds 1.5 clip their largest element to ±6.
    OcpFloor,
    /// `cvt.rp.satfinite.ue8m0(amax / 6)`: the smallest power of two that avoids clipping.
    NoClip,
}

/// The UE8M0 scale code of one MXFP4 block.
pub fn mxfp4_scale_code(amax: f32, rule: MxScaleRule) -> u8 {
    match rule {
        MxScaleRule::OcpFloor => f32_to_ue8m0(amax * 0.25, Ue8m0Rounding::TowardZero, true),
        MxScaleRule::NoClip => f32_to_ue8m0(amax / 6.0, Ue8m0Rounding::TowardPosInf, true),
    }
}

/// 2^(127 − code): the exact reciprocal of a UE8M0 scale (NaN for the NaN code).
pub fn ue8m0_reciprocal(code: u8) -> f32 {
    if code == super::UE8M0_NAN {
        return f32::NAN;
    }
    // 127 − code ranges over [-127, 127]; both ends are representable (2^-127 is subnormal).
    ue8m0_to_f32(254 - code)
}

/// A row-major matrix quantized to MXFP4 with linear scales.
#[derive(Clone, Debug, PartialEq)]
pub struct Mxfp4Matrix {
    /// Rows.
    pub rows: usize,
    /// Columns (elements along K).
    pub cols: usize,
    /// `[rows, cols/2]` packed E2M1.
    pub packed: Vec<u8>,
    /// `[rows, cols/32]` UE8M0 scale codes.
    pub scales: Vec<u8>,
}

/// Quantizes a `[rows, cols]` row-major matrix to MXFP4 (cols a multiple of 32).
pub fn quantize_mxfp4(
    data: &[f32],
    rows: usize,
    cols: usize,
    rule: MxScaleRule,
) -> Result<Mxfp4Matrix, FormatError> {
    check_matrix(data.len(), rows, cols, MXFP4_BLOCK)?;
    if data.iter().any(|x| !x.is_finite()) {
        return Err(FormatError::NonFinite { what: "MXFP4 input" });
    }
    let mut codes = Vec::with_capacity(data.len());
    let mut scales = Vec::with_capacity(data.len() / MXFP4_BLOCK);
    for block in data.chunks_exact(MXFP4_BLOCK) {
        let sf = mxfp4_scale_code(block_amax(block), rule);
        let factor = ue8m0_reciprocal(sf);
        codes.extend(block.iter().map(|&x| f32_to_e2m1(x * factor)));
        scales.push(sf);
    }
    Ok(Mxfp4Matrix { rows, cols, packed: super::pack_nibbles(&codes)?, scales })
}

impl Mxfp4Matrix {
    /// Dequantizes to f32: e2m1 · 2^(code − 127), exact.
    pub fn dequantize(&self) -> Vec<f32> {
        let per_row = self.cols / MXFP4_BLOCK;
        (0..self.rows * self.cols)
            .map(|i| {
                let (r, c) = (i / self.cols, i % self.cols);
                let code = super::nibble_at(&self.packed, i).unwrap_or(0);
                let sf = self.scales.get(r * per_row + c / MXFP4_BLOCK).copied();
                e2m1_to_f32(code) * sf.map_or(f32::NAN, ue8m0_to_f32)
            })
            .collect()
    }
}
