//! The minifloat formats the simulator executes, written from the PTX ISA (§5.2.5.2
//! "Alternate Floating Point Data Formats", `cvt`, the block-scaled `tcgen05.mma` kinds):
//! E2M1 and E4M3 (sign, exponent, mantissa; no infinities), UE4M3 (E4M3 as a block scale)
//! and UE8M0 (a bare power of two).
//!
//! These are the simulator's own. moegen's host quantizers and CPU reference convert with
//! moegen-dsl's formats, a separate implementation built on value tables; the simulator
//! judges kernels written against those, so it must not share them. A cross-crate test
//! (`tests/tests/sim_formats_agree.rs`) holds the two implementations to one answer on
//! every input class, and moegen-dsl's to NVIDIA's host emulation (`cuda_header_oracle`).
//!
//! Here a format is described by its bit layout only and every conversion is integer
//! arithmetic on the encodings: a code is an integer number of *units*, the spacing of the
//! format's subnormals, and rounding works on the f32 significand with explicit round and
//! sticky bits.

/// A sign-magnitude minifloat without infinities: `1 + exponent_bits + mantissa_bits` bits.
#[derive(Clone, Copy)]
struct Layout {
    mantissa_bits: u32,
    bias: i32,
    /// The largest finite magnitude code (codes above it are NaN or absent).
    max_code: u8,
    /// The bit holding the sign.
    sign_bit: u8,
    /// What `cvt.rn.satfinite` gives for a NaN input of either sign.
    nan_result: u8,
}

/// E2M1: 2 exponent bits (bias 1), 1 mantissa bit; every code finite, ±6 the largest.
/// `cvt.rn.satfinite` turns NaN into +6 (the format has no NaN).
const E2M1: Layout =
    Layout { mantissa_bits: 1, bias: 1, max_code: 0x7, sign_bit: 0x8, nan_result: 0x7 };

/// E4M3: 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN, ±448 the largest.
const E4M3: Layout =
    Layout { mantissa_bits: 3, bias: 7, max_code: 0x7E, sign_bit: 0x80, nan_result: 0x7F };

impl Layout {
    /// The magnitude of `code` (sign removed) as an integer count of units, the value of the
    /// smallest subnormal: a subnormal is its mantissa, a normal `1.m · 2^(e-1)` in units.
    fn units(self, magnitude: u8) -> u32 {
        let m = self.mantissa_bits;
        let (e, f) = (u32::from(magnitude) >> m, u32::from(magnitude) & ((1 << m) - 1));
        if e == 0 { f } else { ((1 << m) | f) << (e - 1) }
    }

    /// log2 of the unit: the exponent of the smallest subnormal, `1 - bias - mantissa_bits`.
    fn unit_exponent(self) -> i32 {
        1 - self.bias - self.mantissa_bits as i32
    }

    /// Decodes to f32 (exact: every finite value of these formats is an f32 normal).
    fn to_f32(self, code: u8, nan: bool) -> f32 {
        if nan {
            return f32::NAN;
        }
        let units = self.units(code & !self.sign_bit) as f32;
        let v = units * pow2(self.unit_exponent());
        if code & self.sign_bit != 0 { -v } else { v }
    }

    /// `cvt.rn.satfinite` of one f32: nearest, ties to the even code; magnitudes past the
    /// largest finite one (infinity included) saturate to it; the sign of zero is kept.
    fn encode_rn_satfinite(self, x: f32) -> u8 {
        let bits = x.to_bits();
        let magnitude = bits & 0x7FFF_FFFF;
        if magnitude > 0x7F80_0000 {
            return self.nan_result;
        }
        let sign = if bits >> 31 != 0 { self.sign_bit } else { 0 };
        let Some((significand, exponent)) = f32_significand(magnitude) else {
            return sign | self.max_code; // infinity
        };
        if significand == 0 {
            return sign;
        }
        let m = self.mantissa_bits;
        // The exponent field of the result's binade: x's own, or 1 (the subnormal units'
        // spacing) below the normal range.
        let leading = exponent + 31 - significand.leading_zeros() as i32;
        let field = (leading + self.bias).max(1);
        if field > i32::from(self.max_code >> m) {
            // |x| ≥ 2^(top exponent + 1), beyond every finite value.
            return sign | self.max_code;
        }
        // Units of this binade: 2^(field - 1) of the format's units each.
        let quantum = self.unit_exponent() + field - 1;
        let n = round_half_even(significand, quantum - exponent);
        // Code = (field - 1)·2^m + n for n in [2^m, 2^(m+1)); a carry to 2^(m+1) lands on
        // the next binade's first code, and subnormals (field 1, n < 2^m) are their mantissa.
        let code = ((field as u32 - 1) << m) + n;
        sign | code.min(u32::from(self.max_code)) as u8
    }
}

