//! The Hopper arithmetic on the CPU: the wgmma accumulation model, the fragment layout the
//! weights are uploaded in, and the whole layer in both activation formats against the SM100
//! reference and the unquantized oracle.

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::sm90_weights::{code_at, mxfp4_scale_field, scale_position, value_position};
use moegen_dsl::formats::{MxScaleRule, block_amax, nibble_at, nvfp4_global_scale, quantize_mxfp4};
use moegen_dsl::{ActivationFormat, FinalizeMode, SwigluInput, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::reference::*;
use moegen_runtime::routing::{ExpertWindow, moe_sort};

mod common;
use common::Rng;

fn b(v: f32) -> u16 {
    bf16::from_f32(v).to_bits()
}

#[test]
fn one_wgmma_step_truncates_as_the_h200_does() {
    // 2^100 − 2^100 + 1: the 1 sits 100 binades below the largest nominal exponent, far
    // under the 2^(emax−25) grid, so the tensor cores drop it (an exact sum would keep it).
    let big = 2f32.powi(100);
    let x = [b(big), b(1.0), b(-big), b(0.0)];
    let w = [b(1.0), b(1.0), b(1.0), b(0.0)];
    assert_eq!(wgmma_dot(&x, &w), 0.0);
    // 1 + 2^-24 + 2^-24: both small terms sit on the 2^-25 grid, the sum 1 + 2^-23 fits f32.
    let t = 2f32.powi(-24);
    assert_eq!(wgmma_dot(&[b(1.0), b(t), b(t)], &[b(1.0), b(1.0), b(1.0)]), 1.0 + 2.0 * t);
    // 1 + 2^-24: exact on the grid, then truncated (not rounded) to f32's 24 bits: 1.
    assert_eq!(wgmma_dot(&[b(1.0), b(t)], &[b(1.0), b(1.0)]), 1.0);
    // A term below the grid is truncated toward zero on its own: 2^-26 vanishes next to 1,
    // and −(1 + 2^-24) truncates toward zero to −1.
    assert_eq!(wgmma_dot(&[b(1.0), b(2f32.powi(-26))], &[b(1.0), b(1.0)]), 1.0);
    assert_eq!(wgmma_dot(&[b(-1.0), b(-t)], &[b(1.0), b(1.0)]), -1.0);
    // The nominal exponent of a product is the sum of its operands' exponents: 1.5·1.5 =
    // 2.25 has nominal exponent 0, so with 2^-25 beside it the grid is 2^-25 and the small
    // term survives until the final truncation to 24 bits (2.25 + 2^-25 → 2.25).
    assert_eq!(wgmma_dot(&[b(1.5), b(2f32.powi(-25))], &[b(1.5), b(1.0)]), 2.25);
    // Steps chain through the accumulator: the second step sees the first's f32 result.
    let mut x = vec![b(0.0); 32];
    let mut w = vec![b(0.0); 32];
    (x[0], w[0]) = (b(2f32.powi(12)), b(2f32.powi(12)));
    (x[1], w[1]) = (b(1.0), b(1.0));
    (x[16], w[16]) = (b(1.0), b(1.0));
    assert_eq!(wgmma_dot(&x, &w), 2f32.powi(24));
    assert_eq!(wgmma_step(2f32.powi(24), &x[16..], &w[16..]), 2f32.powi(24));
    // Signed zeros, infinities and NaN.
    assert!(wgmma_dot(&[b(f32::INFINITY)], &[b(0.0)]).is_nan());
    assert_eq!(wgmma_dot(&[b(f32::INFINITY)], &[b(-1.0)]), f32::NEG_INFINITY);
    assert!(wgmma_dot(&[b(f32::NAN)], &[b(1.0)]).is_nan());
    assert_eq!(wgmma_dot(&[b(0.0)], &[b(-1.0)]).to_bits(), 0);
}

struct Problem {
    shape: MoeShape,
    x: Vec<f32>,
    up: Vec<f32>,
    gate: Vec<f32>,
    down: Vec<f32>,
    routing: Routing,
    gs_x: f32,
    prepared: PreparedWeights,
}

fn problem(tokens: usize) -> Problem {
    let (h, i) = (256, 128);
    let shape = MoeShape::new(h, i, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let mut r = Rng(11);
    let x: Vec<f32> = (0..tokens * h).map(|_| r.normal()).collect();
    let s = 1.0 / (h as f32).sqrt();
    let up: Vec<f32> = (0..4 * i * h).map(|_| r.normal() * s).collect();
    let gate: Vec<f32> = (0..4 * i * h).map(|_| r.normal() * s).collect();
    let down: Vec<f32> = (0..4 * h * i).map(|_| r.normal() / (i as f32).sqrt()).collect();
    let experts: Vec<i32> = (0..tokens * 2).map(|j| ((j * 3 + j / 2) % 8) as i32).collect();
    let weights: Vec<f32> = (0..tokens * 2).map(|j| 0.25 + (j % 2) as f32 * 0.5).collect();
    let xb: Vec<f32> = x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
    let gs_x = nvfp4_global_scale(block_amax(&xb)).unwrap();
    let prepared = prepare_weights(&shape, &up, &gate, &down, gs_x, 448.0 * 6.0 / 8.0).unwrap();
    Problem {
        shape,
        x: xb,
        up,
        gate,
        down,
        routing: Routing { tokens, experts, weights },
        gs_x,
        prepared,
    }
}

fn bf16s(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

fn to_f64(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| f64::from(x.to_f32())).collect()
}

#[test]
fn the_fragment_layout_holds_every_code_where_the_abi_says() {
    let p = problem(1);
    let w = Sm90Weights::from_prepared(&p.shape, &p.prepared, ActivationFormat::Nvfp4).unwrap();
    let [w1, s1, _, _] = w.fragment_layout(&p.shape).unwrap();
    let (rows, k) = (256, 256);
    let per = rows * k / 2;
    for e in [0, 3] {
        for (r, c) in [(0, 0), (5, 17), (64, 63), (130, 200), (255, 255)] {
            let code = nibble_at(&w.w1[e * per..], r * k + c).unwrap();
            let (byte, bits) = value_position(rows, k, r, c).unwrap();
            let at = e * per + byte;
            let word = u32::from_le_bytes([w1[at], w1[at + 1], w1[at + 2], w1[at + 3]]);
            assert_eq!(code_at(word, bits), code, "expert {e} ({r}, {c})");
        }
    }
    assert_eq!(s1.len(), w.w1_scales.len());
}

/// MXFP4's scale tiles hold each 32-block's factor field once, where the ABI says
/// (`abi::sm90_weights::scale_position`), and nothing else: half NVFP4's bytes.
#[test]
fn the_mxfp4_layout_holds_each_block_factor_once_where_the_abi_says() {
    let p = problem(1);
    let w = mxfp4_bumped(&p, |_, _| 0);
    let [_, s1, _, s2] = w.fragment_layout(&p.shape).unwrap();
    assert_eq!((s1.len(), s2.len()), (w.w1_scales.len() / 2, w.w2_scales.len() / 2));
    let (h, i) = (p.shape.hidden, p.shape.intermediate);
    for (scales, laid, rows, k) in [(&w.w1_scales, &s1, 2 * i, h), (&w.w2_scales, &s2, h, i)] {
        let (per16, per32) = (rows * k / 16, rows * k / 32);
        let mut seen = vec![false; laid.len()];
        for e in 0..p.shape.local_experts() {
            for r in 0..rows {
                for c in (0..k).step_by(32) {
                    let o = e * per32 + scale_position(WeightFormat::Mxfp4, rows, k, r, c).unwrap();
                    let code = scales[e * per16 + r * k / 16 + c / 16];
                    // Unit-variance weights: no shift, the field is code − 127 + 126 + 127.
                    assert_eq!(Some(laid[o]), mxfp4_scale_field(code, 0), "expert {e} ({r}, {c})");
                    assert!(!seen[o], "byte {o} twice");
                    seen[o] = true;
                }
            }
        }
        assert!(seen.iter().all(|&s| s), "every laid-out byte is some block's");
    }
}

#[test]
fn a4_is_the_blackwell_arithmetic_up_to_accumulation_order() {
    let p = problem(32);
    let x = bf16s(&p.x);
    let w = Sm90Weights::from_prepared(&p.shape, &p.prepared, ActivationFormat::Nvfp4).unwrap();
    let hopper = moe_reference_sm90(
        &p.shape,
        &x,
        p.gs_x,
        &w,
        &p.routing,
        TileSize::T32.into(),
        SwigluInput::F32,
        FinalizeMode::Deterministic,
    )
    .unwrap();
    let acts = quantize_activations(&p.x, 32, 256, p.gs_x).unwrap();
    let opts = ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
    let blackwell =
        moe_reference(&p.shape, &acts, &p.prepared, &p.routing, TileSize::T128, opts).unwrap();
    let err = relative_l2_error(&to_f64(&hopper.output), &to_f64(&blackwell.output));
    // Only the accumulation's roundings (per 16 vs per 64 products) differ, and a few
    // requantized h codes that sit on a rounding boundary.
    // (For data this small the sums are often exact in f32, and the two agree bit for bit.)
    assert!(err < 0.02, "A4 vs SM100: {err}");
    // The tile size only moves rows: the output is the same bits for every Hopper tile.
    let t16 = moe_reference_sm90(
        &p.shape,
        &x,
        p.gs_x,
        &w,
        &p.routing,
        TileSize::T16.into(),
        SwigluInput::F32,
        FinalizeMode::Deterministic,
    )
    .unwrap();
    assert_eq!(t16.output, hopper.output);
}

/// The Hopper reference layer's output for `p` with weights `w`.
fn layer(p: &Problem, x: &[bf16], w: &Sm90Weights, tile: TileSize, fin: FinalizeMode) -> Vec<bf16> {
    let t = Sm90Tiling::unsplit(tile);
    let r = moe_reference_sm90(&p.shape, x, p.gs_x, w, &p.routing, t, SwigluInput::F32, fin);
    r.unwrap().output
}

#[test]
fn a16_and_mxfp4_track_the_unquantized_oracle() {
    let p = problem(32);
    let x = bf16s(&p.x);
    let oracle = oracle_moe(&p.shape, &p.x, &p.up, &p.gate, &p.down, &p.routing).unwrap();
    let a16 = Sm90Weights::from_prepared(&p.shape, &p.prepared, ActivationFormat::Bf16).unwrap();
    let run = |w: &Sm90Weights| layer(&p, &x, w, TileSize::T64, FinalizeMode::BulkReduceAdd);
    let err16 = relative_l2_error(&to_f64(&run(&a16)), &oracle);
    let a4 = Sm90Weights::from_prepared(&p.shape, &p.prepared, ActivationFormat::Nvfp4).unwrap();
    let err4 = relative_l2_error(&to_f64(&run(&a4)), &oracle);
    eprintln!("relative L2 vs the unquantized oracle: A16 {err16:.4}, A4 {err4:.4}");
    // bf16 activations and h leave only the weights' 4-bit error.
    assert!(err16 < err4, "A16 {err16} should beat A4 {err4}");
    assert!(err16 < 0.2 && err4 < 0.3);
    // MXFP4 weights, kept MXFP4 (power-of-two scales per 32).
    let w = mxfp4_bumped(&p, |_, _| 0);
    assert_eq!(w.format, WeightFormat::Mxfp4);
    let errmx = relative_l2_error(&to_f64(&run(&w)), &oracle);
    eprintln!("MXFP4 A16: {errmx:.4}");
    assert!(errmx < 0.25, "MXFP4 A16 vs oracle {errmx}");
}

#[test]
fn gemm2_refuses_a_sort_that_does_not_fit_the_routing() {
    let p = problem(4);
    let w = Sm90Weights::from_prepared(&p.shape, &p.prepared, ActivationFormat::Bf16).unwrap();
    let sort = moe_sort(&p.routing.experts, 4, &p.shape.window, TileSize::T16).unwrap();
    let (x, none) = (bf16s(&p.x), SplitK::NONE);
    let g1 = sm90_gemm1_reference(&p.shape, &x, &w, &sort, SwigluInput::F32, none).unwrap();
    assert!(sm90_gemm2_contributions(&p.shape, &g1, &w, &sort, &p.routing, none).is_ok());
    // The same sort against a routing of fewer tokens: its expanded indices point past it.
    let short = Routing {
        tokens: 1,
        experts: p.routing.experts[..2].to_vec(),
        weights: p.routing.weights[..2].to_vec(),
    };
    let e = sm90_gemm2_contributions(&p.shape, &g1, &w, &sort, &short, none).unwrap_err();
    assert!(matches!(e, RuntimeError::SortMismatch { .. }), "{e}");
}

/// Hopper's Fast recipe: the same GEMM1 with the MUFU model's sigmoid — within a few f32 ulps
/// of Exact's h, not equal to it everywhere — and refused with NVFP4 activations by name.
#[test]
fn the_fast_recipe_moves_h_by_ulps_and_refuses_a4() {
    use moegen_dsl::EpilogueRecipe::{Exact, Fast};
    let p = problem(16);
    let w = Sm90Weights::from_prepared(&p.shape, &p.prepared, ActivationFormat::Bf16).unwrap();
    let sort = moe_sort(&p.routing.experts, 16, &p.shape.window, TileSize::T16).unwrap();
    let x = bf16s(&p.x);
    let h = |recipe| {
        let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe };
        sm90_gemm1_h(&p.shape, &x, &w, &sort, opts, SplitK::NONE).unwrap()
    };
    let (fast, exact) = (h(Fast), h(Exact));
    let differ = fast.iter().zip(&exact).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert!(differ > 0, "Fast computed Exact's h");
    for (f, e) in fast.iter().zip(&exact) {
        assert!((f - e).abs() <= 64.0 * f32::EPSILON * e.abs().max(f32::MIN_POSITIVE), "{f} {e}");
    }
    // The bf16 GEMM1 output is the rounded f32 h; the default entry point is Exact's.
    let exact_out =
        sm90_gemm1_reference(&p.shape, &x, &w, &sort, SwigluInput::F32, SplitK::NONE).unwrap();
    assert!(exact_out.values.iter().zip(&exact).all(|(o, &e)| *o == bf16::from_f32(e)));
    let a4 = Sm90Weights::from_prepared(&p.shape, &p.prepared, ActivationFormat::Nvfp4).unwrap();
    let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe: Fast };
    let e = sm90_gemm1_reference_with(&p.shape, &x, &a4, &sort, opts, SplitK::NONE).unwrap_err();
    assert!(matches!(e, RuntimeError::UnsupportedActivations { .. }), "{e}");
    assert!(e.to_string().contains("Fast"), "{e}");
}

