//! The Hopper reference's split K: each CTA's range of whole K stages (`sm90_split_k_range`)
//! accumulated from zero as an unsplit unit accumulates, the ranks' f32 partial sums added in
//! rank order. Checked against a straightforward computation from the step models, for bf16
//! (64-element stages) and E4M3 (128-element stages, K zero-padded) dots, with ranges that
//! cover K once whatever K and the split; no split is the unsplit arithmetic bit for bit; a
//! split is another arithmetic (results differ); the GEMMs and the layer take the tactic's
//! splits; a split no kernel has is refused by type.

use half::bf16;
use moegen_dsl::epilogue_math::{gemm2_value, round_to_bf16};
use moegen_dsl::formats::{
    MxScaleRule, Mxfp4Matrix, e2m1_to_f32, f32_to_e4m3, nibble_at, quantize_mxfp4, ue8m0_to_f32,
};
use moegen_dsl::sm90_tactics::sm90_split_k_range;
use moegen_dsl::{ActivationFormat, EpilogueRecipe, FinalizeMode, SwigluInput, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::reference::*;
use moegen_runtime::routing::{ExpertWindow, moe_sort};

mod common;
use common::Rng;

fn split(s: u32) -> SplitK {
    SplitK::new(s).unwrap()
}

/// Random bf16 bits of roughly normal values spread over a few binades (so that the steps'
/// truncations bite), with a sprinkling of zeros.
fn bf16_row(r: &mut Rng, k: usize) -> Vec<u16> {
    (0..k)
        .map(|_| {
            let binade = (r.next() % 9) as i32 - 4;
            let v = if r.next().is_multiple_of(16) { 0.0 } else { r.normal() * 2f32.powi(binade) };
            bf16::from_f32(v).to_bits()
        })
        .collect()
}

/// Random E4M3 bytes of roughly normal values (no NaN: the quantizer saturates).
fn e4m3_row(r: &mut Rng, k: usize) -> Vec<u8> {
    (0..k)
        .map(|_| {
            let binade = (r.next() % 9) as i32 - 4;
            f32_to_e4m3(r.normal() * 2f32.powi(binade))
        })
        .collect()
}

/// The split dot written out from the spec: rank `rank` takes stages
/// `sm90_split_k_range(⌈k / stage⌉, s, rank)` (elements past `k` are the zero padding, which
/// adds nothing), folds `step` over its K-`step_k` chunks from 0, and the partial sums are
/// added in rank order with plain f32 adds.
fn spec_split_dot<T: Copy + Default>(
    x: &[T],
    w: &[T],
    s: u32,
    stage: usize,
    step_k: usize,
    step: impl Fn(f32, &[T], &[T]) -> f32,
) -> f32 {
    let k = x.len();
    let k_tiles = k.div_ceil(stage) as u32;
    let mut partials = Vec::new();
    for rank in 0..s {
        let (b, e) = sm90_split_k_range(k_tiles, s, rank);
        let (lo, hi) = ((b as usize * stage).min(k), (e as usize * stage).min(k));
        let mut acc = 0f32;
        let mut at = lo;
        while at < hi {
            let end = (at + step_k).min(hi);
            let (mut a, mut bb) = (vec![T::default(); step_k], vec![T::default(); step_k]);
            a[..end - at].copy_from_slice(&x[at..end]);
            bb[..end - at].copy_from_slice(&w[at..end]);
            acc = step(acc, &a, &bb);
            at = end;
        }
        partials.push(acc);
    }
    let mut sum = partials[0];
    for p in &partials[1..] {
        sum += p;
    }
    sum
}

fn bf16_step(acc: f32, x: &[u16], w: &[u16]) -> f32 {
    wgmma_step(acc, x, w)
}

fn e4m3_step(acc: f32, x: &[u8], w: &[u8]) -> f32 {
    wgmma_step_e4m3(acc, x.try_into().unwrap(), w.try_into().unwrap())
}

/// K lengths with whole and partial stages, stage counts below, at and above each split, and
/// not multiples of it (bf16 stages are 64 elements, E4M3's 128).
const KS: [usize; 12] = [0, 1, 17, 64, 100, 192, 320, 384, 448, 640, 1000, 2880];

#[test]
fn no_split_is_the_unsplit_dot_bit_for_bit() {
    let mut r = Rng(21);
    for &k in &KS {
        for _ in 0..20 {
            let (x, w) = (bf16_row(&mut r, k), bf16_row(&mut r, k));
            let want = wgmma_dot(&x, &w);
            assert_eq!(wgmma_dot_split(&x, &w, SplitK::NONE).to_bits(), want.to_bits(), "K {k}");
            let (x, w) = (e4m3_row(&mut r, k), e4m3_row(&mut r, k));
            let want = wgmma_dot_e4m3(&x, &w).unwrap();
            let got = wgmma_dot_e4m3_split(&x, &w, SplitK::NONE).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "E4M3 K {k}");
        }
    }
    // Specials pass through untouched (one partial sum, no add).
    let one = bf16::from_f32(1.0).to_bits();
    let inf = bf16::from_f32(f32::INFINITY).to_bits();
    assert_eq!(wgmma_dot_split(&[inf], &[one], SplitK::NONE), f32::INFINITY);
    assert_eq!(wgmma_dot_split(&[0x8000], &[one], SplitK::NONE).to_bits(), 0);
}