/// 2^k as an f32 for k in the normal range.
fn pow2(k: i32) -> f32 {
    f32::from_bits(((127 + k) as u32) << 23)
}

/// A finite f32 magnitude as `significand · 2^exponent` (significand < 2^24), None for
/// infinity.
fn f32_significand(magnitude: u32) -> Option<(u32, i32)> {
    let field = magnitude >> 23;
    let fraction = magnitude & 0x7F_FFFF;
    match field {
        0 => Some((fraction, -149)),
        0xFF => None,
        _ => Some((fraction | 0x80_0000, field as i32 - 150)),
    }
}

/// `significand · 2^-shift` rounded to an integer, ties to even.
fn round_half_even(significand: u32, shift: i32) -> u32 {
    if shift <= 0 {
        // Never reached by the formats here (an f32 has more mantissa bits), exact anyway.
        return significand << (-shift).min(31);
    }
    if shift > 24 {
        return 0; // significand < 2^24 ≤ half of 2^shift
    }
    let shift = shift as u32;
    let kept = significand >> shift;
    let dropped = significand & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    let up = dropped > half || (dropped == half && kept & 1 == 1);
    kept + u32::from(up)
}

/// The value of an E2M1 code (low 4 bits).
pub fn e2m1_to_f32(code: u8) -> f32 {
    E2M1.to_f32(code & 0xF, false)
}

/// Twice the value of an E2M1 code (low 4 bits): an integer in {0, ±1, ±2, ±3, ±4, ±6, ±8,
/// ±12}, the form the block-scaled MMA multiplies exactly.
pub fn e2m1_twice(code: u8) -> i32 {
    let units = E2M1.units(code & 0x7) as i32;
    if code & 0x8 != 0 { -units } else { units }
}

/// `cvt.rn.satfinite.e2m1x2.f32`, one lane: the 4-bit code.
pub fn f32_to_e2m1_rn_satfinite(x: f32) -> u8 {
    E2M1.encode_rn_satfinite(x)
}

/// The value of an E4M3 code; 0x7F and 0xFF are NaN.
pub fn e4m3_to_f32(code: u8) -> f32 {
    E4M3.to_f32(code, code & 0x7F == 0x7F)
}

/// `cvt.rn.satfinite.e4m3x2.f32`, one lane: NaN of either sign gives 0x7F, ±Inf ±448.
pub fn f32_to_e4m3_rn_satfinite(x: f32) -> u8 {
    E4M3.encode_rn_satfinite(x)
}

/// `cvt.rn.f16x2.e4m3x2`, one lane: the f16 bits of an E4M3 code (exact: f16 holds every
/// E4M3 value as a normal); NaN gives 0x7FFF, the canonical f16 NaN an H200 writes.
pub fn e4m3_to_f16_bits(code: u8) -> u16 {
    if code & 0x7F == 0x7F {
        return 0x7FFF;
    }
    let sign = u16::from(code & 0x80) << 8;
    let units = E4M3.units(code & 0x7F);
    if units == 0 {
        return sign;
    }
    // value = units · 2^-9: the leading bit of `units` sets the f16 exponent, the (at most
    // three) bits below it the top of the 10-bit mantissa.
    let lead = 31 - units.leading_zeros(); // units = 1.xxx · 2^lead
    let exponent = lead as i32 + E4M3.unit_exponent() + 15;
    let below = units ^ (1 << lead);
    let mantissa = if lead <= 10 { below << (10 - lead) } else { below >> (lead - 10) };
    sign | ((exponent as u16) << 10) | mantissa as u16
}

