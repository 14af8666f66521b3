//! Hopper's A8 activation steps: rows of bf16 → E4M3 with one power-of-two scale per row
//! (`abi::signature::QUANT_FP8_TOKENS`, `QUANT_FP8_ROWS`; docs/hopper.md, "W4A8").
//!
//! One warp per row, grid-stride over rows. Pass 1 takes the row's largest magnitude (each
//! lane over 8-value chunks, then a butterfly); the scale is the least 2^e with
//! amax ≤ 448 · 2^e, found from amax's exponent and mantissa bits (e = E − 8, plus 1 when
//! the mantissa exceeds 1.75's, at least −126), so multiplying by 2^−e is exact and the
//! one rounding is `cvt.rn.satfinite.e4m3x2.f32`. Pass 2 reads the row again (from L2)
//! and writes its E4M3 bytes, then zeros up to the row's padded length (a multiple of 128,
//! what the GEMMs' last K stage reads).

use moegen_dsl::abi::launch::QUANT_FP8_THREADS;
use moegen_dsl::abi::{Buffer, Scalar, SimtFamily, SimtTarget};

use super::e4m3_scale::{e4m3_scale_exponent, e4m3_words, pow2_neg};
use crate::ptx::instrs::Shfl;
use crate::ptx::ops::{Access, Memory, ShflMode};
use crate::ptx::{Cmp, KernelBuilder, Operand, Reg, RegClass, SReg, Space, Ty, VecWidth};

/// Rows one block handles at a time (one per warp).
const WARPS: u32 = QUANT_FP8_THREADS / 32;
/// Values per lane per chunk (16 bytes of bf16).
const CHUNK: u32 = 8;

