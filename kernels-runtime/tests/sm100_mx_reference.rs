//! The SM100 MXFP8 × MXFP4 reference (`kind::mxf8f6f4`): the exact per-MMA (K = 32) dot,
//! the weights' and activations' kernel layouts, each GEMM against its specification from
//! the raw layouts, and the whole layer against f64 arithmetic on the same quantized inputs.

use half::bf16;
use moegen_dsl::epilogue_math::fast::activation_fast;
use moegen_dsl::epilogue_math::{
    ActivationParams, activation_exact, gemm2_value, pre_activation, round_to_bf16,
};
use moegen_dsl::formats::{
    MXFP8_BLOCK, MxScaleRule, Mxfp4Matrix, Scale128x4, e2m1_to_f32, e4m3_to_f32, nibble_at,
    quantize_mxfp4, quantize_mxfp8_block, ue8m0_to_f32,
};
use moegen_dsl::{Activation, EpilogueRecipe, FinalizeMode, SwigluInput, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::reference::*;
use moegen_runtime::routing::ExpertWindow;

mod common;
use common::Rng;

/// E4M3 1.0, E4M3 448, E2M1 1.0, E2M1 6.0, E2M1 0.5, E2M1 −1.0, E2M1 −6.0.
const A_ONE: u8 = 0x38;
const A_MAX: u8 = 0x7E;
const B_ONE: u8 = 0x2;
const B_SIX: u8 = 0x7;
const B_HALF: u8 = 0x1;
const B_NEG_ONE: u8 = 0xA;
const B_NEG_SIX: u8 = 0xF;

/// A hand-made A row of `kp` codes (`kp/32` scales) and B row, all zero with scale 127.
fn rows(kp: usize) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
    (vec![0; kp], vec![127; kp / 32], vec![0; kp / 2], vec![127; kp / 32])
}

fn set_b(packed: &mut [u8], i: usize, code: u8) {
    let shift = 4 * (i % 2);
    packed[i / 2] = (packed[i / 2] & !(0xF << shift)) | (code << shift);
}

#[test]
fn the_dot_rounds_once_per_32_block_not_once_per_dot() {
    // Block 0 is 2^25, blocks 1..3 add 1 each. Per MMA each +1 is below half an ulp (4):
    // 2^25. Rounded once at the end: 2^25 + 3 → 2^25 + 4. f64: 2^25 + 3.
    let (mut a, mut sa, mut b, sb) = rows(128);
    for blk in 0..4 {
        a[32 * blk] = A_ONE;
        set_b(&mut b, 32 * blk, B_ONE);
    }
    sa[0] = 127 + 25;
    let got = mx_dot_bytes(&a, &sa, &b, &sb, 128).unwrap();
    let exact = 2f64.powi(25) + 3.0;
    assert_eq!(got, 2f32.powi(25));
    assert_ne!(got, exact as f32, "rounding once at the end gives 2^25 + 4");
    assert_ne!(f64::from(got), exact);
    // Inside one block the products are summed exactly: 16 · 2688, then 2^-10, then
    // −15 · 2688. Summed in f32 one by one, 2^-10 is lost against 43008 (ulp 2^-8).
    let (mut a, sa, mut b, sb) = rows(32);
    for (j, code) in a.iter_mut().enumerate() {
        *code = A_MAX;
        set_b(&mut b, j, if j < 16 { B_SIX } else { B_NEG_SIX });
    }
    a[16] = 0x01; // 2^-9
    set_b(&mut b, 16, B_HALF);
    let one_block = mx_dot_bytes(&a, &sa, &b, &sb, 32).unwrap();
    assert_eq!(one_block, 2688.0 + 2f32.powi(-10));
    let naive = (0..32)
        .fold(0f32, |acc, j| acc + e4m3_to_f32(a[j]) * e2m1_to_f32(nibble_at(&b, j).unwrap()));
    assert_eq!(naive, 2688.0, "what per-product f32 rounding would give");
}

#[test]
fn nan_codes_and_nan_scales_make_the_dot_nan_inside_k_only() {
    let (mut a, sa, mut b, sb) = rows(128);
    a[0] = A_ONE;
    set_b(&mut b, 0, B_ONE);
    assert_eq!(mx_dot_bytes(&a, &sa, &b, &sb, 64).unwrap(), 1.0);
    for (which, at) in [(0, 1), (1, 1), (0, 0)] {
        let (mut sa2, mut sb2) = (sa.clone(), sb.clone());
        if which == 0 {
            sa2[at] = 0xFF
        } else {
            sb2[at] = 0xFF
        }
        assert!(mx_dot_bytes(&a, &sa2, &b, &sb2, 64).unwrap().is_nan(), "scale {which} {at}");
        // Block 2 lies past K = 64: never read.
        let (mut sa3, mut sb3) = (sa.clone(), sb.clone());
        if which == 0 {
            sa3[2] = 0xFF
        } else {
            sb3[2] = 0xFF
        }
        assert_eq!(mx_dot_bytes(&a, &sa3, &b, &sb3, 64).unwrap(), 1.0);
    }
    for code in [0x7F, 0xFF] {
        let mut a2 = a.clone();
        a2[40] = code;
        assert!(mx_dot_bytes(&a2, &sa, &b, &sb, 64).unwrap().is_nan(), "code {code:#x}");
        let mut a3 = a.clone();
        a3[64] = code;
        assert_eq!(mx_dot_bytes(&a3, &sa, &b, &sb, 64).unwrap(), 1.0);
    }
}

