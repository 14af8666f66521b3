//! Hopper's A8 activation steps, `quant_fp8_tokens` and `quant_fp8_rows`, run in moegen-sim
//! against the CPU reference's `quantize_fp8_row`: bit-identical E4M3 rows (zero-padded to
//! whole 128-wide stages) and scales, each scale at the rows the GEMMs read it from.

use half::bf16;
use moegen_dsl::abi::{Buffer, KernelId, Scalar, SimtFamily, SimtTarget};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::device_ops::{find_kernel, run};
use moegen_runtime::launch::{Bindings, GridInputs};
use moegen_runtime::reference::quantize_fp8_row;

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

/// Rows of random bf16 with a different magnitude per row, and the edge rows: all zero,
/// a NaN, subnormal bf16, a huge row, exact powers of two at the 448 boundary.
fn rows(n: usize, k: usize, seed: u64) -> Vec<bf16> {
    let mut r = Rng(seed);
    let mut x: Vec<bf16> = (0..n * k)
        .map(|i| {
            let u = (r.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            bf16::from_f32(u * 2f32.powi((i / k) as i32 * 3 - 9))
        })
        .collect();
    let mut set = |row: usize, vals: &[f32]| {
        for (j, v) in vals.iter().enumerate() {
            x[row * k + j] = bf16::from_f32(*v);
        }
    };
    set(0, &vec![0.0; k]);
    set(1, &[1.0, f32::NAN, -2.0]);
    set(2, &vec![1e-39; k]);
    set(3, &[3e38, -1.0, 448.0]);
    set(4, &[448.0, 449.0, -0.0, 1.75 * 2f32.powi(-120)]);
    x
}

#[test]
fn token_rows_quantize_bit_for_bit_and_scales_reach_each_local_route() {
    let (tokens, hidden, top_k) = (9usize, 320usize, 2usize);
    let hp = hidden.next_multiple_of(128);
    let x = rows(tokens, hidden, 5);
    // Route r → permuted row 2r + 1, but odd tokens' slot 1, which is not local (−1).
    let e2p: Vec<i32> = (0..tokens * top_k)
        .map(|r| if (r / top_k) % 2 == 1 && r % top_k == 1 { -1 } else { (2 * r + 1) as i32 })
        .collect();
    let rows_max = 2 * tokens * top_k + 2;

    let (got, scales) = quantize_tokens(&x, (tokens, hidden, top_k), &e2p, rows_max);
    let scale_at = |p: usize| f32::from_le_bytes(scales[4 * p..4 * p + 4].try_into().unwrap());
    for t in 0..tokens {
        let (q, s) = quantize_fp8_row(&x[t * hidden..(t + 1) * hidden], hp);
        assert_eq!(&got[t * hp..(t + 1) * hp], q.as_slice(), "token {t}");
        for slot in 0..top_k {
            let p = e2p[t * top_k + slot];
            if p >= 0 {
                assert_eq!(scale_at(p as usize).to_bits(), s.to_bits(), "token {t} slot {slot}");
            }
        }
    }
    // Rows no local route names keep what was there.
    assert_eq!(scale_at(0).to_bits(), 0x7F7F_7F7F);
}

/// Runs `quant_fp8_tokens` on `x` ([tokens, hidden]) with `top_k` slots a token, route r's
/// permuted row `e2p[r]` and `scale_rows` scale words (filled with 0x7F first); returns the
/// E4M3 rows and the scale words' bytes.
fn quantize_tokens(
    x: &[bf16],
    (tokens, hidden, top_k): (usize, usize, usize),
    e2p: &[i32],
    scale_rows: usize,
) -> (Vec<u8>, Vec<u8>) {
    let hp = hidden.next_multiple_of(128);
    let mut sim = SimBackend::hopper();
    let id = KernelId::Simt { family: SimtFamily::QuantFp8Tokens, target: SimtTarget::Sm90a };
    let k = find_kernel(&id).unwrap();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let d_x = sim.upload_new(&bytes).unwrap();
    let d_out = sim.upload_new(&vec![0xA5u8; tokens * hp]).unwrap();
    let e2p_bytes: Vec<u8> = e2p.iter().flat_map(|v| v.to_le_bytes()).collect();
    let d_e2p = sim.upload_new(&e2p_bytes).unwrap();
    let d_s = sim.upload_new(&vec![0x7Fu8; scale_rows * 4]).unwrap();
    let bind = Bindings::new()
        .buffer(Buffer::ActivationsBf16, d_x)
        .buffer(Buffer::ActivationsFp8, d_out)
        .buffer(Buffer::ExpandedIdxToPermutedIdx, d_e2p)
        .buffer(Buffer::ActivationRowScales, d_s)
        .scalar(Scalar::Tokens, tokens as u64)
        .unwrap()
        .scalar(Scalar::Hidden, hidden as u64)
        .unwrap()
        .scalar(Scalar::TopK, top_k as u64)
        .unwrap();
    let grid = GridInputs { tokens: tokens as u64, hidden: hidden as u64, ..Default::default() };
    run(&mut sim, k, &bind, &grid).unwrap();
    (sim.download(d_out, tokens * hp).unwrap(), sim.download(d_s, scale_rows * 4).unwrap())
}

/// Rows wider than one round of the block's unrolled loads (4 chunks of 8 per thread, 8192
/// values), whose largest magnitude or NaN sits in the second round, at the first round's
/// last chunk, in the last chunk (which the clamped loads past the row repeat), or in the
/// very last value.
#[test]
fn wide_rows_take_their_maximum_from_every_round_of_loads() {
    let (tokens, hidden) = (4usize, 8192usize + 320);
    let hp = hidden.next_multiple_of(128);
    let mut r = Rng(23);
    let mut x: Vec<bf16> = (0..tokens * hidden)
        .map(|_| bf16::from_f32((r.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0))
        .collect();
    x[8200] = bf16::from_f32(-300.0);
    x[hidden + hidden - 1] = bf16::from_f32(f32::NAN);
    x[2 * hidden + 8191] = bf16::from_f32(1000.0);
    x[3 * hidden + hidden - 8] = bf16::from_f32(-5000.0);
    let e2p: Vec<i32> = (0..tokens as i32).collect();
    let (got, scales) = quantize_tokens(&x, (tokens, hidden, 1), &e2p, tokens);
    for t in 0..tokens {
        let (q, s) = quantize_fp8_row(&x[t * hidden..(t + 1) * hidden], hp);
        assert_eq!(&got[t * hp..(t + 1) * hp], q.as_slice(), "token {t}");
        let got_s = f32::from_le_bytes(scales[4 * t..4 * t + 4].try_into().unwrap());
        assert_eq!(got_s.to_bits(), s.to_bits(), "token {t}");
    }
    // The planted values decide their rows' scales (not the ±1 background's 2^−8).
    let scale = |t: usize| f32::from_le_bytes(scales[4 * t..4 * t + 4].try_into().unwrap());
    assert_eq!(scale(0), 1.0);
    assert!(scale(1).is_nan() || scale(1) > 1e30, "the NaN row: {}", scale(1));
    assert_eq!(scale(2), 4.0);
    assert_eq!(scale(3), 16.0);
}

#[test]
fn hidden_rows_quantize_up_to_the_live_rows_only() {
    for blocks in [12u64, 3] {
        hidden_rows_with_blocks(blocks);
    }
}

/// `blocks` blocks (the grid from `permuted_rows`): 3 makes each block walk several rows,
/// reusing its shared words.
fn hidden_rows_with_blocks(blocks: u64) {
    let (max_rows, inter) = (12usize, 192usize);
    let ip = inter.next_multiple_of(128);
    let live = 7usize;
    let h = rows(max_rows, inter, 11);

    let mut sim = SimBackend::hopper();
    let id = KernelId::Simt { family: SimtFamily::QuantFp8Rows, target: SimtTarget::Sm90a };
    let k = find_kernel(&id).unwrap();
    let bytes: Vec<u8> = h.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let d_h = sim.upload_new(&bytes).unwrap();
    let d_out = sim.upload_new(&vec![0xA5u8; max_rows * ip]).unwrap();
    let d_live = sim.upload_new(&(live as i32).to_le_bytes()).unwrap();
    let d_s = sim.upload_new(&vec![0x7Fu8; max_rows * 4]).unwrap();
    let bind = Bindings::new()
        .buffer(Buffer::Gemm1OutputBf16, d_h)
        .buffer(Buffer::Gemm1OutputFp8, d_out)
        .buffer(Buffer::TotalNumPaddedTokens, d_live)
        .buffer(Buffer::Gemm1OutputRowScales, d_s)
        .scalar(Scalar::MaxPermutedRows, max_rows as u64)
        .unwrap()
        .scalar(Scalar::Intermediate, inter as u64)
        .unwrap();
    let grid = GridInputs { permuted_rows: blocks, ..Default::default() };
    run(&mut sim, k, &bind, &grid).unwrap();
    let got = sim.download(d_out, max_rows * ip).unwrap();
    let scales = sim.download(d_s, max_rows * 4).unwrap();
    for r in 0..max_rows {
        let s = f32::from_le_bytes(scales[4 * r..4 * r + 4].try_into().unwrap());
        if r < live {
            let (q, want) = quantize_fp8_row(&h[r * inter..(r + 1) * inter], ip);
            assert_eq!(&got[r * ip..(r + 1) * ip], q.as_slice(), "row {r}, {blocks} blocks");
            assert_eq!(s.to_bits(), want.to_bits(), "row {r}, {blocks} blocks");
        } else {
            assert!(got[r * ip..(r + 1) * ip].iter().all(|&b| b == 0xA5), "row {r} untouched");
            assert_eq!(s.to_bits(), 0x7F7F_7F7F, "row {r} untouched");
        }
    }
}
