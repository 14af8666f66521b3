//! The roles' handles on a ring: each holds the ring, the shared array's address and the
//! role's cursor, so no call passes them, and arrives only as its party was declared.

use super::super::sync::{map_to_rank, mbar_wait, ring_advance, ring_advance_if, ring_skip};
use super::{Arrives, Cursor, Pipeline, Side};
use crate::ptx::instrs::{MbarWait, WaitKind};
use crate::ptx::{KernelBuilder, Operand, Reg};

/// A position in a ring and the operations every handle shares.
#[derive(Clone, Copy, Debug)]
struct Position<'a> {
    ring: &'a Pipeline,
    smem: Reg,
    cur: Cursor,
}

impl Position<'_> {
    fn bar(&self, b: &mut KernelBuilder, side: Side) -> Reg {
        self.ring.barrier(b, self.smem, side, self.cur.index)
    }

    /// Waits for the cursor's phase of the full barrier; for the empty barrier, the phase
    /// before it, so the producers' first pass through the ring never blocks.
    fn wait(&self, b: &mut KernelBuilder, side: Side) {
        let bar = self.bar(b, side);
        match side {
            Side::Full => mbar_wait(b, bar, self.cur.phase),
            Side::Empty => {
                let parity = b.xor_b32(self.cur.phase, 1u32);
                mbar_wait(b, bar, parity);
            }
        }
    }

    /// [`Position::wait`] without suspending: whether the phase completed, into `ready`.
    fn test(&self, b: &mut KernelBuilder, side: Side, ready: Reg) -> Reg {
        let bar = self.bar(b, side);
        let parity: Operand = match side {
            Side::Full => self.cur.phase.into(),
            Side::Empty => b.xor_b32(self.cur.phase, 1u32).into(),
        };
        b.push(MbarWait { kind: WaitKind::Test, ready, bar, parity });
        ready
    }

    /// [`Position::wait`] unless the last test found the phase complete.
    fn wait_unless(&self, b: &mut KernelBuilder, side: Side, ready: Reg) {
        let done = b.new_label("peeked");
        b.bra_if(ready, &done);
        self.wait(b, side);
        b.label(&done);
    }

    fn advance(&self, b: &mut KernelBuilder) {
        ring_advance(b, self.cur.index, self.cur.phase, self.ring.stages);
    }

    fn advance_if(&self, b: &mut KernelBuilder, pred: Reg) {
        ring_advance_if(b, self.cur.index, self.cur.phase, self.ring.stages, pred);
    }

    fn skip(&self, b: &mut KernelBuilder, n: Reg) {
        ring_skip(b, self.cur.index, self.cur.phase, self.ring.stages, n);
    }
}

/// A producer role's handle: acquires empty slots, commits full ones by arrival `A`.
#[derive(Clone, Copy, Debug)]
pub struct Producer<'a, A> {
    at: Position<'a>,
    arrival: A,
}

impl<'a, A: Arrives> Producer<'a, A> {
    pub(super) fn new(ring: &'a Pipeline, smem: Reg, cur: Cursor, arrival: A) -> Self {
        Producer { at: Position { ring, smem, cur }, arrival }
    }

    /// The slot and phase this role is at.
    pub fn cursor(&self) -> Cursor {
        self.at.cur
    }

    /// How this role arrives (its declared party).
    pub fn arrival(&self) -> A {
        self.arrival
    }

    /// Waits until the cursor's slot is empty.
    pub fn acquire(&self, b: &mut KernelBuilder) {
        self.at.wait(b, Side::Empty);
    }

    /// Tests, without suspending, whether the cursor's slot is empty, into `ready`, and
    /// returns it (issued ahead of the work before [`Producer::acquire_unless`], so the
    /// barrier's latency overlaps that work).
    pub fn try_acquire(&self, b: &mut KernelBuilder, ready: Reg) -> Reg {
        self.at.test(b, Side::Empty, ready)
    }

    /// Waits until the cursor's slot is empty unless the last try found it so.
    pub fn acquire_unless(&self, b: &mut KernelBuilder, ready: Reg) {
        self.at.wait_unless(b, Side::Empty, ready);
    }

    /// The address of the cursor's full barrier.
    pub fn full(&self, b: &mut KernelBuilder) -> Reg {
        self.at.bar(b, Side::Full)
    }

    /// The same barrier `full` in CTA `rank` (where another CTA's complete_tx must land).
    pub fn full_in(&self, b: &mut KernelBuilder, full: Reg, rank: Reg) -> Reg {
        map_to_rank(b, full, rank)
    }