#[test]
fn extreme_scale_codes_stay_exact_until_f32_overflows() {
    let dot = |sa_code: u8, sb_code: u8, a_code: u8, b_code: u8| {
        let (mut a, mut sa, mut b, mut sb) = rows(32);
        a[0] = a_code;
        set_b(&mut b, 0, b_code);
        (sa[0], sb[0]) = (sa_code, sb_code);
        mx_dot_bytes(&a, &sa, &b, &sb, 32).unwrap()
    };
    // 2^127 · 2^-126 = 2: exact at both ends of the scale range.
    assert_eq!(dot(254, 1, A_MAX, B_SIX), 448.0 * 6.0 * 2.0);
    assert_eq!(dot(1, 254, A_ONE, B_HALF), 1.0);
    // 2^(57 − 127) twice: 2^-140, an f32 subnormal, exact.
    assert_eq!(dot(57, 57, A_ONE, B_ONE), f32::from_bits(1 << 9));
    // The least magnitude: 2^-9 (E4M3 code 1) · 0.5 · 2^-252, far below f32: signed zeros.
    assert_eq!(dot(1, 1, 0x01, B_HALF).to_bits(), 0.0f32.to_bits());
    assert_eq!(dot(1, 1, 0x81, B_HALF).to_bits(), (-0.0f32).to_bits());
    // 448 · 6 · 2^254 overflows to inf, with the sign.
    assert_eq!(dot(254, 254, A_MAX, B_SIX), f32::INFINITY);
    assert_eq!(dot(254, 254, A_MAX, B_NEG_ONE), f32::NEG_INFINITY);
    assert_eq!(dot(254, 127, A_ONE, B_ONE), 2f32.powi(127));
    // An overflow in one block makes the next block's MMA read an infinite accumulator: NaN,
    // the block-scaled MMA's model (docs/simulator.md); an overflow in the last block stays
    // infinite.
    let (mut a, mut sa, mut b, mut sb) = rows(64);
    a[0] = A_MAX;
    set_b(&mut b, 0, B_SIX);
    (sa[0], sb[0]) = (254, 254);
    a[32] = A_ONE;
    set_b(&mut b, 32, B_ONE);
    assert!(mx_dot_bytes(&a, &sa, &b, &sb, 64).unwrap().is_nan());
    (sa[0], sb[0], sa[1], sb[1]) = (127, 127, 254, 254);
    set_b(&mut b, 32, B_SIX);
    a[32] = A_MAX;
    assert_eq!(mx_dot_bytes(&a, &sa, &b, &sb, 64).unwrap(), f32::INFINITY);
    // Against f64 over every pair of extreme codes where f64 is exact and in f32's range.
    for sa_code in [1u8, 2, 100, 127, 200, 253, 254] {
        for sb_code in [1u8, 2, 60, 127, 180, 253, 254] {
            let want = 448.0 * 6.0 * 2f64.powi(i32::from(sa_code) + i32::from(sb_code) - 254);
            let got = dot(sa_code, sb_code, A_MAX, B_SIX);
            if want < f64::from(f32::MAX) && want >= f64::from(f32::MIN_POSITIVE) {
                assert_eq!(f64::from(got), want, "codes {sa_code} {sb_code}");
            }
        }
    }
}

#[test]
fn blocks_past_k_are_never_read() {
    let mut r = Rng(7);
    for (k, kp) in [(64, 128), (192, 256)] {
        let (mut a, mut sa, mut b, mut sb) = rows(kp);
        // Values and scales close enough that every partial sum is exact in f32 (E4M3
        // exponent fields 7..=10, scales 2^-1..2^1): the dot is then the f64 sum.
        for (j, code) in a[..k].iter_mut().enumerate() {
            let sign = if r.next() & 1 == 1 { 0x80 } else { 0 };
            *code = sign | (7 + (r.next() % 4) as u8) << 3 | (r.next() % 8) as u8;
            set_b(&mut b, j, (r.next() % 16) as u8);
        }
        for c in 0..k / 32 {
            sa[c] = 126 + (r.next() % 3) as u8;
            sb[c] = 126 + (r.next() % 3) as u8;
        }
        let clean = mx_dot_bytes(&a, &sa, &b, &sb, k).unwrap();
        let want: f64 = (0..k)
            .map(|j| {
                f64::from(e4m3_to_f32(a[j]))
                    * f64::from(e2m1_to_f32(nibble_at(&b, j).unwrap()))
                    * f64::from(ue8m0_to_f32(sa[j / 32]))
                    * f64::from(ue8m0_to_f32(sb[j / 32]))
            })
            .sum();
        assert_eq!(f64::from(clean), want, "K {k}");
        for j in k..kp {
            a[j] = [0x7F, 0xFF, A_MAX][j % 3];
            set_b(&mut b, j, B_SIX);
        }
        for c in k / 32..kp / 32 {
            (sa[c], sb[c]) = (0xFF, 254);
        }
        assert_eq!(mx_dot_bytes(&a, &sa, &b, &sb, k).unwrap().to_bits(), clean.to_bits());
        // Rows decoded once give the same.
        let (ar, br) = (E4m3Row::new(&a, &sa, k).unwrap(), E2m1Row::new(&b, &sb, k).unwrap());
        assert_eq!(mx_dot(&ar, &br).to_bits(), clean.to_bits());
    }
    let (a, sa, b, sb) = rows(128);
    assert!(matches!(
        mx_dot_bytes(&a, &sa, &b, &sb, 48),
        Err(RuntimeError::Plan(moegen_dsl::plan::PlanError::Alignment { multiple: 32, .. }))
    ));
    assert_eq!(
        mx_dot_bytes(&a[..60], &sa, &b, &sb, 64).unwrap_err(),
        RuntimeError::BufferLength { what: "E4M3 row codes", expected: 64, actual: 60 }
    );
    assert_eq!(
        mx_dot_bytes(&a, &sa, &b, &sb[..1], 64).unwrap_err(),
        RuntimeError::BufferLength { what: "E2M1 row scales", expected: 2, actual: 1 }
    );
}

