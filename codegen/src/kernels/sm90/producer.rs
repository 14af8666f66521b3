//! The producer warpgroup. Per K stage, one elected thread announces the stage's bytes and
//! issues two 1-D bulk copies of the weights — the CTA's N/64 consecutive fragment tiles and
//! their scale tiles at one k block are each one contiguous run (`abi::sm90_weights`) — and,
//! for GEMM2, the TMA load of the T × 64 activation tile. For GEMM1 all 128 threads gather
//! the tile's activation rows (permuted → expanded → token) with 16-byte `cp.async` into the
//! 128B-swizzled tile, zero-filling rows at or past mn_limit.
//!
//! Where an expert's last N block may be partial (N wider than `sm90_n_granule`), the
//! tile count, both copy sizes and the announced bytes are computed per unit from the tiles
//! the block really has: the block never reads the next k block's tiles, the next expert's
//! or past the buffer, and the barrier completes on exactly what arrives. The consumers'
//! fragment tiles past the end keep a previous stage's data; their results are not stored.

use moegen_dsl::ActivationFormat;
use moegen_dsl::GemmKind;
use moegen_dsl::abi::sm90_weights::TILE_ROWS;
use moegen_dsl::abi::{Buffer, Scalar, TensorMap};

use super::Sm90;
use super::layout::{ACT_ROW_BYTES, Sm90Layout};
use super::prologue::{Common, ends_partial};
use crate::kernels::pipeline::{ExpectTx, Producer, Tx};
use crate::kernels::skeleton::{Needs, TokenRow, Unit, token_of_row};
use crate::ptx::instrs::{BulkLoad, Bytes, CpAsync, TmaLoad};
use crate::ptx::ops::CacheOp;
use crate::ptx::{BuildError, Cmp, KernelBuilder, Label, Reg};

/// Bytes of one `cp.async` chunk of an activation row.
const CHUNK: u32 = 16;
/// Chunks per 128-byte activation row.
const CHUNKS_PER_ROW: u32 = ACT_ROW_BYTES / CHUNK;

/// Where one expert's weights and this unit's N block start in global memory, and the
/// bytes each stage of the unit brings.
struct WeightBase {
    values: Reg,
    scales: Reg,
    /// Bytes from one k block's tiles to the next (rows / 64 tiles).
    value_k_stride: Reg,
    scale_k_stride: Reg,
    /// The block's fragment tiles, scale tiles and everything its full barrier receives:
    /// fixed, or for a kernel whose last block may be partial ([`ends_partial`]) computed
    /// from the tiles the block really has.
    value_bytes: Bytes,
    scale_bytes: Bytes,
    tx_bytes: Bytes,
}

/// The expert's fragment and scale tiles for this CTA's N block at k block 0.
fn weight_base(b: &mut KernelBuilder, g: &Sm90, c: &WeightParams, u: &Unit) -> WeightBase {
    let l = &g.l;
    let per_block = l.n / TILE_ROWS as u32;
    let blocks = b.mul_u32(u.n, per_block);
    let (value_bytes, scale_bytes, tx_bytes) = if ends_partial(l) {
        // The expert's rows end inside the last block: copy only its tiles, never the next
        // k block's (or, at the last one, the next expert's or past the buffer).
        let left = b.sub_u32(c.row_tiles, blocks);
        let tiles = b.min_u32(left, per_block);
        let v = b.mul_u32(tiles, l.tile_bytes);
        let s = b.mul_u32(tiles, l.scale_tile_bytes);
        let w = b.add_u32(v, s);
        let tx = match l.kind {
            GemmKind::Gemm1 => w,
            GemmKind::Gemm2 => b.add_u32(w, l.act_bytes()),
        };
        (v.into(), s.into(), tx.into())
    } else {
        (l.value_bytes().into(), l.scale_bytes().into(), l.tx_bytes().into())
    };
    let e_values = b.mul_wide_u32(u.expert, c.expert_value_bytes);
    let v = b.add_u64(c.values, e_values);
    let off = b.mul_wide_u32(blocks, l.tile_bytes);
    let values = b.add_u64(v, off);
    let e_scales = b.mul_wide_u32(u.expert, c.expert_scale_bytes);
    let s = b.add_u64(c.scales, e_scales);
    let off = b.mul_wide_u32(blocks, l.scale_tile_bytes);
    let scales = b.add_u64(s, off);
    WeightBase {
        values,
        scales,
        value_k_stride: c.value_k_stride,
        scale_k_stride: c.scale_k_stride,
        value_bytes,
        scale_bytes,
        tx_bytes,
    }
}

/// Per-kernel weight addressing: the buffers and the per-expert and per-k-block strides.
struct WeightParams {
    values: Reg,
    scales: Reg,
    expert_value_bytes: Reg,
    expert_scale_bytes: Reg,
    value_k_stride: Reg,
    scale_k_stride: Reg,
    /// 64-row tiles of one k block of the expert's matrix.
    row_tiles: Reg,
}

