//! The Hopper A8 arithmetic on the CPU: the per-row FP8 quantization, the A8 weight
//! preparation (table codes, row factors, the requantized far blocks), the A8 fragment
//! layout, and the whole layer against the unquantized oracle within its derived tolerance.

use half::bf16;
use moegen_dsl::abi::sm90_weights::a8;
use moegen_dsl::formats::{
    E2M1_MAGNITUDES, MxScaleRule, Mxfp4Matrix, e2m1_to_f32, e4m3_to_f32, f32_to_e4m3, nibble_at,
    quantize_mxfp4, ue8m0_to_f32,
};
use moegen_dsl::{ActivationFormat, FinalizeMode, SwigluInput, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::reference::*;
use moegen_runtime::routing::ExpertWindow;

mod common;
use common::Rng;

#[test]
fn a_row_takes_the_least_power_of_two_that_holds_its_maximum() {
    let mut r = Rng(3);
    for row in 0..200usize {
        let k = 32 + row % 97;
        let mag = 2f32.powi(row as i32 % 60 - 30);
        let x: Vec<bf16> = (0..k).map(|_| bf16::from_f32(r.normal() * mag)).collect();
        let (q, s) = quantize_fp8_row(&x, k.next_multiple_of(128));
        assert_eq!(q.len(), k.next_multiple_of(128));
        assert_eq!(s.to_bits() & 0x807F_FFFF, 0, "a power of two: {s:e}");
        let amax = x.iter().map(|v| v.to_f32().abs()).fold(0f32, f32::max);
        assert!(amax <= 448.0 * s && amax > 224.0 * s, "row {row}: {amax:e} vs {s:e}");
        for (j, v) in x.iter().enumerate() {
            assert_eq!(q[j], f32_to_e4m3(v.to_f32() / s), "row {row} value {j}");
            // E4M3 keeps 3 fraction bits: relative error at most 2^-4 above 2^-6.
            let back = e4m3_to_f32(q[j]) * s;
            let err = (back - v.to_f32()).abs();
            assert!(err <= v.to_f32().abs() * 0.0625 + s * 2f32.powi(-10), "row {row} value {j}");
        }
        assert!(q[k..].iter().all(|&b| b == 0));
    }
    // The edges: all zero (the least scale), a NaN (its bits give 2^121), a subnormal row.
    let (q, s) = quantize_fp8_row(&[bf16::ZERO, bf16::NEG_ZERO], 128);
    assert_eq!((s, q[0], q[1]), (2f32.powi(-126), 0x00, 0x80));
    let (q, s) = quantize_fp8_row(&[bf16::from_f32(1.0), bf16::NAN], 4);
    assert_eq!((s, q[0], q[1]), (2f32.powi(121), 0x00, 0x7F));
    let tiny = bf16::from_bits(0x0003);
    let (q, s) = quantize_fp8_row(&[tiny], 1);
    assert_eq!(s, 2f32.powi(-126));
    assert_eq!(e4m3_to_f32(q[0]) * s, tiny.to_f32());
    // Exactly 448 · 2^e stays in the binade; a hair more moves up.
    let (_, s) = quantize_fp8_row(&[bf16::from_f32(448.0)], 1);
    assert_eq!(s, 1.0);
    let (_, s) = quantize_fp8_row(&[bf16::from_f32(450.0)], 1);
    assert_eq!(s, 2.0);
}

/// One expert's MXFP4 matrices for `shape`, the rows' block scales `spread` binades apart.
fn mxfp4_experts(shape: &MoeShape, seed: u64, spread: i32) -> Vec<[Mxfp4Matrix; 3]> {
    let (h, i) = (shape.hidden, shape.intermediate);
    let mut r = Rng(seed);
    let mut mat = |rows: usize, cols: usize| {
        let v: Vec<f32> = (0..rows * cols)
            .map(|j| {
                let (block, row) = ((j % cols) / 32, j / cols);
                let binade = ((block * 7 + row) % (spread as usize + 1)) as i32 - spread / 2;
                r.normal() * 2f32.powi(binade) / (cols as f32).sqrt()
            })
            .collect();
        quantize_mxfp4(&v, rows, cols, MxScaleRule::NoClip).unwrap()
    };
    (0..shape.local_experts()).map(|_| [mat(i, h), mat(i, h), mat(h, i)]).collect()
}

fn tensor(m: &Mxfp4Matrix) -> Mxfp4Tensor<'_> {
    Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
}