/// MXFP4 weights of `p` kept MXFP4, with `bump(e, matrix)` added to every scale code of
/// expert e's matrix (0: up and gate, 1: down).
fn mxfp4_bumped(p: &Problem, bump: impl Fn(usize, usize) -> u8) -> Sm90Weights {
    let (h, i) = (256, 128);
    let mx = |v: &[f32], rows, cols, add: u8| {
        let mut m = quantize_mxfp4(v, rows, cols, MxScaleRule::NoClip).unwrap();
        m.scales.iter_mut().for_each(|s| *s += add);
        m
    };
    let per = i * h;
    let mats: Vec<_> = (0..4)
        .map(|e| {
            let s = e * per..(e + 1) * per;
            (
                mx(&p.up[s.clone()], i, h, bump(e, 0)),
                mx(&p.gate[s.clone()], i, h, bump(e, 0)),
                mx(&p.down[s], h, i, bump(e, 1)),
            )
        })
        .collect();
    fn tensor(m: &moegen_dsl::formats::Mxfp4Matrix) -> Mxfp4Tensor<'_> {
        Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
    }
    let experts: Vec<_> = mats
        .iter()
        .map(|(u, g, d)| ExpertTensors { up: tensor(u), gate: tensor(g), down: tensor(d) })
        .collect();
    Sm90Weights::from_mxfp4(&p.shape, &experts, ActivationFormat::Bf16, p.gs_x, 336.0).unwrap()
}

