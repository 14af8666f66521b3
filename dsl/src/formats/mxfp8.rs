//! MXFP8 (E4M3 elements, one UE8M0 power-of-two scale per 32) as moegen's SM100 kernels
//! quantize activations and GEMM1's output, and the power-of-two rule Hopper's A8 kernels
//! apply per row. Each step is an exact f32 operation or one `cvt` of sm100-ptx.md §9, so the
//! CPU reference, the simulator and a GPU produce the same bits (docs/formats.md, "MXFP8").
//!
//! The scale is the least power of two 2^e (e ≥ −126) with amax ≤ 448 · 2^e, found from the
//! bits of amax; TensorRT-LLM's `cvt_warp_fp16_to_mxfp8` reaches nearly the same power
//! through `amax · rcp.approx(448)` rounded up, whose approximate reciprocal has no bit-exact
//! specification (docs/sm100-mxf8f6f4.md): the two differ only where amax/448 lies within
//! one ulp of a power of two, and in the all-zero block's code (1 here, 0 there).

use super::{FormatError, f32_to_e4m3};

/// Elements per MXFP8 scale block.
pub const MXFP8_BLOCK: usize = 32;

/// Mantissa field of 1.75 in an f32 (448 = 1.75 · 2^8): the kernels compare amax's
/// mantissa with it to round the scale's exponent up.
pub const MANT_1_75: u32 = 0x0060_0000;

/// The least e ≥ −126 with `amax ≤ 448 · 2^e`, read from the bits of `amax` (its sign is
/// ignored). A NaN maximum is taken as PTX's canonical NaN (`max.NaN.f32` returns
/// 0x7FFFFFFF), which gives e = 121; infinity gives 120.
pub fn e4m3_scale_exponent(amax: f32) -> i32 {
    let bits = if amax.is_nan() { 0x7FFF_FFFF } else { amax.to_bits() & 0x7FFF_FFFF };
    let field = (bits >> 23) as i32;
    (field + i32::from((bits & 0x7F_FFFF) > MANT_1_75) - 135).max(-126)
}

/// 2^e for e in −126..=127, exact.
pub fn pow2(e: i32) -> f32 {
    f32::from_bits(((e.clamp(-126, 127) + 127) as u32) << 23)
}

/// Quantizes one block (1..=32 values; a short block behaves as if padded with zeros) as
/// the kernels do: amax (NaN if any value is NaN), e = [`e4m3_scale_exponent`], each value
/// `x · 2^−e` (exact unless it underflows, then one f32 rounding) rounded once to E4M3
/// (nearest even, saturating). Returns the E4M3 codes and the UE8M0 code `e + 127`.
pub fn quantize_mxfp8_block(v: &[f32]) -> (Vec<u8>, u8) {
    let amax = super::block_amax(v);
    let e = e4m3_scale_exponent(amax);
    let inv = pow2(-e);
    (v.iter().map(|&x| f32_to_e4m3(x * inv)).collect(), (e + 127) as u8)
}

/// A row-major matrix quantized to MXFP8 with linear scales.
#[derive(Clone, Debug, PartialEq)]
pub struct Mxfp8Matrix {
    /// Rows.
    pub rows: usize,
    /// Columns (elements along K).
    pub cols: usize,
    /// `[rows, cols]` E4M3 codes.
    pub codes: Vec<u8>,
    /// `[rows, ceil(cols/32)]` UE8M0 codes, row-major; a row's last block may be short.
    pub scales: Vec<u8>,
}

/// Quantizes a `[rows, cols]` row-major matrix to MXFP8 (any cols ≥ 1; a row's last block
/// may be shorter than 32).
pub fn quantize_mxfp8(data: &[f32], rows: usize, cols: usize) -> Result<Mxfp8Matrix, FormatError> {
    if rows == 0 || cols == 0 {
        return Err(FormatError::ZeroSize { rows, cols });
    }
    let n = rows.checked_mul(cols).ok_or(FormatError::SizeOverflow { rows, cols })?;
    if data.len() != n {
        return Err(FormatError::LengthMismatch { expected: n, actual: data.len() });
    }
    let mut codes = Vec::with_capacity(n);
    let mut scales = Vec::with_capacity(rows * cols.div_ceil(MXFP8_BLOCK));
    for row in data.chunks_exact(cols) {
        for block in row.chunks(MXFP8_BLOCK) {
            let (c, s) = quantize_mxfp8_block(block);
            codes.extend(c);
            scales.push(s);
        }
    }
    Ok(Mxfp8Matrix { rows, cols, codes, scales })
}