/// An E4M3 code as an integer count of 2^-9 (its value · 512, |·| ≤ 448 · 512), None for
/// NaN (0x7F, 0xFF): the form the block-scaled MMA multiplies exactly.
pub fn e4m3_times_512(code: u8) -> Option<i32> {
    if code & 0x7F == 0x7F {
        return None;
    }
    let units = E4M3.units(code & 0x7F) as i32;
    Some(if code & 0x80 != 0 { -units } else { units })
}

/// A UE4M3 block-scale byte as an integer count of 2^-9 (its value · 512), None for NaN
/// (0x7F, 0xFF). The scale factors of `kind::mxf4nvf4.block_scale` are E4M3 with the sign
/// bit clear; the PTX ISA does not say what a set sign bit does, and moegen never writes
/// one, so the simulator reads the byte as a signed E4M3 value.
pub fn ue4m3_times_512(code: u8) -> Option<i64> {
    e4m3_times_512(code).map(i64::from)
}

/// The two rounding modes of `cvt.{rz,rp}{.satfinite}.ue8m0x2.f32` (the PTX ISA has no
/// `.rn` form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ue8m0Rounding {
    /// `.rz`: the largest power of two not above |x|.
    Rz,
    /// `.rp`: the smallest power of two not below |x|.
    Rp,
}

/// The value of a UE8M0 code, 2^(code − 127); 0xFF is NaN.
pub fn ue8m0_to_f32(code: u8) -> f32 {
    if code == 0xFF {
        return f32::NAN;
    }
    // 2^-127 is below the f32 normal range: halve the smallest normal.
    let k = i32::from(code) - 127;
    if k < -126 { pow2(-126) / 2.0 } else { pow2(k) }
}