fn shape(h: usize, i: usize) -> MoeShape {
    MoeShape::new(h, i, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap()
}

/// Per local expert (4) one MXFP4 matrix of each `[rows, cols]` of `dims`, block scales
/// spread over 9 binades.
fn mats<const N: usize>(dims: [(usize, usize); N], seed: u64) -> Vec<[Mxfp4Matrix; N]> {
    let mut r = Rng(seed);
    (0..4)
        .map(|_| {
            dims.map(|(rows, cols)| {
                let v: Vec<f32> = (0..rows * cols)
                    .map(|j| r.normal() * 2f32.powi((j / 32 % 9) as i32 - 4) / (cols as f32).sqrt())
                    .collect();
                quantize_mxfp4(&v, rows, cols, MxScaleRule::NoClip).unwrap()
            })
        })
        .collect()
}

fn tensor(m: &Mxfp4Matrix) -> Mxfp4Tensor<'_> {
    Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
}

fn swizzled<'a>(m: &'a Mxfp4Matrix, scales: &'a [u8]) -> Mxfp4Tensor<'a> {
    Mxfp4Tensor { packed: &m.packed, scales, layout: CheckpointScales::Swizzled128x4 }
}

fn gated(s: &MoeShape, m: &[[Mxfp4Matrix; 3]]) -> Result<Sm100MxWeights, RuntimeError> {
    let experts: Vec<_> = m
        .iter()
        .map(|[u, g, d]| ExpertTensors { up: tensor(u), gate: tensor(g), down: tensor(d) })
        .collect();
    Sm100MxWeights::from_mxfp4(s, &experts)
}

/// Checks that kernel matrix `codes`/`scales` (`rows` × `k` per expert) holds source row
/// `src(e, r)` of the input matrices at each (e, r), with zero padding everywhere else.
fn assert_laid_out<'m>(
    codes: &[u8],
    scales: &[u8],
    layout: &Scale128x4,
    rows: usize,
    k: usize,
    src: impl Fn(usize, usize) -> (&'static str, &'m Mxfp4Matrix, usize),
) {
    let kp = mx_padded_k(k).unwrap();
    assert_eq!(codes.len(), 4 * rows * kp / 2);
    assert_eq!(scales.len(), 4 * layout.bytes());
    assert_eq!((layout.rows(), layout.cols()), (rows, kp / 32));
    let mut placed = vec![false; scales.len()];
    for e in 0..4 {
        for r in 0..rows {
            let (name, m, sr) = src(e, r);
            for c in 0..kp {
                let got = nibble_at(codes, (e * rows + r) * kp + c).unwrap();
                let want = if c < k { nibble_at(&m.packed, sr * k + c).unwrap() } else { 0 };
                assert_eq!(got, want, "{name}: expert {e} row {r} k {c}");
            }
            for c in 0..k / 32 {
                let o = e * layout.bytes() + layout.offset(r, c).unwrap();
                assert_eq!(scales[o], m.scales[sr * k / 32 + c], "{name}: e {e} r {r} block {c}");
                placed[o] = true;
            }
        }
    }
    let stray = scales.iter().zip(&placed).filter(|&(&b, &p)| !p && b != 0).count();
    assert_eq!(stray, 0, "padding scale bytes must be zero");
}

