//! Pipelines as values: a ring of `stages` slots guarded by mbarriers. Producers wait for a
//! slot to be empty (`acquire`), fill it and signal it full (`commit`); consumers wait for it
//! to be full (`wait`), use it and signal it empty (`release`).
//!
//! A ring is declared with its parties: [`Pipeline::produced_by`] and
//! [`Pipeline::consumed_by`] add a party's arrivals to the barrier's count and return the
//! party's token, the only way to make the role's handle ([`Producer`], [`Consumer`]). The
//! handle is generic over the party's way of arriving ([`Arrives`]), so a role arrives only
//! as its ring declared it (an undeclared arrival does not compile), and a role that
//! arrives on nothing only gets a [`Waiter`], which has no arrival at all. Each handle holds
//! the shared array's address and its cursor; a token used on another ring is a build
//! error.
//!
//! ```
//! use moegen_codegen::kernels::pipeline::{Commit, CommitAt, ExpectTx, Pipeline};
//! use moegen_codegen::ptx::{CtaGroup, KernelBuilder, smem::Region};
//!
//! let bars = |offset| Region { name: "bars", index: None, offset, size: 16, align: 8 };
//! let mut ring = Pipeline::new("ring", 2, bars(0), Some(bars(16)));
//! let _tma = ring.produced_by("TMA producer", ExpectTx);
//! let mma = ring.consumed_by("MMA issuer", Commit { issuers: 1 });
//! let mut b = KernelBuilder::new("k");
//! let smem = b.smem_addr(0);
//! let consumer = ring.consumer(&mut b, &mma, smem);
//! consumer.wait(&mut b);
//! consumer.release(&mut b, CommitAt { group: CtaGroup::One, mask: None });
//! ```
//!
//! The MMA issuer was declared to release by `tcgen05.commit`; an `arrive.expect_tx` from
//! it does not compile:
//!
//! ```compile_fail
//! # use moegen_codegen::kernels::pipeline::{Commit, ExpectTx, Pipeline, Tx};
//! # use moegen_codegen::ptx::{KernelBuilder, smem::Region};
//! # let bars = |offset| Region { name: "bars", index: None, offset, size: 16, align: 8 };
//! # let mut ring = Pipeline::new("ring", 2, bars(0), Some(bars(16)));
//! # let _tma = ring.produced_by("TMA producer", ExpectTx);
//! # let mma = ring.consumed_by("MMA issuer", Commit { issuers: 1 });
//! # let mut b = KernelBuilder::new("k");
//! # let smem = b.smem_addr(0);
//! let consumer = ring.consumer(&mut b, &mma, smem);
//! consumer.release(&mut b, Tx { bytes: 64.into(), only: None });
//! ```
//!
//! Nor can a consumer party make a producer's handle (and commit), nor a role with no
//! declared arrival arrive at all:
//!
//! ```compile_fail
//! # use moegen_codegen::kernels::pipeline::{Commit, CommitAt, ExpectTx, Pipeline};
//! # use moegen_codegen::ptx::{CtaGroup, KernelBuilder, smem::Region};
//! # let bars = |offset| Region { name: "bars", index: None, offset, size: 16, align: 8 };
//! # let mut ring = Pipeline::new("ring", 2, bars(0), Some(bars(16)));
//! # let mma = ring.consumed_by("MMA issuer", Commit { issuers: 1 });
//! # let mut b = KernelBuilder::new("k");
//! # let smem = b.smem_addr(0);
//! let producer = ring.producer(&mut b, &mma, smem);
//! producer.commit(&mut b, CommitAt { group: CtaGroup::One, mask: None });
//! ```
//!
//! ```compile_fail
//! # use moegen_codegen::kernels::pipeline::{Pipeline, Tx};
//! # use moegen_codegen::ptx::{KernelBuilder, smem::Region};
//! # let bars = |offset| Region { name: "bars", index: None, offset, size: 16, align: 8 };
//! # let ring = Pipeline::new("ring", 2, bars(0), None);
//! # let mut b = KernelBuilder::new("k");
//! # let smem = b.smem_addr(0);
//! let relay = ring.waiter(&mut b, smem);
//! relay.commit(&mut b, Tx { bytes: 64.into(), only: None });
//! ```

mod arrival;
mod handles;

