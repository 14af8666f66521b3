//! The f32 epilogue arithmetic against f64.

use moegen_dsl::epilogue_math::*;

fn ulp_distance(a: f32, b: f32) -> u32 {
    (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
}

#[test]
fn exp_is_within_two_ulp_on_its_range() {
    let mut worst = 0;
    let steps = 200_000;
    for i in 0..=steps {
        let x = EXP_LO + (EXP_HI - EXP_LO) * i as f32 / steps as f32;
        let want = (f64::from(x)).exp() as f32;
        let d = ulp_distance(exp_f32(x), want);
        worst = worst.max(d);
        assert!(d <= 2, "exp({x}) = {} want {want}", exp_f32(x));
    }
    assert!(worst <= 2);
    assert_eq!(exp_f32(0.0), 1.0);
    assert_eq!(exp_f32(88.5), f32::INFINITY);
    assert_eq!(exp_f32(-90.0), 0.0);
    assert!(exp_f32(f32::NAN).is_nan());
}

#[test]
fn silu_and_swiglu_track_f64() {
    for i in -2000..=2000 {
        let g = i as f32 / 40.0;
        let want = f64::from(g) / (1.0 + (-f64::from(g)).exp());
        let got = f64::from(silu_f32(g));
        assert!((got - want).abs() <= want.abs() * 1e-6 + 1e-30, "silu({g})");
    }
    assert_eq!(silu_f32(-100.0), -0.0);
    assert_eq!(silu_f32(100.0), 100.0);
    assert_eq!(swiglu_f32(2.0, 0.0), 0.0);
}

#[test]
fn bf16_rounding_is_nearest_even() {
    assert_eq!(round_to_bf16(1.0), 1.0);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
    assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 1.0);
    assert_eq!(round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2.0 * 2f32.powi(-7));
    assert_eq!(round_to_bf16(f32::MAX), f32::INFINITY);
    assert!(round_to_bf16(f32::NAN).is_nan());
    for i in 0..10_000u32 {
        let x = f32::from_bits(0x3000_0000 + i * 7919);
        assert_eq!(round_to_bf16(x), half::bf16::from_f32(x).to_f32(), "{x}");
    }
}