#[test]
fn weights_are_relaid_exactly_with_zero_padding() {
    // H = 320 and I = 192: both K pad (to 384 and 256).
    for (h, i) in [(256, 192), (320, 192)] {
        let s = shape(h, i);
        let m = mats([(i, h), (i, h), (h, i)], 3);
        let w = gated(&s, &m).unwrap();
        assert_eq!((w.alpha1.clone(), w.alpha2.clone()), (vec![1.0; 4], vec![1.0; 4]));
        let l1 = sm100_mx_w1_scale_layout(&s, Activation::Swiglu).unwrap();
        // Kernel row r: up row (r/128)·64 + r%64 for r%128 < 64, else that gate row.
        assert_laid_out(&w.w1, &w.w1_scales, &l1, 2 * i, h, |e, r| {
            let (half, sr) = (r % 128 / 64, r / 128 * 64 + r % 64);
            if half == 0 { ("up", &m[e][0], sr) } else { ("gate", &m[e][1], sr) }
        });
        let l2 = sm100_mx_w2_scale_layout(&s).unwrap();
        assert_laid_out(&w.w2, &w.w2_scales, &l2, h, i, |e, r| ("down", &m[e][2], r));

        // 128x4 input scales give the same weights.
        let sw: Vec<[Vec<u8>; 3]> = m
            .iter()
            .map(|ms| {
                ms.each_ref().map(|x| {
                    Scale128x4::new(x.rows, x.cols / 32).unwrap().swizzle(&x.scales).unwrap()
                })
            })
            .collect();
        let experts: Vec<_> = m
            .iter()
            .zip(&sw)
            .map(|([u, g, d], [su, sg, sd])| ExpertTensors {
                up: swizzled(u, su),
                gate: swizzled(g, sg),
                down: swizzled(d, sd),
            })
            .collect();
        assert_eq!(Sm100MxWeights::from_mxfp4(&s, &experts).unwrap(), w);

        // ReLU²: W1 has I rows, in h column order.
        let m2 = mats([(i, h), (h, i)], 4);
        let experts: Vec<_> = m2.iter().map(|[a, d]| (tensor(a), tensor(d))).collect();
        let w2 = Sm100MxWeights::from_mxfp4_relu2(&s, &experts).unwrap();
        assert_eq!(w2.epilogue.spec().activation, Activation::Relu2);
        let l1 = sm100_mx_w1_scale_layout(&s, Activation::Relu2).unwrap();
        assert_laid_out(&w2.w1, &w2.w1_scales, &l1, i, h, |e, r| ("W1", &m2[e][0], r));
        assert_laid_out(&w2.w2, &w2.w2_scales, &l2, h, i, |e, r| ("down", &m2[e][1], r));
    }
}

#[test]
fn bad_weights_are_refused_with_typed_errors() {
    let s = shape(256, 192);
    let m = mats([(192, 256), (192, 256), (256, 192)], 5);
    // A wrong code length, a wrong scale length: named by expert and tensor.
    let mut short = m.clone();
    short[1][1].packed.pop();
    assert_eq!(
        gated(&s, &short).unwrap_err(),
        RuntimeError::TensorShape {
            tensor: "expert 1 gate codes (bytes)".into(),
            expected: vec![192 * 256 / 2],
            actual: vec![192 * 256 / 2 - 1],
        }
    );
    let mut short = m.clone();
    short[3][2].scales.push(127);
    assert!(matches!(
        gated(&s, &short).unwrap_err(),
        RuntimeError::TensorShape { tensor, .. } if tensor == "expert 3 down scales (linear bytes)"
    ));
    // A NaN scale code is refused (weights never carry NaN blocks), at its element.
    let mut nan = m.clone();
    nan[2][2].scales[17] = 0xFF;
    assert_eq!(
        gated(&s, &nan).unwrap_err(),
        RuntimeError::TensorScaleCode {
            tensor: "expert 2 down scales".into(),
            offset: 17,
            code: 0xFF,
            reason: "NaN",
        }
    );
    assert_eq!(
        gated(&s, &m[..3]).unwrap_err(),
        RuntimeError::BufferLength { what: "experts", expected: 4, actual: 3 }
    );
    // H = 272 is a valid MoeShape (multiple of 16) but not of whole 32-blocks.
    let odd = shape(272, 192);
    assert!(matches!(
        gated(&odd, &m).unwrap_err(),
        RuntimeError::Plan(moegen_dsl::plan::PlanError::Alignment { what: "hidden size", .. })
    ));

    // The prepared layout's own checks.
    let w = gated(&s, &m).unwrap();
    let mut bad = w.clone();
    let row = mx_padded_k(192).unwrap() / 2;
    bad.w2[row - 1] = 0x10; // a code past I = 192 in W2's first row
    assert!(matches!(
        bad.validate(&s).unwrap_err(),
        RuntimeError::UnsupportedWeights { what: "SM100 MX W2", .. }
    ));
    let mut bad = w.clone();
    let l2 = sm100_mx_w2_scale_layout(&s).unwrap();
    let o = l2.bytes() + l2.offset(5, 6).unwrap(); // expert 1, block 6 ≥ I/32
    bad.w2_scales[o] = 1;
    assert!(matches!(
        bad.validate(&s).unwrap_err(),
        RuntimeError::UnsupportedWeights { what: "SM100 MX W2 scales", .. }
    ));
    let mut bad = w.clone();
    let l1 = sm100_mx_w1_scale_layout(&s, Activation::Swiglu).unwrap();
    let o = 2 * l1.bytes() + l1.offset(300, 3).unwrap();
    bad.w1_scales[o] = 0xFF;
    assert_eq!(
        bad.validate(&s).unwrap_err(),
        RuntimeError::NanScaleCode { what: "SM100 MX W1 scales", offset: o }
    );
    assert_eq!(
        w.clone().with_alphas(&s, vec![1.0, 2.0, f32::NAN, 1.0], vec![1.0; 4]).unwrap_err(),
        RuntimeError::NonFinite { what: "alpha1" }
    );
    assert!(matches!(
        w.clone().with_alphas(&s, vec![1.0; 3], vec![1.0; 4]).unwrap_err(),
        RuntimeError::BufferLength { what: "alpha1", expected: 4, actual: 3 }
    ));
    let (nan_w, zero_w) = (vec![f32::NAN; 4 * 192 * 256], vec![0f32; 4 * 192 * 256]);
    // Gated weights cannot serve ReLU² (W1 holds 2I rows, ReLU² reads I).
    let relu2 = ExpertEpilogue::new(&s, Activation::Relu2, vec![], None, None).unwrap();
    assert!(matches!(
        w.clone().with_epilogue(&s, relu2).unwrap_err(),
        RuntimeError::BufferLength { what: "SM100 MX W1", .. }
    ));
    assert!(matches!(
        Sm100MxWeights::quantize(&s, &nan_w, &zero_w, &zero_w).unwrap_err(),
        RuntimeError::Format(_)
    ));
}

