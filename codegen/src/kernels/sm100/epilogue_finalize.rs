//! GEMM2's epilogue (the MoE finalize): thread t owns accumulator row t. Per 64 columns
//! (`tcgen05.ld.32x32b.x64`) it scales by α2[expert] · router weight (with a GEMM2 bias:
//! `fma(acc, α2, bias[column]) · router weight`), rounds to bf16 and
//! stages the values in its shared-memory row; after the tile, one bulk reduce-add per row
//! adds the row into the token's output row (the deterministic variant bulk-copies it into
//! the route's row of a `[N·k, H]` scratch instead).
//!
//! The row's destination and scale depend on three dependent global loads (tile limit,
//! permuted → expanded index, router weight) and α2[expert]; they are issued for the next
//! work unit at the start of this one, so they land while this tile is processed and are
//! off the path between the accumulator's arrival and its release.

use moegen_dsl::FinalizeMode;
use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::resources::GEMM2_STAGING_GROUPS;

use super::Sm100;
use super::epilogue::{STEP_COLS, acc_acquire, acc_release, tmem_load, walk};
use super::epilogue_swiglu::load_f32x64;
use super::prologue::Common;
use super::smem::{gemm2_group_bytes, gemm2_row_bytes};
use crate::kernels::epilogue_math::gemm2_value;
use crate::kernels::skeleton::{Needs, Unit};
use crate::ptx::instrs::{BulkStore, BulkWait};
use crate::ptx::ops::memory::ld;
use crate::ptx::ops::{Access, Alu, Bulk, LdRepeat, Memory, Tcgen05};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

/// What the epilogue needs about its row of a work unit.
#[derive(Clone, Copy)]
struct RowInfo {
    /// The output (or scratch) row's address for this unit's N block.
    dst: Reg,
    /// Bytes of the row in this N block: N·2, less in a last block of H not a multiple of N.
    bytes: Reg,
    /// α2[expert] · router weight.
    scale: Reg,
    /// Whether the row is valid (below the tile's mn_limit, and the unit is live).
    valid: Reg,
    /// With a GEMM2 bias: α2[expert], the router weight and the address of the expert's
    /// bias at this N block's first column.
    bias: Option<BiasInfo>,
}

/// What a row needs for GEMM2's bias: `fma(acc, α2, b) · w` instead of `acc · (α2 · w)`.
#[derive(Clone, Copy)]
struct BiasInfo {
    alpha: Reg,
    weight: Reg,
    row: Reg,
}

/// Issues the loads of `RowInfo` for work unit `u` (which may be past the schedule: then
/// nothing is loaded and the row is invalid).
fn row_info(b: &mut KernelBuilder, g: &Sm100, c: &Common, k: &Params, u: Reg) -> RowInfo {
    let l = &g.l;
    let in_range = b.setp_u32(Cmp::Lt, u, c.sched.total_units);
    let m = b.div_u32(u, c.sched.units_n);
    let live = b.setp_u32(Cmp::Lt, m, c.sched.live_tiles);
    let live = b.and_pred(live, in_range);
    let (limit, expert) = (b.mov_u32(0u32), b.mov_u32(0u32));
    for (dst, table) in [(limit, c.sched.tile_limit), (expert, c.sched.tile_expert)] {
        let a = b.index_addr(table, m, 4);
        b.emit_if(
            Guard::when(live),
            ld(Space::Global, Ty::U32),
            vec![dst.into(), Operand::addr(a)],
        );
    }
    let row = b.mad_u32(m, l.tile, c.tid);
    let row = b.mad_u32(c.target.m_rank, 128u32, row);
    let below = b.setp_u32(Cmp::Lt, row, limit);
    let valid = b.and_pred(below, live);
    let ea = b.index_addr(k.p2e, row, 4);
    let expanded = b.mov_u32(0u32);
    b.emit_if(
        Guard::when(valid),
        ld(Space::Global, Ty::U32),
        vec![expanded.into(), Operand::addr(ea)],
    );
    let wa = b.index_addr(k.weights, expanded, 4);
    let w = b.mov_f32(0f32);
    b.emit_if(Guard::when(valid), ld(Space::Global, Ty::F32), vec![w.into(), Operand::addr(wa)]);
    let aa = b.index_addr(k.alpha, expert, 4);
    let al = b.mov_f32(0f32);
    b.emit_if(Guard::when(live), ld(Space::Global, Ty::F32), vec![al.into(), Operand::addr(aa)]);
    let scale = b.mul_f32(al, w);
    let dst_index = match l.key.finalize {
        FinalizeMode::BulkReduceAdd => b.div_u32(expanded, k.top_k),
        FinalizeMode::Deterministic => expanded,
    };
    let nt = b.rem_u32(u, c.sched.units_n);
    let n = b.mad_u32(nt, l.cn, c.target.n_rank);
    let col_bytes = b.mul_u32(n, l.n * 2);
    // A last block of H not a multiple of N stores its columns below H; a cluster's last
    // group may hold a block wholly past H (an N-tile count not a multiple of the cluster
    // N), which stores nothing.
    let inside = b.setp_u32(Cmp::Lt, col_bytes, k.out_row_bytes);
    let valid = b.and_pred(valid, inside);
    let left = b.sub_u32(k.out_row_bytes, col_bytes);
    let bytes = b.min_u32(left, l.n * 2);
    let bytes = b.selp_u32(bytes, 0u32, inside);
    let dst = b.mul_wide_u32(dst_index, k.out_row_bytes);
    let dst = b.add_u64(k.out, dst);
    let col_bytes = b.cvt_u64_u32(col_bytes);
    let dst = b.add_u64(dst, col_bytes);
    let bias = k.bias.map(|(base, hidden)| {
        // A block past H reads column 0's biases (its values are not stored).
        let first = b.mul_u32(n, l.n);
        let first = b.selp_u32(first, 0u32, inside);
        let i = b.mad_u32(expert, hidden, first);
        BiasInfo { alpha: al, weight: w, row: b.index_addr(base, i, 4) }
    });
    RowInfo { dst, bytes, scale, valid, bias }
}