fn weight_params(b: &mut KernelBuilder, l: &Sm90Layout) -> WeightParams {
    let (wv, ws) = match l.kind {
        GemmKind::Gemm1 => (Buffer::W1, Buffer::W1Scales),
        GemmKind::Gemm2 => (Buffer::W2, Buffer::W2Scales),
    };
    let values = b.ld_buffer(wv);
    let scales = b.ld_buffer(ws);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let inter = b.ld_scalar(Scalar::Intermediate);
    // rows × K of one expert's matrix: W1 [2I, H] (ungated: [I, H]), W2 [H, I]; either
    // way 2·I·H or I·H.
    let ih = b.mul_u32(hidden, inter);
    let rows = match l.kind {
        GemmKind::Gemm1 if l.ungated() => inter,
        GemmKind::Gemm1 => b.shl_b32(inter, 1u32),
        GemmKind::Gemm2 => hidden,
    };
    // One scale byte per block of 16 (NVFP4) or 32 (MXFP4) values.
    let block_shift = l.key.format.block().trailing_zeros();
    let plain = (!l.a8).then(|| match l.kind {
        // 2·I·H values: I·H bytes, 2·I·H / block scale bytes.
        GemmKind::Gemm1 if !l.ungated() => (ih, b.shr_u32(ih, block_shift - 1)),
        // I·H values: I·H / 2 bytes, I·H / block scale bytes.
        GemmKind::Gemm1 | GemmKind::Gemm2 => (b.shr_u32(ih, 1u32), b.shr_u32(ih, block_shift)),
    });
    let row_tiles = b.shr_u32(rows, (TILE_ROWS as u32).trailing_zeros());
    let value_k_stride = b.mul_u32(row_tiles, l.tile_bytes);
    let scale_k_stride = b.mul_u32(row_tiles, l.scale_tile_bytes);
    let (expert_value_bytes, expert_scale_bytes) = match plain {
        Some(bytes) => bytes,
        None => {
            // A8: K padded to whole 128-wide stages, k blocks × one k block's tiles.
            let k_dim = match l.kind {
                GemmKind::Gemm1 => hidden,
                GemmKind::Gemm2 => inter,
            };
            let k_pad = b.add_u32(k_dim, l.k_stage - 1);
            let k_blocks = b.shr_u32(k_pad, l.k_stage.trailing_zeros());
            (b.mul_u32(k_blocks, value_k_stride), b.mul_u32(k_blocks, scale_k_stride))
        }
    };
    WeightParams {
        values,
        scales,
        expert_value_bytes,
        expert_scale_bytes,
        value_k_stride,
        scale_k_stride,
        row_tiles,
    }
}

/// The elected thread's part of one stage: acquire, announce, weights (and GEMM2's TMA).
fn issue_stage(
    b: &mut KernelBuilder,
    g: &Sm90,
    c: &Common,
    issuer: &Producer<'_, ExpectTx>,
    kk: Reg,
    w: &WeightBase,
    act: Option<(Reg, Reg)>,
) {
    let full = issuer.commit(b, Tx { bytes: w.tx_bytes, only: None });
    let st = g.smem.stage_base(b, c.smem, issuer.cursor().index);
    if let Some((map, row0)) = act {
        // The activation tile's K coordinate in elements (64 bf16 or 128 E4M3 per stage).
        let k0 = b.shl_b32(kk, g.l.k_stage.trailing_zeros());
        let coords = vec![k0.into(), row0.into()];
        b.push(TmaLoad { dst: st, map, coords, bar: full, multicast: None, cta_group: None });
    }
    for (dst_off, base, stride, bytes) in [
        (g.smem.values, w.values, w.value_k_stride, w.value_bytes),
        (g.smem.scales, w.scales, w.scale_k_stride, w.scale_bytes),
    ] {
        let off = b.mul_wide_u32(kk, stride);
        let src = b.add_u64(base, off);
        let dst = b.add_u32(st, dst_off);
        b.push(BulkLoad { dst, src, bytes, bar: full });
    }
}

/// The producer warpgroup's work. GEMM2: warp 0's elected thread only (the other warps
/// leave). GEMM1: every thread gathers; thread 0 also issues the weights.
pub(super) fn producer_role(b: &mut KernelBuilder, g: &Sm90, c: &Common, end: &Label) {
    let l = &g.l;
    match l.kind {
        GemmKind::Gemm2 => {
            let w0 = b.setp_u32(Cmp::Eq, c.warp, 0u32);
            b.bra_unless(w0, end);
            let one = b.elect();
            b.bra_unless(one, end);
            let wp = weight_params(b, l);
            let map = b.tensor_map_addr(if l.a8 {
                TensorMap::Gemm1HiddenFp8Load
            } else {
                TensorMap::Gemm1HiddenLoad
            });
            let issuer = g.rings.stage.producer(b, &g.rings.issuer, c.smem);
            c.sched.units(b, Needs::ALL, &mut |b, u| {
                let w = weight_base(b, g, &wp, u);
                c.sched.k_loop(b, &mut |b, kk| {
                    issuer.acquire(b);
                    issue_stage(b, g, c, &issuer, kk, &w, Some((map, u.row0)));
                    issuer.advance(b);
                });
            });
        }
        GemmKind::Gemm1 => gather_role(b, g, c),
    }
    b.bra(end);
}