pub use arrival::{Arrives, Commit, CommitAt, CpAsyncNoinc, ExpectTx, Local, Remote, RemoteAt, Tx};
pub use handles::{Consumer, Producer, Waiter};

use super::sync::mbar_init;
use crate::ptx::smem::Region;
use crate::ptx::{BuildError, KernelBuilder, Reg};

/// Bytes of one mbarrier.
pub const MBARRIER_BYTES: u32 = 8;

/// Which CTAs of the cluster a multicast reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtaMask {
    /// Every CTA of a cluster of `ctas`.
    Cluster {
        /// CTAs in the cluster.
        ctas: u32,
    },
    /// The two CTAs of this CTA's pair (ranks 2·n_rank and 2·n_rank + 1).
    Pair,
    /// This CTA and the one at the same m_rank in the other N rank (cluster N 2, CTA
    /// group `cm`): the CTAs sharing this CTA's A rows.
    AlongN {
        /// CTA-group size.
        cm: u32,
    },
}

impl CtaMask {
    /// The 16-bit mask for this CTA.
    pub fn emit(self, b: &mut KernelBuilder, m_rank: Reg, n_rank: Reg) -> Reg {
        match self {
            CtaMask::Cluster { ctas } => b.mov_b16((1 << ctas) - 1),
            CtaMask::Pair => {
                let shift = b.shl_b32(n_rank, 1u32);
                let m = b.shl_b32(3u32, shift);
                b.cvt_u16_u32(m)
            }
            CtaMask::AlongN { cm } => {
                let m = b.shl_b32(1u32, m_rank);
                let m2 = b.shl_b32(m, cm);
                let both = b.or_b32(m, m2);
                b.cvt_u16_u32(both)
            }
        }
    }
}

/// A role's position in a ring: the slot index and the parity of its current phase.
#[derive(Clone, Copy, Debug)]
pub struct Cursor {
    /// Slot.
    pub index: Reg,
    /// Phase parity (0 on the first pass).
    pub phase: Reg,
}

/// The two barriers of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Signalled by producers, awaited by consumers.
    Full,
    /// Signalled by consumers, awaited by producers.
    Empty,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Full => "full",
            Side::Empty => "empty",
        }
    }
}

/// A party as declared: what the barrier-count comment says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Declared {
    role: &'static str,
    count: u32,
    kind: &'static str,
}

/// A producer party of a ring, as declared; it makes that role's [`Producer`] handle.
#[derive(Clone, Copy, Debug)]
pub struct Producing<A> {
    ring: &'static str,
    arrival: A,
}

/// A consumer party of a ring, as declared; it makes that role's [`Consumer`] handle.
#[derive(Clone, Copy, Debug)]
pub struct Consuming<A> {
    ring: &'static str,
    arrival: A,
}

/// A ring of mbarrier-guarded slots.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// Name (in comments and errors).
    pub name: &'static str,
    /// Slots.
    pub stages: u32,
    /// Full barriers, one per slot.
    pub full: Region,
    /// Empty barriers, one per slot; `None` for a ring whose slots are recycled by another
    /// ring's empty barrier.
    pub empty: Option<Region>,
    /// Where the commits that fill a slot are multicast.
    pub full_multicast: Option<CtaMask>,
    /// Where the commits that empty a slot are multicast.
    pub empty_multicast: Option<CtaMask>,
    producers: Vec<Declared>,
    consumers: Vec<Declared>,
}

impl Pipeline {
    /// A ring with no party yet (counts 0) and no multicast.
    pub fn new(name: &'static str, stages: u32, full: Region, empty: Option<Region>) -> Self {
        Pipeline {
            name,
            stages,
            full,
            empty,
            full_multicast: None,
            empty_multicast: None,
            producers: Vec::new(),
            consumers: Vec::new(),
        }
    }

    /// Declares `role` as arriving on the full barriers by `arrival`.
    pub fn produced_by<A: Arrives>(&mut self, role: &'static str, arrival: A) -> Producing<A> {
        self.producers.push(Declared { role, count: arrival.count(), kind: arrival.kind() });
        Producing { ring: self.name, arrival }
    }

    /// Declares `role` as arriving on the empty barriers by `arrival`.
    pub fn consumed_by<A: Arrives>(&mut self, role: &'static str, arrival: A) -> Consuming<A> {
        self.consumers.push(Declared { role, count: arrival.count(), kind: arrival.kind() });
        Consuming { ring: self.name, arrival }
    }