fn sm90(shape: &MoeShape, mats: &[[Mxfp4Matrix; 3]], acts: ActivationFormat) -> Sm90Weights {
    let experts: Vec<_> = mats
        .iter()
        .map(|[u, g, d]| ExpertTensors { up: tensor(u), gate: tensor(g), down: tensor(d) })
        .collect();
    Sm90Weights::from_mxfp4(shape, &experts, acts, 1.0, 1.0).unwrap()
}

#[test]
fn a8_weights_are_the_mxfp4_values_but_for_blocks_far_below_their_row() {
    let shape = MoeShape::new(320, 192, ExpertWindow::new(4, 0, 2, 2).unwrap()).unwrap();
    let mats = mxfp4_experts(&shape, 5, 30);
    let w = sm90(&shape, &mats, ActivationFormat::Fp8);
    let a = Sm90A8Weights::from_sm90(&shape, &w).unwrap();
    let (h, i) = (shape.hidden, shape.intermediate);
    let (mut exact, mut moved) = (0usize, 0usize);
    for (e, [_, _, down]) in mats.iter().enumerate() {
        for row in 0..h {
            let r = e * h + row;
            let codes: Vec<u8> = (0..i / 32).map(|b| down.scales[row * (i / 32) + b]).collect();
            let s_max = codes.iter().copied().max().unwrap().max(7);
            assert_eq!(a.w2_rows[r], 2f32.powi(i32::from(s_max) - 133), "row {r}");
            for c in 0..i {
                let s = codes[c / 32];
                let want =
                    e2m1_to_f32(nibble_at(&down.packed, row * i + c).unwrap()) * ue8m0_to_f32(s);
                let got = a.weight(&shape, false, r, c).unwrap();
                let table = i32::from(s) - i32::from(s_max) + 12;
                assert_eq!(i32::from(a.w2_codes[r * i / 32 + c / 32]), table.max(1));
                if table >= 1 {
                    assert_eq!(got, want, "({r}, {c})");
                    exact += 1;
                } else {
                    // Nearest on the c = 1 grid: E2M1 magnitudes times 2^(s_max − 138).
                    let unit = 2f32.powi(i32::from(s_max) - 138);
                    let best = E2M1_MAGNITUDES
                        .iter()
                        .map(|m| (m * unit - want.abs()).abs())
                        .fold(f32::INFINITY, f32::min);
                    assert_eq!((got.abs() - want.abs()).abs(), best, "({r}, {c})");
                    assert!(got == 0.0 || got.signum() == want.signum());
                    moved += usize::from(got != want);
                }
            }
        }
    }
    assert!(exact > 0 && moved > 0, "the data reaches both kinds of block: {exact} {moved}");
}

#[test]
fn the_a8_fragment_layout_holds_every_value_where_the_abi_says() {
    // H = 320 and I = 192: K ends in a partial 128-wide tile in both GEMMs.
    let shape = MoeShape::new(320, 192, ExpertWindow::new(4, 0, 2, 2).unwrap()).unwrap();
    let w = sm90(&shape, &mxfp4_experts(&shape, 9, 16), ActivationFormat::Fp8);
    let a = Sm90A8Weights::from_sm90(&shape, &w).unwrap();
    let [w1, s1, w2, s2] = a.fragment_layout(&shape).unwrap();
    let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
    for (gemm1, values, tables, rows, k) in [(true, &w1, &s1, 2 * i, h), (false, &w2, &s2, h, i)] {
        let (vb, sb) = (a8::value_bytes(rows, k), a8::scale_bytes(rows, k));
        assert_eq!((values.len(), tables.len()), (l * vb, l * sb));
        let mut seen = vec![0u32; values.len() / 4];
        for e in 0..l {
            for r in 0..rows {
                for c in 0..a8::padded_k(k) {
                    let (byte, mag, sign) = a8::value_position(rows, k, r, c).unwrap();
                    let word = u32::from_le_bytes(
                        values[e * vb + byte..e * vb + byte + 4].try_into().unwrap(),
                    );
                    seen[(e * vb + byte) / 4] |= 7 << mag | 1 << sign;
                    let t = tables[e * sb + a8::scale_position(rows, k, r, c).unwrap()];
                    let m = ((word >> mag) & 7) as u8;
                    let v = e4m3_to_f32(a8::table_byte(t, m))
                        * if (word >> sign) & 1 == 1 { -1.0 } else { 1.0 };
                    if c < k {
                        let rows_f = if gemm1 { &a.w1_rows } else { &a.w2_rows };
                        let want = a.weight(&shape, gemm1, e * rows + r, c).unwrap();
                        assert_eq!(
                            v * rows_f[e * rows + r],
                            want,
                            "gemm1 {gemm1} e {e} ({r}, {c})"
                        );
                    } else {
                        assert_eq!((m, t), (0, a8::MIN_CODE), "padding ({r}, {c})");
                    }
                }
            }
        }
        // Every bit of every word belongs to exactly one value's magnitude or sign.
        assert!(seen.iter().all(|&b| b == u32::MAX), "gemm1 {gemm1}: bits left unassigned");
    }
}

