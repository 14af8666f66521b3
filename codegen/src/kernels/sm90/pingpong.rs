//! The ping-pong schedule's order between the two consumers (docs/hopper-schedule.md).
//!
//! Consumer c takes the CTA's units c, c + 2, c + 4, … (in the skeleton's numbering, every
//! other one of the CTA's units), and the producer fills the one stage ring with every unit's
//! stages in unit order, so each consumer walks the ring's cursor over the other's stages
//! without waiting for them (`skip`), and the stage ring's empty barriers count one
//! consumer's warps.
//!
//! Skipping alone is not enough: an mbarrier's parity wait cannot tell phase q + 1 from
//! phase q − 1, so a consumer may wait for a stage only once the producer has filled the
//! one a whole ring before it. The turn barriers guarantee that: a consumer starts a unit's
//! K loop only after the other consumer has waited for every stage of the previous unit
//! (hence the producer has filled them). They also keep the K loops in unit order, which is
//! the point: one consumer's epilogue runs while the other's K loop keeps the tensor cores
//! busy. Each consumer's turn barrier completes one phase per unit the other consumer
//! finished (one elected lane per warp arrives), and the two alternate, so neither is ever
//! more than one phase ahead of its waiter.

use moegen_dsl::abi::roles::WARPGROUP_WARPS;

use crate::kernels::pipeline::MBARRIER_BYTES;
use crate::kernels::sync::mbar_wait;
use crate::ptx::instrs::MbarArrive;
use crate::ptx::ops::{Alu, IntOp};
use crate::ptx::smem::Region;
use crate::ptx::{Guard, KernelBuilder, Reg, Ty};

/// Arrivals that complete a phase of a turn barrier: one elected lane per consumer warp.
pub(super) const TURN_ARRIVALS: u32 = WARPGROUP_WARPS;

/// The turn barriers' initialization (thread 0, before the CTA barrier).
pub(super) fn init_turns(b: &mut KernelBuilder, smem: Reg, turns: Region, consumers: u32) {
    b.comment(&format!(
        "consumer turns: {consumers} barriers, each {TURN_ARRIVALS} x the other consumer's elected lanes"
    ));
    for c in 0..consumers {
        let bar = b.add_u32(smem, turns.offset + MBARRIER_BYTES * c);
        crate::kernels::sync::mbar_init(b, bar, TURN_ARRIVALS);
    }
}

/// One consumer's side of the turn barriers.
#[derive(Clone, Copy, Debug)]
pub(super) struct Turn {
    /// This consumer's turn barrier: the other consumer arrives on it.
    mine: Reg,
    /// The other consumer's.
    theirs: Reg,
    /// The parity this consumer waits for next.
    parity: Reg,
    elected: Reg,
}

impl Turn {
    /// Consumer `ci` (0 or 1) of the two. Consumer 0's first unit follows no other, so it
    /// starts waiting for parity 1, which a fresh barrier reports complete; consumer 1's
    /// first waits for consumer 0's first unit (parity 0).
    pub(super) fn new(
        b: &mut KernelBuilder,
        smem: Reg,
        turns: Region,
        ci: Reg,
        elected: Reg,
    ) -> Self {
        let base = b.add_u32(smem, turns.offset);
        let mine = b.mad_u32(ci, MBARRIER_BYTES, base);
        let other = b.xor_b32(ci, 1u32);
        let theirs = b.mad_u32(other, MBARRIER_BYTES, base);
        let parity = b.xor_b32(ci, 1u32);
        Turn { mine, theirs, parity, elected }
    }

    /// Waits until the other consumer has waited for every stage of its previous unit.
    pub(super) fn wait(&self, b: &mut KernelBuilder) {
        mbar_wait(b, self.mine, self.parity);
        b.emit(
            Alu::Int(IntOp::Xor, Ty::B32),
            vec![self.parity.into(), self.parity.into(), 1u32.into()],
        );
    }

    /// Hands the turn over, once this warp has waited for its unit's last stage
    /// (predicated, not branched: the wgmmas are still in flight here).
    pub(super) fn pass(&self, b: &mut KernelBuilder) {
        let arrive = MbarArrive { bar: self.theirs, remote: false, order: None, expect_tx: None };
        b.push_if(Guard::when(self.elected), arrive);
    }
}