#[test]
fn split_dots_are_the_ranks_partial_sums_added_in_rank_order() {
    let mut r = Rng(22);
    for &k in &KS {
        for s in [2, 4] {
            for _ in 0..20 {
                let (x, w) = (bf16_row(&mut r, k), bf16_row(&mut r, k));
                let want = spec_split_dot(&x, &w, s, 64, 16, bf16_step);
                let got = wgmma_dot_split(&x, &w, split(s));
                assert_eq!(got.to_bits(), want.to_bits(), "bf16 K {k} split {s}");
                // A8: K zero-padded to whole 128-element stages, as the GEMMs pass it; the
                // unpadded slice splits at the same stages.
                let kp = k.next_multiple_of(128);
                let (mut x, mut w) = (e4m3_row(&mut r, k), e4m3_row(&mut r, k));
                let got = wgmma_dot_e4m3_split(&x, &w, split(s)).unwrap();
                x.resize(kp, 0);
                w.resize(kp, 0);
                let want = spec_split_dot(&x, &w, s, 128, 32, e4m3_step);
                assert_eq!(got.to_bits(), want.to_bits(), "E4M3 K {k} split {s}");
                let padded = wgmma_dot_e4m3_split(&x, &w, split(s)).unwrap();
                assert_eq!(padded.to_bits(), want.to_bits(), "E4M3 K {k} padded to {kp}");
            }
        }
    }
    // Rank 0's +∞ plus rank 1's −∞ is the GPU's canonical NaN, as the unsplit steps give;
    // +∞ plus a finite partial sum stays +∞.
    let (one, inf) = (bf16::from_f32(1.0).to_bits(), bf16::from_f32(f32::INFINITY).to_bits());
    let (mut x, w) = (vec![0u16; 128], vec![one; 128]);
    (x[0], x[64]) = (inf, inf | 0x8000);
    assert_eq!(wgmma_dot(&x, &w).to_bits(), 0x7FFF_FFFF);
    assert_eq!(wgmma_dot_split(&x, &w, split(2)).to_bits(), 0x7FFF_FFFF);
    x[64] = 0;
    assert_eq!(wgmma_dot_split(&x, &w, split(2)), f32::INFINITY);
    // The weights' length must match the activations'.
    let e = wgmma_dot_e4m3_split(&[0; 4], &[0; 3], split(2)).unwrap_err();
    assert!(matches!(e, RuntimeError::BufferLength { .. }), "{e}");
}

