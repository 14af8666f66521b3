//! Hopper's A8 activation steps: rows of bf16 → E4M3 with one power-of-two scale per row
//! (`abi::signature::QUANT_FP8_TOKENS`, `QUANT_FP8_ROWS`; docs/hopper.md, "W4A8").
//!
//! One block per row, grid-stride over rows. At small batches a row's passes are the
//! kernel's whole time, and a warp walking a 7168-wide row alone waited on 28 loads one
//! after another per pass (10 µs at 16 tokens, docs/perf.md 2026-12-07): the block's
//! threads split the row instead, each issuing `UNROLL` 16-byte loads before it uses one.
//! Pass 1 takes the row's largest magnitude (per thread, a butterfly per warp, then the
//! warps' values through shared memory); the scale is the least 2^e with amax ≤ 448 · 2^e,
//! found from amax's exponent and mantissa bits (e = E − 8, plus 1 when the mantissa
//! exceeds 1.75's, at least −126), so multiplying by 2^−e is exact and the one rounding is
//! `cvt.rn.satfinite.e4m3x2.f32`. Pass 2 reads the row again (from L2) and writes its E4M3
//! bytes, then zeros up to the row's padded length (a multiple of 128, what the GEMMs' last
//! K stage reads).

use moegen_dsl::abi::launch::QUANT_FP8_THREADS;
use moegen_dsl::abi::{Buffer, Scalar, SimtFamily, SimtTarget};

use super::e4m3_scale::{e4m3_scale_exponent, e4m3_words, pow2_neg};
use super::local_route::local_route;
use crate::ptx::instrs::Shfl;
use crate::ptx::ops::{Access, Memory, ShflMode};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, SReg, Space, Ty, VecWidth};

/// Warps of the block (one row).
const WARPS: u32 = QUANT_FP8_THREADS / 32;
/// Values per thread per chunk (16 bytes of bf16).
const CHUNK: u32 = 8;
/// Chunks a thread loads before it uses the first: one pass over a 7168-wide row (896
/// chunks over 256 threads) is one round of loads.
const UNROLL: u32 = 4;

