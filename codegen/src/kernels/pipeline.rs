//! Pipelines as values: a ring of `stages` slots guarded by mbarriers. Producers wait for a
//! slot to be empty (`acquire`), fill it and signal it full (`commit`); consumers wait for it
//! to be full (`wait`), use it and signal it empty (`release`). Each barrier's expected
//! arrival count is the sum of the parties declared to arrive on it, and a role that emits
//! an arrival its ring did not declare is a build error, so a count can never drift from
//! the code that arrives.

use super::sync::{map_to_rank, mbar_init, mbar_wait, ring_advance, ring_advance_if};
use crate::ptx::instrs::{CpAsyncArrive, MbarArrive, MbarWait, Tcgen05Commit, WaitKind};
use crate::ptx::smem::Region;
use crate::ptx::types::{Scope, Sem};
use crate::ptx::{BuildError, CtaGroup, Guard, KernelBuilder, Reg};

/// Bytes of one mbarrier.
pub const MBARRIER_BYTES: u32 = 8;

/// How a party arrives on a barrier; each counts toward the barrier's expected arrivals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// One elected thread's `mbarrier.arrive.expect_tx`; the announced bytes complete
    /// through the complete_tx of the TMA loads.
    ExpectTx,
    /// `threads` threads' `cp.async.mbarrier.arrive.noinc`, each arriving when its own
    /// copies have landed.
    CpAsyncNoinc {
        /// Arriving threads.
        threads: u32,
    },
    /// `arrivals` elected threads' `mbarrier.arrive`, possibly from another CTA of the
    /// cluster (through `mapa`).
    Remote {
        /// Arriving threads.
        arrivals: u32,
    },
    /// `tcgen05.commit` from `issuers` MMA-issuing threads, each arriving once when its
    /// prior tensor-core operations complete (multicast reaches several CTAs).
    Commit {
        /// Issuing threads whose commits reach this barrier.
        issuers: u32,
    },
    /// `arrivals` elected threads' plain `mbarrier.arrive` on a barrier of their own CTA
    /// (no cluster: nothing beyond the CTA's own accesses to order).
    Local {
        /// Arriving threads.
        arrivals: u32,
    },
}

impl Arrival {
    /// Arrivals per phase.
    pub fn count(self) -> u32 {
        match self {
            Arrival::ExpectTx => 1,
            Arrival::CpAsyncNoinc { threads } => threads,
            Arrival::Remote { arrivals } => arrivals,
            Arrival::Commit { issuers } => issuers,
            Arrival::Local { arrivals } => arrivals,
        }
    }
    fn kind(self) -> &'static str {
        match self {
            Arrival::ExpectTx => "arrive.expect_tx",
            Arrival::CpAsyncNoinc { .. } => "cp.async arrive.noinc",
            Arrival::Remote { .. } => "remote arrive",
            Arrival::Commit { .. } => "tcgen05.commit",
            Arrival::Local { .. } => "arrive",
        }
    }
}

/// A role arriving on one side of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Party {
    /// The role (for the comment beside the barrier initialization).
    pub role: &'static str,
    /// How, and how many times per phase.
    pub arrival: Arrival,
}

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

/// One arrival as emitted, with what only the call site knows.
#[derive(Clone, Copy, Debug)]
pub enum Signal {
    /// `mbarrier.arrive.expect_tx` of `bytes`, by the threads where `only` holds (all if none).
    ExpectTx {
        /// Bytes the phase's complete_tx operations deliver.
        bytes: u32,
        /// Guard.
        only: Option<Reg>,
    },
    /// `cp.async.mbarrier.arrive.noinc`.
    CpAsyncNoinc,
    /// One arrival on the barrier at the same offset in CTA `rank` (through `mapa`), or on
    /// the local barrier when `rank` is `None`, with `order` as its `.sem.scope` (`None`:
    /// the default, release at CTA scope).
    Remote {
        /// Cluster rank of the barrier's CTA, if it may be another CTA's.
        rank: Option<Reg>,
        /// Memory-ordering qualifiers.
        order: Option<(Sem, Scope)>,
    },
    /// `tcgen05.commit` for `group`, multicast to `mask` if any.
    Commit {
        /// The CTA group of the MMAs it tracks.
        group: CtaGroup,
        /// Receiving CTAs.
        mask: Option<Reg>,
    },
    /// A plain arrival on a barrier of this CTA, by the threads where `only` holds (all if
    /// none).
    Local {
        /// Guard.
        only: Option<Reg>,
    },
}

