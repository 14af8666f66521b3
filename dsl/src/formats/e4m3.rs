//! FP8 E4M3 ("fn" variant): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
//! NaN = S.1111.111. Used unsigned (sign 0) as the NVFP4 block scale ("UE4M3").

use super::minifloat::MinifloatTable;

/// Largest finite E4M3 magnitude.
pub const E4M3_MAX: f32 = 448.0;

/// Code of the positive NaN.
pub const E4M3_NAN: u8 = 0x7F;

/// Finite magnitudes of codes 0x00..=0x7E, built once from the bit layout.
fn magnitudes() -> &'static [f64; 127] {
    static TABLE: std::sync::OnceLock<[f64; 127]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0.0; 127];
        for (code, slot) in t.iter_mut().enumerate() {
            *slot = f64::from(decode_magnitude(code as u8));
        }
        t
    })
}

fn decode_magnitude(code: u8) -> f32 {
    let exp = i32::from((code >> 3) & 0xF);
    let man = f32::from(code & 0x7);
    if exp == 0 {
        // Subnormal: 0.mmm × 2^-6.
        man / 8.0 * 2f32.powi(-6)
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    }
}

/// Decodes an E4M3 byte; 0x7F and 0xFF are NaN.
pub fn e4m3_to_f32(code: u8) -> f32 {
    if code & 0x7F == 0x7F {
        return f32::NAN;
    }
    let m = decode_magnitude(code & 0x7F);
    if code & 0x80 != 0 { -m } else { m }
}

/// One lane of `cvt.rn.satfinite.e4m3x2.f32`: nearest-even, saturating to ±448.
///
/// NaN of either sign becomes 0x7F; ±inf saturates to ±448; the sign of zero is kept.
pub fn f32_to_e4m3(x: f32) -> u8 {
    MinifloatTable { magnitudes: magnitudes(), sign_bit: 0x80, nan_code: E4M3_NAN }
        .encode_rn_satfinite(x)
}

/// `cvt.rn.satfinite.e4m3x2.f32 d, a, b`: `a` lands in the high byte and `b` in the low byte.
pub fn cvt_e4m3x2(a: f32, b: f32) -> u16 {
    (u16::from(f32_to_e4m3(a)) << 8) | u16::from(f32_to_e4m3(b))
}