/// Hopper's MXFP4 kernels multiply each placed E2M1 by one factor 2^126 · scale, a bf16 only
/// for scales up to 2 (codes ≤ 128); a matrix with larger scales is shifted by 2^−ρ and its
/// α carries 2^ρ. The layer is then exactly the unshifted one scaled: down scales 2^100
/// larger give outputs 2^100 larger, bit for bit (the wgmma model, f32 and bf16 roundings
/// are all scale-free away from their range ends), and the scale bytes the kernels read
/// are the shifted factors' exponent fields.
#[test]
fn mxfp4_scales_above_two_are_shifted_into_alpha_exactly() {
    let p = problem(32);
    let x = bf16s(&p.x);
    let run = |w: &Sm90Weights| layer(&p, &x, w, TileSize::T16, FinalizeMode::Deterministic);
    let base = mxfp4_bumped(&p, |_, _| 0);
    // Unit-variance weights: every scale code is far below 128, nothing is shifted.
    assert!(base.w1_scales.iter().chain(&base.w2_scales).all(|&c| c <= 128));
    assert_eq!(base.kernel_alphas(&p.shape).unwrap(), (base.alpha1.clone(), base.alpha2.clone()));
    let big = mxfp4_bumped(&p, |_, m| if m == 1 { 100 } else { 0 });
    let max2 = *big.w2_scales.iter().max().unwrap();
    let rho = max2 - 128;
    assert!(rho > 0, "the bump must force a shift (max code {max2})");
    let (a1, a2) = big.kernel_alphas(&p.shape).unwrap();
    assert_eq!(a1, big.alpha1);
    // The upload's one-pass form is the two parts.
    let (layout, b1, b2) = big.kernel_layout(&p.shape).unwrap();
    assert_eq!((layout, &b1, &b2), (big.fragment_layout(&p.shape).unwrap(), &a1, &a2));
    // Per expert: its own largest code decides.
    for (e, a) in a2.iter().enumerate() {
        let per = 256 * 128 / 16;
        let m = *big.w2_scales[e * per..(e + 1) * per].iter().max().unwrap();
        assert_eq!(*a, big.alpha2[e] * 2f32.powi(i32::from(m.saturating_sub(128))), "expert {e}");
    }
    // The stored W2 scale bytes are code − ρ_e + 126.
    let [_, _, _, s2] = big.fragment_layout(&p.shape).unwrap();
    let [_, _, _, s2_base] = base.fragment_layout(&p.shape).unwrap();
    // The laid-out scales: one byte per 32-block.
    let per = 256 * 128 / 32;
    for e in 0..4 {
        let m = *big.w2_scales[2 * e * per..2 * (e + 1) * per].iter().max().unwrap();
        let shift = m.saturating_sub(128);
        for o in e * per..(e + 1) * per {
            assert_eq!(i32::from(s2[o]), i32::from(s2_base[o]) + 100 - i32::from(shift), "at {o}");
        }
    }
    let (want, got) = (run(&base), run(&big));
    let scale = 2f32.powi(100);
    for (j, (a, b)) in want.iter().zip(&got).enumerate() {
        assert_eq!(b.to_f32(), a.to_f32() * scale, "element {j}");
    }
}

