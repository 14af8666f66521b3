//! GEMM2's epilogue (the MoE finalize): element (output column, token) of the accumulators
//! becomes `bf16_rn(acc ·rn (α2[expert] ·rn router_weight[route]))` — with a bias
//! `bf16_rn(fma.rn(acc, α2, bias[expert][column]) ·rn router_weight)` — in the consumer's
//! staging tile [T tokens][its weight rows] bf16; then thread t < T bulk-reduce-adds token
//! t's staged row (the consumer's 64 or 128 output columns, contiguous) into
//! `out[token]`, or — deterministic — bulk-copies it into the route's scratch row. Padding
//! tokens (row ≥ mn_limit) are neither read nor written, nor are output columns ≥ H in an
//! expert's partial last N block.

use moegen_dsl::FinalizeMode;
use moegen_dsl::abi::sm90_weights::TILE_ROWS;
use moegen_dsl::abi::{Buffer, Scalar};

use super::Sm90;
use super::accum::elements;
use super::columns::{ColumnLoads, ColumnParams, ColumnReader, column_params, store_columns};
use super::epilogue_a8::{A8Params, a8_params, a8_unit};
use super::epilogue_swiglu::consumer_barrier;
use super::mainloop::Consumer;
use super::prologue::{Common, ends_partial};
use crate::kernels::epilogue_math::gemm2_value;
use crate::kernels::skeleton::Unit;
use crate::ptx::instrs::{BulkStore, BulkWait};
use crate::ptx::ops::memory::st;
use crate::ptx::ops::{Bulk, Cvt};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, Rnd, Space, Ty};

/// Per-consumer values the epilogue reads every unit.
pub(super) struct FinalizeParams {
    alpha: Reg,
    out: Reg,
    top_k: Reg,
    /// Bytes per output row: H · 2.
    row_bytes: Reg,
    /// This thread's staging slot of (token col0, row r0) at n8 block 0, block 0.
    slot: Reg,
    /// Token t's staged row (thread t < T issues its bulk operation).
    own_row: Reg,
    issuer: Reg,
    /// H, where the unit's last N block may be partial (rows past it are not stored).
    hidden: Option<Reg>,
    /// The A8 factors' buffers.
    a8: Option<A8Params>,
    /// GEMM2's bias, f32 [L, H] (kernels with a bias), and H.
    bias: Option<(Reg, Reg)>,
    /// The consumer's column table (router weights, A8 scales).
    pub columns: Option<ColumnParams>,
}

/// Bytes of one staged token row.
fn staged_row_bytes(g: &Sm90) -> u32 {
    g.l.rows_per_consumer * 2
}

/// Loads parameters and places this thread's staging slots.
pub(super) fn finalize_params(
    b: &mut KernelBuilder,
    g: &Sm90,
    c: &Common,
    k: &Consumer,
) -> FinalizeParams {
    let alpha = b.ld_buffer(Buffer::Alpha2);
    let out = b.ld_buffer(match g.l.key.finalize {
        FinalizeMode::BulkReduceAdd => Buffer::Output,
        FinalizeMode::Deterministic => Buffer::FinalizeScratch,
    });
    let top_k = b.ld_scalar(Scalar::TopK);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let row_bytes = b.shl_b32(hidden, 1u32);
    let base = b.mad_u32(k.ci, g.smem.staging_stride, g.smem.staging.offset);
    let stg = b.add_u32(c.smem, base);
    let at = b.mad_u32(k.col0, staged_row_bytes(g), stg);
    let slot = b.mad_u32(k.r0, 2u32, at);
    let own_row = b.mad_u32(k.t, staged_row_bytes(g), stg);
    let issuer = b.setp_u32(Cmp::Lt, k.t, g.l.tile);
    let bias = g.l.key.bias.then(|| (b.ld_buffer(Buffer::Gemm2Bias), hidden));
    let hidden = ends_partial(&g.l).then_some(hidden);
    let a8 = a8_params(b, g);
    let columns = column_params(b, g, c.smem, k, c.target);
    FinalizeParams {
        alpha,
        out,
        top_k,
        row_bytes,
        slot,
        own_row,
        issuer,
        hidden,
        a8,
        bias,
        columns,
    }
}