#[test]
fn the_a8_layer_tracks_the_unquantized_oracle_within_its_tolerance() {
    let shape = MoeShape::new(256, 128, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let (h, i, tokens) = (256, 128, 32);
    let mut r = Rng(11);
    let x: Vec<f32> = (0..tokens * h).map(|_| bf16::from_f32(r.normal()).to_f32()).collect();
    let dense = |rows: usize, cols: usize, r: &mut Rng| -> Vec<f32> {
        (0..4 * rows * cols).map(|_| r.normal() / (cols as f32).sqrt()).collect()
    };
    let (up, gate, down) = (dense(i, h, &mut r), dense(i, h, &mut r), dense(h, i, &mut r));
    let mx = |v: &[f32], rows, cols| quantize_mxfp4(v, rows, cols, MxScaleRule::NoClip).unwrap();
    let mats: Vec<[Mxfp4Matrix; 3]> = (0..4)
        .map(|e| {
            let per = i * h;
            [
                mx(&up[e * per..(e + 1) * per], i, h),
                mx(&gate[e * per..(e + 1) * per], i, h),
                mx(&down[e * per..(e + 1) * per], h, i),
            ]
        })
        .collect();
    let experts: Vec<i32> = (0..tokens * 2).map(|j| ((j * 3 + j / 2) % 8) as i32).collect();
    let weights: Vec<f32> = (0..tokens * 2).map(|j| 0.25 + (j % 2) as f32 * 0.5).collect();
    let routing = Routing { tokens, experts, weights };
    let oracle = oracle_moe(&shape, &x, &up, &gate, &down, &routing).unwrap();
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let to_f64 = |v: &[bf16]| v.iter().map(|x| f64::from(x.to_f32())).collect::<Vec<f64>>();

    let a8w =
        Sm90A8Weights::from_sm90(&shape, &sm90(&shape, &mats, ActivationFormat::Fp8)).unwrap();
    let run = |tile: TileSize| {
        let det = FinalizeMode::Deterministic;
        moe_reference_sm90_a8(&shape, &xb, &a8w, &routing, tile.into(), det).unwrap()
    };
    let a8 = run(TileSize::T64);
    let a16 = moe_reference_sm90(
        &shape,
        &xb,
        1.0,
        &sm90(&shape, &mats, ActivationFormat::Bf16),
        &routing,
        TileSize::T64.into(),
        SwigluInput::F32,
        FinalizeMode::Deterministic,
    )
    .unwrap();
    let err8 = relative_l2_error(&to_f64(&a8.output), &oracle);
    let err16 = relative_l2_error(&to_f64(&a16.output), &oracle);
    let vs16 = relative_l2_error(&to_f64(&a8.output), &to_f64(&a16.output));
    eprintln!("relative L2: A8 vs oracle {err8:.4}, A16 vs oracle {err16:.4}, A8 vs A16 {vs16:.4}");
    // docs/reference.md ("Hopper A8"): the two E4M3 roundings (x and h) add at most about
    // 2^-4 / √3 · √2 ≈ 5 % relative L2 to what the 4-bit weights already cost; the bound
    // doubles that.
    assert!(vs16 < 0.10, "A8 vs A16 {vs16}");
    assert!(vs16 > 0.005, "A8 should differ from A16: {vs16}");
    assert!(err8 < err16 + 0.10, "A8 {err8} vs A16 {err16}");
    // Rows move with the tile; every output bit stays.
    assert_eq!(run(TileSize::T16).output, a8.output);
    // The finalize of the contributions is the output.
    let sum = finalize(&a8.contributions, tokens, 2, h, FinalizeMode::Deterministic).unwrap();
    assert_eq!(sum, a8.output);
}

#[test]
fn a8_refuses_weights_made_for_something_else() {
    let shape = MoeShape::new(256, 128, ExpertWindow::new(4, 0, 2, 2).unwrap()).unwrap();
    let mats = mxfp4_experts(&shape, 2, 4);
    let a16 = sm90(&shape, &mats, ActivationFormat::Bf16);
    assert!(matches!(
        Sm90A8Weights::from_sm90(&shape, &a16),
        Err(RuntimeError::UnsupportedActivations { .. })
    ));
    let mut a8w =
        Sm90A8Weights::from_sm90(&shape, &sm90(&shape, &mats, ActivationFormat::Fp8)).unwrap();
    a8w.w1_codes[3] = 13;
    assert!(matches!(
        a8w.validate(&shape),
        Err(RuntimeError::BadTableCode { what: "A8 W1 table codes", offset: 3, code: 13 })
    ));
    a8w.w1_codes[3] = 1;
    for bad in [f32::INFINITY, 0.0, 3.0] {
        a8w.w2_rows[0] = bad;
        assert!(matches!(
            a8w.validate(&shape),
            Err(RuntimeError::NonFinite { what: "A8 W2 row factors" })
        ));
    }
    a8w.w2_rows[0] = 1.0;
    a8w.validate(&shape).unwrap();
    let other = MoeShape::new(320, 128, ExpertWindow::new(4, 0, 2, 2).unwrap()).unwrap();
    assert!(a8w.fragment_layout(&other).is_err());
    // Outside the matrix: no value.
    assert_eq!(a8w.weight(&shape, true, 0, 256), None);
    assert_eq!(a8w.weight(&shape, false, 2 * 256, 0), None);
    assert!(a8w.weight(&shape, false, 2 * 256 - 1, 127).is_some());
    // MXFP4 given per 16 must repeat each 32-block's code.
    let mut split = sm90(&shape, &mats, ActivationFormat::Fp8);
    split.w2_scales[7] ^= 1;
    assert!(matches!(
        Sm90A8Weights::from_sm90(&shape, &split),
        Err(RuntimeError::SplitMxfp4Scale { what: "W2 scales", offset: 6 })
    ));
    // H must fill whole 64-row tiles (W2's rows): 160 is a valid MXFP4 shape, not an A8 one.
    let narrow = MoeShape::new(160, 128, ExpertWindow::new(4, 0, 2, 2).unwrap()).unwrap();
    let w = sm90(&narrow, &mxfp4_experts(&narrow, 2, 4), ActivationFormat::Fp8);
    assert!(matches!(
        Sm90A8Weights::from_sm90(&narrow, &w),
        Err(RuntimeError::Plan(moegen_dsl::plan::PlanError::Alignment { what: "hidden size", .. }))
    ));
    // Dot products of unequal lengths are refused.
    assert!(wgmma_dot_e4m3(&[0x38; 33], &[0x38; 32]).is_err());
    assert_eq!(wgmma_dot_e4m3(&[0x38; 33], &[0x38; 33]).unwrap(), 33.0);
}

/// The reference's FP8 step against 512 steps an H200 computed (the sample of
/// docs/hopper.md's measurement, shared with moegen-sim's test).
#[test]
fn the_fp8_step_is_what_the_h200_computes() {
    let data: &[u8] = include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/tests/data/h200_wgmma_e4m3_steps.bin"
    ));
    assert_eq!(data.len(), 512 * 73);
    for r in data.chunks_exact(73) {
        let word = |at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
        // scale-d false (byte 64 = 0) ignores the accumulator: a zero one adds no term.
        let acc = if r[64] == 1 { f32::from_bits(word(65)) } else { 0.0 };
        let (x, w) = (r[..32].try_into().unwrap(), r[32..64].try_into().unwrap());
        let got = wgmma_step_e4m3(acc, x, w);
        assert_eq!(
            got.to_bits(),
            word(69),
            "a {:02x?} b {:02x?} acc {acc:e}",
            &r[..32],
            &r[32..64]
        );
    }
}
