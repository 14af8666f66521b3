//! The Hopper GEMM's one pipeline, the stage ring (`ab_stages` slots): full ← the producer's
//! elected thread (`arrive.expect_tx` of the stage's bulk-copy and TMA bytes) and, for
//! GEMM1, the producer warpgroup's 128 gather threads (`cp.async … arrive.noinc`); empty ←
//! one elected lane per consumer warp, once the wgmmas reading the stage have completed.
//! The accumulators live in the consumers' registers, so there is no accumulator ring.

use moegen_dsl::GemmKind;

use super::layout::Sm90Layout;
use super::smem::Sm90Smem;
use crate::kernels::pipeline::{Arrival, Party, Pipeline};
use moegen_dsl::abi::roles::WARPGROUP_WARPS;

/// The stage ring of `l`, its barriers where `smem` put them.
pub fn stage_ring(l: &Sm90Layout, smem: &Sm90Smem) -> Pipeline {
    let mut producers =
        vec![Party { role: "producer's elected thread", arrival: Arrival::ExpectTx }];
    if l.kind == GemmKind::Gemm1 {
        producers.push(Party {
            role: "gather thread",
            arrival: Arrival::CpAsyncNoinc { threads: Sm90Layout::warpgroup_threads() },
        });
    }
    Pipeline {
        name: "stage ring",
        stages: l.budget.ab_stages,
        full: smem.full,
        empty: Some(smem.empty),
        producers,
        consumers: vec![Party {
            role: "consumer warp",
            arrival: Arrival::Local { arrivals: WARPGROUP_WARPS * l.consumers },
        }],
        full_multicast: None,
        empty_multicast: None,
    }
}
