//! The expert-parallel all-to-all dispatch pack (mode (b), docs/expert-parallel.md): from a
//! rank's routing, each route's slot in its owner's fixed block of `C` slots, in the
//! routing sort's order (by expert, then by expanded index), with its id, router weight and
//! expanded index; the other slots padding (`abi::ep::NO_ROUTE`, weight 0, index −1); and
//! the routes packed per peer. Nothing is read back on the host: the counts and the padding
//! travel in the all-to-all as data, so the step stays capturable.
//!
//! One block, because a slot depends on every earlier route of the same owner (a grid would
//! need the routing sort's three launches); the pack moves 12 bytes per route, the row
//! copies (`ep_copy`) move the activations with a full grid. Passes:
//!
//! 1. every slot padding, every per-expert counter 0;
//! 2. per route: the routing sort's checks (range, duplicate, weight; the padding id is a
//!    route of no expert) and a per-expert count;
//! 3. thread 0: per peer, the exclusive scan of its experts' counts (each expert's first
//!    slot in its owner's block) and the peer's count; a peer over `C` raises
//!    `FLAG_TILE_OVERFLOW` (a plan for fewer tokens than were run) and its excess routes are
//!    not written;
//! 4. routes in expanded order, `THREADS` at a time: each route's slot is its expert's next
//!    slot plus the earlier routes of the chunk with the same expert.

use moegen_dsl::abi::ep::NO_ROUTE;
use moegen_dsl::abi::error_record::{
    FLAG_TILE_OVERFLOW, WORD_BAD_EXPERT_ID, WORD_FIRST_BAD_EXPERT,
};
use moegen_dsl::abi::launch::EP_PACK_THREADS;
use moegen_dsl::abi::{Buffer, Scalar, SimtFamily, SimtTarget};

use super::moe_sort::{
    check_duplicate, check_weight, count_equal, local_expert, raise_flag, record_duplicate,
    record_word, simt_builder, strided,
};
use crate::ptx::ops::memory::st;
use crate::ptx::ops::{AtomOp, Memory};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, RegClass, SReg, Space, Ty};

const THREADS: u32 = EP_PACK_THREADS;