impl Mxfp8Matrix {
    /// Dequantizes to f32: e4m3 · 2^(code − 127), exact.
    pub fn dequantize(&self) -> Vec<f32> {
        let per_row = self.cols.div_ceil(MXFP8_BLOCK);
        (0..self.rows * self.cols)
            .map(|i| {
                let (r, c) = (i / self.cols, i % self.cols);
                let sf = self.scales[r * per_row + c / MXFP8_BLOCK];
                super::e4m3_to_f32(self.codes[i]) * super::ue8m0_to_f32(sf)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::e4m3_to_f32;

    #[test]
    fn the_scale_is_the_least_power_of_two_that_fits_448() {
        assert_eq!(e4m3_scale_exponent(448.0), 0);
        assert_eq!(e4m3_scale_exponent(448.0f32.next_up()), 1);
        assert_eq!(e4m3_scale_exponent(224.0), -1);
        assert_eq!(e4m3_scale_exponent(-896.0), 1, "the sign is ignored");
        assert_eq!(e4m3_scale_exponent(0.0), -126);
        assert_eq!(e4m3_scale_exponent(f32::from_bits(1)), -126);
        assert_eq!(e4m3_scale_exponent(f32::INFINITY), 120);
        assert_eq!(e4m3_scale_exponent(f32::NAN), 121);
        // Against the definition, over a sweep of magnitudes.
        let mut x = 0x9E37_79B9u32;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let a = f32::from_bits(x & 0x7F7F_FFFF);
            let e = e4m3_scale_exponent(a);
            assert!(f64::from(a) <= 448.0 * 2f64.powi(e), "{a:e} fits 2^{e}");
            if e > -126 {
                assert!(f64::from(a) > 448.0 * 2f64.powi(e - 1), "{a:e}: 2^{} fits too", e - 1);
            }
        }
    }

    #[test]
    fn blocks_round_once_and_keep_their_largest_value() {
        let v: Vec<f32> = (0..32).map(|i| (i as f32 - 13.5) * 3.25).collect();
        let (codes, sf) = quantize_mxfp8_block(&v);
        let e = i32::from(sf) - 127;
        for (x, c) in v.iter().zip(&codes) {
            assert_eq!(*c, f32_to_e4m3(x * 2f32.powi(-e)));
            let back = e4m3_to_f32(*c) * 2f32.powi(e);
            assert!((back - x).abs() <= x.abs() / 16.0 + 1e-6, "{x} -> {back}");
        }
        let (zeros, sf) = quantize_mxfp8_block(&[0.0; 32]);
        assert_eq!((zeros, sf), (vec![0; 32], 1), "an all-zero block: code 1, zero values");
        let (nan, sf) = quantize_mxfp8_block(&[1.0, f32::NAN]);
        assert_eq!((nan[1] & 0x7F, sf), (0x7F, 121 + 127));
    }

    #[test]
    fn matrices_take_short_last_blocks_and_refuse_bad_shapes() {
        let data: Vec<f32> = (0..2 * 40).map(|i| i as f32 * 0.37 - 9.0).collect();
        let m = quantize_mxfp8(&data, 2, 40).unwrap();
        assert_eq!((m.codes.len(), m.scales.len()), (80, 4));
        let (_, tail) = quantize_mxfp8_block(&data[32..40]);
        assert_eq!(m.scales[1], tail);
        let back = m.dequantize();
        for (x, y) in data.iter().zip(&back) {
            assert!((x - y).abs() <= x.abs() / 16.0 + 1e-6);
        }
        assert!(matches!(quantize_mxfp8(&data, 0, 40), Err(FormatError::ZeroSize { .. })));
        assert!(matches!(
            quantize_mxfp8(&data, 3, 40),
            Err(FormatError::LengthMismatch { expected: 120, actual: 80 })
        ));
    }
}
