//! The routing sort on the GPU, in three launches with no host round trip, for any N:
//!
//! 1. `moe_sort_histogram`: each block counts its 1024 routes per local expert.
//! 2. `moe_sort_offsets` (one block): per-expert totals and tile runs, the tile arrays,
//!    the two counters, −1 on padding rows, and each block's first row per expert
//!    (written over the counts).
//! 3. `moe_sort_scatter`: each route's row = its block's base for the expert + the number of
//!    earlier routes of the block with the same expert.
//!
//! When one block holds every route, `moe_sort_single` (`moe_sort_single.rs`) runs the same
//! three passes in one launch, from the helpers here.
//!
//! Rows within an expert come out in ascending expanded index, the CPU reference's order, so
//! the outputs are identical to `moe_sort` bit for bit. Expert ids outside [0, experts) are
//! treated as non-local and recorded in the error record (`abi::error_record`: the flag, the
//! first such route and its id); non-finite router weights and a token naming one expert at
//! two slots (the first such route, the earlier slot and the id) are recorded the same way.
//! The padding id `abi::ep::NO_ROUTE` (unused slots of an expert-parallel peer block) is a
//! route of no expert, skipped like a non-local one with no error bit, only when the launch's
//! `accept_padding` is 1 (the all-to-all owner's sort); at 0 it is out of range like −1, since
//! a router's `NO_ROUTE` would otherwise drop a route unnoticed. Nothing is written out of
//! bounds.

use moegen_dsl::abi::ep::NO_ROUTE;
use moegen_dsl::abi::error_record::{
    FLAG_DUPLICATE_EXPERT, FLAG_EXPERT_OUT_OF_RANGE, FLAG_NON_FINITE_WEIGHT, FLAG_TILE_OVERFLOW,
    WORD_BAD_EXPERT_ID, WORD_DUPLICATE_EARLIER_SLOT, WORD_DUPLICATE_EXPERT_ID,
    WORD_FIRST_BAD_EXPERT, WORD_FIRST_DUPLICATE_EXPERT, WORD_FIRST_NON_FINITE_WEIGHT, byte_offset,
};
use moegen_dsl::abi::launch::{ROUTES_PER_BLOCK, SORT_OFFSET_THREADS, SORT_THREADS};
use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::abi::{KernelId, SimtFamily, SimtTarget, params};

use crate::ptx::instrs::Shfl;
use crate::ptx::ops::memory::{ld, st};
use crate::ptx::ops::{AtomOp, Memory, ShflMode};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, SReg, Space, Ty};

/// Raises `flag` in the error record's flag word at `flags` where `when` holds: the word
/// holds the flags inverted (`abi::error_record`), so `red.global.and.b32` with `!flag`.
pub(crate) fn raise_flag(b: &mut KernelBuilder, when: Reg, flags: Reg, flag: u32) {
    b.emit_if(
        Guard::when(when),
        Memory::Red(Space::Global, AtomOp::And, Ty::B32),
        vec![Operand::addr(flags), (!flag).into()],
    );
}

/// `red.global.min.u32`: keeps the first offending route of one check.
pub(crate) fn keep_first() -> Memory {
    Memory::Red(Space::Global, AtomOp::Min, Ty::U32)
}

/// The address of word `word` of the error record at `flags`.
pub(crate) fn record_word(b: &mut KernelBuilder, flags: Reg, word: usize) -> Reg {
    b.add_u64(flags, byte_offset(word) as i64)
}

const THREADS: u32 = SORT_THREADS;
const OFFSET_THREADS: u32 = SORT_OFFSET_THREADS;
/// Routes per chunk of the scatter's rank passes: one warp's worth.
const CHUNK: u32 = 32;

/// A builder for the SIMT kernel `family` on `target`, its parameters declared from the ABI.
pub(crate) fn simt_builder(family: SimtFamily, target: SimtTarget) -> KernelBuilder {
    let id = KernelId::Simt { family, target };
    let mut b = KernelBuilder::new(id.name());
    b.declare(params(&id));
    // The kernel after this one, when launched programmatically (the GEMMs), may start its
    // set-up now: it runs `griddepcontrol.wait`, which waits for this whole grid and its
    // writes, before it reads anything. Without the trigger it would launch only as this
    // grid's blocks exit.
    b.pdl_trigger();
    b
}

/// Local expert of route `i` or −1 (also −1 for out-of-range ids, which raise the flag and
/// take part in the first-route minimum); the raw id comes back too. `accept`: the
/// predicate under which the padding id is skipped rather than out of range (`None`: always,
/// the pack's rule for a router's dropped route).
#[allow(clippy::too_many_arguments)]
pub(crate) fn local_expert(
    b: &mut KernelBuilder,
    experts: Reg,
    i: Reg,
    ne: Reg,
    off: Reg,
    l: Reg,
    flags: Reg,
    accept: Option<Reg>,
) -> (Reg, Reg, Reg) {
    let e = load_word(b, experts, i);
    local_expert_of(b, e, i, ne, off, l, flags, accept)
}

/// Word `i` of the u32 array at `base`.
pub(crate) fn load_word(b: &mut KernelBuilder, base: Reg, i: Reg) -> Reg {
    let addr = b.index_addr(base, i, 4);
    b.ld_global(Ty::U32, RegClass::B32, addr)
}