impl Signal {
    fn matches(self, a: Arrival) -> bool {
        matches!(
            (self, a),
            (Signal::ExpectTx { .. }, Arrival::ExpectTx)
                | (Signal::CpAsyncNoinc, Arrival::CpAsyncNoinc { .. })
                | (Signal::Remote { .. }, Arrival::Remote { .. })
                | (Signal::Commit { .. }, Arrival::Commit { .. })
                | (Signal::Local { .. }, Arrival::Local { .. })
        )
    }
    fn kind(self) -> &'static str {
        match self {
            Signal::ExpectTx { .. } => Arrival::ExpectTx.kind(),
            Signal::CpAsyncNoinc => Arrival::CpAsyncNoinc { threads: 0 }.kind(),
            Signal::Remote { .. } => Arrival::Remote { arrivals: 0 }.kind(),
            Signal::Commit { .. } => Arrival::Commit { issuers: 0 }.kind(),
            Signal::Local { .. } => Arrival::Local { arrivals: 0 }.kind(),
        }
    }
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
    /// Who arrives on the full barriers.
    pub producers: Vec<Party>,
    /// Who arrives on the empty barriers.
    pub consumers: Vec<Party>,
    /// Where the commits that fill a slot are multicast.
    pub full_multicast: Option<CtaMask>,
    /// Where the commits that empty a slot are multicast.
    pub empty_multicast: Option<CtaMask>,
}

impl Pipeline {
    /// Arrivals that complete a phase of a full barrier.
    pub fn full_count(&self) -> u32 {
        self.producers.iter().map(|p| p.arrival.count()).sum()
    }
    /// Arrivals that complete a phase of an empty barrier.
    pub fn empty_count(&self) -> u32 {
        self.consumers.iter().map(|p| p.arrival.count()).sum()
    }