#[test]
fn activations_are_mxfp8_per_32_with_zero_padding_scales() {
    let (tokens, h) = (5, 320);
    let mut r = Rng(9);
    let x: Vec<bf16> = (0..tokens * h)
        .map(|j| bf16::from_f32(r.normal() * 2f32.powi((j / 32 % 13) as i32 - 6)))
        .collect();
    let a = quantize_mxfp8_activations(&x, tokens, h).unwrap();
    let cols = mx_padded_k(h).unwrap() / 32;
    assert_eq!(
        (a.codes.len(), a.scales.len(), a.scale_cols().unwrap()),
        (tokens * h, tokens * 12, 12)
    );
    for t in 0..tokens {
        for c in 0..cols {
            if c >= h / 32 {
                assert_eq!(a.scales[t * cols + c], 0, "token {t} padding block {c}");
                continue;
            }
            let v: Vec<f32> =
                x[t * h + 32 * c..t * h + 32 * c + 32].iter().map(|v| v.to_f32()).collect();
            let (codes, s) = quantize_mxfp8_block(&v);
            assert_eq!(a.scales[t * cols + c], s);
            assert_eq!(&a.codes[t * h + 32 * c..t * h + 32 * c + 32], &codes[..]);
        }
    }
    assert!(matches!(
        quantize_mxfp8_activations(&x[..48 * 2], 2, 48).unwrap_err(),
        RuntimeError::Plan(moegen_dsl::plan::PlanError::Alignment { multiple: 32, .. })
    ));
    assert_eq!(
        quantize_mxfp8_activations(&x[..10], 1, 32).unwrap_err(),
        RuntimeError::BufferLength { what: "activations", expected: 32, actual: 10 }
    );
    let mut bad = a.clone();
    bad.scales[cols - 1] = 3;
    assert!(matches!(bad.validate().unwrap_err(), RuntimeError::UnsupportedActivations { .. }));
    // NaN inputs are data, as on the device: a NaN code and the NaN maximum's scale.
    let mut xn = x.clone();
    xn[3] = bf16::NAN;
    let an = quantize_mxfp8_activations(&xn, tokens, h).unwrap();
    assert_eq!((an.codes[3] & 0x7F, an.scales[0]), (0x7F, 121 + 127));
}

/// The test layer: H 256, I 192 (Kp(I) = 256), 4 local experts of 8, top 2, 40 tokens.
struct Layer {
    shape: MoeShape,
    x: Mxfp8Activations,
    routing: Routing,
    /// Gated: the weights and decoded up, gate, down `[L, ·, ·]` as f32.
    gated: (Sm100MxWeights, [Vec<f32>; 3]),
    /// ReLU²: the weights and decoded W1, down.
    relu2: (Sm100MxWeights, [Vec<f32>; 2]),
}

const TOKENS: usize = 40;

fn layer() -> Layer {
    let (h, i) = (256, 192);
    let s = shape(h, i);
    let mut r = Rng(11);
    let x: Vec<bf16> = (0..TOKENS * h).map(|_| bf16::from_f32(r.normal())).collect();
    let mut dense = |n: usize, fan_in: usize| -> Vec<f32> {
        (0..n).map(|_| r.normal() / (fan_in as f32).sqrt()).collect()
    };
    let n = 4 * i * h;
    let (up, gate, down, w1) = (dense(n, h), dense(n, h), dense(n, i), dense(n, h));
    let (wg, mg) = Sm100MxWeights::quantize(&s, &up, &gate, &down).unwrap();
    let deq = |ms: &[Mxfp4Matrix]| ms.iter().flat_map(|m| m.dequantize()).collect::<Vec<f32>>();
    let pick = |j: usize| deq(&mg.iter().map(|m| m[j].clone()).collect::<Vec<_>>());
    let gated = (wg, [pick(0), pick(1), pick(2)]);
    let (wr, mr) = Sm100MxWeights::quantize_relu2(&s, &w1, &down).unwrap();
    let pick = |j: usize| deq(&mr.iter().map(|m| m[j].clone()).collect::<Vec<_>>());
    let relu2 = (wr, [pick(0), pick(1)]);
    let experts: Vec<i32> = (0..TOKENS * 2).map(|j| ((j * 3 + j / 2) % 8) as i32).collect();
    let weights: Vec<f32> = (0..TOKENS * 2).map(|j| 0.25 + (j % 2) as f32 * 0.5).collect();
    Layer {
        x: quantize_mxfp8_activations(&x, TOKENS, h).unwrap(),
        shape: s,
        routing: Routing { tokens: TOKENS, experts, weights },
        gated,
        relu2,
    }
}

