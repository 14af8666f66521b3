//! The ways a party arrives on a barrier, one type each: its count per phase (what the
//! barrier's initialization sums) and how it is emitted (with what only the call site
//! knows, [`Arrives::At`]). A handle is generic over its party's type, so a role can only
//! emit the arrival its ring declared for it.

use super::super::sync::map_to_rank;
use crate::ptx::instrs::{Bytes, CpAsyncArrive, MbarArrive, Tcgen05Commit};
use crate::ptx::{CtaGroup, Guard, KernelBuilder, Reg};

/// A way of arriving on an mbarrier.
pub trait Arrives: Copy {
    /// What the call site supplies when it arrives.
    type At;
    /// Arrivals per phase.
    fn count(&self) -> u32;
    /// The instruction, for comments and errors.
    fn kind(&self) -> &'static str;
    /// Emits the arrival on the barrier at `bar`.
    fn emit(b: &mut KernelBuilder, bar: Reg, at: Self::At);
}

/// One elected thread's `mbarrier.arrive.expect_tx`; the announced bytes complete through
/// the complete_tx of the TMA loads and bulk copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectTx;

/// The bytes an `arrive.expect_tx` announces, by the threads where `only` holds (all if
/// none).
#[derive(Clone, Copy, Debug)]
pub struct Tx {
    /// Bytes the phase's complete_tx operations deliver.
    pub bytes: Bytes,
    /// Guard.
    pub only: Option<Reg>,
}

impl Arrives for ExpectTx {
    type At = Tx;
    fn count(&self) -> u32 {
        1
    }
    fn kind(&self) -> &'static str {
        "arrive.expect_tx"
    }
    fn emit(b: &mut KernelBuilder, bar: Reg, at: Tx) {
        let arrive = MbarArrive { bar, remote: false, order: None, expect_tx: Some(at.bytes) };
        match at.only {
            Some(p) => b.push_if(Guard::when(p), arrive),
            None => b.push(arrive),
        }
    }
}

/// `threads` threads' `cp.async.mbarrier.arrive.noinc`, each arriving when its own copies
/// have landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpAsyncNoinc {
    /// Arriving threads.
    pub threads: u32,
}

impl Arrives for CpAsyncNoinc {
    type At = ();
    fn count(&self) -> u32 {
        self.threads
    }
    fn kind(&self) -> &'static str {
        "cp.async arrive.noinc"
    }
    fn emit(b: &mut KernelBuilder, bar: Reg, (): ()) {
        b.push(CpAsyncArrive { bar, noinc: true });
    }
}

/// `arrivals` elected threads' `mbarrier.arrive`, possibly from another CTA of the cluster
/// (through `mapa`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Arriving threads.
    pub arrivals: u32,
}

/// Where a remote arrival lands. It is the arrive's default `.release.cta`, as CUTLASS's
/// `ClusterBarrier::arrive(cta_id)` (docs/kernels.md: `.release.cluster` costs a GPU-scope
/// memory barrier and `.relaxed.cluster` lets ptxas sink the arrive).
#[derive(Clone, Copy, Debug)]
pub struct RemoteAt {
    /// Cluster rank of the barrier's CTA, if it may be another CTA's (`None`: this CTA's).
    pub rank: Option<Reg>,
}

impl Arrives for Remote {
    type At = RemoteAt;
    fn count(&self) -> u32 {
        self.arrivals
    }
    fn kind(&self) -> &'static str {
        "remote arrive"
    }
    fn emit(b: &mut KernelBuilder, bar: Reg, at: RemoteAt) {
        match at.rank {
            None => b.push(MbarArrive { bar, remote: false, order: None, expect_tx: None }),
            Some(rank) => {
                let remote = map_to_rank(b, bar, rank);
                b.push(MbarArrive { bar: remote, remote: true, order: None, expect_tx: None });
            }
        }
    }
}

/// `tcgen05.commit` from `issuers` MMA-issuing threads, each arriving once when its prior
/// tensor-core operations complete (multicast reaches several CTAs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Issuing threads whose commits reach this barrier.
    pub issuers: u32,
}

/// The MMAs a commit tracks and where it is multicast.
#[derive(Clone, Copy, Debug)]
pub struct CommitAt {
    /// The CTA group of the MMAs it tracks.
    pub group: CtaGroup,
    /// Receiving CTAs (none: this CTA).
    pub mask: Option<Reg>,
}

impl Arrives for Commit {
    type At = CommitAt;
    fn count(&self) -> u32 {
        self.issuers
    }
    fn kind(&self) -> &'static str {
        "tcgen05.commit"
    }
    fn emit(b: &mut KernelBuilder, bar: Reg, at: CommitAt) {
        b.push(Tcgen05Commit { group: at.group, bar, multicast: at.mask });
    }
}

/// `arrivals` elected threads' plain `mbarrier.arrive` on a barrier of their own CTA (no
/// cluster: nothing beyond the CTA's own accesses to order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Local {
    /// Arriving threads.
    pub arrivals: u32,
}

impl Arrives for Local {
    /// The threads that arrive (all if none).
    type At = Option<Reg>;
    fn count(&self) -> u32 {
        self.arrivals
    }
    fn kind(&self) -> &'static str {
        "arrive"
    }
    fn emit(b: &mut KernelBuilder, bar: Reg, only: Option<Reg>) {
        let arrive = MbarArrive { bar, remote: false, order: None, expect_tx: None };
        match only {
            Some(p) => b.push_if(Guard::when(p), arrive),
            None => b.push(arrive),
        }
    }
}