/// [`local_expert`] of the already loaded id `e`: callers that load a route's words first
/// keep the loads in flight together (the checks' reductions to the error record are
/// stores ptxas will not move a later load above).
#[allow(clippy::too_many_arguments)]
pub(crate) fn local_expert_of(
    b: &mut KernelBuilder,
    e: Reg,
    i: Reg,
    ne: Reg,
    off: Reg,
    l: Reg,
    flags: Reg,
    accept: Option<Reg>,
) -> (Reg, Reg, Reg) {
    let (le, bad) = classify_expert(b, e, ne, off, l, accept);
    raise_flag(b, bad, flags, FLAG_EXPERT_OUT_OF_RANGE);
    let first_bad = record_word(b, flags, WORD_FIRST_BAD_EXPERT);
    b.emit_if(Guard::when(bad), keep_first(), vec![Operand::addr(first_bad), i.into()]);
    (le, e, bad)
}

/// Id `e`'s local expert (−1 when not local or out of range) and whether it is out of
/// range, with nothing recorded: passes after the histogram's, which recorded it.
fn classify_expert(
    b: &mut KernelBuilder,
    e: Reg,
    ne: Reg,
    off: Reg,
    l: Reg,
    accept: Option<Reg>,
) -> (Reg, Reg) {
    // Unsigned compare also rejects negative ids, except an accepted padding id (abi::ep),
    // which is a route of no expert: never local (its offset from any window is ≥ 2^31 > L).
    let out = b.setp_u32(Cmp::Ge, e, ne);
    let pad = accepted_padding(b, e, accept);
    let bad = b.and_pred(out, Operand::NotPred(pad));
    let rel = b.sub_u32(e, off);
    let local = b.setp_u32(Cmp::Lt, rel, l);
    let ok = b.and_pred(local, Operand::NotPred(bad));
    (b.selp_u32(rel, Operand::Imm(-1), ok), bad)
}

/// Whether `e` is the all-to-all mode's padding id.
pub(crate) fn is_padding(b: &mut KernelBuilder, e: Reg) -> Reg {
    b.setp_u32(Cmp::Eq, e, NO_ROUTE as u32)
}

/// Whether `e` is the padding id and `accept` (if any) holds.
fn accepted_padding(b: &mut KernelBuilder, e: Reg, accept: Option<Reg>) -> Reg {
    let pad = is_padding(b, e);
    match accept {
        Some(a) => b.and_pred(pad, a),
        None => pad,
    }
}

/// The launch's `accept_padding` scalar as a predicate.
fn accepts_padding(b: &mut KernelBuilder) -> Reg {
    let a = b.ld_scalar(Scalar::AcceptPadding);
    b.setp_u32(Cmp::Ne, a, 0u32)
}

/// Flags route `i` when its router weight is NaN or ±∞ (all exponent bits set).
pub(crate) fn check_weight(b: &mut KernelBuilder, weights: Reg, i: Reg, flags: Reg) {
    let w = load_word(b, weights, i);
    check_weight_bits(b, w, i, flags);
}

/// [`check_weight`] of the already loaded bits `w`.
fn check_weight_bits(b: &mut KernelBuilder, w: Reg, i: Reg, flags: Reg) {
    let exp = b.and_b32(w, 0x7f80_0000u32);
    let bad = b.setp_u32(Cmp::Eq, exp, 0x7f80_0000u32);
    raise_flag(b, bad, flags, FLAG_NON_FINITE_WEIGHT);
    let first = record_word(b, flags, WORD_FIRST_NON_FINITE_WEIGHT);
    b.emit_if(Guard::when(bad), keep_first(), vec![Operand::addr(first), i.into()]);
}

/// The first route of route `i`'s token (`i − i mod top_k`).
fn token_start(b: &mut KernelBuilder, i: Reg, top_k: Reg) -> Reg {
    let slot = b.rem_u32(i, top_k);
    b.sub_u32(i, slot)
}

/// Flags route `i` (expert id `e`) when an earlier slot of its token names the same id: the
/// sort would give that expert the token twice. top_k is small, so each route rereads its
/// token's earlier ids (L1 hits) rather than staging them. `accept` as in [`local_expert`].
pub(crate) fn check_duplicate(
    b: &mut KernelBuilder,
    experts: Reg,
    i: Reg,
    e: Reg,
    top_k: Reg,
    flags: Reg,
    accept: Option<Reg>,
) {
    let dup = duplicate_hit(b, experts, i, e, top_k, accept);
    record_duplicate_hit(b, dup, i, flags);
}

/// Whether route `i` (id `e`) repeats an earlier slot's id of its token (loads only).
fn duplicate_hit(
    b: &mut KernelBuilder,
    experts: Reg,
    i: Reg,
    e: Reg,
    top_k: Reg,
    accept: Option<Reg>,
) -> Reg {
    let start = token_start(b, i, top_k);
    let hits = b.mov_u32(0u32);
    strided(b, start, i, 1, &mut |b, q| {
        let a = b.index_addr(experts, q, 4);
        let other = b.ld_global(Ty::U32, RegClass::B32, a);
        let same = b.setp_u32(Cmp::Eq, other, e);
        let inc = b.selp_u32(1u32, 0u32, same);
        b.inc_u32(hits, inc);
    });
    let hit = b.setp_u32(Cmp::Ne, hits, 0u32);
    // Two accepted padding slots of one token are no duplicate.
    let pad = accepted_padding(b, e, accept);
    b.and_pred(hit, Operand::NotPred(pad))
}

