//! Exhaustive tests of the 4- and 8-bit codecs: every code, every rounding midpoint,
//! saturation, NaN and signed zero.

use moegen_dsl::formats::*;

fn next_up(x: f32) -> f32 {
    x.next_up()
}
fn next_down(x: f32) -> f32 {
    x.next_down()
}

#[test]
fn e2m1_decodes_every_code() {
    let expect = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    for code in 0u8..16 {
        let v = e2m1_to_f32(code);
        let m = expect[usize::from(code & 7)];
        assert_eq!(v.abs(), m, "code {code:#x}");
        assert_eq!(v.is_sign_negative(), code & 8 != 0, "sign of code {code:#x}");
    }
}

#[test]
fn e2m1_every_code_round_trips() {
    for code in 0u8..16 {
        assert_eq!(f32_to_e2m1(e2m1_to_f32(code)), code, "code {code:#x}");
    }
}

#[test]
fn e2m1_midpoints_round_to_even_code() {
    for lo in 0u8..7 {
        let (a, b) = (e2m1_to_f32(lo), e2m1_to_f32(lo + 1));
        let mid = (a + b) / 2.0;
        let even = if lo % 2 == 0 { lo } else { lo + 1 };
        for sign in [0u8, 8] {
            let s = if sign == 8 { -1.0 } else { 1.0 };
            assert_eq!(f32_to_e2m1(s * mid), even | sign, "midpoint {mid} sign {sign}");
            assert_eq!(f32_to_e2m1(s * next_down(mid)), lo | sign, "below {mid}");
            assert_eq!(f32_to_e2m1(s * next_up(mid)), (lo + 1) | sign, "above {mid}");
        }
    }
}

#[test]
fn e2m1_saturates_and_maps_nan_to_plus_six() {
    for x in [6.0, 6.5, 7.0, 100.0, f32::MAX, f32::INFINITY] {
        assert_eq!(f32_to_e2m1(x), 0x7, "{x}");
        assert_eq!(f32_to_e2m1(-x), 0xF, "-{x}");
    }
    assert_eq!(f32_to_e2m1(f32::NAN), 0x7);
    assert_eq!(f32_to_e2m1(-f32::NAN), 0x7);
    assert_eq!(f32_to_e2m1(0.0), 0x0);
    assert_eq!(f32_to_e2m1(-0.0), 0x8);
    assert_eq!(f32_to_e2m1(-0.2), 0x8, "tiny negatives keep the sign");
    assert_eq!(f32_to_e2m1(f32::from_bits(1)), 0x0, "subnormal input");
}

#[test]
fn e2m1x2_puts_first_operand_in_high_nibble() {
    // cvt.rn.satfinite.e2m1x2.f32 d, a, b: a → bits 7:4.
    assert_eq!(cvt_e2m1x2(1.0, 6.0), 0x27);
    assert_eq!(cvt_e2m1x2(-0.5, 0.0), 0x90);
}

#[test]
fn e4m3_decodes_every_code() {
    for code in 0u8..=255 {
        let v = e4m3_to_f32(code);
        if code & 0x7F == 0x7F {
            assert!(v.is_nan(), "code {code:#x} is NaN");
            continue;
        }
        let e = i32::from((code >> 3) & 0xF);
        let m = f64::from(code & 7);
        let expect =
            if e == 0 { m / 8.0 * 2f64.powi(-6) } else { (1.0 + m / 8.0) * 2f64.powi(e - 7) };
        let expect = if code & 0x80 != 0 { -expect } else { expect };
        assert_eq!(f64::from(v), expect, "code {code:#x}");
    }
    assert_eq!(e4m3_to_f32(0x7E), E4M3_MAX);
    assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9), "smallest subnormal");
    assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6), "smallest normal");
}

#[test]
fn e4m3_every_finite_code_round_trips() {
    for code in 0u8..=255 {
        if code & 0x7F == 0x7F {
            continue;
        }
        assert_eq!(f32_to_e4m3(e4m3_to_f32(code)), code, "code {code:#x}");
    }
}

#[test]
fn e4m3_midpoints_round_to_even_code() {
    for lo in 0u8..0x7E {
        let (a, b) = (e4m3_to_f32(lo), e4m3_to_f32(lo + 1));
        let mid = ((f64::from(a) + f64::from(b)) / 2.0) as f32;
        assert_eq!(f64::from(mid), (f64::from(a) + f64::from(b)) / 2.0, "midpoint exact in f32");
        let even = if lo % 2 == 0 { lo } else { lo + 1 };
        assert_eq!(f32_to_e4m3(mid), even, "midpoint of {lo:#x}");
        assert_eq!(f32_to_e4m3(-mid), even | 0x80, "negative midpoint of {lo:#x}");
        assert_eq!(f32_to_e4m3(next_down(mid)), lo, "below midpoint of {lo:#x}");
        assert_eq!(f32_to_e4m3(next_up(mid)), lo + 1, "above midpoint of {lo:#x}");
    }
}