/// Kernel parameters the epilogue reads.
struct Params {
    alpha: Reg,
    weights: Reg,
    out: Reg,
    p2e: Reg,
    top_k: Reg,
    out_row_bytes: Reg,
    /// GEMM2's bias f32 [L, H] and H (kernels with a bias).
    bias: Option<(Reg, Reg)>,
}

/// `dst ← src` for each register of a row info (the next unit's becoming the current).
fn take(b: &mut KernelBuilder, dst: RowInfo, src: RowInfo) {
    b.emit_to(dst.dst, Alu::Mov(Ty::B64), vec![src.dst.into()]);
    b.emit_to(dst.bytes, Alu::Mov(Ty::U32), vec![src.bytes.into()]);
    b.emit_to(dst.scale, Alu::Mov(Ty::F32), vec![src.scale.into()]);
    b.emit_to(dst.valid, Alu::Mov(Ty::Pred), vec![src.valid.into()]);
    if let (Some(d), Some(s)) = (dst.bias, src.bias) {
        b.emit_to(d.alpha, Alu::Mov(Ty::F32), vec![s.alpha.into()]);
        b.emit_to(d.weight, Alu::Mov(Ty::F32), vec![s.weight.into()]);
        b.emit_to(d.row, Alu::Mov(Ty::B64), vec![s.row.into()]);
    }
}

