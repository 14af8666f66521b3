//! UE8M0: an unsigned power of two, value 2^(code − 127); 0xFF is NaN. The MXFP4 block scale.

/// Code of NaN.
pub const UE8M0_NAN: u8 = 0xFF;

/// Largest finite code (2^127).
pub const UE8M0_MAX_CODE: u8 = 0xFE;

/// The two rounding modes PTX offers for this conversion (`.rn` is rejected by ptxas).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Ue8m0Rounding {
    /// `.rz`: drop the mantissa (round toward zero on the exponent).
    TowardZero,
    /// `.rp`: any non-zero mantissa rounds the exponent up.
    TowardPosInf,
}

/// Decodes a UE8M0 byte to f32 (code 0 is the f32 subnormal 2^-127).
pub fn ue8m0_to_f32(code: u8) -> f32 {
    if code == UE8M0_NAN {
        return f32::NAN;
    }
    // 2^(code-127): codes ≥ 1 are the f32 normal with that biased exponent; code 0 is the
    // subnormal whose only mantissa bit is the top one.
    if code == 0 { f32::from_bits(0x0040_0000) } else { f32::from_bits(u32::from(code) << 23) }
}

/// `cvt.{rz,rp}{.satfinite}.ue8m0x2.f32`, one lane.
///
/// The sign is ignored (the format has none). NaN gives 0xFF. Infinity and results past
/// 2^127 give 0xFE with `satfinite`, 0xFF without. Inputs at or below 2^-127 (zero and
/// subnormals) give code 0, except that `.rp` rounds a subnormal above 2^-127 up to code 1.
pub fn f32_to_ue8m0(x: f32, rounding: Ue8m0Rounding, satfinite: bool) -> u8 {
    if x.is_nan() {
        return UE8M0_NAN;
    }
    let overflow = if satfinite { UE8M0_MAX_CODE } else { UE8M0_NAN };
    if x.is_infinite() {
        return overflow;
    }
    let bits = x.to_bits() & 0x7FFF_FFFF;
    let exp = bits >> 23;
    let man = bits & 0x007F_FFFF;
    match rounding {
        Ue8m0Rounding::TowardZero => exp as u8,
        Ue8m0Rounding::TowardPosInf => {
            if exp == 0 {
                u8::from(man > 0x0040_0000)
            } else if man != 0 {
                if exp + 1 >= 0xFF { overflow } else { (exp + 1) as u8 }
            } else {
                exp as u8
            }
        }
    }
}

/// `cvt.{rz,rp}{.satfinite}.ue8m0x2.f32 d, a, b`: `a` in the high byte, `b` in the low byte.
pub fn cvt_ue8m0x2(a: f32, b: f32, rounding: Ue8m0Rounding, satfinite: bool) -> u16 {
    (u16::from(f32_to_ue8m0(a, rounding, satfinite)) << 8)
        | u16::from(f32_to_ue8m0(b, rounding, satfinite))
}