/// Records duplicate route `i` where `dup` holds: the flag and the first-route minimum.
fn record_duplicate_hit(b: &mut KernelBuilder, dup: Reg, i: Reg, flags: Reg) {
    raise_flag(b, dup, flags, FLAG_DUPLICATE_EXPERT);
    let first = record_word(b, flags, WORD_FIRST_DUPLICATE_EXPERT);
    b.emit_if(Guard::when(dup), keep_first(), vec![Operand::addr(first), i.into()]);
}

/// The thread of the first duplicate route (word 4, final once the histogram pass is done)
/// records the earliest slot of its token with the same id, and the id.
pub(crate) fn record_duplicate(
    b: &mut KernelBuilder,
    experts: Reg,
    i: Reg,
    e: Reg,
    top_k: Reg,
    flags: Reg,
) {
    let fa = record_word(b, flags, WORD_FIRST_DUPLICATE_EXPERT);
    let first_dup = b.ld_global(Ty::U32, RegClass::B32, fa);
    record_duplicate_at(b, first_dup, experts, i, e, top_k, flags);
}

/// [`record_duplicate`] with the record's first duplicate route already loaded.
fn record_duplicate_at(
    b: &mut KernelBuilder,
    first_dup: Reg,
    experts: Reg,
    i: Reg,
    e: Reg,
    top_k: Reg,
    flags: Reg,
) {
    let is_first = b.setp_u32(Cmp::Eq, first_dup, i);
    let done = b.new_label("dup_done");
    b.bra_unless(is_first, &done);
    let start = token_start(b, i, top_k);
    let earliest = b.mov_u32(u32::MAX);
    strided(b, start, i, 1, &mut |b, q| {
        let a = b.index_addr(experts, q, 4);
        let other = b.ld_global(Ty::U32, RegClass::B32, a);
        let same = b.setp_u32(Cmp::Eq, other, e);
        let slot = b.sub_u32(q, start);
        let cand = b.selp_u32(slot, u32::MAX, same);
        let m = b.min_u32(earliest, cand);
        b.assign_u32(earliest, m);
    });
    let sa = record_word(b, flags, WORD_DUPLICATE_EARLIER_SLOT);
    b.st_global(Ty::U32, sa, earliest);
    let ia = record_word(b, flags, WORD_DUPLICATE_EXPERT_ID);
    b.st_global(Ty::U32, ia, e);
    b.label(&done);
}

/// The inputs every pass over the routes reads.
pub(crate) struct Routes {
    pub experts: Reg,
    pub routes: Reg,
    pub top_k: Reg,
    pub ne: Reg,
    pub off: Reg,
    pub l: Reg,
    pub flags: Reg,
    pub accept: Reg,
}

pub(crate) fn routes_in(b: &mut KernelBuilder) -> Routes {
    let experts = b.ld_buffer(Buffer::RoutedExperts);
    let routes = b.ld_scalar(Scalar::NumRoutes);
    let top_k = b.ld_scalar(Scalar::TopK);
    let ne = b.ld_scalar(Scalar::NumExperts);
    let off = b.ld_scalar(Scalar::LocalOffset);
    let l = b.ld_scalar(Scalar::LocalExperts);
    let flags = b.ld_buffer(Buffer::ErrorFlags);
    let accept = accepts_padding(b);
    Routes { experts, routes, top_k, ne, off, l, flags, accept }
}

/// `body(j, i, inside)` for the block's routes: j = tid + r · THREADS (unrolled over r), its
/// route i = first + j and whether i < routes.
pub(crate) fn block_routes(
    b: &mut KernelBuilder,
    tid: Reg,
    first: Reg,
    routes: Reg,
    body: &mut dyn FnMut(&mut KernelBuilder, Reg, Reg, Reg),
) {
    for r in 0..ROUTES_PER_BLOCK / THREADS {
        let j = b.add_u32(tid, r * THREADS);
        let i = b.add_u32(first, j);
        let inside = b.setp_u32(Cmp::Lt, i, routes);
        body(b, j, i, inside);
    }
}

