//! Set-up shared by every role (barrier initialization, TMEM allocation, the PDL hand-off,
//! problem sizes) and the loops every role runs: the static persistent schedule over work
//! units and the K-stage loop.
//!
//! There is no scheduler warp: cluster c takes work units c, c + #clusters, …, a unit being
//! one routing tile × one cluster-wide N block (N fastest), and stops at the first routing
//! tile ≥ `num_non_exiting_tiles`. Each role evaluates this pure function itself; a warp
//! broadcasting it through shared memory would add barriers and nothing else.

use moegen_dsl::GemmKind;
use moegen_dsl::abi::{Buffer, Scalar};

use super::Sm100;
use crate::ptx::instrs::Tcgen05Alloc;
use crate::ptx::ops::{Fence, Tcgen05};
use crate::ptx::{Cmp, KernelBuilder, Reg, RegClass, SReg, Ty};

/// Runtime values every role needs.
pub(super) struct Common {
    pub tid: Reg,
    pub warp: Reg,
    pub lane: Reg,
    pub m_rank: Reg,
    pub n_rank: Reg,
    pub leader_rank: Reg,
    pub cluster_id: Reg,
    pub clusters: Reg,
    pub smem: Reg,
    pub tmem: Reg,
    pub k_tiles: Reg,
    pub units_n: Reg,
    pub total_units: Reg,
    pub live_tiles: Reg,
    pub tile_expert: Reg,
    pub tile_limit: Reg,
}

/// One work unit inside the schedule loop.
pub(super) struct Unit {
    /// The unit's index in the schedule (this cluster's next is `u + clusters`).
    pub u: Reg,
    /// N block (in MMA tiles) of this CTA.
    pub n: Reg,
    /// Expert of the routing tile.
    pub expert: Reg,
    /// Rows of the routing tile below this bound are valid.
    pub mn_limit: Reg,
    /// First permuted row of this CTA.
    pub row0: Reg,
}

/// Barrier initialization, TMEM allocation and the values every role reads.
pub(super) fn prologue(b: &mut KernelBuilder, g: &Sm100) -> Common {
    let l = &g.l;
    let tid = b.sreg(SReg::TidX);
    let warp = b.shr_u32(tid, 5u32);
    let lane = b.and_b32(tid, 31u32);
    let rank = b.sreg(SReg::ClusterCtarank);
    let m_rank = b.rem_u32(rank, l.cm);
    let n_rank = b.div_u32(rank, l.cm);
    let leader_rank = b.sub_u32(rank, m_rank);
    let cluster_id = b.sreg(SReg::ClusteridX);
    let clusters = b.sreg(SReg::NclusteridX);
    let smem = b.smem_addr(0);

    let not0 = b.setp_u32(Cmp::Ne, tid, 0u32);
    let after_init = b.new_label("after_init");
    b.bra_if(not0, &after_init);
    g.rings.init(b, smem);
    b.emit(Fence::MbarrierInit, vec![]);
    b.label(&after_init);

    let not_mma = b.setp_u32(Cmp::Ne, warp, l.mma_warp);
    let after_alloc = b.new_label("after_alloc");
    b.bra_if(not_mma, &after_alloc);
    let slot = b.add_u32(smem, g.tmem_slot());
    let columns = l.budget.tmem_alloc_columns;
    b.push(Tcgen05Alloc { group: l.cta_group(), slot, columns });
    b.emit(Tcgen05::RelinquishAllocPermit(l.cta_group()), vec![]);
    b.label(&after_alloc);
    b.tcgen05_fence_before();
    b.bar_sync(0u32);
    if l.cm * l.cn > 1 {
        b.cluster_sync_relaxed();
    }
    b.tcgen05_fence_after();
    let slot = b.add_u32(smem, g.tmem_slot());
    let tmem = b.ld_shared(Ty::B32, RegClass::B32, slot);

    // PDL: let the next kernel's prologue start, then wait for the previous kernel's output.
    b.pdl_handoff();

    let k_dim = b.ld_scalar(match l.kind {
        GemmKind::Gemm1 => Scalar::Hidden,
        GemmKind::Gemm2 => Scalar::Intermediate,
    });
    let k_tiles = b.shr_u32(k_dim, 8u32);
    let n_dim = match l.kind {
        GemmKind::Gemm1 => {
            let i = b.ld_scalar(Scalar::Intermediate);
            b.shl_b32(i, 1u32)
        }
        GemmKind::Gemm2 => b.ld_scalar(Scalar::Hidden),
    };
    let n_pad = b.add_u32(n_dim, l.n - 1);
    let n_tiles = b.div_u32(n_pad, l.n);
    let units_n = b.div_u32(n_tiles, l.cn);
    let max_tiles = b.ld_scalar(Scalar::MaxTiles);
    let total_units = b.mul_u32(max_tiles, units_n);
    let live_ptr = b.ld_buffer(Buffer::NumNonExitingTiles);
    let live_raw = b.ld_global(Ty::U32, RegClass::B32, live_ptr);
    let live_tiles = b.min_u32(live_raw, max_tiles);
    let tile_expert = b.ld_buffer(Buffer::TileIdxToExpertIdx);
    let tile_limit = b.ld_buffer(Buffer::TileIdxToMnLimit);
    Common {
        tid,
        warp,
        lane,
        m_rank,
        n_rank,
        leader_rank,
        cluster_id,
        clusters,
        smem,
        tmem,
        k_tiles,
        units_n,
        total_units,
        live_tiles,
        tile_expert,
        tile_limit,
    }
}