#[test]
fn the_ranks_ranges_cover_k_once_at_whole_stages() {
    for (acts, stage) in [(ActivationFormat::Bf16, 64), (ActivationFormat::Fp8, 128)] {
        for k in (0..=3000).chain([1 << 20, (1 << 20) + 5]) {
            for s in [1, 2, 4] {
                let ranges: Vec<_> = split(s).k_ranges(k, acts).collect();
                assert_eq!(ranges.len(), s as usize);
                let k_tiles = k.div_ceil(stage) as u32;
                let mut at = 0;
                for (rank, range) in ranges.iter().enumerate() {
                    // Contiguous, in rank order, starting where the previous rank stopped.
                    assert_eq!(range.start, at, "{acts:?} K {k} split {s} rank {rank}");
                    assert!(range.end >= range.start);
                    // Whole stages, the last cut at K: the dsl's stages.
                    let (b, e) = sm90_split_k_range(k_tiles, s, rank as u32);
                    assert_eq!(range.start, (b as usize * stage).min(k));
                    assert_eq!(range.end, (e as usize * stage).min(k));
                    at = range.end;
                }
                assert_eq!(at, k, "{acts:?} K {k} split {s}: every element once");
                // As even as whole stages allow: rank sizes differ by at most one stage.
                let stages: Vec<u32> = (0..s)
                    .map(|rank| {
                        let (b, e) = sm90_split_k_range(k_tiles, s, rank);
                        e - b
                    })
                    .collect();
                let (lo, hi) = (stages.iter().min().unwrap(), stages.iter().max().unwrap());
                assert!(hi - lo <= 1, "{acts:?} K {k} split {s}: {stages:?}");
            }
        }
    }
    // K past the kernels' u32 stage arithmetic (no kernel runs it) still splits by the same
    // formula, without wrapping.
    for k in [1usize << 40, (1 << 40) + 3, usize::MAX] {
        let ranges: Vec<_> = split(4).k_ranges(k, ActivationFormat::Bf16).collect();
        let k_tiles = k.div_ceil(64) as u128;
        let mut at = 0;
        for (rank, range) in ranges.iter().enumerate() {
            let end = ((rank as u128 + 1) * k_tiles / 4 * 64).min(k as u128);
            assert_eq!((range.start, range.end as u128), (at, end), "K {k} rank {rank}");
            at = range.end;
        }
        assert_eq!(at, k);
    }
    // 5 bf16 stages over 4 ranks: the longer range last; 3 A8 stages (K 320 padded to 384)
    // over 4 ranks: rank 0 has none.
    let r: Vec<_> = split(4).k_ranges(320, ActivationFormat::Bf16).collect();
    assert_eq!(r, [0..64, 64..128, 128..192, 192..320]);
    let r: Vec<_> = split(4).k_ranges(320, ActivationFormat::Fp8).collect();
    assert_eq!(r, [0..0, 0..128, 128..256, 256..320]);
    let r: Vec<_> = split(2).k_ranges(320, ActivationFormat::Fp8).collect();
    assert_eq!(r, [0..128, 128..320]);
}

#[test]
fn a_split_is_another_arithmetic() {
    // bf16, K 128 = two stages. One rank holds 1·1, the other 2^-24 twice in two K16 steps.
    // Unsplit, each 2^-24 meets the accumulator's 1 and is truncated away (1 + 2^-24 keeps
    // 24 bits: 1); split, the second rank sums them exactly to 2^-23 and rank 0's f32 add
    // keeps 1 + 2^-23.
    let b = |v: f32| bf16::from_f32(v).to_bits();
    let (mut x, mut w) = (vec![b(0.0); 128], vec![b(0.0); 128]);
    (x[0], w[0]) = (b(1.0), b(1.0));
    (x[64], w[64]) = (b(2f32.powi(-12)), b(2f32.powi(-12)));
    (x[80], w[80]) = (b(2f32.powi(-12)), b(2f32.powi(-12)));
    assert_eq!(wgmma_dot(&x, &w), 1.0);
    assert_eq!(wgmma_dot_split(&x, &w, split(2)), 1.0 + 2f32.powi(-23));
    // Over 4 ranks the two stages go to ranks 1 and 3 (ranks 0 and 2 have none: +0).
    assert_eq!(wgmma_dot_split(&x, &w, split(4)), 1.0 + 2f32.powi(-23));
    // E4M3, K 256 = two stages: the FP8 step keeps 13 bits below its largest exponent, so
    // products of 2^-7 (subnormal E4M3) vanish next to 1 unsplit and survive split.
    let (mut x, mut w) = (vec![0u8; 256], vec![0u8; 256]);
    (x[0], w[0]) = (f32_to_e4m3(1.0), f32_to_e4m3(1.0));
    for j in [128, 129, 160, 161] {
        (x[j], w[j]) = (f32_to_e4m3(2f32.powi(-7)), f32_to_e4m3(2f32.powi(-7)));
    }
    assert_eq!(wgmma_dot_e4m3(&x, &w).unwrap(), 1.0);
    let got = wgmma_dot_e4m3_split(&x, &w, split(2)).unwrap();
    assert_eq!(got, 1.0 + 4.0 * 2f32.powi(-14));
    // On random data the roundings differ in some dots and stay within a few f32 ulps.
    let mut r = Rng(23);
    let mut differ = 0;
    for _ in 0..200 {
        let (x, w) = (bf16_row(&mut r, 2880), bf16_row(&mut r, 2880));
        let (a, c) = (wgmma_dot(&x, &w), wgmma_dot_split(&x, &w, split(4)));
        differ += usize::from(a.to_bits() != c.to_bits());
        let scale: f32 = x.iter().zip(&w).map(|(&p, &q)| (f(p) * f(q)).abs()).sum();
        assert!((a - c).abs() <= 64.0 * f32::EPSILON * scale, "{a} {c}");
    }
    assert!(differ > 20, "the split changed only {differ} of 200 dots");
}