/// The gpt-oss epilogue (clamped SwiGLU, α 1.702, β 1, limit 7, both biases) or ReLU² with
/// both biases.
fn epilogue(s: &MoeShape, kind: Activation) -> ExpertEpilogue {
    let (h, i) = (s.hidden, s.intermediate);
    let rows = kind.w1_rows(i);
    let b1: Vec<f32> = (0..4 * rows).map(|j| ((j % 7) as f32 - 3.0) * 0.25).collect();
    let b2: Vec<f32> = (0..4 * h).map(|j| ((j % 5) as f32 - 2.0) * 0.125).collect();
    let params = if kind.has_params() { vec![ActivationParams::GPT_OSS; 4] } else { vec![] };
    ExpertEpilogue::new(s, kind, params, Some(b1), Some(b2)).unwrap()
}

fn weights_for(l: &Layer, kind: Activation) -> Sm100MxWeights {
    let w = if kind.gated() { l.gated.0.clone() } else { l.relu2.0.clone() };
    // α ≠ 1 on some experts, so that its place in the epilogue is checked.
    w.with_epilogue(&l.shape, epilogue(&l.shape, kind))
        .unwrap()
        .with_alphas(&l.shape, vec![1.0, 0.75, 1.25, 1.0], vec![1.0, 1.5, 1.0, 0.5])
        .unwrap()
}

/// x decoded: e4m3 · 2^(scale − 127), exact.
fn decoded_x(x: &Mxfp8Activations) -> Vec<f32> {
    let cols = x.scale_cols().unwrap();
    (0..x.tokens * x.hidden)
        .map(|j| {
            let (t, c) = (j / x.hidden, j % x.hidden);
            e4m3_to_f32(x.codes[j]) * ue8m0_to_f32(x.scales[t * cols + c / 32])
        })
        .collect()
}

#[test]
fn gemm1_is_the_per_mma_dot_then_the_unfolded_epilogue_then_mxfp8() {
    let l = layer();
    let s = &l.shape;
    let (h, i) = (s.hidden, s.intermediate);
    let xc = l.x.scale_cols().unwrap();
    for kind in [Activation::SwigluClamped, Activation::Relu2] {
        let w = weights_for(&l, kind);
        let rows1 = kind.w1_rows(i);
        let l1 = sm100_mx_w1_scale_layout(s, kind).unwrap();
        let hp = mx_padded_k(h).unwrap();
        let opts = [
            (SwigluInput::F32, EpilogueRecipe::Exact),
            (SwigluInput::F32, EpilogueRecipe::Fast),
            (SwigluInput::Bf16, EpilogueRecipe::Fast),
        ];
        for (swiglu_input, recipe) in opts {
            let o =
                ReferenceOptions { swiglu_input, recipe, finalize: FinalizeMode::Deterministic };
            let run = moe_reference_sm100_mx(s, &l.x, &w, &l.routing, TileSize::T128, o).unwrap();
            let g = &run.gemm1;
            let layout = sm100_mx_h_scale_layout(s, g.rows).unwrap();
            assert_eq!(g.scale_layout, layout);
            let mut valid = 0;
            for row in 0..g.rows {
                let Some((e, t, _)) = run.sort.route_of_row(row, 2) else {
                    assert!(g.codes[row * i..(row + 1) * i].iter().all(|&c| c == 0));
                    for c in 0..layout.padded_cols() {
                        assert_eq!(g.scales[layout.offset(row, c).unwrap()], 0, "padding row");
                    }
                    continue;
                };
                valid += 1;
                if row % 3 != 0 {
                    continue; // a third of the rows suffices, each checked whole
                }
                // The dot from the raw layouts: x's row t, W1's kernel row r.
                let acc = |r: usize| {
                    let base = (e * rows1 + r) * hp / 2;
                    let ws: Vec<u8> = (0..hp / 32)
                        .map(|c| w.w1_scales[e * l1.bytes() + l1.offset(r, c).unwrap()])
                        .collect();
                    let (xcodes, xs) =
                        (&l.x.codes[t * h..(t + 1) * h], &l.x.scales[t * xc..(t + 1) * xc]);
                    mx_dot_bytes(xcodes, xs, &w.w1[base..base + hp / 2], &ws, h).unwrap()
                };
                let hrow: Vec<f32> = (0..i)
                    .map(|j| {
                        let (up, gate) = if kind.gated() {
                            let r = j / 64 * 128 + j % 64;
                            (acc(r), acc(r + 64))
                        } else {
                            (acc(j), 0.0)
                        };
                        let b = w.epilogue.gemm1_bias(s, e, j).unwrap();
                        let mut u = pre_activation(w.alpha1[e], up, Some(b.0));
                        let mut g = pre_activation(w.alpha1[e], gate, Some(b.1));
                        if swiglu_input == SwigluInput::Bf16 {
                            (u, g) = (round_to_bf16(u), round_to_bf16(g));
                        }
                        let p = w.epilogue.params(e);
                        match recipe {
                            EpilogueRecipe::Exact => activation_exact(kind, &p, u, g),
                            EpilogueRecipe::Fast => activation_fast(kind, &p, u, g),
                        }
                    })
                    .collect();
                for (c, block) in hrow.chunks_exact(MXFP8_BLOCK).enumerate() {
                    let (codes, sc) = quantize_mxfp8_block(block);
                    assert_eq!(
                        &g.codes[row * i + 32 * c..row * i + 32 * c + 32],
                        &codes[..],
                        "{kind:?} row {row} block {c}"
                    );
                    assert_eq!(
                        g.scales[layout.offset(row, c).unwrap()],
                        sc,
                        "{kind:?} row {row} block {c}"
                    );
                }
                for c in i / 32..layout.padded_cols() {
                    assert_eq!(g.scales[layout.offset(row, c).unwrap()], 0, "block {c} past I");
                }
            }
            assert!(valid > 20, "the routing reaches the local experts: {valid}");
            // GEMM2 from the raw layouts: h's row and W2's row n, then α2, bias, w, bf16.
            let l2 = sm100_mx_w2_scale_layout(s).unwrap();
            let ip = mx_padded_k(i).unwrap();
            for row in (0..g.rows).step_by(5) {
                let Some((e, t, slot)) = run.sort.route_of_row(row, 2) else { continue };
                let hs: Vec<u8> =
                    (0..ip / 32).map(|c| g.scales[layout.offset(row, c).unwrap()]).collect();
                for n in (0..h).step_by(7) {
                    let base = (e * h + n) * ip / 2;
                    let ws: Vec<u8> = (0..ip / 32)
                        .map(|c| w.w2_scales[e * l2.bytes() + l2.offset(n, c).unwrap()])
                        .collect();
                    let acc = mx_dot_bytes(
                        &g.codes[row * i..(row + 1) * i],
                        &hs,
                        &w.w2[base..base + ip / 2],
                        &ws,
                        i,
                    )
                    .unwrap();
                    let rw = l.routing.weights[t * 2 + slot];
                    let want = round_to_bf16(gemm2_value(
                        acc,
                        w.alpha2[e],
                        rw,
                        w.epilogue.gemm2_bias(s, e, n),
                    ));
                    assert_eq!(run.contributions[(t * 2 + slot) * h + n].to_bits(), want.to_bits());
                }
            }
        }
    }
}

