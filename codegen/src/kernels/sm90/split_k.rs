//! Split K: the hand-off between the CTAs of a cluster that share each unit's K
//! (`Sm90Layout::split_k`). Every rank accumulates its stages of K from zero. One rank leads
//! each unit, taking turns (the cluster's j-th unit is led by rank j mod S), so the
//! epilogues spread over the cluster instead of holding every rank at one CTA's pace: the
//! others store their fp32 accumulators into their slot in the leader's shared memory
//! (distributed shared memory) and arrive on its full barrier; the leader stores its own
//! into its slot, waits for the others, adds the slots in rank order
//! (`((p0 + p1) + p2) + p3`, `add.rn.f32`, the order the CPU reference follows), hands the
//! slots back by arriving on each rank's empty barrier for it, and runs the epilogue on the
//! sums.
//!
//! Phases: a leader uses its full barrier once per turn (every S units), and a rank's empty
//! barrier for leader L completes once per L's turn, so both wait on the parity of the turn,
//! j / S; a rank's first store into a leader needs no wait (the fresh barrier's parity-1
//! phase counts as complete).
//!
//! A thread's accumulators are stored as it holds them: vector v (its registers 4v..4v+3,
//! block-major) of thread t of consumer c at `slot + c · 2048 · v4s + (v · 128 + t) · 16`, so
//! each warp's 16-byte stores and loads are contiguous, and the leader's thread reads back
//! exactly the words its own stores wrote (program order, no barrier). The arrivals release
//! and the waits acquire at cluster scope: the stores of one CTA are read by another.

use super::Sm90;
use super::layout::Sm90Layout;
use super::mainloop::Consumer;
use super::smem::SplitSmem;
use crate::kernels::pipeline::MBARRIER_BYTES;
use crate::kernels::sync::{map_to_rank, mbar_arrive_cluster, mbar_init, mbar_wait_cluster};
use crate::ptx::ops::{Access, Alu, IntOp, Memory};
use crate::ptx::{Cmp, KernelBuilder, Label, Operand, Reg, RegClass, Space, Ty, VecWidth};

/// Bytes one vector (four accumulators) of every thread of a consumer takes.
const VECTOR_STRIDE: u32 = 128 * 16;

/// Initializes the hand-off's barriers (by the initializing thread): the full barrier counts
/// every consumer thread of the other ranks, each empty barrier every consumer thread of its
/// leader.
pub(super) fn init(b: &mut KernelBuilder, l: &Sm90Layout, smem: Reg, s: &SplitSmem) {
    let threads = l.consumers * Sm90Layout::warpgroup_threads();
    b.comment(&format!(
        "split K over {s} CTAs: full {f} = {o} other ranks x {threads} consumer threads; \
         {s} empty barriers (one per leading rank) {threads}",
        s = l.split_k,
        f = (l.split_k - 1) * threads,
        o = l.split_k - 1
    ));
    let full = b.add_u32(smem, s.full.offset);
    mbar_init(b, full, (l.split_k - 1) * threads);
    for r in 0..l.split_k {
        let empty = b.add_u32(smem, s.empty.offset + r * MBARRIER_BYTES);
        mbar_init(b, empty, threads);
    }
}

/// A consumer thread's side of the hand-off, made once before its units. Only the rank, the
/// unit count and two addresses stay live through the K loops (the kernel's shared-memory
/// base is live anyway): the barrier and own-slot addresses are recomputed per unit, which
/// keeps the split of 4's GEMM1 N 128 at 3 CTAs per SM free of spills.
pub(super) struct Handoff {
    rank: Reg,
    /// The cluster's units so far (j).
    units: Reg,
    smem: Reg,
    /// This thread's first vector in slot 0.
    slot0: Reg,
    full: u32,
    empty: u32,
    split: u32,
    slot_bytes: u32,
}

/// Stores a thread's accumulators into its place in a slot at `at` (this CTA's, or another's
/// through `mapa`), four per 16-byte store.
fn store_slot(b: &mut KernelBuilder, space: Space, at: Reg, acc: &[Reg]) {
    for (v, regs) in acc.chunks_exact(4).enumerate() {
        let off = v as u32 * VECTOR_STRIDE;
        b.emit(
            Memory::St(Access::vector(space, VecWidth::V4, Ty::F32)),
            vec![Operand::Reg(at).at(i64::from(off)), Operand::regs(regs)],
        );
    }
}

