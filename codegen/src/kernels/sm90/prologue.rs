//! Hopper set-up every role runs before its body: the skeleton's thread coordinates and
//! barrier initialization, a CTA barrier that publishes it (a cluster barrier too when the
//! cluster splits K: ranks 1.. arrive on rank 0's full barrier, rank 0 on their empty
//! ones), then the skeleton's
//! schedule (CTA c takes units c, c + #CTAs, …; with split K, cluster c takes them and each
//! rank its stages of K).

use moegen_dsl::sm90_n_granule;

use super::Sm90;
use super::layout::Sm90Layout;
use crate::kernels::skeleton::{
    self, KTail, NBlocks, ProblemShape, Threads, TileScheduler, init_barriers, threads,
};
use crate::ptx::{KernelBuilder, Reg, SReg};

/// What every Hopper role reads beyond the skeleton's: this CTA's rank in a split-K
/// cluster (`None` without a split).
pub(super) type Common = skeleton::Common<Option<Reg>>;

/// Whether an expert's last N block may be partial: N is wider than the granule the
/// applicability guard makes divide the dimension (`sm90_n_granule`). The producer then
/// copies only the tiles that exist and the epilogues store nothing past the dimension;
/// narrower kernels stay as they were.
pub(super) fn ends_partial(l: &Sm90Layout) -> bool {
    l.n > sm90_n_granule(l.kind)
}

/// Barrier initialization and the values every role reads.
pub(super) fn prologue(b: &mut KernelBuilder, g: &Sm90) -> Common {
    let l = &g.l;
    let t @ Threads { tid, warp, lane } = threads(b);
    let split = l.split_k > 1;
    let (first, stride) = if split {
        (b.sreg(SReg::ClusteridX), b.sreg(SReg::NclusteridX))
    } else {
        (b.sreg(SReg::CtaidX), b.sreg(SReg::NctaidX))
    };
    let smem = b.smem_addr(0);
    init_barriers(b, &t, |b| {
        g.rings.stage.init(b, smem);
        if let Some(turns) = g.smem.turns {
            super::pingpong::init_turns(b, smem, turns, l.consumers);
        }
        if let Some(s) = g.smem.split {
            super::split_k::init(b, l, smem, &s);
        }
    });
    b.bar_sync(0u32);
    if split {
        // Every rank's barriers must be initialized before another rank arrives on them
        // (the initialization's fence released them to the cluster).
        b.cluster_sync_relaxed();
    }

    let n_blocks =
        if ends_partial(l) { NBlocks::Ceil { n: l.n } } else { NBlocks::Exact { n: l.n } };
    let shape = ProblemShape {
        kind: l.kind,
        ungated: l.ungated(),
        k_stage: l.k_stage,
        k_tail: if l.a8 { KTail::Padded } else { KTail::None },
        n_blocks,
    };
    let sched = TileScheduler::load(b, &shape, first, stride, l.tile, None);
    let (sched, rank) = if split {
        let rank = b.sreg(SReg::ClusterCtarank);
        (sched.split_k(b, rank, l.split_k), Some(rank))
    } else {
        (sched, None)
    };
    Common { tid, warp, lane, smem, sched, target: rank }
}