fn f(h: u16) -> f32 {
    bf16::from_bits(h).to_f32()
}

#[test]
fn a_split_no_kernel_has_is_refused_by_type() {
    for s in [0, 3, 5, 8, 16, u32::MAX] {
        let e = SplitK::new(s).unwrap_err();
        assert_eq!(e, RuntimeError::UnsupportedSplitK { split: s });
        assert!(e.to_string().contains(&format!("over {s} CTAs")), "{e}");
    }
    for s in [1, 2, 4] {
        assert_eq!(SplitK::new(s).unwrap().get(), s);
    }
    assert_eq!(SplitK::default(), SplitK::NONE);
    assert_eq!(SplitK::NONE.get(), 1);
    // Every Hopper tactic's tiling: its tile and both GEMMs' splits, some of them split.
    let tactics = moegen_dsl::sm90_tactics();
    let mut split_ones = 0;
    for t in &tactics {
        let tiling = Sm90Tiling::of(t).unwrap();
        assert_eq!(tiling.tile, t.tile());
        assert_eq!(tiling.gemm1.get(), t.gemm1().split_k(), "{t}");
        assert_eq!(tiling.gemm2.get(), t.gemm2().split_k(), "{t}");
        split_ones += usize::from(tiling != Sm90Tiling::unsplit(t.tile()));
    }
    assert!(split_ones > 0, "no split tactic in the Hopper space");
    assert_eq!(Sm90Tiling::from(TileSize::T32), Sm90Tiling::unsplit(TileSize::T32));
}

/// A small MXFP4 layer: H 320, I 192 (partial last stages: 5 bf16 stages of H, 3 of I; A8's
/// padded H has 3, I 2), 4 local experts of 8, top-2, 29 tokens.
struct Layer {
    shape: MoeShape,
    x: Vec<bf16>,
    routing: Routing,
    mats: Vec<[Mxfp4Matrix; 3]>,
}

fn layer() -> Layer {
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let (h, i, tokens) = (320, 192, 29);
    let mut r = Rng(24);
    let x: Vec<bf16> = (0..tokens * h).map(|_| bf16::from_f32(r.normal())).collect();
    let mut mat = |rows: usize, cols: usize| {
        let v: Vec<f32> = (0..rows * cols).map(|_| r.normal() / (cols as f32).sqrt()).collect();
        quantize_mxfp4(&v, rows, cols, MxScaleRule::NoClip).unwrap()
    };
    let mats = (0..4).map(|_| [mat(i, h), mat(i, h), mat(h, i)]).collect();
    let experts: Vec<i32> = (0..tokens * 2).map(|j| ((j * 3 + j / 2) % 8) as i32).collect();
    let weights: Vec<f32> = (0..tokens * 2).map(|j| 0.25 + (j % 2) as f32 * 0.5).collect();
    Layer { shape, x, routing: Routing { tokens, experts, weights }, mats }
}

fn weights(l: &Layer, acts: ActivationFormat) -> Sm90Weights {
    fn t(m: &Mxfp4Matrix) -> Mxfp4Tensor<'_> {
        Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
    }
    let experts: Vec<_> =
        l.mats.iter().map(|[u, g, d]| ExpertTensors { up: t(u), gate: t(g), down: t(d) }).collect();
    Sm90Weights::from_mxfp4(&l.shape, &experts, acts, 1.0, 1.0).unwrap()
}

/// GEMM1's h under each split: another arithmetic (some f32 values move), by no more than the
/// accumulators' truncation moves them (a few ulps of f32, or of the FP8 steps' 14 bits, of
/// accumulators of about h's RMS: h near 0 comes from cancelling ones).
fn check_h_moves(name: &str, unsplit: &[f32], ulp: f32, h: impl Fn(SplitK) -> Vec<f32>) {
    let rms = (unsplit.iter().map(|v| v * v).sum::<f32>() / unsplit.len() as f32).sqrt();
    for s in [2, 4] {
        let got = h(split(s));
        let differ = got.iter().zip(unsplit).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        let worst = got.iter().zip(unsplit).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        eprintln!(
            "{name} split {s}: {differ} of {} h values moved, at most {worst:e} (RMS {rms:e})",
            got.len()
        );
        assert!(differ > 0, "{name} split {s}: h did not move");
        assert!(worst <= 64.0 * ulp * rms, "{name} split {s}: {worst} (RMS {rms})");
    }
}