/// The histogram's work for the block's routes from `first`: the error checks (router
/// weight, expert id, duplicate slot) and one count per route for its local expert in
/// `hist` (shared, zeroed and synchronized before).
pub(crate) fn count_routes(
    b: &mut KernelBuilder,
    r: &Routes,
    weights: Reg,
    tid: Reg,
    first: Reg,
    hist: Reg,
) {
    // Every load of every route of the thread before the first reduction to the error
    // record: ptxas will not move a load above those stores, so loads issued route by route
    // between them waited one after another (three waits a route).
    let mut routes = Vec::new();
    block_routes(b, tid, first, r.routes, &mut |b, _, i, inside| {
        let (w, e) = (b.mov_u32(0u32), b.mov_u32(0u32));
        for (v, base) in [(w, weights), (e, r.experts)] {
            let a = b.index_addr(base, i, 4);
            b.emit_if(
                Guard::when(inside),
                ld(Space::Global, Ty::U32),
                vec![v.into(), Operand::addr(a)],
            );
        }
        routes.push((i, w, e));
    });
    let dups: Vec<Reg> = routes
        .iter()
        .map(|&(i, _, e)| {
            // Recomputed, not kept: a predicate per route live across the passes ran ptxas
            // out of predicate registers (spills).
            let inside = b.setp_u32(Cmp::Lt, i, r.routes);
            // As a word: a route past the end has no token to read.
            let dup = b.mov_u32(0u32);
            let skip = b.new_label("outside_dup");
            b.bra_unless(inside, &skip);
            let hit = duplicate_hit(b, r.experts, i, e, r.top_k, Some(r.accept));
            let v = b.selp_u32(1u32, 0u32, hit);
            b.assign_u32(dup, v);
            b.label(&skip);
            dup
        })
        .collect();
    for (&(i, w, e), &dup) in routes.iter().zip(&dups) {
        let inside = b.setp_u32(Cmp::Lt, i, r.routes);
        let skip = b.new_label("outside");
        b.bra_unless(inside, &skip);
        let dup = b.setp_u32(Cmp::Ne, dup, 0u32);
        record_duplicate_hit(b, dup, i, r.flags);
        check_weight_bits(b, w, i, r.flags);
        let (le, _, _) = local_expert_of(b, e, i, r.ne, r.off, r.l, r.flags, Some(r.accept));
        let none = b.setp_s32(Cmp::Lt, le, 0i32);
        b.bra_if(none, &skip);
        let a = b.mad_u32(le, 4u32, hist);
        let add = Memory::Atom(Space::Shared, AtomOp::Add, Ty::U32);
        b.emit(add, vec![Operand::Sink, Operand::addr(a), 1u32.into()]);
        b.label(&skip);
    }
}

/// Counts per block and local expert.
pub fn build_histogram(target: SimtTarget) -> KernelBuilder {
    let mut b = simt_builder(SimtFamily::MoeSortHistogram, target);
    let r = routes_in(&mut b);
    let weights = b.ld_buffer(Buffer::RouterWeights);
    let counts = b.ld_buffer(Buffer::SortBlockCounts);
    let tid = b.sreg(SReg::TidX);
    let bid = b.sreg(SReg::CtaidX);
    let hist = b.smem_addr(0);
    zero_shared(&mut b, tid, r.l, hist);
    b.bar_sync(0u32);
    let first = b.mul_u32(bid, ROUTES_PER_BLOCK);
    count_routes(&mut b, &r, weights, tid, first, hist);
    b.bar_sync(0u32);
    let row = b.mul_u32(bid, r.l);
    strided(&mut b, tid, r.l, THREADS, &mut |b, e| {
        let a = b.mad_u32(e, 4u32, hist);
        let v = b.ld_shared(Ty::U32, RegClass::B32, a);
        let idx = b.add_u32(row, e);
        let g = b.index_addr(counts, idx, 4);
        b.st_global(Ty::U32, g, v);
    });
    b.ret();
    b
}

/// How many of the shared words `[from, to)` of the array at `base` equal `value`.
pub(crate) fn count_equal(b: &mut KernelBuilder, base: Reg, from: Reg, to: Reg, value: Reg) -> Reg {
    let n = b.mov_u32(0u32);
    strided(b, from, to, 1, &mut |b, q| {
        let qa = b.mad_u32(q, 4u32, base);
        let other = b.ld_shared(Ty::U32, RegClass::B32, qa);
        let same = b.setp_u32(Cmp::Eq, other, value);
        let inc = b.selp_u32(1u32, 0u32, same);
        b.inc_u32(n, inc);
    });
    n
}

/// Zeroes `n` words of shared memory at `at`, the block's threads striding.
pub(crate) fn zero_shared(b: &mut KernelBuilder, tid: Reg, n: Reg, at: Reg) {
    strided(b, tid, n, THREADS, &mut |b, e| {
        let a = b.mad_u32(e, 4u32, at);
        b.st_shared(Ty::U32, a, 0u32);
    });
}

/// `for (v = start; v < end; v += step) body(v)`.
pub(crate) fn strided(
    b: &mut KernelBuilder,
    start: Reg,
    end: Reg,
    step: u32,
    body: &mut dyn FnMut(&mut KernelBuilder, Reg),
) {
    let v = b.mov_u32(start);
    let top = b.new_label("for");
    let done = b.new_label("for_done");
    b.label(&top);
    let stop = b.setp_u32(Cmp::Ge, v, end);
    b.bra_if(stop, &done);
    body(b, v);
    b.inc_u32(v, step);
    b.bra(&top);
    b.label(&done);
}

/// The tile plan's outputs.
pub(crate) struct TilePlan {
    pub t: Reg,
    pub max_tiles: Reg,
    pub tile_e: Reg,
    pub tile_m: Reg,
    pub p2e: Reg,
}