/// Builds `quant_fp8_tokens` (rows = tokens, K = H, the scale to each local route's
/// permuted row) or `quant_fp8_rows` (rows = the live tiles' permuted rows, K = I).
pub fn build(family: SimtFamily, target: SimtTarget) -> KernelBuilder {
    let mut b = super::moe_sort::simt_builder(family, target);
    let tokens_mode = family == SimtFamily::QuantFp8Tokens;
    let (x, out, scales) = if tokens_mode {
        (
            b.ld_buffer(Buffer::ActivationsBf16),
            b.ld_buffer(Buffer::ActivationsFp8),
            b.ld_buffer(Buffer::ActivationRowScales),
        )
    } else {
        (
            b.ld_buffer(Buffer::Gemm1OutputBf16),
            b.ld_buffer(Buffer::Gemm1OutputFp8),
            b.ld_buffer(Buffer::Gemm1OutputRowScales),
        )
    };
    let (rows, k, e2p, top_k) = if tokens_mode {
        let rows = b.ld_scalar(Scalar::Tokens);
        let k = b.ld_scalar(Scalar::Hidden);
        let e2p = b.ld_buffer(Buffer::ExpandedIdxToPermutedIdx);
        let top_k = b.ld_scalar(Scalar::TopK);
        (rows, k, Some(e2p), Some(top_k))
    } else {
        // The live tiles' rows (the routing sort's output; at most the buffers' rows).
        let total = b.ld_buffer(Buffer::TotalNumPaddedTokens);
        let live = b.ld_global(Ty::U32, RegClass::B32, total);
        let max_rows = b.ld_scalar(Scalar::MaxPermutedRows);
        (b.min_u32(live, max_rows), b.ld_scalar(Scalar::Intermediate), None, None)
    };
    let k_pad = b.add_u32(k, 127u32);
    let k_pad = b.and_b32(k_pad, !127u32);
    let chunks = b.shr_u32(k, CHUNK.trailing_zeros());
    let pad_chunks = b.shr_u32(k_pad, CHUNK.trailing_zeros());
    let in_row_bytes = b.shl_b32(k, 1u32);

    let tid = b.sreg(SReg::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    let bid = b.sreg(SReg::CtaidX);
    let nb = b.sreg(SReg::NctaidX);
    let row = b.mad_u32(bid, WARPS, warp);
    let stride = b.mul_u32(nb, WARPS);

    let top = b.new_label("row");
    let done = b.new_label("done");
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, row, rows);
    b.bra_if(end, &done);
    let src_row = b.mul_wide_u32(row, in_row_bytes);
    let src_row = b.add_u64(x, src_row);
    let dst_row = b.mul_wide_u32(row, k_pad);
    let dst_row = b.add_u64(out, dst_row);

    // Pass 1: the row's largest magnitude (NaN-propagating, as the reference's).
    let amax = b.mov_f32(0f32);
    chunk_loop(&mut b, lane, chunks, "amax", &mut |b, c| {
        for v in load_chunk(b, src_row, c) {
            let a = b.abs_f32(v);
            let m = b.max_nan_f32(amax, a);
            b.assign_f32(amax, m);
        }
    });
    for shift in [16u32, 8, 4, 2, 1] {
        let other = b.reg(RegClass::F32);
        b.push(Shfl {
            mode: ShflMode::Bfly,
            dst: other,
            in_range: None,
            src: amax,
            lane: shift.into(),
            clamp: 31u32.into(),
            members: Operand::Hex(0xFFFF_FFFF),
        });
        let m = b.max_nan_f32(amax, other);
        b.assign_f32(amax, m);
    }

    // e = max(E − 8 + [mantissa > 1.75's], −126) from amax's bits (E = field − 127).
    let e = e4m3_scale_exponent(&mut b, amax);
    // 2^e and 2^−e as f32 bit patterns (both normal for e in [−126, 121]).
    let sbits = b.add_u32(e, 127u32);
    let sbits = b.shl_b32(sbits, 23u32);
    let scale = b.mov_b32(RegClass::F32, sbits);
    let inv = pow2_neg(&mut b, e);

    // Pass 2: x · 2^−e, rounded once to E4M3, 8 bytes per chunk.
    chunk_loop(&mut b, lane, chunks, "quant", &mut |b, c| {
        let v = load_chunk(b, src_row, c);
        let scaled: Vec<Reg> = v.iter().map(|&x| b.mul_f32(x, inv)).collect();
        let words = e4m3_words(b, &scaled);
        let dst = b.index_addr(dst_row, c, CHUNK);
        b.emit(
            Memory::St(Access::vector(Space::Global, VecWidth::V2, Ty::B32)),
            vec![Operand::addr(dst), Operand::regs(&words)],
        );
    });
    // The padded tail: zeros the last K stage multiplies with zero weights.
    let tail = b.add_u32(chunks, lane);
    let zero = b.mov_u32(0u32);
    let t_top = b.new_label("tail");
    let t_done = b.new_label("tail_done");
    b.label(&t_top);
    let t_end = b.setp_u32(Cmp::Ge, tail, pad_chunks);
    b.bra_if(t_end, &t_done);
    let dst = b.index_addr(dst_row, tail, CHUNK);
    b.emit(
        Memory::St(Access::vector(Space::Global, VecWidth::V2, Ty::B32)),
        vec![Operand::addr(dst), Operand::regs(&[zero, zero])],
    );
    b.inc_u32(tail, 32u32);
    b.bra(&t_top);
    b.label(&t_done);

    // The scale: to the row itself, or to the permuted row of each of the token's local
    // routes (lane j < top_k takes slot j; −1: not local).
    match (e2p, top_k) {
        (Some(e2p), Some(top_k)) => {
            let skip = b.new_label("no_route");
            let mine = b.setp_u32(Cmp::Lt, lane, top_k);
            b.bra_unless(mine, &skip);
            let route = b.mad_u32(row, top_k, lane);
            let at = b.index_addr(e2p, route, 4);
            let p = b.ld_global(Ty::S32, RegClass::B32, at);
            let local = b.setp_s32(Cmp::Ge, p, 0u32);
            b.bra_unless(local, &skip);
            let at = b.index_addr(scales, p, 4);
            b.st_global(Ty::F32, at, scale);
            b.label(&skip);
        }
        _ => {
            let skip = b.new_label("not_lane0");
            let first = b.setp_u32(Cmp::Eq, lane, 0u32);
            b.bra_unless(first, &skip);
            let at = b.index_addr(scales, row, 4);
            b.st_global(Ty::F32, at, scale);
            b.label(&skip);
        }
    }
    b.inc_u32(row, stride);
    b.bra(&top);
    b.label(&done);
    b.ret();
    b
}

/// `for c in (lane..count).step_by(32)` around `body(c)`.
fn chunk_loop(
    b: &mut KernelBuilder,
    lane: Reg,
    count: Reg,
    stem: &str,
    body: &mut dyn FnMut(&mut KernelBuilder, Reg),
) {
    let c = b.mov_u32(lane);
    let top = b.new_label(stem);
    let done = b.new_label("chunks_done");
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, c, count);
    b.bra_if(end, &done);
    body(b, c);
    b.inc_u32(c, 32u32);
    b.bra(&top);
    b.label(&done);
}

/// Chunk `c` of a bf16 row (8 values, 16 bytes) as f32 (exact: bf16 is an f32's top half).
fn load_chunk(b: &mut KernelBuilder, row: Reg, c: Reg) -> Vec<Reg> {
    let src = b.index_addr(row, c, 2 * CHUNK);
    let w = b.regs(RegClass::B32, 4);
    b.emit(
        Memory::Ld(Access::vector(Space::Global, VecWidth::V4, Ty::B32)),
        vec![Operand::regs(&w), Operand::addr(src)],
    );
    w.iter()
        .flat_map(|&word| {
            let lo = b.shl_b32(word, 16u32);
            let hi = b.and_b32(word, Operand::Hex(0xFFFF_0000));
            [b.mov_b32(RegClass::F32, lo), b.mov_b32(RegClass::F32, hi)]
        })
        .collect()
}
