//! Hopper set-up every role runs before its body: the skeleton's thread coordinates and
//! barrier initialization, a CTA barrier that publishes it, then the skeleton's schedule
//! (CTA c takes units c, c + #CTAs, …: no clusters).

use moegen_dsl::resources::SM90_K_STAGE;

use super::Sm90;
use crate::kernels::skeleton::{
    self, NBlocks, ProblemShape, Threads, TileScheduler, init_barriers, threads,
};
use crate::ptx::{KernelBuilder, SReg};

/// What every Hopper role reads (nothing beyond the skeleton's).
pub(super) type Common = skeleton::Common<()>;

/// Barrier initialization and the values every role reads.
pub(super) fn prologue(b: &mut KernelBuilder, g: &Sm90) -> Common {
    let l = &g.l;
    let t @ Threads { tid, warp, lane } = threads(b);
    let cta = b.sreg(SReg::CtaidX);
    let ctas = b.sreg(SReg::NctaidX);
    let smem = b.smem_addr(0);
    init_barriers(b, &t, |b| g.rings.stage.init(b, smem));
    b.bar_sync(0u32);

    let shape =
        ProblemShape { kind: l.kind, k_stage: SM90_K_STAGE, n_blocks: NBlocks::Exact { n: l.n } };
    let sched = TileScheduler::load(b, &shape, cta, ctas, l.tile, None);
    Common { tid, warp, lane, smem, sched, target: () }
}
