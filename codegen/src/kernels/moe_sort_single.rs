//! The routing sort in one launch, for a batch whose routes fit one block
//! (`ROUTES_PER_BLOCK`): the histogram, the tile plan and the placement of
//! [`super::moe_sort`]'s three passes, with the counts and bases in shared memory instead
//! of the per-block scratch. At small batches the layer's time is the weight stream plus
//! the launches around it, and the three passes were three launches of a few microseconds
//! each (docs/perf.md, 2026-12-06). The outputs, error record included, are those of the
//! three passes bit for bit.

use moegen_dsl::abi::launch::ROUTES_PER_BLOCK;
use moegen_dsl::abi::{Buffer, Scalar, SimtFamily, SimtTarget};

use super::moe_sort::{
    count_routes, expert_tiles, idle_tiles, place_routes, rank_routes, routes_in, scan_tiles,
    simt_builder, stage_routes, strided, tile_plan_in, zero_shared,
};
use crate::ptx::{KernelBuilder, RegClass, SReg, Ty};

/// Registers per thread the one-launch sort may take (it uses 45: ptxas 13.5, sm_90a).
const SINGLE_MAX_REGS: u32 = 64;

/// Threads of the one block (as each pass of the three-launch sort).
const THREADS: u32 = moegen_dsl::abi::launch::SORT_THREADS;

/// The whole routing sort in one block. Shared memory (`abi::launch`): the staged local
/// experts and their ranks (4 bytes a route each), then per local expert its route count,
/// its first tile (L + 1 words: the last is the live tile count), its rank counter and
/// its first row.
pub fn build_single(target: SimtTarget) -> KernelBuilder {
    let mut b = simt_builder(SimtFamily::MoeSortSingle, target);
    // One block, alone: occupancy is no concern, and with `.reqntid 256` alone ptxas caps
    // the registers at 32 (eight blocks an SM), which spills the histogram's loads of four
    // routes held in flight together.
    b.directives.push(format!(".maxnreg {SINGLE_MAX_REGS}"));
    let r = routes_in(&mut b);
    let weights = b.ld_buffer(Buffer::RouterWeights);
    let p = tile_plan_in(&mut b);
    let max_rows = b.ld_scalar(Scalar::MaxPermutedRows);
    let tid = b.sreg(SReg::TidX);
    let first = b.mov_u32(0u32);
    let local = b.smem_addr(0);
    let ranks = b.smem_addr(4 * ROUTES_PER_BLOCK);
    let totals = b.smem_addr(8 * ROUTES_PER_BLOCK);
    let words = b.shl_b32(r.l, 2u32);
    let starts = b.add_u32(totals, words);
    let counters = b.add_u32(starts, words);
    let counters = b.add_u32(counters, 4u32);
    let bases = b.add_u32(counters, words);
    zero_shared(&mut b, tid, r.l, totals);
    zero_shared(&mut b, tid, r.l, counters);
    b.bar_sync(0u32);
    // The histogram: the error checks and the counts.
    count_routes(&mut b, &r, weights, tid, first, totals);
    // Every route's checks have taken their minimum: staging records the first ones.
    b.bar_sync(0u32);
    stage_routes(&mut b, &r, tid, first, local);
    b.bar_sync(0u32);
    // The tile plan; each expert's first row is its base.
    scan_tiles(&mut b, tid, r.l, &p, totals, starts);
    b.bar_sync(0u32);
    let la = b.mad_u32(r.l, 4u32, starts);
    let live = b.ld_shared(Ty::U32, RegClass::B32, la);
    strided(&mut b, tid, r.l, THREADS, &mut |b, e| {
        let row0 = expert_tiles(b, e, &p, totals, starts);
        let a = b.mad_u32(e, 4u32, bases);
        b.st_shared(Ty::U32, a, row0);
    });
    idle_tiles(&mut b, tid, live, &p, THREADS);
    // Ranks (synchronized on both sides, so the bases are in place), then the rows.
    rank_routes(&mut b, tid, first, r.routes, local, ranks, counters);
    place_routes(&mut b, tid, first, r.routes, local, ranks, max_rows, &mut |b, le| {
        let a = b.mad_u32(le, 4u32, bases);
        b.ld_shared(Ty::U32, RegClass::B32, a)
    });
    b.ret();
    b
}