pub(crate) fn tile_plan_in(b: &mut KernelBuilder) -> TilePlan {
    let t = b.ld_scalar(Scalar::TileSize);
    let max_tiles = b.ld_scalar(Scalar::MaxTiles);
    let tile_e = b.ld_buffer(Buffer::TileIdxToExpertIdx);
    let tile_m = b.ld_buffer(Buffer::TileIdxToMnLimit);
    let p2e = b.ld_buffer(Buffer::PermutedIdxToExpandedIdx);
    TilePlan { t, max_tiles, tile_e, tile_m, p2e }
}

/// Warp 0: the exclusive scan of the experts' tile counts from their route counts
/// `totals` (shared) into `starts` (shared, L + 1 words: the last is the live tile count),
/// the two counters and the overflow flag. The warp takes 32 experts at a time, each lane
/// one expert's tile count (one division each, in parallel: a single thread's chain of L
/// divisions was a microsecond of the one-launch sort at L = 32) and a `shfl.sync.up`
/// scan, so the starts are those of the serial sum. The caller synchronizes before reading
/// `starts`.
pub(crate) fn scan_tiles(
    b: &mut KernelBuilder,
    tid: Reg,
    l: Reg,
    p: &TilePlan,
    totals: Reg,
    starts: Reg,
) {
    let not_warp0 = b.setp_u32(Cmp::Ge, tid, 32u32);
    let after_scan = b.new_label("after_scan");
    b.bra_if(not_warp0, &after_scan);
    let run = b.mov_u32(0u32);
    let zero = b.mov_u32(0u32);
    strided(b, zero, l, 32, &mut |b, group| {
        let e = b.add_u32(group, tid);
        let inside = b.setp_u32(Cmp::Lt, e, l);
        let ta = b.mad_u32(e, 4u32, totals);
        let c = b.mov_u32(0u32);
        b.emit_if(
            Guard::when(inside),
            ld(Space::Shared, Ty::U32),
            vec![c.into(), Operand::addr(ta)],
        );
        let c1 = b.add_u32(c, p.t);
        let c1 = b.sub_u32(c1, 1u32);
        let tiles = b.div_u32(c1, p.t);
        // Inclusive scan over the warp: lane i adds lane i − d's sum where it exists.
        let incl = b.mov_u32(tiles);
        for d in [1u32, 2, 4, 8, 16] {
            let other = b.reg(RegClass::B32);
            let valid = b.reg(RegClass::Pred);
            b.push(Shfl {
                mode: ShflMode::Up,
                dst: other,
                in_range: Some(valid),
                src: incl,
                lane: d.into(),
                clamp: 0u32.into(),
                members: Operand::Hex(0xFFFF_FFFF),
            });
            let add = b.selp_u32(other, 0u32, valid);
            b.inc_u32(incl, add);
        }
        let start = b.add_u32(run, incl);
        let start = b.sub_u32(start, tiles);
        let sa = b.mad_u32(e, 4u32, starts);
        b.emit_if(
            Guard::when(inside),
            st(Space::Shared, Ty::U32),
            vec![Operand::addr(sa), start.into()],
        );
        let group_total = b.reg(RegClass::B32);
        b.push(Shfl {
            mode: ShflMode::Idx,
            dst: group_total,
            in_range: None,
            src: incl,
            lane: 31u32.into(),
            clamp: 31u32.into(),
            members: Operand::Hex(0xFFFF_FFFF),
        });
        b.inc_u32(run, group_total);
    });
    let not0 = b.setp_u32(Cmp::Ne, tid, 0u32);
    b.bra_if(not0, &after_scan);
    let live = b.min_u32(run, p.max_tiles);
    let over = b.setp_u32(Cmp::Gt, run, p.max_tiles);
    let fp = b.ld_buffer(Buffer::ErrorFlags);
    raise_flag(b, over, fp, FLAG_TILE_OVERFLOW);
    let np = b.ld_buffer(Buffer::NumNonExitingTiles);
    b.st_global(Ty::U32, np, live);
    let padded = b.mul_u32(live, p.t);
    let pp = b.ld_buffer(Buffer::TotalNumPaddedTokens);
    b.st_global(Ty::U32, pp, padded);
    let la = b.mad_u32(l, 4u32, starts);
    b.st_shared(Ty::U32, la, live);
    b.label(&after_scan);
}