/// Turns a turn's parity into the previous turn's: a rank waits for the leader to have read
/// the slot it filled one turn earlier.
fn flip(b: &mut KernelBuilder, x: Reg) {
    b.emit(Alu::Int(IntOp::Xor, Ty::B32), vec![x.into(), x.into(), 1u32.into()]);
}

impl Handoff {
    /// The thread's addresses, at the cluster's first unit.
    pub(super) fn new(
        b: &mut KernelBuilder,
        g: &Sm90,
        smem: Reg,
        k: &Consumer,
        rank: Reg,
        s: &SplitSmem,
    ) -> Self {
        let l = &g.l;
        let slot_bytes = l.split_slot_bytes();
        let consumer = b.mul_u32(k.ci, l.acc_regs() / 4 * VECTOR_STRIDE);
        let thread = b.mad_u32(k.t, 16u32, consumer);
        let slots = b.add_u32(smem, s.slots.offset);
        let slot0 = b.add_u32(slots, thread);
        let units = b.mov_u32(0u32);
        Self {
            rank,
            units,
            smem,
            slot0,
            full: s.full.offset,
            empty: s.empty.offset,
            split: l.split_k,
            slot_bytes,
        }
    }

    /// After a unit's K loop: the ranks that do not lead it hand their accumulators to the
    /// one that does and branch to `skip` (past the epilogue); the leader falls through with
    /// the cluster's sums, which the epilogue reads in place of `acc`.
    pub(super) fn exchange(
        &self,
        b: &mut KernelBuilder,
        acc: &[Vec<Reg>],
        skip: &Label,
    ) -> Vec<Vec<Reg>> {
        let flat: Vec<Reg> = acc.iter().flatten().copied().collect();
        let leader = b.and_b32(self.units, self.split - 1);
        let turn = b.shr_u32(self.units, self.split.trailing_zeros());
        let parity = b.and_b32(turn, 1u32);
        b.inc_u32(self.units, 1u32);
        let leads = b.setp_u32(Cmp::Eq, self.rank, leader);
        let own = b.mad_u32(self.rank, self.slot_bytes, self.slot0);
        let full = b.add_u32(self.smem, self.full);
        let empty = b.add_u32(self.smem, self.empty);
        let other = b.new_label("split_partner");
        b.bra_unless(leads, &other);

        // The leader: its own partials into its slot, then every rank's in rank order.
        store_slot(b, Space::Shared, own, &flat);
        mbar_wait_cluster(b, full, parity);
        // The sums go into the accumulator registers themselves: no wgmma is in flight after
        // the K loop's last wait, and a second set of 16–32 registers live through the
        // epilogue would spill at 3 CTAs per SM.
        for r in 0..self.split {
            for (v, regs) in flat.chunks_exact(4).enumerate() {
                let at = r * self.slot_bytes + v as u32 * VECTOR_STRIDE;
                // Slot 0 lands in the accumulators, the others beside them to be added.
                let dst = if r == 0 { regs.to_vec() } else { b.regs(RegClass::F32, 4) };
                b.emit(
                    Memory::Ld(Access::vector(Space::Shared, VecWidth::V4, Ty::F32)),
                    vec![Operand::regs(&dst), Operand::Reg(self.slot0).at(i64::from(at))],
                );
                if r > 0 {
                    for (&d, &pj) in regs.iter().zip(&dst) {
                        b.accumulate_f32(d, pj);
                    }
                }
            }
        }
        // Every rank's empty barrier for this leader (this CTA's own too: nothing waits on
        // it, and its phases keep step with the others').
        let mine = b.mad_u32(self.rank, MBARRIER_BYTES, empty);
        for r in 0..self.split {
            let rank = b.mov_u32(r);
            mbar_arrive_cluster(b, mine, rank);
        }
        let done = b.new_label("split_done");
        b.bra(&done);

        // Another rank: wait until the leader has read this rank's slot of its last turn,
        // store, arrive.
        b.label(&other);
        let free = b.mad_u32(leader, MBARRIER_BYTES, empty);
        flip(b, parity);
        mbar_wait_cluster(b, free, parity);
        let remote = map_to_rank(b, own, leader);
        store_slot(b, Space::SharedCluster, remote, &flat);
        mbar_arrive_cluster(b, full, leader);
        b.bra(skip);
        b.label(&done);
        acc.to_vec()
    }
}