/// GEMM1: the 128 threads gather the tile's rows in T/16 rounds of 16 rows; in each round
/// eight consecutive threads copy one row's eight 16-byte chunks, so every warp instruction
/// reads four whole 128-byte lines. (One thread per row at T 128, each copying its row's
/// chunks one instruction at a time, made every warp instruction touch 32 lines for 16
/// bytes each: GEMM1 was bound by the L2's request rate at large batches, ncu 2026-12-06.)
fn gather_role(b: &mut KernelBuilder, g: &Sm90, c: &Common) {
    let (l, ring) = (&g.l, &g.rings.stage);
    let Some(party) = g.rings.gather else {
        let kernel = b.name.clone();
        return b.error(BuildError::Inconsistent { kernel, what: "gather role without a party" });
    };
    let rows_per_round = Sm90Layout::warpgroup_threads() / CHUNKS_PER_ROW;
    let rounds = l.tile / rows_per_round;
    let row = b.shr_u32(c.tid, CHUNKS_PER_ROW.trailing_zeros());
    let chunk = b.and_b32(c.tid, CHUNKS_PER_ROW - 1);
    let is_issuer = b.setp_u32(Cmp::Eq, c.tid, 0u32);
    let wp = weight_params(b, l);
    let x = b.ld_buffer(match l.key.activations {
        ActivationFormat::Bf16 => Buffer::ActivationsBf16,
        ActivationFormat::Nvfp4 => Buffer::ActivationsDequantized,
        // (No Hopper description takes MXFP8.)
        ActivationFormat::Fp8 | ActivationFormat::Mxfp8 => Buffer::ActivationsFp8,
    });
    let p2e = b.ld_buffer(Buffer::PermutedIdxToExpandedIdx);
    let top_k = b.ld_scalar(Scalar::TopK);
    let hidden = b.ld_scalar(Scalar::Hidden);
    // bf16 rows are 2H bytes; E4M3 rows H rounded up to whole 128-byte stages.
    let row_bytes = if l.a8 {
        let h_pad = b.add_u32(hidden, 127u32);
        b.and_b32(h_pad, !127u32)
    } else {
        b.shl_b32(hidden, 1u32)
    };
    // This thread's chunk within the 128B-swizzled tile: 16-byte chunk j of row r lives at
    // chunk j ^ (r % 8) (the tile is 1024-aligned, so the pattern starts at row 0). The
    // rounds are 16 rows apart, so r % 8 is the same in each.
    let swz = b.and_b32(row, 7u32);
    let sw = b.xor_b32(chunk, swz);
    let dst_row = b.mul_u32(row, ACT_ROW_BYTES);
    let dst_off = b.mad_u32(sw, CHUNK, dst_row);
    let chunk_bytes = b.mul_u32(chunk, CHUNK);
    let chunk_bytes = b.cvt_u64_u32(chunk_bytes);
    let x_chunk = b.add_u64(x, chunk_bytes);
    let gather = ring.producer(b, &party, c.smem);
    // Thread 0 also issues the weights: the elected thread's party, in the same slot.
    let issuer = ring.producer_on(b, &g.rings.issuer, c.smem, gather.cursor());
    c.sched.units(b, Needs::ALL, &mut |b, u| {
        // Per round: this thread's source chunk of the row's k block 0, and the bytes it
        // reads (0 past mn_limit: the chunk is zero-filled).
        let sources: Vec<(Reg, Reg)> = (0..rounds)
            .map(|i| {
                let prow = b.add_u32(u.row0, row);
                let prow = if i > 0 { b.add_u32(prow, i * rows_per_round) } else { prow };
                let TokenRow { token, valid } = token_of_row(b, p2e, top_k, prow, u.mn_limit);
                let off = b.mul_wide_u32(token, row_bytes);
                let src = b.add_u64(x_chunk, off);
                (src, b.selp_u32(CHUNK, 0u32, valid))
            })
            .collect();
        let w = weight_base(b, g, &wp, u);
        c.sched.k_loop(b, &mut |b, kk| {
            gather.acquire(b);
            let skip = b.new_label("skip_weights");
            b.bra_unless(is_issuer, &skip);
            issue_stage(b, g, c, &issuer, kk, &w, None);
            b.label(&skip);
            let st = g.smem.stage_base(b, c.smem, gather.cursor().index);
            let dst = b.add_u32(st, dst_off);
            let koff = b.mul_wide_u32(kk, ACT_ROW_BYTES);
            for (i, &(src, n16)) in sources.iter().enumerate() {
                let src = b.add_u64(src, koff);
                b.push(CpAsync {
                    cache: CacheOp::Cg,
                    dst,
                    dst_offset: i as u32 * rows_per_round * ACT_ROW_BYTES,
                    src,
                    src_offset: 0,
                    bytes: CHUNK,
                    src_bytes: n16,
                });
            }
            gather.commit(b, ());
            gather.advance(b);
        });
    });
}