/// Expert `e`'s tiles (expert and row limit), the padding rows of its last tile (−1);
/// returns its first row.
pub(crate) fn expert_tiles(
    b: &mut KernelBuilder,
    e: Reg,
    p: &TilePlan,
    totals: Reg,
    starts: Reg,
) -> Reg {
    let sa = b.mad_u32(e, 4u32, starts);
    let first = b.ld_shared(Ty::U32, RegClass::B32, sa);
    let ta = b.mad_u32(e, 4u32, totals);
    let count = b.ld_shared(Ty::U32, RegClass::B32, ta);
    let c1 = b.add_u32(count, p.t);
    let c1 = b.sub_u32(c1, 1u32);
    let tiles = b.div_u32(c1, p.t);
    let row0 = b.mul_u32(first, p.t);
    let end_row = b.add_u32(row0, count);
    let zero = b.mov_u32(0u32);
    strided(b, zero, tiles, 1, &mut |b, k| {
        let tile = b.add_u32(first, k);
        let ok = b.setp_u32(Cmp::Lt, tile, p.max_tiles);
        let ea = b.index_addr(p.tile_e, tile, 4);
        b.emit_if(Guard::when(ok), st(Space::Global, Ty::U32), vec![Operand::addr(ea), e.into()]);
        let next = b.add_u32(tile, 1u32);
        let lim = b.mul_u32(next, p.t);
        let lim = b.min_u32(lim, end_row);
        let ma = b.index_addr(p.tile_m, tile, 4);
        b.emit_if(Guard::when(ok), st(Space::Global, Ty::U32), vec![Operand::addr(ma), lim.into()]);
    });
    let last_end = b.add_u32(first, tiles);
    let last_end = b.min_u32(last_end, p.max_tiles);
    let last_end = b.mul_u32(last_end, p.t);
    strided(b, end_row, last_end, 1, &mut |b, row| {
        let a = b.index_addr(p.p2e, row, 4);
        b.st_global(Ty::U32, a, Operand::Imm(-1));
    });
    row0
}

/// The tiles past the live ones (expert −1, limit 0) and their rows (−1), `threads`
/// threads striding.
pub(crate) fn idle_tiles(b: &mut KernelBuilder, tid: Reg, live: Reg, p: &TilePlan, threads: u32) {
    let from = b.add_u32(live, tid);
    strided(b, from, p.max_tiles, threads, &mut |b, tile| {
        let ea = b.index_addr(p.tile_e, tile, 4);
        b.st_global(Ty::U32, ea, Operand::Imm(-1));
        let ma = b.index_addr(p.tile_m, tile, 4);
        b.st_global(Ty::U32, ma, 0u32);
        let r0 = b.mul_u32(tile, p.t);
        let r1 = b.add_u32(r0, p.t);
        strided(b, r0, r1, 1, &mut |b, row| {
            let a = b.index_addr(p.p2e, row, 4);
            b.st_global(Ty::U32, a, Operand::Imm(-1));
        });
    });
}

/// Blocks of the histogram whose counts one offsets thread loads before it uses the first:
/// a thread's serial chain of one load per block was most of the pass at many blocks.
const COUNTS_UNROLL: u32 = 8;

/// One block's count in [`block_counts`]: whether the block exists, the count's address and
/// the count (0 past the last block).
#[derive(Clone, Copy)]
struct BlockCount {
    exists: Reg,
    addr: Reg,
    count: Reg,
}

/// `body` over expert `e`'s per-block counts (`counts[blk · L + e]`), `COUNTS_UNROLL`
/// blocks at a time in block order.
fn block_counts(
    b: &mut KernelBuilder,
    counts: Reg,
    nblk: Reg,
    l: Reg,
    e: Reg,
    body: &mut dyn FnMut(&mut KernelBuilder, &[BlockCount]),
) {
    let zero = b.mov_u32(0u32);
    strided(b, zero, nblk, COUNTS_UNROLL, &mut |b, blk0| {
        let counted: Vec<BlockCount> = (0..COUNTS_UNROLL)
            .map(|j| {
                let blk = b.add_u32(blk0, j);
                let ok = b.setp_u32(Cmp::Lt, blk, nblk);
                let idx = b.mad_u32(blk, l, e);
                let a = b.index_addr(counts, idx, 4);
                let v = b.mov_u32(0u32);
                b.emit_if(
                    Guard::when(ok),
                    ld(Space::Global, Ty::U32),
                    vec![v.into(), Operand::addr(a)],
                );
                BlockCount { exists: ok, addr: a, count: v }
            })
            .collect();
        body(b, &counted);
    });
}

/// Totals, tile runs, counters, padding rows and per-block bases; one block.
pub fn build_offsets(target: SimtTarget) -> KernelBuilder {
    let mut b = simt_builder(SimtFamily::MoeSortOffsets, target);
    let nblk = b.ld_scalar(Scalar::SortBlocks);
    let l = b.ld_scalar(Scalar::LocalExperts);
    let p = tile_plan_in(&mut b);
    let counts = b.ld_buffer(Buffer::SortBlockCounts);
    let tid = b.sreg(SReg::TidX);
    // Shared: totals[L] then start_tile[L + 1].
    let totals = b.smem_addr(0);
    let starts_off = b.shl_b32(l, 2u32);
    let starts = b.add_u32(totals, starts_off);
    strided(&mut b, tid, l, OFFSET_THREADS, &mut |b, e| {
        let sum = b.mov_u32(0u32);
        block_counts(b, counts, nblk, l, e, &mut |b, counted| {
            for c in counted {
                b.inc_u32(sum, c.count);
            }
        });
        let a = b.mad_u32(e, 4u32, totals);
        b.st_shared(Ty::U32, a, sum);
    });
    b.bar_sync(0u32);
    scan_tiles(&mut b, tid, l, &p, totals, starts);
    b.bar_sync(0u32);
    let la = b.mad_u32(l, 4u32, starts);
    let live = b.ld_shared(Ty::U32, RegClass::B32, la);
    // Per expert: its tiles, the padding rows of its last tile, and the per-block bases.
    strided(&mut b, tid, l, OFFSET_THREADS, &mut |b, e| {
        let row0 = expert_tiles(b, e, &p, totals, starts);
        let base = b.mov_u32(row0);
        block_counts(b, counts, nblk, l, e, &mut |b, counted| {
            for c in counted {
                let to = vec![Operand::addr(c.addr), base.into()];
                b.emit_if(Guard::when(c.exists), st(Space::Global, Ty::U32), to);
                b.inc_u32(base, c.count);
            }
        });
    });
    idle_tiles(&mut b, tid, live, &p, OFFSET_THREADS);
    b.ret();
    b
}

