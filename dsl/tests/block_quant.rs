//! NVFP4 and MXFP4 block quantization: the recipe step by step, error bounds, typed errors.

use moegen_dsl::formats::*;

/// A deterministic generator (no external RNG needed for reproducible data).
struct Lcg(u64);
impl Lcg {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

#[test]
fn nvfp4_recipe_on_a_hand_worked_block() {
    // amax 3 with g = 2: sf = e4m3(3 · (1/6) · 2) = e4m3(1.0) = 0x38; factor = 2 / 1 = 2.
    let mut v = [0.0f32; 16];
    v[0] = 3.0;
    v[1] = -0.75;
    v[2] = 0.2;
    v[3] = 1.1;
    let (q, sf) = quantize_nvfp4_block(&v, 2.0);
    assert_eq!(sf, 0x38);
    assert_eq!(e4m3_to_f32(sf), 1.0);
    assert_eq!(q[0], f32_to_e2m1(6.0));
    assert_eq!(q[1], f32_to_e2m1(-1.5));
    assert_eq!(q[2], f32_to_e2m1(0.4));
    assert_eq!(q[3], f32_to_e2m1(2.2));
    assert_eq!(nvfp4_block_factor(sf, 2.0), 2.0);
}

#[test]
fn nvfp4_scale_uses_the_f32_one_sixth_constant() {
    assert_eq!(RCP_E2M1_MAX.to_bits(), 0x3E2A_AAAB);
    // 1/6 rounded to f32 is slightly above 1/6, so 6 · (1/6) rounds to 1 exactly.
    assert_eq!(nvfp4_scale_code(6.0, 1.0), f32_to_e4m3(6.0 * RCP_E2M1_MAX));
}

#[test]
fn nvfp4_zero_scale_block_encodes_signed_zeros() {
    // amax · g / 6 below half the smallest E4M3 subnormal → sf = 0 → factor 0.
    let v = [1e-6f32, -1e-6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let (q, sf) = quantize_nvfp4_block(&v, 1.0);
    assert_eq!(sf, 0);
    assert_eq!(nvfp4_block_factor(0, 1.0), 0.0);
    assert_eq!(q[0], 0x0);
    assert_eq!(q[1], 0x8);
}

#[test]
fn nvfp4_nan_block_gets_a_nan_scale() {
    let mut v = [1.0f32; 16];
    v[5] = f32::NAN;
    assert!(block_amax(&v).is_nan());
    let (_, sf) = quantize_nvfp4_block(&v, 1.0);
    assert_eq!(sf, E4M3_NAN);
}

#[test]
fn nvfp4_dequantization_error_is_within_one_e2m1_step() {
    let mut rng = Lcg(7);
    let (rows, cols) = (64, 256);
    let data: Vec<f32> = (0..rows * cols).map(|i| rng.next_f32() * (1 + i % 97) as f32).collect();
    let amax = block_amax(&data);
    let g = nvfp4_global_scale(amax).unwrap();
    let m = quantize_nvfp4(&data, rows, cols, g).unwrap();
    let deq = m.dequantize();
    for (i, (&x, &d)) in data.iter().zip(&deq).enumerate() {
        let sf = e4m3_to_f32(m.scales[i / 16]);
        // The widest E2M1 gap is 2 (between 4 and 6), so rounding moves a value by at most 1
        // scaled unit; scale rounding can push |x·factor| to at most 6·(1 + 1/16), whose
        // clipping to 6 moves it by less than that.
        let bound = sf / g * 1.0 + x.abs() * 1e-6;
        assert!((x - d).abs() <= bound, "element {i}: {x} vs {d} (bound {bound})");
    }
    // The largest block lands on E4M3's maximum scale.
    assert!(m.scales.iter().any(|&s| s == 0x7E || s == 0x7D), "global scale uses the E4M3 range");
}

#[test]
fn nvfp4_rejects_bad_input() {
    assert_eq!(
        quantize_nvfp4(&[0.0; 15], 1, 15, 1.0),
        Err(FormatError::ColsNotBlockMultiple { cols: 15, block: 16 })
    );
    assert_eq!(
        quantize_nvfp4(&[0.0; 16], 1, 32, 1.0),
        Err(FormatError::LengthMismatch { expected: 32, actual: 16 })
    );
    assert_eq!(quantize_nvfp4(&[], 0, 16, 1.0), Err(FormatError::ZeroSize { rows: 0, cols: 16 }));
    assert!(matches!(
        quantize_nvfp4(&[0.0; 16], 1, 16, 0.0),
        Err(FormatError::BadGlobalScale { .. })
    ));
    assert!(matches!(
        quantize_nvfp4(&[0.0; 16], 1, 16, f32::NAN),
        Err(FormatError::BadGlobalScale { .. })
    ));
    let mut bad = [0.0f32; 16];
    bad[3] = f32::INFINITY;
    assert!(matches!(quantize_nvfp4(&bad, 1, 16, 1.0), Err(FormatError::NonFinite { .. })));
    assert!(matches!(
        quantize_nvfp4(&[0.0; 16], usize::MAX, 16, 1.0),
        Err(FormatError::SizeOverflow { .. })
    ));
    assert_eq!(nvfp4_global_scale(0.0), Ok(1.0));
    assert!(nvfp4_global_scale(f32::NAN).is_err());
}

#[test]
fn mxfp4_no_clip_rule_never_saturates() {
    let mut rng = Lcg(11);
    for _ in 0..200 {
        let scale = 2f32.powf(rng.next_f32() * 40.0);
        let block: Vec<f32> = (0..32).map(|_| rng.next_f32() * scale).collect();
        let amax = block_amax(&block);
        let sf = mxfp4_scale_code(amax, MxScaleRule::NoClip);
        let factor = ue8m0_reciprocal(sf);
        assert!(amax * factor <= 6.0, "amax {amax} scale code {sf}");
        let m = quantize_mxfp4(&block, 1, 32, MxScaleRule::NoClip).unwrap();
        for (x, d) in block.iter().zip(m.dequantize()) {
            // Widest gap 2 scaled units → error ≤ 1 unit = 1 / factor.
            assert!((x - d).abs() <= 1.0 / factor, "{x} vs {d}");
        }
    }
}

#[test]
fn mxfp4_ocp_rule_matches_the_spec_exponent() {
    // OCP: X = 2^(floor(log2 amax) − 2). amax = 7 → 2^(2−2) = 1 → 7 clips to 6.
    let mut block = [0.0f32; 32];
    block[0] = 7.0;
    block[1] = -1.0;
    let m = quantize_mxfp4(&block, 1, 32, MxScaleRule::OcpFloor).unwrap();
    assert_eq!(m.scales[0], 127);
    assert_eq!(m.dequantize()[0], 6.0);
    assert_eq!(m.dequantize()[1], -1.0);
    let m = quantize_mxfp4(&block, 1, 32, MxScaleRule::NoClip).unwrap();
    assert_eq!(m.scales[0], 128, "no-clip picks 2 so that 7/2 = 3.5 fits");
    assert_eq!(ue8m0_reciprocal(0), 2f32.powi(127));
    assert_eq!(ue8m0_reciprocal(254), 2f32.powi(-127));
    assert!(quantize_mxfp4(&[0.0; 16], 1, 16, MxScaleRule::NoClip).is_err());
}