#[test]
fn the_gemms_and_the_layer_take_each_gemms_split() {
    let l = layer();
    let (s, r) = (&l.shape, &l.routing);
    let sort = moe_sort(&r.experts, r.tokens, &s.window, TileSize::T16).unwrap();
    let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe: EpilogueRecipe::Exact };

    // A16: GEMM1's h moves with GEMM1's split.
    let w = weights(&l, ActivationFormat::Bf16);
    let h = |sp| sm90_gemm1_h(s, &l.x, &w, &sort, opts, sp).unwrap();
    check_h_moves("A16", &h(SplitK::NONE), f32::EPSILON, h);
    // A16 GEMM2 is each route's split dot of its h row with the decoded W2 rows (unit-scale
    // weights: no MXFP4 shift, α as given), then the unchanged epilogue.
    assert_eq!(w.kernel_alphas(s).unwrap(), (w.alpha1.clone(), w.alpha2.clone()));
    let g1 = sm90_gemm1_reference(s, &l.x, &w, &sort, SwigluInput::F32, SplitK::NONE).unwrap();
    let (hid, inter, k) = (s.hidden, s.intermediate, s.top_k());
    for sp in [1, 2, 4] {
        let got = sm90_gemm2_contributions(s, &g1, &w, &sort, r, split(sp)).unwrap();
        let mut checked = 0;
        for row in 0..g1.rows {
            let Some((e, token, slot)) = sort.route_of_row(row, k) else { continue };
            let a: Vec<u16> =
                g1.values[row * inter..(row + 1) * inter].iter().map(|v| v.to_bits()).collect();
            for c in (0..hid).step_by(7) {
                let wrow: Vec<u16> = (0..inter)
                    .map(|j| {
                        let at = (e * hid + c) * inter + j;
                        let v = e2m1_to_f32(nibble_at(&w.w2, at).unwrap())
                            * ue8m0_to_f32(w.w2_scales[at / 16]);
                        bf16::from_f32(v).to_bits()
                    })
                    .collect();
                let acc = spec_split_dot(&a, &wrow, sp, 64, 16, bf16_step);
                let rw = r.weights[token * k + slot];
                let want = round_to_bf16(gemm2_value(acc, w.alpha2[e], rw, None));
                let at = (token * k + slot) * hid + c;
                assert_eq!(got[at].to_bits(), want.to_bits(), "split {sp} route {token}/{slot}");
                checked += 1;
            }
        }
        assert!(checked > 1000, "{checked}");
    }

    // A8: GEMM1's h over the padded H moves with the split too.
    let a8 = Sm90A8Weights::from_sm90(s, &weights(&l, ActivationFormat::Fp8)).unwrap();
    let h8 = |sp| sm90_a8_gemm1_h(s, &l.x, &a8, &sort, EpilogueRecipe::Exact, sp).unwrap();
    check_h_moves("A8", &h8(SplitK::NONE), 2f32.powi(-13), h8);

    // The layer: the unsplit tiling is the tile's; a tiling's GEMM1 split gives the GEMM1
    // output of that split, its GEMM2 split the contributions of that split; the tile still
    // only moves rows.
    let fin = FinalizeMode::Deterministic;
    let run16 = |tiling| moe_reference_sm90(s, &l.x, 1.0, &w, r, tiling, SwigluInput::F32, fin);
    let tiling = Sm90Tiling { tile: TileSize::T16, gemm1: split(4), gemm2: split(2) };
    let got = run16(tiling).unwrap();
    let g1_4 = sm90_gemm1_reference(s, &l.x, &w, &sort, SwigluInput::F32, split(4)).unwrap();
    assert_eq!(got.gemm1, g1_4);
    let c = sm90_gemm2_contributions(s, &g1_4, &w, &sort, r, split(2)).unwrap();
    assert_eq!(got.output, finalize(&c, r.tokens, k, hid, fin).unwrap());
    let t32 = run16(Sm90Tiling { tile: TileSize::T32, ..tiling }).unwrap();
    assert_eq!(t32.output, got.output);
    let a8_run = |tiling| moe_reference_sm90_a8(s, &l.x, &a8, r, tiling, fin).unwrap();
    let (a8_split, a8_none) = (a8_run(tiling), a8_run(TileSize::T16.into()));
    let g1_8 = sm90_a8_gemm1_reference(s, &l.x, &a8, &sort, split(4)).unwrap();
    assert_eq!(a8_split.gemm1, g1_8);
    assert_ne!(a8_split.gemm1, a8_none.gemm1, "A8 GEMM1's output moved with the split");
    let c8 = sm90_a8_gemm2_contributions(s, &g1_8, &a8, &sort, r, split(2)).unwrap();
    assert_eq!(a8_split.contributions, c8);
}