/// Stages the block's routes from `first` for the rank passes: route `i` at block position
/// `j` puts its local expert, or −1 for a non-local route and past the end, at `local[j]`
/// (shared); the thread of the first out-of-range route and of the first duplicate (final
/// once every route of the launch has been counted) records the id and slot.
pub(crate) fn stage_routes(b: &mut KernelBuilder, r: &Routes, tid: Reg, first: Reg, local: Reg) {
    // The record's two first-route words (final: the histogram's reductions are done) once
    // for all the thread's routes, and every route's id, before any store.
    let fa = record_word(b, r.flags, WORD_FIRST_BAD_EXPERT);
    let first_bad = b.ld_global(Ty::U32, RegClass::B32, fa);
    let da = record_word(b, r.flags, WORD_FIRST_DUPLICATE_EXPERT);
    let first_dup = b.ld_global(Ty::U32, RegClass::B32, da);
    let mut routes = Vec::new();
    block_routes(b, tid, first, r.routes, &mut |b, j, i, inside| {
        let e = b.mov_u32(0u32);
        let a = b.index_addr(r.experts, i, 4);
        b.emit_if(
            Guard::when(inside),
            ld(Space::Global, Ty::U32),
            vec![e.into(), Operand::addr(a)],
        );
        routes.push((j, i, e));
    });
    for (j, i, e) in routes {
        let inside = b.setp_u32(Cmp::Lt, i, r.routes);
        stage_route(b, r, (j, i, inside, e), (first_bad, first_dup), local);
    }
}

/// [`stage_routes`]' work for one route: (block position, route, inside, its id).
fn stage_route(
    b: &mut KernelBuilder,
    r: &Routes,
    (j, i, inside, e): (Reg, Reg, Reg, Reg),
    (first_bad, first_dup): (Reg, Reg),
    local: Reg,
) {
    let le = b.mov_u32(Operand::Imm(-1));
    let skip = b.new_label("skip_load");
    b.bra_unless(inside, &skip);
    let (v, bad) = classify_expert(b, e, r.ne, r.off, r.l, Some(r.accept));
    b.assign_u32(le, v);
    let is_first = b.setp_u32(Cmp::Eq, first_bad, i);
    let record = b.and_pred(is_first, bad);
    let ia = record_word(b, r.flags, WORD_BAD_EXPERT_ID);
    b.emit_if(Guard::when(record), st(Space::Global, Ty::U32), vec![Operand::addr(ia), e.into()]);
    record_duplicate_at(b, first_dup, r.experts, i, e, r.top_k, r.flags);
    b.label(&skip);
    let a = b.mad_u32(j, 4u32, local);
    b.st_shared(Ty::U32, a, le);
}

/// Each route's rank among the block's routes of its expert, into `ranks` (shared), from
/// the staged `local` experts (shared, synchronized before), using `counters` (shared, one
/// zeroed word per local expert). Two cheap passes rather than each route counting every
/// earlier route of the block (that was quadratic: about 30 µs for a full block on an
/// H100, a tenth of a small-batch layer):
///
/// 1. every thread counts the same-expert routes before its route in the route's 32-route
///    chunk (at most 31 shared reads);
/// 2. warp 0 walks the block's chunks in route order and adds to each route the number of
///    same-expert routes in the chunks before it, kept per local expert in `counters`:
///    the chunk's lanes read the expert's count, then each raises it to its own rank + 1
///    (`red.shared.max`: the largest rank of the expert in the chunk wins, whichever lane
///    writes last).
///
/// The ranks are exactly those of the quadratic count. Ends synchronized.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rank_routes(
    b: &mut KernelBuilder,
    tid: Reg,
    first: Reg,
    routes: Reg,
    local: Reg,
    ranks: Reg,
    counters: Reg,
) {
    block_routes(b, tid, first, routes, &mut |b, j, _, inside| {
        let skip = b.new_label("skip_chunk_rank");
        b.bra_unless(inside, &skip);
        let a = b.mad_u32(j, 4u32, local);
        let le = b.ld_shared(Ty::U32, RegClass::B32, a);
        let chunk = b.and_b32(j, !(CHUNK - 1));
        let rank = count_equal(b, local, chunk, j, le);
        let ra = b.mad_u32(j, 4u32, ranks);
        b.st_shared(Ty::U32, ra, rank);
        b.label(&skip);
    });
    b.bar_sync(0u32);
    let warp = b.shr_u32(tid, 5u32);
    let not_warp0 = b.setp_u32(Cmp::Ne, warp, 0u32);
    let after = b.new_label("after_chunks");
    b.bra_if(not_warp0, &after);
    let left = b.sub_u32(routes, first);
    let left = b.min_u32(left, ROUTES_PER_BLOCK);
    let chunks = b.add_u32(left, CHUNK - 1);
    let chunks = b.shr_u32(chunks, CHUNK.trailing_zeros());
    let zero = b.mov_u32(0u32);
    strided(b, zero, chunks, 1, &mut |b, c| {
        let j = b.mad_u32(c, CHUNK, tid);
        let a = b.mad_u32(j, 4u32, local);
        let le = b.ld_shared(Ty::U32, RegClass::B32, a);
        let has = b.setp_s32(Cmp::Ge, le, 0i32);
        let ca = b.mad_u32(le, 4u32, counters);
        let before = b.mov_u32(0u32);
        b.emit_if(
            Guard::when(has),
            ld(Space::Shared, Ty::U32),
            vec![before.into(), Operand::addr(ca)],
        );
        let ra = b.mad_u32(j, 4u32, ranks);
        let within = b.ld_shared(Ty::U32, RegClass::B32, ra);
        let rank = b.add_u32(before, within);
        // Every lane has read its expert's count before any lane raises it.
        b.bar_warp_sync();
        let next = b.add_u32(rank, 1u32);
        b.emit_if(
            Guard::when(has),
            Memory::Red(Space::Shared, AtomOp::Max, Ty::U32),
            vec![Operand::addr(ca), next.into()],
        );
        b.emit_if(
            Guard::when(has),
            st(Space::Shared, Ty::U32),
            vec![Operand::addr(ra), rank.into()],
        );
        // The next chunk reads the raised counts.
        b.bar_warp_sync();
    });
    b.label(&after);
    b.bar_sync(0u32);
}