    /// Arrives on the cursor's full barrier; returns its address.
    pub fn commit(&self, b: &mut KernelBuilder, at: A::At) -> Reg {
        let full = self.full(b);
        A::emit(b, full, at);
        full
    }

    /// Arrives on the cursor's full barrier of this ring or, where `pick_other` holds, of
    /// `other`'s ring (a party declared on both, walking them in lockstep).
    pub fn commit_or(
        &self,
        b: &mut KernelBuilder,
        other: &Producer<'_, A>,
        pick_other: Reg,
        at: A::At,
    ) {
        let full = self.full(b);
        let alt = other.full(b);
        let bar = b.selp_u32(alt, full, pick_other);
        A::emit(b, bar, at);
    }

    /// Moves to the next slot, flipping the phase on wrap-around.
    pub fn advance(&self, b: &mut KernelBuilder) {
        self.at.advance(b);
    }

    /// The pipeline tail: waits until every slot this role filled has been released, so
    /// that no arrival (possibly multicast from another CTA) is in flight toward this CTA
    /// when it exits.
    pub fn drain(&self, b: &mut KernelBuilder) {
        for _ in 0..self.at.ring.stages {
            self.acquire(b);
            self.advance(b);
        }
    }
}

/// A consumer role's handle: waits for full slots, releases them by arrival `A`.
#[derive(Clone, Copy, Debug)]
pub struct Consumer<'a, A> {
    at: Position<'a>,
    arrival: A,
}

impl<'a, A: Arrives> Consumer<'a, A> {
    pub(super) fn new(ring: &'a Pipeline, smem: Reg, cur: Cursor, arrival: A) -> Self {
        Consumer { at: Position { ring, smem, cur }, arrival }
    }

    /// The slot and phase this role is at.
    pub fn cursor(&self) -> Cursor {
        self.at.cur
    }

    /// How this role arrives (its declared party).
    pub fn arrival(&self) -> A {
        self.arrival
    }

    /// Waits until the cursor's slot is full.
    pub fn wait(&self, b: &mut KernelBuilder) {
        self.at.wait(b, Side::Full);
    }

    /// Tests, without suspending, whether the cursor's slot is full, into `ready`, and
    /// returns it (issued ahead of the work before [`Consumer::wait_unless`]).
    pub fn try_wait(&self, b: &mut KernelBuilder, ready: Reg) -> Reg {
        self.at.test(b, Side::Full, ready)
    }

    /// Waits until the cursor's slot is full unless the last try found it so.
    pub fn wait_unless(&self, b: &mut KernelBuilder, ready: Reg) {
        self.at.wait_unless(b, Side::Full, ready);
    }

    /// Arrives on the cursor's empty barrier.
    pub fn release(&self, b: &mut KernelBuilder, at: A::At) {
        let empty = self.at.bar(b, Side::Empty);
        A::emit(b, empty, at);
    }

    /// Moves to the next slot, flipping the phase on wrap-around.
    pub fn advance(&self, b: &mut KernelBuilder) {
        self.at.advance(b);
    }

    /// [`Consumer::advance`] when `pred` holds, branch-free.
    pub fn advance_if(&self, b: &mut KernelBuilder, pred: Reg) {
        self.at.advance_if(b, pred);
    }

    /// Moves `n` slots on without touching them: the slots another consumer of the ring
    /// waits for and releases.
    pub fn skip(&self, b: &mut KernelBuilder, n: Reg) {
        self.at.skip(b, n);
    }
}

/// The handle of a role that waits for full slots and arrives on no barrier of the ring.
#[derive(Clone, Copy, Debug)]
pub struct Waiter<'a> {
    at: Position<'a>,
}

impl<'a> Waiter<'a> {
    pub(super) fn new(ring: &'a Pipeline, smem: Reg, cur: Cursor) -> Self {
        Waiter { at: Position { ring, smem, cur } }
    }

    /// The slot and phase this role is at.
    pub fn cursor(&self) -> Cursor {
        self.at.cur
    }

    /// Waits until the cursor's slot is full.
    pub fn wait(&self, b: &mut KernelBuilder) {
        self.at.wait(b, Side::Full);
    }

    /// Moves to the next slot, flipping the phase on wrap-around.
    pub fn advance(&self, b: &mut KernelBuilder) {
        self.at.advance(b);
    }

    /// Moves `n` slots on without waiting for them (slots another role consumes).
    pub fn skip(&self, b: &mut KernelBuilder, n: Reg) {
        self.at.skip(b, n);
    }
}
