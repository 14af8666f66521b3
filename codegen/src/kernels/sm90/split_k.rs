//! Split K: the hand-off between the CTAs of a cluster that share each unit's K
//! (`Sm90Layout::split_k`). Every rank accumulates its stages of K from zero; ranks 1.. then
//! store their fp32 accumulators into their slot in rank 0's shared memory (distributed
//! shared memory) and arrive on rank 0's full barrier; rank 0 waits for all of them, adds
//! the slots to its own accumulators in rank order (`((p0 + p1) + p2) + p3`, `add.rn.f32`, the
//! order the CPU reference follows), hands each slot back by arriving on that rank's empty
//! barrier and runs the epilogue. Rank r stores the next unit's partials only after rank 0
//! has read the last ones.
//!
//! A thread's accumulators are stored as it holds them: vector v (its registers 4v..4v+3,
//! block-major) of thread t of consumer c at `slot + c · 2048 · v4s + (v · 128 + t) · 16`, so
//! each warp's 16-byte stores and loads are contiguous. The arrivals release and the waits
//! acquire at cluster scope: the stores of one CTA are read by another.
//!
//! Rank 0 leads every unit. A build where the ranks took turns (to spread the epilogues) was
//! bit-exact on the simulator and an H100 but no faster (the split of 4 stayed 2.1–2.5×
//! slower than unsplit wherever clusters had several units), and compute-sanitizer's
//! racecheck reported hazards in its GEMM1 that were not explained (docs/perf.md and
//! docs/validation.md, session 14), so it was not kept.

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

/// Initializes the hand-off's barriers (by the initializing thread): rank 0's full barrier
/// counts every consumer thread of the other ranks, a rank's empty barrier every consumer
/// thread of rank 0.
pub(super) fn init(b: &mut KernelBuilder, l: &Sm90Layout, smem: Reg, s: &SplitSmem) {
    let threads = l.consumers * Sm90Layout::warpgroup_threads();
    b.comment(&format!(
        "split K over {} CTAs: full {} = {} other ranks x {threads} consumer threads; empty {threads}",
        l.split_k,
        (l.split_k - 1) * threads,
        l.split_k - 1
    ));
    debug_assert_eq!(s.full.size, MBARRIER_BYTES);
    let full = b.add_u32(smem, s.full.offset);
    mbar_init(b, full, (l.split_k - 1) * threads);
    let empty = b.add_u32(smem, s.empty.offset);
    mbar_init(b, empty, threads);
}

/// Moves a thread's hand-off phase to the next unit's: each barrier completes one phase
/// per unit.
fn flip(b: &mut KernelBuilder, phase: Reg) {
    b.emit(Alu::Int(IntOp::Xor, Ty::B32), vec![phase.into(), phase.into(), 1u32.into()]);
}

/// A consumer thread's side of the hand-off, made once before its units.
pub(super) struct Handoff {
    leader: Reg,
    phase: Reg,
    full: Reg,
    empty: Reg,
    /// This thread's first vector in rank 0's slot of rank 1 (rank 0 reads from it).
    local: Reg,
    /// Ranks 1..: this thread's first vector in its own slot, mapped into rank 0.
    remote: Reg,
    split: u32,
    slot_bytes: u32,
    vectors: u32,
}

impl Handoff {
    /// The thread's addresses and the phase it starts at.
    pub(super) fn new(
        b: &mut KernelBuilder,
        g: &Sm90,
        smem: Reg,
        k: &Consumer,
        rank: Reg,
        s: &SplitSmem,
    ) -> Self {
        let l = &g.l;
        let vectors = l.acc_regs() / 4;
        let slot_bytes = l.split_slot_bytes();
        let leader = b.setp_u32(Cmp::Eq, rank, 0u32);
        let full = b.add_u32(smem, s.full.offset);
        let empty = b.add_u32(smem, s.empty.offset);
        let consumer = b.mul_u32(k.ci, vectors * VECTOR_STRIDE);
        let thread = b.mad_u32(k.t, 16u32, consumer);
        let slots = b.add_u32(smem, s.slots.offset);
        let local = b.add_u32(slots, thread);
        // Rank r's slot is the (r − 1)-th; rank 0 computes an address it never uses.
        let below = b.sub_u32(rank, 1u32);
        let r1 = b.selp_u32(0u32, below, leader);
        let own = b.mad_u32(r1, slot_bytes, local);
        let zero = b.mov_u32(0u32);
        let remote = map_to_rank(b, own, zero);
        let phase = b.mov_u32(0u32);
        Self { leader, phase, full, empty, local, remote, split: l.split_k, slot_bytes, vectors }
    }

    /// After a unit's K loop: ranks 1.. hand their accumulators to rank 0 and branch to
    /// `skip` (past the epilogue); rank 0 falls through with the cluster's sums, which the
    /// epilogue reads in place of `acc`.
    pub(super) fn exchange(
        &self,
        b: &mut KernelBuilder,
        acc: &[Vec<Reg>],
        skip: &Label,
    ) -> Vec<Vec<Reg>> {
        let flat: Vec<Reg> = acc.iter().flatten().copied().collect();
        let partner = b.new_label("split_partner");
        b.bra_unless(self.leader, &partner);

        // Rank 0: every other rank's partials are in its slots.
        mbar_wait_cluster(b, self.full, self.phase);
        let mut sum = flat.clone();
        for r in 1..self.split {
            for v in 0..self.vectors {
                let p = b.regs(RegClass::F32, 4);
                let at = (r - 1) * self.slot_bytes + v * VECTOR_STRIDE;
                b.emit(
                    Memory::Ld(Access::vector(Space::Shared, VecWidth::V4, Ty::F32)),
                    vec![Operand::regs(&p), Operand::Reg(self.local).at(i64::from(at))],
                );
                for (j, &pj) in p.iter().enumerate() {
                    let i = (v * 4) as usize + j;
                    sum[i] = b.add_f32(sum[i], pj);
                }
            }
        }
        for r in 1..self.split {
            let rank = b.mov_u32(r);
            mbar_arrive_cluster(b, self.empty, rank);
        }
        flip(b, self.phase);
        let done = b.new_label("split_done");
        b.bra(&done);

        // Ranks 1..: wait until rank 0 has read this slot's last partials, store, arrive. The
        // wait is on the previous phase's parity: a fresh barrier's parity-1 phase counts as
        // complete, so the first unit's store does not wait.
        b.label(&partner);
        let free = b.xor_b32(self.phase, 1u32);
        mbar_wait_cluster(b, self.empty, free);
        for (v, regs) in flat.chunks_exact(4).enumerate() {
            let at = v as u32 * VECTOR_STRIDE;
            b.emit(
                Memory::St(Access::vector(Space::SharedCluster, VecWidth::V4, Ty::F32)),
                vec![Operand::Reg(self.remote).at(i64::from(at)), Operand::regs(regs)],
            );
        }
        let zero = b.mov_u32(0u32);
        mbar_arrive_cluster(b, self.full, zero);
        flip(b, self.phase);
        b.bra(skip);
        b.label(&done);
        let blocks = acc.len();
        let per = flat.len() / blocks.max(1);
        sum.chunks(per).map(<[Reg]>::to_vec).collect()
    }
}