/// `cvt.{rz,rp}{.satfinite}.ue8m0x2.f32`, one lane. The format has no sign and no zero:
/// |x| is rounded to a power of two within 2^-127..=2^127 (values at or below 2^-127, zero
/// included, give code 0); NaN gives 0xFF; infinity and powers above 2^127 give 0xFE with
/// `.satfinite`, NaN (0xFF) without.
pub fn f32_to_ue8m0(x: f32, rounding: Ue8m0Rounding, satfinite: bool) -> u8 {
    let magnitude = x.to_bits() & 0x7FFF_FFFF;
    if magnitude > 0x7F80_0000 {
        return 0xFF;
    }
    let too_large = if satfinite { 0xFE } else { 0xFF };
    let Some((significand, exponent)) = f32_significand(magnitude) else {
        return too_large;
    };
    if significand == 0 {
        return 0;
    }
    // floor(log2 |x|), and whether |x| is exactly that power of two.
    let floor = exponent + 31 - significand.leading_zeros() as i32;
    let exact = significand.is_power_of_two();
    let power = match rounding {
        Ue8m0Rounding::Rz => floor,
        Ue8m0Rounding::Rp => floor + i32::from(!exact),
    };
    match power + 127 {
        c if c <= 0 => 0,
        c if c > 0xFE => too_large,
        c => c as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_follow_the_bit_layouts() {
        let e2m1: Vec<f32> = (0..8).map(e2m1_to_f32).collect();
        assert_eq!(e2m1, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(e2m1_to_f32(0xF), -6.0);
        assert!(e2m1_to_f32(0x8).is_sign_negative());
        assert_eq!((0..16).map(e2m1_twice).collect::<Vec<_>>()[..8], [0, 1, 2, 3, 4, 6, 8, 12]);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_to_f32(0xFE), -448.0);
        assert!(e4m3_to_f32(0x7F).is_nan() && e4m3_to_f32(0xFF).is_nan());
        assert_eq!(ue4m3_times_512(0x38), Some(512));
        assert_eq!(ue4m3_times_512(0x7E), Some(448 * 512));
        assert_eq!(ue4m3_times_512(0x7F), None);
        for code in 0..=255u8 {
            let v = e4m3_to_f32(code);
            match e4m3_times_512(code) {
                Some(u) => assert_eq!(u as f32 / 512.0, v, "{code:#04x}"),
                None => assert!(v.is_nan(), "{code:#04x}"),
            }
        }
        assert_eq!(ue8m0_to_f32(127), 1.0);
        assert_eq!(ue8m0_to_f32(0), 2f32.powi(-127));
        assert_eq!(ue8m0_to_f32(254), 2f32.powi(127));
        assert!(ue8m0_to_f32(255).is_nan());
    }

    #[test]
    fn e4m3_to_f16_is_exact() {
        for code in 0..=255u8 {
            let h = e4m3_to_f16_bits(code);
            let v = e4m3_to_f32(code);
            if v.is_nan() {
                assert_eq!(h, 0x7FFF);
                continue;
            }
            // f16 normal: (1024 + m) · 2^(e - 25); every E4M3 value is one.
            let (e, m) = (i32::from((h >> 10) & 0x1F), f32::from(h & 0x3FF));
            let back = if e == 0 { 0.0 } else { (1024.0 + m) * 2f32.powi(e - 25) };
            let back = if h & 0x8000 != 0 { -back } else { back };
            assert_eq!(back.to_bits(), v.to_bits(), "code {code:#04x}");
        }
    }

    #[test]
    fn encodes_round_to_nearest_even_and_saturate() {
        let e2m1 = f32_to_e2m1_rn_satfinite;
        assert_eq!(e2m1(0.25), 0x0, "a tie between 0 and 0.5 goes to the even code 0");
        assert_eq!(e2m1(0.75), 0x2, "a tie between 0.5 and 1 goes to 1");
        assert_eq!(e2m1(2.5), 0x4);
        assert_eq!(e2m1(5.0), 0x6);
        assert_eq!(e2m1(5.0f32.next_up()), 0x7);
        assert_eq!(e2m1(1e30), 0x7);
        assert_eq!(e2m1(f32::NEG_INFINITY), 0xF);
        assert_eq!(e2m1(-f32::NAN), 0x7);
        assert_eq!(e2m1(-0.0), 0x8);
        assert_eq!(e2m1(-0.2), 0x8);
        let e4m3 = f32_to_e4m3_rn_satfinite;
        assert_eq!(e4m3(464.0), 0x7E, "the tie with the NaN code saturates");
        assert_eq!(e4m3(2f32.powi(-10)), 0x00);
        assert_eq!(e4m3(2f32.powi(-10).next_up()), 0x01);
        assert_eq!(e4m3(1.0625), 0x38, "tie to even");
        assert_eq!(e4m3(1.1875), 0x3A, "tie to even");
        assert_eq!(e4m3(f32::from_bits(1)), 0x00);
        assert_eq!(e4m3(-f32::NAN), 0x7F);
        for code in (0..=255u8).filter(|c| c & 0x7F != 0x7F) {
            assert_eq!(e4m3(e4m3_to_f32(code)), code, "code {code:#04x} round trips");
        }
        for code in 0..16u8 {
            assert_eq!(e2m1(e2m1_to_f32(code)), code, "code {code:#x} round trips");
        }
    }

    #[test]
    fn ue8m0_rounds_to_powers_of_two() {
        use Ue8m0Rounding::{Rp, Rz};
        assert_eq!(f32_to_ue8m0(1.0, Rz, false), 127);
        assert_eq!(f32_to_ue8m0(1.5, Rz, false), 127);
        assert_eq!(f32_to_ue8m0(1.5, Rp, false), 128);
        assert_eq!(f32_to_ue8m0(-1.5, Rp, false), 128, "the sign is ignored");
        assert_eq!(f32_to_ue8m0(0.0, Rp, true), 0);
        assert_eq!(f32_to_ue8m0(f32::from_bits(0x0040_0000), Rp, true), 0);
        assert_eq!(f32_to_ue8m0(f32::from_bits(0x0040_0001), Rp, true), 1);
        assert_eq!(f32_to_ue8m0(f32::MAX, Rp, true), 0xFE);
        assert_eq!(f32_to_ue8m0(f32::MAX, Rp, false), 0xFF);
        assert_eq!(f32_to_ue8m0(f32::MAX, Rz, false), 0xFE);
        assert_eq!(f32_to_ue8m0(f32::INFINITY, Rz, true), 0xFE);
        assert_eq!(f32_to_ue8m0(f32::NAN, Rz, true), 0xFF);
        for code in 0..=254u8 {
            for r in [Rz, Rp] {
                assert_eq!(f32_to_ue8m0(ue8m0_to_f32(code), r, true), code);
            }
        }
    }
}