/// Which per-tile tables a role reads (each a global load per work unit); a role that does
/// not read one sees 0 there.
#[derive(Clone, Copy)]
pub(super) struct Needs {
    /// `tile_idx_to_expert_idx`.
    pub expert: bool,
    /// `tile_idx_to_mn_limit`.
    pub limit: bool,
}

impl Needs {
    /// Neither table.
    pub const NONE: Needs = Needs { expert: false, limit: false };
    /// The expert only.
    pub const EXPERT: Needs = Needs { expert: true, limit: false };
    /// The row limit only.
    pub const LIMIT: Needs = Needs { expert: false, limit: true };
}

/// Emits the static schedule loop around `body`.
pub(super) fn schedule(
    b: &mut KernelBuilder,
    g: &Sm100,
    c: &Common,
    needs: Needs,
    body: &mut dyn FnMut(&mut KernelBuilder, &Unit),
) {
    let l = &g.l;
    let top = b.new_label("unit");
    let done = b.new_label("units_done");
    let zero = b.mov_u32(0u32);
    let u = b.mov_u32(c.cluster_id);
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, u, c.total_units);
    b.bra_if(end, &done);
    let m = b.div_u32(u, c.units_n);
    let dead = b.setp_u32(Cmp::Ge, m, c.live_tiles);
    b.bra_if(dead, &done);
    let nt = b.rem_u32(u, c.units_n);
    let n = b.mad_u32(nt, l.cn, c.n_rank);
    let table = |b: &mut KernelBuilder, needed: bool, base: Reg| {
        if needed {
            let a = b.index_addr(base, m, 4);
            b.ld_global(Ty::U32, RegClass::B32, a)
        } else {
            zero
        }
    };
    let expert = table(b, needs.expert, c.tile_expert);
    let mn_limit = table(b, needs.limit, c.tile_limit);
    let rows = b.mul_u32(m, l.tile);
    let row0 = b.mad_u32(c.m_rank, 128u32, rows);
    body(b, &Unit { u, n, expert, mn_limit, row0 });
    b.inc_u32(u, c.clusters);
    b.bra(&top);
    b.label(&done);
}

/// A runtime K-stage loop `for kk in 0..k_tiles`.
pub(super) fn k_loop(
    b: &mut KernelBuilder,
    c: &Common,
    body: &mut dyn FnMut(&mut KernelBuilder, Reg),
) {
    let top = b.new_label("k");
    let done = b.new_label("k_done");
    let kk = b.mov_u32(0u32);
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, kk, c.k_tiles);
    b.bra_if(end, &done);
    body(b, kk);
    b.inc_u32(kk, 1u32);
    b.bra(&top);
    b.label(&done);
}
