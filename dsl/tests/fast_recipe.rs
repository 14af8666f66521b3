//! The Fast epilogue recipe: the MUFU model (correctly rounded ex2 and rcp with flush to
//! zero) and the recipe against f64.

use moegen_dsl::SwigluInput;
use moegen_dsl::epilogue_math::fast::{FastFactors, quantize_block_fast, swiglu_fast};
use moegen_dsl::epilogue_math::mufu::{
    ex2_approx_ftz, ex2_approx_ftz_double_double, rcp_approx_ftz,
};
use moegen_dsl::formats::{e2m1_to_f32, e4m3_to_f32};

/// Whether `got` is the f32 nearest to `exact` (checked against both neighbours in f64).
fn is_nearest(got: f32, exact: f64) -> bool {
    let g = f64::from(got);
    let up = f64::from(f32::from_bits(got.to_bits() + 1));
    let down = f64::from(f32::from_bits(got.to_bits() - 1));
    (g - exact).abs() <= (up - exact).abs() && (g - exact).abs() <= (down - exact).abs()
}

#[test]
fn ex2_is_correctly_rounded_on_a_dense_sample() {
    // Every 1021st f32 in [−126, 128): ~2.1e6 inputs; f64's exp2 is within an ulp of
    // 2^x, far inside half an f32 ulp except at the rare hard cases, which `is_nearest`
    // would then flag for a closer look.
    let (neg, pos) = ((-126.0f32).to_bits(), 128.0f32.to_bits());
    let mut checked = 0;
    for bits in (0u32..pos).step_by(1021).chain((0x8000_0000u32..=neg).step_by(1021)) {
        let x = f32::from_bits(bits);
        let got = ex2_approx_ftz(x);
        assert!(is_nearest(got, f64::from(x).exp2()), "ex2({x:e}) = {got:e}");
        checked += 1;
    }
    for i in 0..200_000 {
        let x = 128.0 * (i as f32 / 200_000.0);
        assert!(is_nearest(ex2_approx_ftz(x), f64::from(x).exp2()), "ex2({x})");
    }
    assert!(checked > 2_000_000);
}

#[test]
fn ex2_double_double_path_agrees_with_the_f64_path() {
    // Force both paths on the same inputs: where f64's exp2 is far from a boundary the
    // double-double evaluation must round the same way.
    for i in 0..200_000 {
        let x = -126.0 + i as f32 * 0.001_269_9;
        assert_eq!(ex2_approx_ftz(x), ex2_approx_ftz_double_double(x), "{x}");
    }
}

#[test]
fn ex2_special_values_and_flushes() {
    assert_eq!(ex2_approx_ftz(0.0), 1.0);
    assert_eq!(ex2_approx_ftz(-0.0), 1.0);
    assert_eq!(ex2_approx_ftz(1.0), 2.0);
    assert_eq!(ex2_approx_ftz(-126.0), f32::MIN_POSITIVE);
    assert_eq!(ex2_approx_ftz(127.0), 2f32.powi(127));
    assert_eq!(ex2_approx_ftz(-126.000_01).to_bits(), 0, "subnormal result flushed to +0");
    assert_eq!(ex2_approx_ftz(-200.0).to_bits(), 0);
    assert_eq!(ex2_approx_ftz(f32::NEG_INFINITY).to_bits(), 0);
    assert_eq!(ex2_approx_ftz(128.0), f32::INFINITY);
    assert_eq!(ex2_approx_ftz(f32::INFINITY), f32::INFINITY);
    assert_eq!(ex2_approx_ftz(f32::from_bits(1)), 1.0, "subnormal input read as 0");
    assert!(ex2_approx_ftz(f32::NAN).is_nan());
    // Just below 128: the largest finite results.
    let x = f32::from_bits(128.0f32.to_bits() - 1);
    assert!(ex2_approx_ftz(x).is_finite());
}

#[test]
fn rcp_is_ieee_division_with_flush_to_zero() {
    for i in 1..100_000u32 {
        let x = f32::from_bits(0x0080_0000 + i * 21_001);
        assert_eq!(rcp_approx_ftz(x), 1.0 / x, "{x:e}");
    }
    assert_eq!(rcp_approx_ftz(0.0), f32::INFINITY);
    assert_eq!(rcp_approx_ftz(-0.0), f32::NEG_INFINITY);
    assert_eq!(rcp_approx_ftz(f32::from_bits(5)), f32::INFINITY, "subnormal input read as 0");
    assert_eq!(rcp_approx_ftz(f32::MAX).to_bits(), 0, "subnormal result flushed");
    assert_eq!(rcp_approx_ftz(-f32::MAX).to_bits(), 0x8000_0000);
    assert_eq!(rcp_approx_ftz(f32::INFINITY), 0.0);
    assert!(rcp_approx_ftz(f32::NAN).is_nan());
}

fn silu64(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

#[test]
fn fast_swiglu_tracks_f64_for_both_input_precisions() {
    let alpha = 0.037f32;
    let f = FastFactors::new(alpha, 1.0, SwigluInput::F32);
    for i in -3000..=3000 {
        let (u, g) = (i as f32 * 0.731, i as f32 * -0.53 + 7.0);
        let want = f64::from(alpha) * f64::from(u) * silu64(f64::from(alpha) * f64::from(g));
        // f32 inputs: the loop yields h / α².
        let got = f64::from(swiglu_fast(&f, u, g)) * f64::from(alpha) * f64::from(alpha);
        assert!((got - want).abs() <= want.abs() * 4e-6 + 1e-30, "({u}, {g}): {got} vs {want}");
    }
    let f = FastFactors::new(alpha, 1.0, SwigluInput::Bf16);
    for i in -3000..=3000 {
        let (u, g) = (i as f32 * 0.731, i as f32 * -0.53 + 7.0);
        let (ub, gb) =
            (half::bf16::from_f32(alpha * u).to_f64(), half::bf16::from_f32(alpha * g).to_f64());
        let got = f64::from(swiglu_fast(&f, u, g));
        let want = ub * silu64(gb);
        assert!((got - want).abs() <= want.abs() * 4e-6 + 1e-30, "bf16 ({u}, {g})");
    }
}

#[test]
fn fast_quantization_reconstructs_the_block() {
    // A block of h / α² values quantized with α² folded into the factors decodes (e2m1 ·
    // sf / g) to h within NVFP4's half step.
    let (alpha, g) = (0.011f32, 336.0f32);
    let f = FastFactors::new(alpha, g, SwigluInput::F32);
    let h: Vec<f32> = (0..16).map(|i| (i as f32 - 7.5) * 0.21).collect();
    let h2: Vec<f32> = h.iter().map(|&x| x / (alpha * alpha)).collect();
    let (codes, sf) = quantize_block_fast(&f, &h2);
    let amax = h.iter().fold(0f32, |m, x| m.max(x.abs()));
    for (c, x) in codes.iter().zip(&h) {
        let back = e2m1_to_f32(*c) * e4m3_to_f32(sf) / g;
        assert!((back - x).abs() <= amax / 6.0 * 1.01, "{x} → {back}");
    }
    // An all-zero block: scale 0, codes 0.
    let (codes, sf) = quantize_block_fast(&f, &[0.0; 16]);
    assert_eq!(sf, 0);
    assert!(codes.iter().all(|&c| c == 0));
}