/// A block far below its matrix's largest scale gets a factor so small that its products
/// underflow bf16: refused by name, with its expert and offset; a block of zeros there is
/// accepted (zero whatever its factor), and so is a block whose values all stay exact.
#[test]
fn mxfp4_blocks_past_the_shift_range_are_refused_by_name() {
    let p = problem(4);
    let mut w = mxfp4_bumped(&p, |_, _| 0);
    // Expert 1's first W2 block gets the largest code the runtime accepts (6 · 2^125 is the
    // largest bf16 weight): ρ = 252 − 128 = 124, so a code of 0 elsewhere in that matrix
    // gets the factor 2^(2 − 127) and e2m1 · 2^-251, far below bf16's least subnormal.
    let per = 256 * 128 / 16;
    w.w2_scales[per] = 252;
    w.w2_scales[per + 2] = 0;
    let e = w.fragment_layout(&p.shape).unwrap_err();
    assert!(
        matches!(
            e,
            RuntimeError::Mxfp4ScaleSpan {
                what: "W2 scales", expert: 1, offset, code: 0, max: 252, shift: 124
            } if offset == per + 2
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(text.contains("W2 scales of expert 1") && text.contains("byte"), "{text}");
    assert!(w.kernel_alphas(&p.shape).is_err());
    // The same block holding only zeros (±0) is fine.
    for v in 0..16 {
        let at = (per + 2) * 16 + v;
        let byte = &mut w.w2[at / 2];
        *byte &= if at % 2 == 0 { 0xF0 } else { 0x0F };
        if v == 3 {
            *byte |= if at % 2 == 0 { 0x08 } else { 0x80 };
        }
    }
    assert!(w.fragment_layout(&p.shape).is_ok());
    assert_eq!(w.kernel_alphas(&p.shape).unwrap().1[1], w.alpha2[1] * 2f32.powi(124));
    // Codes past 252: 6 · scale overflows bf16 (253, 254), or NaN (255): refused by name.
    for (code, overflow) in [(253u8, true), (254, true), (255, false)] {
        w.w2_scales[per + 5] = code;
        let e = w.fragment_layout(&p.shape).unwrap_err();
        let want = if overflow {
            matches!(e, RuntimeError::ScaleOverflow { what: "W2 scales", offset, code: c }
                if offset == per + 5 && c == code)
        } else {
            matches!(e, RuntimeError::NanScaleCode { what: "W2 scales", offset } if offset == per + 5)
        };
        assert!(want, "code {code}: {e}");
    }
}