    /// Arrivals that complete a phase of a full barrier.
    pub fn full_count(&self) -> u32 {
        self.producers.iter().map(|p| p.count).sum()
    }
    /// Arrivals that complete a phase of an empty barrier.
    pub fn empty_count(&self) -> u32 {
        self.consumers.iter().map(|p| p.count).sum()
    }

    /// How the barriers' counts come about, for the comment beside their initialization.
    pub fn describe(&self) -> String {
        let side = |parties: &[Declared], total: u32| {
            let terms: Vec<String> =
                parties.iter().map(|p| format!("{} x {} ({})", p.count, p.role, p.kind)).collect();
            format!("{} = {total}", terms.join(" + "))
        };
        let mut s = format!(
            "{}, {} stages: full {}",
            self.name,
            self.stages,
            side(&self.producers, self.full_count())
        );
        if self.empty.is_some() {
            s.push_str(&format!("; empty {}", side(&self.consumers, self.empty_count())));
        }
        s
    }

    /// Initializes every slot's barriers with their counts, after a comment deriving them.
    pub fn init(&self, b: &mut KernelBuilder, smem: Reg) {
        b.comment(&self.describe());
        for s in 0..self.stages {
            let f = b.add_u32(smem, self.full.offset + MBARRIER_BYTES * s);
            mbar_init(b, f, self.full_count());
            if let Some(e) = self.empty {
                let e = b.add_u32(smem, e.offset + MBARRIER_BYTES * s);
                mbar_init(b, e, self.empty_count());
            }
        }
    }

    /// `party`'s handle, at slot 0 of phase 0 (a fresh cursor).
    pub fn producer<A: Arrives>(
        &self,
        b: &mut KernelBuilder,
        party: &Producing<A>,
        smem: Reg,
    ) -> Producer<'_, A> {
        let cur = cursor(b);
        self.producer_on(b, party, smem, cur)
    }

    /// `party`'s handle walking `cur`, another handle's cursor over a ring of the same
    /// depth (a role that moves through two rings in lockstep).
    pub fn producer_on<A: Arrives>(
        &self,
        b: &mut KernelBuilder,
        party: &Producing<A>,
        smem: Reg,
        cur: Cursor,
    ) -> Producer<'_, A> {
        self.check(b, party.ring, Side::Full, party.arrival.kind());
        Producer::new(self, smem, cur, party.arrival)
    }

    /// `party`'s handle, at slot 0 of phase 0 (a fresh cursor).
    pub fn consumer<A: Arrives>(
        &self,
        b: &mut KernelBuilder,
        party: &Consuming<A>,
        smem: Reg,
    ) -> Consumer<'_, A> {
        let cur = cursor(b);
        self.check(b, party.ring, Side::Empty, party.arrival.kind());
        Consumer::new(self, smem, cur, party.arrival)
    }

    /// A handle that only waits for full slots (a role that arrives on no barrier of this
    /// ring), at slot 0 of phase 0.
    pub fn waiter(&self, b: &mut KernelBuilder, smem: Reg) -> Waiter<'_> {
        let cur = cursor(b);
        Waiter::new(self, smem, cur)
    }

    /// Refuses a party token declared on another ring.
    fn check(&self, b: &mut KernelBuilder, ring: &'static str, side: Side, kind: &'static str) {
        if ring != self.name {
            let kernel = b.name.clone();
            b.error(BuildError::UndeclaredArrival {
                kernel,
                ring: self.name,
                side: side.name(),
                arrival: kind,
            });
        }
    }

    /// The address of `side`'s barrier of slot `index`.
    fn barrier(&self, b: &mut KernelBuilder, smem: Reg, side: Side, index: Reg) -> Reg {
        let region = match side {
            Side::Full => Some(self.full),
            Side::Empty => self.empty,
        };
        let region = region.unwrap_or_else(|| {
            let kernel = b.name.clone();
            b.error(BuildError::Inconsistent { kernel, what: "empty barrier of a full-only ring" });
            self.full
        });
        let o = b.mad_u32(index, MBARRIER_BYTES, region.offset);
        b.add_u32(smem, o)
    }
}

/// Registers for a role's position, at slot 0 of phase 0.
fn cursor(b: &mut KernelBuilder) -> Cursor {
    let index = b.mov_u32(0u32);
    let phase = b.mov_u32(0u32);
    Cursor { index, phase }
}