/// The pack kernel.
pub fn build(target: SimtTarget) -> KernelBuilder {
    let mut b = simt_builder(SimtFamily::EpDispatchPack, target);
    let experts = b.ld_buffer(Buffer::RoutedExperts);
    let weights = b.ld_buffer(Buffer::RouterWeights);
    let routes = b.ld_scalar(Scalar::NumRoutes);
    let top_k = b.ld_scalar(Scalar::TopK);
    let ne = b.ld_scalar(Scalar::NumExperts);
    let l = b.ld_scalar(Scalar::LocalExperts);
    let c = b.ld_scalar(Scalar::PerPeer);
    let send_e = b.ld_buffer(Buffer::EpSendExperts);
    let send_w = b.ld_buffer(Buffer::EpSendWeights);
    let sent = b.ld_buffer(Buffer::EpSentRoutes);
    let counts = b.ld_buffer(Buffer::EpPeerCounts);
    let flags = b.ld_buffer(Buffer::ErrorFlags);
    let tid = b.sreg(SReg::TidX);
    // Shared: the chunk's experts [THREADS], then one counter per expert of the model.
    let stage = b.smem_addr(0);
    let next = b.smem_addr(4 * THREADS);
    let zero = b.mov_u32(0u32);
    let peers = b.div_u32(ne, l);
    let slots = b.mul_u32(peers, c);

    // 1. Padding everywhere (routes overwrite their slots after the barriers below).
    strided(&mut b, tid, slots, THREADS, &mut |b, s| {
        let a = b.index_addr(send_e, s, 4);
        b.st_global(Ty::U32, a, NO_ROUTE as u32);
        let a = b.index_addr(send_w, s, 4);
        b.st_global(Ty::U32, a, 0u32);
        let a = b.index_addr(sent, s, 4);
        b.st_global(Ty::U32, a, Operand::Imm(-1));
    });
    strided(&mut b, tid, ne, THREADS, &mut |b, e| {
        let a = b.mad_u32(e, 4u32, next);
        b.st_shared(Ty::U32, a, 0u32);
    });
    b.bar_sync(0u32);

    // 2. Checks and per-expert counts.
    strided(&mut b, tid, routes, THREADS, &mut |b, i| {
        check_weight(b, weights, i, flags);
        let (e, raw, _) = local_expert(b, experts, i, ne, zero, ne, flags, None);
        check_duplicate(b, experts, i, raw, top_k, flags, None);
        let none = b.setp_s32(Cmp::Lt, e, 0i32);
        let skip = b.new_label("no_count");
        b.bra_if(none, &skip);
        let a = b.mad_u32(e, 4u32, next);
        let add = Memory::Atom(Space::Shared, AtomOp::Add, Ty::U32);
        b.emit(add, vec![Operand::Sink, Operand::addr(a), 1u32.into()]);
        b.label(&skip);
    });
    b.bar_sync(0u32);

    // 3. Per peer: its experts' first slots and its count (G·L is small: one thread).
    let not0 = b.setp_u32(Cmp::Ne, tid, 0u32);
    let scanned = b.new_label("scanned");
    b.bra_if(not0, &scanned);
    strided(&mut b, zero, peers, 1, &mut |b, d| {
        let run = b.mov_u32(0u32);
        let first = b.mul_u32(d, l);
        let end = b.add_u32(first, l);
        strided(b, first, end, 1, &mut |b, e| {
            let a = b.mad_u32(e, 4u32, next);
            let n = b.ld_shared(Ty::U32, RegClass::B32, a);
            b.st_shared(Ty::U32, a, run);
            b.inc_u32(run, n);
        });
        let ca = b.index_addr(counts, d, 4);
        b.st_global(Ty::U32, ca, run);
        let over = b.setp_u32(Cmp::Gt, run, c);
        raise_flag(b, over, flags, FLAG_TILE_OVERFLOW);
    });
    b.label(&scanned);
    b.bar_sync(0u32);

    // 4. Routes in expanded order, a chunk of THREADS at a time (the loop is uniform: every
    // thread reaches every barrier).
    let base = b.mov_u32(0u32);
    let top = b.new_label("chunk");
    let done = b.new_label("chunks_done");
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, base, routes);
    b.bra_if(end, &done);
    let i = b.add_u32(base, tid);
    let inside = b.setp_u32(Cmp::Lt, i, routes);
    let e = b.mov_u32(Operand::Imm(-1));
    let staged = b.new_label("staged");
    b.bra_unless(inside, &staged);
    let (v, raw, bad) = local_expert(&mut b, experts, i, ne, zero, ne, flags, None);
    b.assign_u32(e, v);
    // Every route has taken the minima of pass 2: the first offenders record their ids.
    let fa = record_word(&mut b, flags, WORD_FIRST_BAD_EXPERT);
    let first_bad = b.ld_global(Ty::U32, RegClass::B32, fa);
    let is_first = b.setp_u32(Cmp::Eq, first_bad, i);
    let record = b.and_pred(is_first, bad);
    let ia = record_word(&mut b, flags, WORD_BAD_EXPERT_ID);
    b.emit_if(Guard::when(record), st(Space::Global, Ty::U32), vec![Operand::addr(ia), raw.into()]);
    record_duplicate(&mut b, experts, i, raw, top_k, flags);
    b.label(&staged);
    let sa = b.mad_u32(tid, 4u32, stage);
    b.st_shared(Ty::U32, sa, e);
    b.bar_sync(0u32);
    let none = b.setp_s32(Cmp::Lt, e, 0i32);
    let placed = b.new_label("placed");
    b.bra_if(none, &placed);
    let rank = count_equal(&mut b, stage, zero, tid, e);
    let na = b.mad_u32(e, 4u32, next);
    let first = b.ld_shared(Ty::U32, RegClass::B32, na);
    let pos = b.add_u32(first, rank);
    let fits = b.setp_u32(Cmp::Lt, pos, c);
    b.bra_unless(fits, &placed);
    let d = b.div_u32(e, l);
    let slot = b.mad_u32(d, c, pos);
    let a = b.index_addr(send_e, slot, 4);
    b.st_global(Ty::U32, a, e);
    let wa = b.index_addr(weights, i, 4);
    let w = b.ld_global(Ty::U32, RegClass::B32, wa);
    let a = b.index_addr(send_w, slot, 4);
    b.st_global(Ty::U32, a, w);
    let a = b.index_addr(sent, slot, 4);
    b.st_global(Ty::U32, a, i);
    b.label(&placed);
    // Every route of the chunk has read its expert's next slot before any advances it.
    b.bar_sync(0u32);
    let skip = b.new_label("no_advance");
    b.bra_if(none, &skip);
    let add = Memory::Atom(Space::Shared, AtomOp::Add, Ty::U32);
    b.emit(add, vec![Operand::Sink, Operand::addr(na), 1u32.into()]);
    b.label(&skip);
    b.inc_u32(base, THREADS);
    b.bra(&top);
    b.label(&done);
    b.ret();
    b
}
