//! The Hopper GEMM's one pipeline, the stage ring (`ab_stages` slots): full ← the producer's
//! elected thread (`arrive.expect_tx` of the stage's bulk-copy and TMA bytes) and, for
//! GEMM1, the producer warpgroup's 128 gather threads (`cp.async … arrive.noinc`); empty ←
//! one elected lane per consumer warp, once the wgmmas reading the stage have completed
//! (every consumer's warps when they split each unit; in ping-pong only the warps of the
//! consumer whose unit the stage belongs to).
//! The accumulators live in the consumers' registers, so there is no accumulator ring.

use moegen_dsl::GemmKind;
use moegen_dsl::abi::roles::WARPGROUP_WARPS;

use super::layout::Sm90Layout;
use super::smem::Sm90Smem;
use crate::kernels::pipeline::{Consuming, CpAsyncNoinc, ExpectTx, Local, Pipeline, Producing};

/// The stage ring and the parties declared on it.
#[derive(Clone, Debug)]
pub struct Rings {
    /// Producer → consumers: activation, fragment and scale tiles.
    pub stage: Pipeline,
    /// The producer's elected thread fills stages (weights; GEMM2's activation TMA).
    pub issuer: Producing<ExpectTx>,
    /// GEMM1's gather threads fill stages.
    pub gather: Option<Producing<CpAsyncNoinc>>,
    /// The consumer warps empty stages.
    pub consumer: Consuming<Local>,
}

/// The stage ring of `l`, its barriers where `smem` put them.
pub fn stage_ring(l: &Sm90Layout, smem: &Sm90Smem) -> Rings {
    let mut stage = Pipeline::new("stage ring", l.budget.ab_stages, smem.full, Some(smem.empty));
    let issuer = stage.produced_by("producer's elected thread", ExpectTx);
    let gather = (l.kind == GemmKind::Gemm1).then(|| {
        let threads = Sm90Layout::warpgroup_threads();
        stage.produced_by("gather thread", CpAsyncNoinc { threads })
    });
    let consumer =
        stage.consumed_by("consumer warp", Local { arrivals: WARPGROUP_WARPS * l.parts });
    Rings { stage, issuer, gather, consumer }
}