/// The permuted row of each of the block's routes: `base(le)` (its expert's first row for
/// this block) + its rank; non-local routes get −1, rows past `max_rows` are not written.
#[allow(clippy::too_many_arguments)]
pub(crate) fn place_routes(
    b: &mut KernelBuilder,
    tid: Reg,
    first: Reg,
    routes: Reg,
    local: Reg,
    ranks: Reg,
    max_rows: Reg,
    base: &mut dyn FnMut(&mut KernelBuilder, Reg) -> Reg,
) {
    let e2p = b.ld_buffer(Buffer::ExpandedIdxToPermutedIdx);
    let p2e = b.ld_buffer(Buffer::PermutedIdxToExpandedIdx);
    block_routes(b, tid, first, routes, &mut |b, j, i, inside| {
        let skip = b.new_label("skip_route");
        b.bra_unless(inside, &skip);
        let a = b.mad_u32(j, 4u32, local);
        let le = b.ld_shared(Ty::U32, RegClass::B32, a);
        let dst = b.index_addr(e2p, i, 4);
        let none = b.setp_s32(Cmp::Lt, le, 0i32);
        b.emit_if(
            Guard::when(none),
            st(Space::Global, Ty::U32),
            vec![Operand::addr(dst), Operand::Imm(-1)],
        );
        b.bra_if(none, &skip);
        let ra = b.mad_u32(j, 4u32, ranks);
        let rank = b.ld_shared(Ty::U32, RegClass::B32, ra);
        let base = base(b, le);
        let row = b.add_u32(base, rank);
        let fits = b.setp_u32(Cmp::Lt, row, max_rows);
        let stored = b.selp_u32(row, Operand::Imm(-1), fits);
        b.st_global(Ty::U32, dst, stored);
        let pa = b.index_addr(p2e, row, 4);
        b.emit_if(Guard::when(fits), st(Space::Global, Ty::U32), vec![Operand::addr(pa), i.into()]);
        b.label(&skip);
    });
}

/// Places every route of a block: stages its local experts, ranks them
/// (`rank_routes`) and writes the rows from the offsets pass's per-block bases.
pub fn build_scatter(target: SimtTarget) -> KernelBuilder {
    let mut b = simt_builder(SimtFamily::MoeSortScatter, target);
    let r = routes_in(&mut b);
    let bases = b.ld_buffer(Buffer::SortBlockCounts);
    let max_rows = b.ld_scalar(Scalar::MaxPermutedRows);
    let tid = b.sreg(SReg::TidX);
    let bid = b.sreg(SReg::CtaidX);
    let first = b.mul_u32(bid, ROUTES_PER_BLOCK);
    // Shared: the block's local experts, their ranks, then one counter per local expert
    // (`abi::launch`: 8 · ROUTES_PER_BLOCK + 4 · L bytes).
    let local = b.smem_addr(0);
    let ranks = b.smem_addr(4 * ROUTES_PER_BLOCK);
    let counters = b.smem_addr(8 * ROUTES_PER_BLOCK);
    zero_shared(&mut b, tid, r.l, counters);
    stage_routes(&mut b, &r, tid, first, local);
    b.bar_sync(0u32);
    rank_routes(&mut b, tid, first, r.routes, local, ranks, counters);
    let l = r.l;
    place_routes(&mut b, tid, first, r.routes, local, ranks, max_rows, &mut |b, le| {
        let idx = b.mad_u32(bid, l, le);
        let ba = b.index_addr(bases, idx, 4);
        b.ld_global(Ty::U32, RegClass::B32, ba)
    });
    b.ret();
    b
}