#[test]
fn e4m3_saturates_and_canonicalizes_nan() {
    for x in [448.0, 449.0, 464.0, 480.0, 1e9, f32::MAX, f32::INFINITY] {
        assert_eq!(f32_to_e4m3(x), 0x7E, "{x}");
        assert_eq!(f32_to_e4m3(-x), 0xFE, "-{x}");
    }
    assert_eq!(f32_to_e4m3(f32::NAN), E4M3_NAN);
    assert_eq!(f32_to_e4m3(-f32::NAN), E4M3_NAN);
    assert_eq!(f32_to_e4m3(-0.0), 0x80);
    assert_eq!(f32_to_e4m3(2f32.powi(-10)), 0x00, "half the smallest subnormal ties to 0");
    assert_eq!(f32_to_e4m3(next_up(2f32.powi(-10))), 0x01);
    assert_eq!(cvt_e4m3x2(1.0, 448.0), 0x387E, "a lands in the high byte");
}

#[test]
fn ue8m0_decodes_every_code() {
    for code in 0u8..=254 {
        assert_eq!(f64::from(ue8m0_to_f32(code)), 2f64.powi(i32::from(code) - 127), "code {code}");
    }
    assert!(ue8m0_to_f32(255).is_nan());
}

#[test]
fn ue8m0_powers_of_two_round_trip_in_both_modes() {
    for code in 0u8..=254 {
        let v = ue8m0_to_f32(code);
        for r in [Ue8m0Rounding::TowardZero, Ue8m0Rounding::TowardPosInf] {
            assert_eq!(f32_to_ue8m0(v, r, true), code, "code {code} {r:?}");
            assert_eq!(f32_to_ue8m0(-v, r, true), code, "sign ignored, code {code}");
        }
    }
}

#[test]
fn ue8m0_rounds_between_powers() {
    for e in -126..127 {
        let p = 2f32.powi(e);
        let code = (e + 127) as u8;
        for x in [next_up(p), p * 1.5, next_down(p * 2.0)] {
            assert_eq!(f32_to_ue8m0(x, Ue8m0Rounding::TowardZero, true), code, "rz {x}");
            assert_eq!(f32_to_ue8m0(x, Ue8m0Rounding::TowardPosInf, true), code + 1, "rp {x}");
        }
    }
}

#[test]
fn ue8m0_special_values() {
    use Ue8m0Rounding::*;
    for r in [TowardZero, TowardPosInf] {
        assert_eq!(f32_to_ue8m0(f32::NAN, r, true), UE8M0_NAN);
        assert_eq!(f32_to_ue8m0(f32::INFINITY, r, true), 0xFE);
        assert_eq!(f32_to_ue8m0(f32::INFINITY, r, false), 0xFF);
        assert_eq!(f32_to_ue8m0(0.0, r, true), 0);
    }
    assert_eq!(f32_to_ue8m0(f32::MAX, TowardPosInf, true), 0xFE, "satfinite clamps");
    assert_eq!(f32_to_ue8m0(f32::MAX, TowardPosInf, false), 0xFF);
    assert_eq!(f32_to_ue8m0(f32::MAX, TowardZero, false), 0xFE);
    // Subnormals: at or below 2^-127 → 0; .rp rounds anything above up to 2^-126.
    assert_eq!(f32_to_ue8m0(f32::from_bits(0x0040_0000), TowardPosInf, true), 0);
    assert_eq!(f32_to_ue8m0(f32::from_bits(0x0040_0001), TowardPosInf, true), 1);
    assert_eq!(f32_to_ue8m0(f32::from_bits(0x0040_0001), TowardZero, true), 0);
    assert_eq!(cvt_ue8m0x2(1.0, 2.0, TowardZero, true), 0x7F80);
}

#[test]
fn nibble_packing_puts_even_elements_low() {
    let codes = [1u8, 2, 3, 4, 0xF, 0];
    let packed = pack_nibbles(&codes).unwrap();
    assert_eq!(packed, vec![0x21, 0x43, 0x0F]);
    assert_eq!(unpack_nibbles(&packed), codes.to_vec());
    for (i, &c) in codes.iter().enumerate() {
        assert_eq!(nibble_at(&packed, i), Some(c));
    }
    assert_eq!(nibble_at(&packed, 6), None);
    assert_eq!(pack_nibbles(&[1, 2, 3]), Err(FormatError::OddNibbleCount { len: 3 }));
}