/// f64 activation of one pre-activation pair (the oracle's definitions).
fn act_f64(kind: Activation, p: &ActivationParams, u: f64, g: f64) -> f64 {
    match kind {
        Activation::SwigluClamped => {
            let lim = f64::from(p.limit);
            let (g, u) = (g.min(lim), u.clamp(-lim, lim));
            g / (1.0 + (-f64::from(p.alpha) * g).exp()) * (u + f64::from(p.beta))
        }
        Activation::Relu2 => u.max(0.0).powi(2),
        _ => unreachable!("the tests use these two"),
    }
}

/// The layer in f64 from the decoded inputs, α and biases included; with `requantize` h goes
/// through f32 and `quantize_mxfp8_block` first, as GEMM2's input does on the device.
fn layer_f64(l: &Layer, w: &Sm100MxWeights, dec: &[Vec<f32>], requantize: bool) -> Vec<f64> {
    let s = &l.shape;
    let (h, i) = (s.hidden, s.intermediate);
    let kind = w.epilogue.spec().activation;
    let x = decoded_x(&l.x);
    let (w1, gate, down) =
        if kind.gated() { (&dec[0], Some(&dec[1]), &dec[2]) } else { (&dec[0], None, &dec[1]) };
    let mut out = vec![0f64; TOKENS * h];
    for t in 0..TOKENS {
        for slot in 0..2 {
            let Some(e) =
                (l.routing.experts[t * 2 + slot] as usize).checked_sub(2).filter(|&e| e < 4)
            else {
                continue;
            };
            let dot = |m: &[f32], row: usize| -> f64 {
                (0..h).map(|c| f64::from(m[(e * i + row) * h + c]) * f64::from(x[t * h + c])).sum()
            };
            let mut act: Vec<f64> = (0..i)
                .map(|j| {
                    let b = w.epilogue.gemm1_bias(s, e, j).unwrap();
                    let a1 = f64::from(w.alpha1[e]);
                    let u = a1 * dot(w1, j) + f64::from(b.0);
                    let g = gate.map_or(0.0, |gm| a1 * dot(gm, j) + f64::from(b.1));
                    act_f64(kind, &w.epilogue.params(e), u, g)
                })
                .collect();
            if requantize {
                for block in act.chunks_exact_mut(32) {
                    let f: Vec<f32> = block.iter().map(|&v| v as f32).collect();
                    let (codes, sc) = quantize_mxfp8_block(&f);
                    for (v, c) in block.iter_mut().zip(codes) {
                        *v = f64::from(e4m3_to_f32(c)) * f64::from(ue8m0_to_f32(sc));
                    }
                }
            }
            let rw = f64::from(l.routing.weights[t * 2 + slot]);
            for n in 0..h {
                let d: f64 = (0..i).map(|j| f64::from(down[(e * h + n) * i + j]) * act[j]).sum();
                let b2 = f64::from(w.epilogue.gemm2_bias(s, e, n).unwrap());
                out[t * h + n] += rw * (f64::from(w.alpha2[e]) * d + b2);
            }
        }
    }
    out
}