    /// How the barriers' counts come about, for the comment beside their initialization.
    pub fn describe(&self) -> String {
        let side = |parties: &[Party], total: u32| {
            let terms: Vec<String> = parties
                .iter()
                .map(|p| format!("{} x {} ({})", p.arrival.count(), p.role, p.arrival.kind()))
                .collect();
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

    /// Registers for a role's position, at slot 0 of phase 0.
    pub fn cursor(&self, b: &mut KernelBuilder) -> Cursor {
        let index = b.mov_u32(0u32);
        let phase = b.mov_u32(0u32);
        Cursor { index, phase }
    }

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

    /// The full barrier of the cursor's slot.
    pub fn full_at(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor) -> Reg {
        self.barrier(b, smem, Side::Full, cur.index)
    }

    /// Producer: waits until the cursor's slot is empty. The producer waits on the phase
    /// before the consumers' current one, so its first pass through the ring never blocks.
    pub fn acquire(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor) {
        let empty = self.barrier(b, smem, Side::Empty, cur.index);
        let parity = b.xor_b32(cur.phase, 1u32);
        mbar_wait(b, empty, parity);
    }

    /// Producer: tests, without suspending, whether the cursor's slot is empty, into `ready`
    /// (see [`Pipeline::peek_full`]).
    pub fn peek_empty(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor, ready: Reg) {
        let empty = self.barrier(b, smem, Side::Empty, cur.index);
        let parity = b.xor_b32(cur.phase, 1u32);
        b.push(MbarWait { kind: WaitKind::Test, ready, bar: empty, parity: parity.into() });
    }

    /// Producer: waits until the cursor's slot is empty unless the last peek found it so.
    pub fn acquire_peeked(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor, ready: Reg) {
        let done = b.new_label("peeked");
        b.bra_if(ready, &done);
        self.acquire(b, smem, cur);
        b.label(&done);
    }

    /// Consumer: waits until the cursor's slot is full.
    pub fn wait(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor) {
        let full = self.full_at(b, smem, cur);
        mbar_wait(b, full, cur.phase);
    }

    /// Consumer: tests, without suspending, whether the cursor's slot is full, into `ready`
    /// (a peek issued ahead of the work that precedes [`Pipeline::wait_peeked`], so the
    /// barrier's latency overlaps that work).
    pub fn peek_full(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor, ready: Reg) {
        let full = self.full_at(b, smem, cur);
        b.push(MbarWait { kind: WaitKind::Test, ready, bar: full, parity: cur.phase.into() });
    }

    /// Consumer: waits until the cursor's slot is full unless the last peek found it so.
    pub fn wait_peeked(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor, ready: Reg) {
        let done = b.new_label("peeked");
        b.bra_if(ready, &done);
        self.wait(b, smem, cur);
        b.label(&done);
    }

    /// Producer: arrives on the cursor's full barrier; returns its address.
    pub fn commit(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor, sig: Signal) -> Reg {
        let full = self.full_at(b, smem, cur);
        self.signal(b, Side::Full, full, sig);
        full
    }

    /// Consumer: arrives on the cursor's empty barrier.
    pub fn release(&self, b: &mut KernelBuilder, smem: Reg, cur: Cursor, sig: Signal) {
        let empty = self.barrier(b, smem, Side::Empty, cur.index);
        self.signal(b, Side::Empty, empty, sig);
    }

    /// Emits `sig` on the barrier at `bar` (a `side` barrier of this ring, or the same
    /// barrier chosen at run time among rings), checking that `side` declares it.
    pub fn signal(&self, b: &mut KernelBuilder, side: Side, bar: Reg, sig: Signal) {
        let parties = match side {
            Side::Full => &self.producers,
            Side::Empty => &self.consumers,
        };
        if !parties.iter().any(|p| sig.matches(p.arrival)) {
            let kernel = b.name.clone();
            b.error(BuildError::UndeclaredArrival {
                kernel,
                ring: self.name,
                side: side.name(),
                arrival: sig.kind(),
            });
        }
        match sig {
            Signal::ExpectTx { bytes, only } => {
                let arrive = MbarArrive { bar, remote: false, order: None, expect_tx: Some(bytes) };
                match only {
                    Some(p) => b.push_if(Guard::when(p), arrive),
                    None => b.push(arrive),
                }
            }
            Signal::CpAsyncNoinc => b.push(CpAsyncArrive { bar, noinc: true }),
            Signal::Remote { rank: None, order } => {
                b.push(MbarArrive { bar, remote: false, order, expect_tx: None });
            }
            Signal::Remote { rank: Some(rank), order } => {
                let remote = map_to_rank(b, bar, rank);
                b.push(MbarArrive { bar: remote, remote: true, order, expect_tx: None });
            }
            Signal::Commit { group, mask } => b.push(Tcgen05Commit { group, bar, multicast: mask }),
            Signal::Local { only } => {
                let arrive = MbarArrive { bar, remote: false, order: None, expect_tx: None };
                match only {
                    Some(p) => b.push_if(Guard::when(p), arrive),
                    None => b.push(arrive),
                }
            }
        }
    }

    /// Moves the cursor to the next slot, flipping the phase on wrap-around.
    pub fn advance(&self, b: &mut KernelBuilder, cur: Cursor) {
        ring_advance(b, cur.index, cur.phase, self.stages);
    }

    /// [`Pipeline::advance`] when `pred` holds, branch-free.
    pub fn advance_if(&self, b: &mut KernelBuilder, cur: Cursor, pred: Reg) {
        ring_advance_if(b, cur.index, cur.phase, self.stages, pred);
    }

    /// The address of the cursor's full barrier in CTA `rank` (where another CTA's
    /// complete_tx or arrival must land).
    pub fn full_in(&self, b: &mut KernelBuilder, full: Reg, rank: Reg) -> Reg {
        map_to_rank(b, full, rank)
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
}
