//! SM100 set-up every role runs before its body: the skeleton's thread coordinates and
//! barrier initialization, this CTA's place in its cluster, TMEM allocation (by the MMA
//! warp, published to the others through the address slot), then the skeleton's schedule.

use moegen_dsl::GemmKind;
use moegen_dsl::resources::CTA_ROWS;

use super::Sm100;
use crate::kernels::skeleton::{
    self, ClusterPlace, KTail, NBlocks, ProblemShape, Threads, TileScheduler, init_barriers,
    threads,
};
use crate::ptx::instrs::Tcgen05Alloc;
use crate::ptx::ops::Tcgen05;
use crate::ptx::{Cmp, KernelBuilder, Reg, RegClass, SReg, Ty};

/// What every SM100 role reads.
pub(super) type Common = skeleton::Common<Place>;

/// This CTA's place in its cluster and its TMEM.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    pub m_rank: Reg,
    pub n_rank: Reg,
    /// The rank of this CTA's pair leader.
    pub leader_rank: Reg,
    /// TMEM base address of the allocation.
    pub tmem: Reg,
}

/// Barrier initialization, TMEM allocation and the values every role reads.
pub(super) fn prologue(b: &mut KernelBuilder, g: &Sm100) -> Common {
    let l = &g.l;
    let t @ Threads { tid, warp, lane } = threads(b);
    let rank = b.sreg(SReg::ClusterCtarank);
    let m_rank = b.rem_u32(rank, l.cm);
    let n_rank = b.div_u32(rank, l.cm);
    let leader_rank = b.sub_u32(rank, m_rank);
    let cluster_id = b.sreg(SReg::ClusteridX);
    let clusters = b.sreg(SReg::NclusteridX);
    let smem = b.smem_addr(0);
    init_barriers(b, &t, |b| g.rings.init(b, smem));

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

    let shape = ProblemShape {
        kind: l.kind,
        // ReLU²'s GEMM1: N = I.
        ungated: l.kind == GemmKind::Gemm1 && !l.key.activation.gated(),
        k_stage: l.operands.k_stage(),
        n_blocks: NBlocks::RoundUp { n: l.n, cn: l.cn },
        k_tail: KTail::Split,
    };
    let place = ClusterPlace { cn: l.cn, n_rank, m_rank, cta_rows: CTA_ROWS };
    let sched = TileScheduler::load(b, &shape, cluster_id, clusters, l.tile, Some(place));
    let target = Place { m_rank, n_rank, leader_rank, tmem };
    Common { tid, warp, lane, smem, sched, target }
}
