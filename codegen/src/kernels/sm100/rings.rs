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
use crate::kernels::pipeline::{Arrival, CtaMask, Party, Pipeline};
use crate::ptx::smem::Region;
use crate::ptx::{KernelBuilder, Reg};

/// The pipelines of one GEMM kernel.
#[derive(Clone, Debug)]
pub struct Rings {
    /// TMA/gather → MMA: A, B and scale-factor stages.
    pub ab: Pipeline,
    /// 2-CTA GEMM1: the peer CTA's gather completion, relayed to the leader's A/B ring.
    pub relay: Option<Pipeline>,
    /// MMA → epilogue: accumulators in TMEM.
    pub acc: Pipeline,
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
        let gather = Party {
            role: "gather thread",
            arrival: Arrival::CpAsyncNoinc { threads: GATHER_WARPS * 32 },
        };
        let mut ab_producers =
            vec![Party { role: "leader's TMA producer", arrival: Arrival::ExpectTx }];
        if l.kind == GemmKind::Gemm1 {
            ab_producers.push(gather);
            if l.relay_warp.is_some() {
                ab_producers
                    .push(Party { role: "relay warp", arrival: Arrival::Remote { arrivals: 1 } });
            }
        }
        let cluster = l.cm * l.cn;
        let ab = Pipeline {
            name: "A/B ring",
            stages: l.budget.ab_stages,
            full: bars.ab_full,
            empty: Some(bars.ab_empty),
            producers: ab_producers,
            consumers: vec![Party {
                role: "MMA issuer sharing the stage",
                arrival: Arrival::Commit { issuers: l.cn },
            }],
            full_multicast: (l.cn == 2).then_some(CtaMask::AlongN { cm: l.cm }),
            empty_multicast: (cluster > 1).then_some(CtaMask::Cluster { ctas: cluster }),
        };
        let relay = bars.relay_full.map(|full| Pipeline {
            name: "gather relay ring",
            stages: l.budget.ab_stages,
            full,
            empty: None,
            producers: vec![gather],
            consumers: Vec::new(),
            full_multicast: None,
            empty_multicast: None,
        });
        let acc = Pipeline {
            name: "accumulator ring",
            stages: l.budget.acc_ring_slots(),
            full: bars.acc_full,
            empty: Some(bars.acc_empty),
            producers: vec![Party { role: "MMA issuer", arrival: Arrival::Commit { issuers: 1 } }],
            consumers: vec![Party {
                role: "epilogue warp of the pair",
                arrival: Arrival::Remote { arrivals: EPILOGUE_WARPS * l.cm },
            }],
            full_multicast: (l.cm == 2).then_some(CtaMask::Pair),
            empty_multicast: None,
        };
        Rings { ab, relay, acc }
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