/// Builds `quant_fp8_tokens` (rows = tokens, K = H, the scale to each local route's
/// permuted row) or `quant_fp8_rows` (rows = the live tiles' permuted rows, K = I).
pub fn build(family: SimtFamily, target: SimtTarget) -> KernelBuilder {
    let mut b = super::moe_sort::simt_builder(family, target);
    let tokens_mode = family == SimtFamily::QuantFp8Tokens;
    // `quant_fp8_tokens` loads its scale pointer only after its wait (below).
    let (x, out, row_scales) = if tokens_mode {
        (b.ld_buffer(Buffer::ActivationsBf16), b.ld_buffer(Buffer::ActivationsFp8), None)
    } else {
        (
            b.ld_buffer(Buffer::Gemm1OutputBf16),
            b.ld_buffer(Buffer::Gemm1OutputFp8),
            Some(b.ld_buffer(Buffer::Gemm1OutputRowScales)),
        )
    };
    let (rows, k) = if tokens_mode {
        (b.ld_scalar(Scalar::Tokens), b.ld_scalar(Scalar::Hidden))
    } else {
        // The live tiles' rows (the routing sort's output; at most the buffers' rows).
        let total = b.ld_buffer(Buffer::TotalNumPaddedTokens);
        let live = b.ld_global(Ty::U32, RegClass::B32, total);
        let max_rows = b.ld_scalar(Scalar::MaxPermutedRows);
        (b.min_u32(live, max_rows), b.ld_scalar(Scalar::Intermediate))
    };
    let k_pad = b.add_u32(k, 127u32);
    let k_pad = b.and_b32(k_pad, !127u32);
    let chunks = b.shr_u32(k, CHUNK.trailing_zeros());
    let pad_chunks = b.shr_u32(k_pad, CHUNK.trailing_zeros());
    let last_chunk = b.sub_u32(chunks, 1u32);
    let in_row_bytes = b.shl_b32(k, 1u32);

    let tid = b.sreg(SReg::TidX);
    let lane = b.and_b32(tid, 31u32);
    let warp = b.shr_u32(tid, 5u32);
    // One word per warp: the warps' largest magnitudes.
    let warp_max = b.smem_addr(0);
    let my_max = b.mad_u32(warp, 4u32, warp_max);
    let row = b.sreg(SReg::CtaidX);
    let stride = b.sreg(SReg::NctaidX);

    let top = b.new_label("row");
    let done = b.new_label("done");
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, row, rows);
    b.bra_if(end, &done);
    let src_row = b.mul_wide_u32(row, in_row_bytes);
    let src_row = b.add_u64(x, src_row);
    let dst_row = b.mul_wide_u32(row, k_pad);
    let dst_row = b.add_u64(out, dst_row);

    // Pass 1: the row's largest magnitude (NaN-propagating, as the reference's). A chunk
    // index past the row reloads the row's last chunk: the maximum is unchanged by it.
    let amax = b.mov_f32(0f32);
    unrolled_chunks(&mut b, tid, chunks, "amax", &mut |b, c| {
        let loaded: Vec<Vec<Reg>> = (0..UNROLL)
            .map(|j| {
                let cj = b.add_u32(c, j * QUANT_FP8_THREADS);
                let cj = b.min_u32(cj, last_chunk);
                load_chunk(b, src_row, cj)
            })
            .collect();
        for v in loaded.into_iter().flatten() {
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
    let lane0 = b.setp_u32(Cmp::Eq, lane, 0u32);
    b.emit_if(
        Guard::when(lane0),
        Memory::St(Access::scalar(Space::Shared, Ty::F32)),
        vec![Operand::addr(my_max), amax.into()],
    );
    b.bar_sync(0u32);
    let amax = b.ld_shared(Ty::F32, RegClass::F32, warp_max);
    for w in 1..WARPS {
        let a = b.add_u32(warp_max, 4 * w);
        let other = b.ld_shared(Ty::F32, RegClass::F32, a);
        let m = b.max_nan_f32(amax, other);
        b.assign_f32(amax, m);
    }
    // Every warp has read the words before the next row's pass 1 writes them.
    b.bar_sync(0u32);

    // e = max(E − 8 + [mantissa > 1.75's], −126) from amax's bits (E = field − 127).
    let e = e4m3_scale_exponent(&mut b, amax);
    // 2^e and 2^−e as f32 bit patterns (both normal for e in [−126, 121]).
    let sbits = b.add_u32(e, 127u32);
    let sbits = b.shl_b32(sbits, 23u32);
    let scale = b.mov_b32(RegClass::F32, sbits);
    let inv = pow2_neg(&mut b, e);

    // Pass 2: x · 2^−e, rounded once to E4M3, 8 bytes per chunk inside the row.
    unrolled_chunks(&mut b, tid, chunks, "quant", &mut |b, c| {
        let loaded: Vec<(Reg, Vec<Reg>)> = (0..UNROLL)
            .map(|j| {
                let cj = b.add_u32(c, j * QUANT_FP8_THREADS);
                let inside = b.setp_u32(Cmp::Lt, cj, chunks);
                let cj = b.min_u32(cj, last_chunk);
                (inside, load_chunk(b, src_row, cj))
            })
            .collect();
        for (j, (inside, v)) in loaded.into_iter().enumerate() {
            let scaled: Vec<Reg> = v.iter().map(|&x| b.mul_f32(x, inv)).collect();
            let words = e4m3_words(b, &scaled);
            let cj = b.add_u32(c, j as u32 * QUANT_FP8_THREADS);
            let dst = b.index_addr(dst_row, cj, CHUNK);
            b.emit_if(
                Guard::when(inside),
                Memory::St(Access::vector(Space::Global, VecWidth::V2, Ty::B32)),
                vec![Operand::addr(dst), Operand::regs(&words)],
            );
        }
    });
    // The padded tail: zeros the last K stage multiplies with zero weights.
    let tail = b.add_u32(chunks, tid);
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
    b.inc_u32(tail, QUANT_FP8_THREADS);
    b.bra(&t_top);
    b.label(&t_done);

    // The scale: to the row itself, or to the permuted row of each of the token's local
    // routes (thread j < top_k takes slot j; −1: not local).
    if let Some(scales) = row_scales {
        let skip = b.new_label("not_thread0");
        let first = b.setp_u32(Cmp::Eq, tid, 0u32);
        b.bra_unless(first, &skip);
        let at = b.index_addr(scales, row, 4);
        b.st_global(Ty::F32, at, scale);
        b.label(&skip);
    } else {
        // The token's row was read and written beside the routing sort (launched
        // programmatically, this kernel reads only the layer's input before here); where its
        // routes went is the sort's output.
        b.pdl_wait();
        let e2p = b.ld_buffer(Buffer::ExpandedIdxToPermutedIdx);
        let scales = b.ld_buffer(Buffer::ActivationRowScales);
        let top_k = b.ld_scalar(Scalar::TopK);
        let skip = b.new_label("no_route");
        let mine = b.setp_u32(Cmp::Lt, tid, top_k);
        b.bra_unless(mine, &skip);
        let p = local_route(&mut b, e2p, row, top_k, tid, &skip).permuted;
        let at = b.index_addr(scales, p, 4);
        b.st_global(Ty::F32, at, scale);
        b.label(&skip);
    }
    b.inc_u32(row, stride);
    b.bra(&top);
    b.label(&done);
    // A block without a row exits only once the sort has, too: the GEMM that waits on this
    // kernel then waits on the sort (docs/kernels.md, "Programmatic launches").
    if tokens_mode {
        b.pdl_wait();
    }
    b.ret();
    b
}

/// `for c in (tid..count).step_by(UNROLL · threads)` around `body(c)`: the body covers
/// chunks `c + j · threads` for `j < UNROLL`.
fn unrolled_chunks(
    b: &mut KernelBuilder,
    tid: Reg,
    count: Reg,
    stem: &str,
    body: &mut dyn FnMut(&mut KernelBuilder, Reg),
) {
    let c = b.mov_u32(tid);
    let top = b.new_label(stem);
    let done = b.new_label("chunks_done");
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, c, count);
    b.bra_if(end, &done);
    body(b, c);
    b.inc_u32(c, UNROLL * QUANT_FP8_THREADS);
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