/// Tolerances, derived. Against f64 on the same decoded inputs, what remains is GEMM1's f32
/// accumulation and epilogue (~2^-24 relative), h's MXFP8 requantization and the bf16
/// output. E4M3 keeps 3 fraction bits: rounding to nearest moves a value by at most 2^-4 of
/// its binade's base, an RMS relative error of about 2^-4/√3 · 0.72 ≈ 2.6 % for values spread
/// over a binade (the UE8M0 scale leaves 14 binades of normal E4M3 below a block's largest,
/// so subnormal codes are rare); GEMM2 sums I = 192 independent such errors, so the output's
/// relative L2 error is about that RMS (measured: 2.7 % SwiGLU, 2.6 % ReLU²). Bound: 5 %
/// (twice the estimate). With h requantized in the f64 evaluation too, only the bf16
/// roundings remain (each route's contribution and their sum, ≈ 2^-9/√3 · 0.72 ≈ 0.08 % RMS
/// each, ≈ 0.14 % for three) and the rare E4M3 rounding flip of an h value within ~2^-24 of
/// a rounding boundary (measured: 0.17 %, 0.18 %): bound 0.5 %.
const BOUND_F64: f64 = 0.05;
const BOUND_REQUANTIZED: f64 = 0.005;

#[test]
fn the_layer_tracks_f64_arithmetic_on_its_quantized_inputs() {
    let l = layer();
    for kind in [Activation::SwigluClamped, Activation::Relu2] {
        let w = weights_for(&l, kind);
        let dec: Vec<Vec<f32>> = if kind.gated() { l.gated.1.to_vec() } else { l.relu2.1.to_vec() };
        // The crate's oracle (its own loops) for the plain f64 evaluation.
        let x = decoded_x(&l.x);
        let ep = &w.epilogue;
        let gate: &[f32] = if kind.gated() { &dec[1] } else { &[] };
        let down = dec.last().unwrap();
        let scaled = |m: &[f32], per: usize, alphas: &[f32]| -> Vec<f32> {
            m.iter().enumerate().map(|(j, &v)| v * alphas[j / per]).collect()
        };
        // α folded into the weights for the oracle (exact: α ∈ {0.5, 0.75, 1, 1.25, 1.5} and
        // the decoded weights have few bits).
        let per = 192 * 256;
        let oracle = oracle_moe_epilogue(
            &l.shape,
            &x,
            &scaled(&dec[0], per, &w.alpha1),
            &scaled(gate, per, &w.alpha1),
            &scaled(down, per, &w.alpha2),
            &l.routing,
            ep,
        )
        .unwrap();
        let own = layer_f64(&l, &w, &dec, false);
        assert!(
            relative_l2_error(&own, &oracle) < 1e-12,
            "{kind:?}: the test's f64 layer is the oracle's"
        );
        let requantized = layer_f64(&l, &w, &dec, true);
        let mut outputs = Vec::new();
        for recipe in [EpilogueRecipe::Exact, EpilogueRecipe::Fast] {
            for finalize in [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic] {
                let o = ReferenceOptions { swiglu_input: SwigluInput::F32, recipe, finalize };
                let run = moe_reference_sm100_mx(&l.shape, &l.x, &w, &l.routing, TileSize::T128, o)
                    .unwrap();
                let got: Vec<f64> = run.output.iter().map(|v| f64::from(v.to_f32())).collect();
                let (e1, e2) =
                    (relative_l2_error(&got, &oracle), relative_l2_error(&got, &requantized));
                println!(
                    "{kind:?} {recipe:?} {finalize:?}: vs f64 {e1:.4}, vs f64 with h requantized {e2:.5}"
                );
                assert!(e1 < BOUND_F64, "{kind:?} {recipe:?} {finalize:?}: {e1}");
                assert!(e2 < BOUND_REQUANTIZED, "{kind:?} {recipe:?} {finalize:?}: {e2}");
                // Top 2: a bf16 contribution plus another rounds the same in both modes.
                outputs.push(run.output);
                // 256-row tiles: the same rows per expert in other places, the same output.
                if finalize == FinalizeMode::Deterministic {
                    let t256 =
                        moe_reference_sm100_mx(&l.shape, &l.x, &w, &l.routing, TileSize::T256, o)
                            .unwrap();
                    assert_eq!(t256.output, outputs[outputs.len() - 1], "T = 256");
                }
            }
        }
        assert_eq!(outputs[0], outputs[1], "{kind:?}: k = 2 finalizes alike");
        assert_eq!(outputs[2], outputs[3]);
    }
    // The layer refuses activations of another token count.
    let w = weights_for(&l, Activation::Relu2);
    let fewer = Routing {
        tokens: 39,
        experts: l.routing.experts[..78].to_vec(),
        weights: l.routing.weights[..78].to_vec(),
    };
    assert_eq!(
        moe_reference_sm100_mx(
            &l.shape,
            &l.x,
            &w,
            &fewer,
            TileSize::T128,
            ReferenceOptions::default()
        )
        .unwrap_err(),
        RuntimeError::BufferLength { what: "routing tokens", expected: 40, actual: 39 }
    );
}