pub(super) fn epilogue_finalize(b: &mut KernelBuilder, g: &Sm100, c: &Common) {
    let l = &g.l;
    let hidden = b.ld_scalar(Scalar::Hidden);
    let k = Params {
        alpha: b.ld_buffer(Buffer::Alpha2),
        weights: b.ld_buffer(Buffer::RouterWeights),
        out: b.ld_buffer(match l.key.finalize {
            FinalizeMode::BulkReduceAdd => Buffer::Output,
            FinalizeMode::Deterministic => Buffer::FinalizeScratch,
        }),
        p2e: b.ld_buffer(Buffer::PermutedIdxToExpandedIdx),
        top_k: b.ld_scalar(Scalar::TopK),
        out_row_bytes: b.shl_b32(hidden, 1u32),
        bias: l.key.bias.then(|| (b.ld_buffer(Buffer::Gemm2Bias), hidden)),
    };
    let acc = g.rings.acc.consumer(b, &g.rings.parties.epilogue, c.smem);
    // Row t's staging: bank group t % 8, index t / 8 (docs/kernels.md: the eight threads
    // of a 128-bit store phase hit eight different 16-byte bank groups).
    let group = b.and_b32(c.tid, GEMM2_STAGING_GROUPS - 1);
    let index = b.shr_u32(c.tid, GEMM2_STAGING_GROUPS.trailing_zeros());
    let staging = b.add_u32(c.smem, g.smem.epilogue.offset);
    let my_row = b.mad_u32(group, gemm2_group_bytes(l), staging);
    let my_row = b.mad_u32(index, gemm2_row_bytes(l), my_row);
    let first = row_info(b, g, c, &k, c.sched.first);
    let now = RowInfo {
        dst: b.reg(RegClass::B64),
        bytes: b.reg(RegClass::B32),
        scale: b.reg(RegClass::F32),
        valid: b.reg(RegClass::Pred),
        bias: first.bias.map(|_| BiasInfo {
            alpha: b.reg(RegClass::F32),
            weight: b.reg(RegClass::F32),
            row: b.reg(RegClass::B64),
        }),
    };
    take(b, now, first);
    let steps = l.n / STEP_COLS;
    let zero = b.mov_u32(0u32);
    let reduce_add = match l.key.finalize {
        FinalizeMode::BulkReduceAdd => Some(Ty::Bf16),
        FinalizeMode::Deterministic => None,
    };
    c.sched.units(b, Needs::NONE, &mut |b, u: &Unit| {
        let next_u = b.add_u32(u.u, c.sched.stride);
        let next = row_info(b, g, c, &k, next_u);
        // The staging row is free once this thread's previous bulk operation has read it.
        b.push(BulkWait { pending: 0, read: true });
        let scale2 = b.pack_b64(now.scale, now.scale);
        let tile = acc_acquire(b, g, c, &acc);
        let (order, release_after) = walk(b, g, &tile, steps);
        for (p, step) in order.into_iter().enumerate() {
            let at = step.offset(b, tile.taddr, STEP_COLS);
            let v = tmem_load::<64>(b, at, 0, LdRepeat::X64);
            b.emit(Tcgen05::WaitLd, vec![]);
            if p + 1 == release_after {
                acc_release(b, g, c, &acc);
            }
            let mut words = Vec::with_capacity(32);
            match now.bias {
                None => {
                    for pair in v.chunks_exact(2) {
                        if let &[even, odd] = pair {
                            let both = b.pack_b64(even, odd);
                            let both = b.mul_f32x2(both, scale2);
                            let (lo, hi) = b.unpack_f32x2(both);
                            words.push(b.cvt_bf16x2(hi, lo));
                        }
                    }
                }
                Some(bi) => {
                    // The step's 64 biases (the same for every row: broadcast loads); a step
                    // past H reads the block's first ones instead, and its values are not
                    // stored.
                    let at = step.offset_u64(b, bi.row, STEP_COLS * 4);
                    let in_n = step.within(b, zero, STEP_COLS * 2, now.bytes);
                    let at = b.selp_b64(at, bi.row, in_n);
                    let biases = load_f32x64(b, at);
                    let y: Vec<Reg> = v
                        .iter()
                        .zip(&biases)
                        .map(|(&acc, &bias)| {
                            gemm2_value(b, acc, bi.alpha, bi.weight, now.scale, Some(bias))
                        })
                        .collect();
                    for pair in y.chunks_exact(2) {
                        if let &[even, odd] = pair {
                            words.push(b.cvt_bf16x2(odd, even));
                        }
                    }
                }
            }
            // 128 bytes of the row per step.
            let dst = step.offset(b, my_row, STEP_COLS * 2);
            for (q, quad) in (0i64..).zip(words.chunks(4)) {
                b.emit(
                    Memory::St(Access::vector(Space::Shared, VecWidth::V4, Ty::B32)),
                    vec![Operand::Reg(dst).at(16 * q), Operand::regs(quad)],
                );
            }
        }
        acc.advance(b);
        // This thread's row, written through the generic proxy, is read by the bulk copy
        // engine through the async proxy.
        b.fence_proxy_async();
        let store = BulkStore { dst: now.dst, src: my_row, bytes: now.bytes.into(), reduce_add };
        b.push_if(Guard::when(now.valid), store);
        b.emit(Bulk::CommitGroup, vec![]);
        take(b, now, next);
    });
    b.push(BulkWait { pending: 0, read: false });
}
