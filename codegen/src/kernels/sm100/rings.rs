//! The GEMM's pipelines, their arrival counts derived from the roles that arrive:
//!
//! - **A/B ring** (`ab_stages`): full ← the leader's TMA producer (arrive.expect_tx of both
//!   CTAs' bytes), and for GEMM1 the CTA's 128 gather threads (cp.async noinc) and, in 2-CTA
//!   mode, the relay's remote arrival for the peer's gather; empty ← one commit per MMA
//!   issuer sharing the stage (the cluster-N pairs: A is multicast along N).
//! - **gather relay ring** (2-CTA GEMM1, the peer's side): full ← the peer's 128 gather
//!   threads; it has no empty barrier: a slot is reused only after the A/B ring's empty
//!   barrier completes, which needs the leader's full barrier, which needs the relay to
//!   have observed this slot's phase.
//! - **accumulator ring** (one slot per accumulator buffer, or one slot for two buffers that
//!   share columns): full ← the MMA issuer's commit (multicast to the pair); empty ← one
//!   elected arrival per epilogue warp of the pair, on the leader.

use moegen_dsl::GemmKind;
use moegen_dsl::abi::roles::{EPILOGUE_WARPS, GATHER_WARPS};

use super::layout::Sm100Layout;
use crate::kernels::pipeline::{
    Commit, Consuming, CpAsyncNoinc, CtaMask, ExpectTx, Pipeline, Producing, Remote,
};
use crate::ptx::smem::Region;
use crate::ptx::{KernelBuilder, Reg};

/// The pipelines of one GEMM kernel and the parties declared on them.
#[derive(Clone, Debug)]
pub struct Rings {
    /// TMA/gather → MMA: A, B and scale-factor stages.
    pub ab: Pipeline,
    /// 2-CTA GEMM1: the peer CTA's gather completion, relayed to the leader's A/B ring.
    pub relay: Option<Pipeline>,
    /// MMA → epilogue: accumulators in TMEM.
    pub acc: Pipeline,
    /// Who arrives where.
    pub parties: Parties,
}

/// The roles' parties on the rings (GEMM1's gather and the relay only where they run).
#[derive(Clone, Copy, Debug)]
pub struct Parties {
    /// The TMA producer fills A/B stages.
    pub tma: Producing<ExpectTx>,
    /// GEMM1's gather threads fill A/B stages (the leader's).
    pub gather: Option<Producing<CpAsyncNoinc>>,
    /// 2-CTA GEMM1: the relay arrives on the leader's A/B stages for the peer's gather.
    pub relay: Option<Producing<Remote>>,
    /// 2-CTA GEMM1: the peer's gather threads fill the relay ring.
    pub relay_gather: Option<Producing<CpAsyncNoinc>>,
    /// The MMA issuer empties A/B stages.
    pub mma_ab: Consuming<Commit>,
    /// The MMA issuer fills accumulators.
    pub mma_acc: Producing<Commit>,
    /// The epilogue warps empty accumulators.
    pub epilogue: Consuming<Remote>,
}

/// Where each ring's barriers live.
#[derive(Clone, Copy, Debug)]
pub struct RingBarriers {
    /// A/B full.
    pub ab_full: Region,
    /// A/B empty.
    pub ab_empty: Region,
    /// Relay full (2-CTA GEMM1).
    pub relay_full: Option<Region>,
    /// Accumulator full.
    pub acc_full: Region,
    /// Accumulator empty.
    pub acc_empty: Region,
}

impl Rings {
    /// The rings of `l`, their barriers at `bars`.
    pub fn new(l: &Sm100Layout, bars: &RingBarriers) -> Self {
        let gather_threads = CpAsyncNoinc { threads: GATHER_WARPS * 32 };
        let gemm1 = l.kind == GemmKind::Gemm1;
        let cluster = l.cm * l.cn;
        let mut ab =
            Pipeline::new("A/B ring", l.budget.ab_stages, bars.ab_full, Some(bars.ab_empty));
        let tma = ab.produced_by("leader's TMA producer", ExpectTx);
        let gather = gemm1.then(|| ab.produced_by("gather thread", gather_threads));
        let relay_fwd = (gemm1 && l.relay_warp.is_some())
            .then(|| ab.produced_by("relay warp", Remote { arrivals: 1 }));
        let mma_ab = ab.consumed_by("MMA issuer sharing the stage", Commit { issuers: l.cn });
        ab.full_multicast = (l.cn == 2).then_some(CtaMask::AlongN { cm: l.cm });
        ab.empty_multicast = (cluster > 1).then_some(CtaMask::Cluster { ctas: cluster });
        let (relay, relay_gather) = match bars.relay_full {
            Some(full) => {
                let mut r = Pipeline::new("gather relay ring", l.budget.ab_stages, full, None);
                let g = r.produced_by("gather thread", gather_threads);
                (Some(r), Some(g))
            }
            None => (None, None),
        };
        let mut acc = Pipeline::new(
            "accumulator ring",
            l.budget.acc_ring_slots(),
            bars.acc_full,
            Some(bars.acc_empty),
        );
        let mma_acc = acc.produced_by("MMA issuer", Commit { issuers: 1 });
        let epilogue = acc
            .consumed_by("epilogue warp of the pair", Remote { arrivals: EPILOGUE_WARPS * l.cm });
        acc.full_multicast = (l.cm == 2).then_some(CtaMask::Pair);
        let parties =
            Parties { tma, gather, relay: relay_fwd, relay_gather, mma_ab, mma_acc, epilogue };
        Rings { ab, relay, acc, parties }
    }

    /// Initializes every barrier with its count.
    pub fn init(&self, b: &mut KernelBuilder, smem: Reg) {
        self.ab.init(b, smem);
        if let Some(r) = &self.relay {
            r.init(b, smem);
        }
        self.acc.init(b, smem);
    }
}
