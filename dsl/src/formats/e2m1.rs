//! FP4 E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa bit; no infinities, no NaN.

use super::minifloat::MinifloatTable;

/// Magnitudes of codes 0..=7.
pub const E2M1_MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Largest finite E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;

const TABLE: [f64; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Decodes the low 4 bits of `code`.
pub fn e2m1_to_f32(code: u8) -> f32 {
    let m = E2M1_MAGNITUDES[usize::from(code & 0x7)];
    if code & 0x8 != 0 { -m } else { m }
}

/// One lane of `cvt.rn.satfinite.e2m1x2.f32`: nearest-even, saturating to ±6.
///
/// NaN of either sign becomes +6 (code 0x7) and ±inf saturates to ±6, as the PTX
/// conversion and NVIDIA's reference emulation do; the sign of zero is kept.
pub fn f32_to_e2m1(x: f32) -> u8 {
    MinifloatTable { magnitudes: &TABLE, sign_bit: 0x8, nan_code: 0x7 }.encode_rn_satfinite(x)
}

/// `cvt.rn.satfinite.e2m1x2.f32 d, a, b`: `a` lands in bits 7:4 and `b` in bits 3:0.
///
/// Element 2i of a packed NVFP4 row lives in the low nibble, so callers pass
/// `(x[2i+1], x[2i])`, exactly the operand order the kernels emit.
pub fn cvt_e2m1x2(a: f32, b: f32) -> u8 {
    (f32_to_e2m1(a) << 4) | f32_to_e2m1(b)
}