/// The epilogue of one unit; `loads` are its columns' values, loaded before the K loop.
pub(super) fn epilogue_finalize(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    p: &FinalizeParams,
    u: &Unit,
    acc: &[Vec<Reg>],
    loads: Option<&ColumnLoads>,
) {
    let l = &g.l;
    let (Some(cp), Some(loads), Some(route)) =
        (p.columns.as_ref(), loads, loads.and_then(ColumnLoads::route))
    else {
        let kernel = b.name.clone();
        b.error(crate::ptx::BuildError::Inconsistent { kernel, what: "GEMM2 column table" });
        return;
    };
    let al_addr = b.index_addr(p.alpha, u.expert, 4);
    let al = b.ld_global(Ty::F32, RegClass::F32, al_addr);
    let a8 = p.a8.as_ref().map(|a| a8_unit(b, g, k, u, a));
    let bias = p.bias.map(|(base, hidden)| unit_bias(b, g, k, u, acc.len(), base, hidden));
    // The previous unit's bulk operations have read the staging tile.
    b.push_if(Guard::when(p.issuer), BulkWait { pending: 0, read: true });
    store_columns(b, g, k, cp, loads);
    consumer_barrier(b, k);
    let reader = ColumnReader::new(b, g, k, cp);
    let row = staged_row_bytes(g);
    for i in 0..l.tile / 8 {
        let tau = a8.as_ref().map(|_| reader.scales(b, i));
        let weights = reader.weights(b, i);
        for v0 in 0..2u32 {
            let w = weights[v0 as usize];
            let scale = b.mul_f32(al, w);
            for (blk, regs) in acc.iter().enumerate() {
                for e in elements(l.tile).filter(|e| e.i == i && e.v0 == v0) {
                    let mut acc = regs[e.index];
                    if let (Some(a), Some(t)) = (&a8, tau) {
                        acc = a.apply(b, acc, blk, e.v1, t[v0 as usize]);
                    }
                    let bias = bias.as_ref().map(|r| r[blk][e.v1 as usize]);
                    let v = gemm2_value(b, acc, al, w, scale, bias);
                    let h = b.cvt(
                        RegClass::B16,
                        Cvt::round(Rnd::Rn, Ty::Bf16, Ty::F32),
                        vec![v.into()],
                    );
                    let col = 64 * blk as u32 + 8 * e.v1;
                    let at = (8 * i + v0) * row + col * 2;
                    b.emit(
                        st(Space::Shared, Ty::B16),
                        vec![Operand::Reg(p.slot).at(i64::from(at)), h.into()],
                    );
                }
            }
        }
    }
    // Generic-proxy writes, read next by the bulk engine (async proxy).
    b.fence_proxy_async();
    consumer_barrier(b, k);
    let prow = b.add_u32(u.row0, k.t);
    let in_tile = b.setp_u32(Cmp::Lt, prow, u.mn_limit);
    let valid = b.and_pred(in_tile, p.issuer);
    let dst_row = match l.key.finalize {
        FinalizeMode::BulkReduceAdd => b.div_u32(route, p.top_k),
        FinalizeMode::Deterministic => route,
    };
    let dst = b.mul_wide_u32(dst_row, p.row_bytes);
    let dst = b.add_u64(p.out, dst);
    let col0 = b.mul_u32(u.n, l.n * 2);
    let col0 = b.mad_u32(k.part, row, col0);
    let col0 = b.cvt_u64_u32(col0);
    let dst = b.add_u64(dst, col0);
    let reduce_add = match l.key.finalize {
        FinalizeMode::BulkReduceAdd => Some(Ty::Bf16),
        FinalizeMode::Deterministic => None,
    };
    let store = BulkStore { dst, src: p.own_row, bytes: row.into(), reduce_add };
    match p.hidden {
        None => b.push_if(Guard::when(valid), store),
        Some(hidden) => partial_store(b, g, k, u, hidden, valid, store),
    }
    b.emit_if(Guard::when(p.issuer), Bulk::CommitGroup, vec![]);
}

/// This thread's GEMM2 bias per m64 block and row offset v1: output column
/// n·N + ci·rows + 64·block + r0 + 8·v1 of the expert's row, clamped to H − 1 (columns past
/// H, in an expert's partial last N block, are never stored).
fn unit_bias(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    u: &Unit,
    blocks: usize,
    base: Reg,
    hidden: Reg,
) -> Vec<[Reg; 2]> {
    let first = b.mul_u32(u.n, g.l.n);
    let first = b.mad_u32(k.part, g.l.rows_per_consumer, first);
    let first = b.add_u32(first, k.r0);
    let last = b.sub_u32(hidden, 1u32);
    let row = b.mul_u32(u.expert, hidden);
    (0..blocks as u32)
        .map(|blk| {
            [0u32, 8].map(|dv| {
                let col = b.add_u32(first, 64 * blk + dv);
                let col = b.min_u32(col, last);
                let i = b.add_u32(row, col);
                let a = b.index_addr(base, i, 4);
                b.ld_global(Ty::F32, RegClass::F32, a)
            })
        })
        .collect()
}

/// The bulk store of a kernel whose last N block may be partial: the consumer's rows start
/// at n·N + ci·rows; all of them are stored when they end at or before H, the first 64 (the
/// staged row's first 128 bytes) when H falls in the middle of a 128-row consumer, nothing
/// when they start at or past H (H is a multiple of 64, `sm90_n_granule`).
fn partial_store(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    u: &Unit,
    hidden: Reg,
    valid: Reg,
    store: BulkStore,
) {
    let rows = g.l.rows_per_consumer;
    let first = b.mul_u32(u.n, g.l.n);
    let first = b.mad_u32(k.part, rows, first);
    let end = b.add_u32(first, rows);
    let whole = b.setp_u32(Cmp::Ge, hidden, end);
    let whole = b.and_pred(valid, whole);
    b.push_if(Guard::when(whole), store);
    if rows > TILE_ROWS as u32 {
        let end = b.add_u32(first, TILE_ROWS as u32);
        let half = b.setp_u32(Cmp::Eq, end, hidden);
        let half = b.and_pred(valid, half);
        b.push_if(Guard::when(half), BulkStore { bytes: (TILE_ROWS as u32 * 2).into(), ..store });
    }
}

/// Before the consumer leaves: its last bulk operations have completed.
pub(super) fn finalize_drain(b: &mut KernelBuilder, p: &FinalizeParams) {
    b.push_if(Guard::when(p.issuer), BulkWait { pending: 0, read: false });
}
