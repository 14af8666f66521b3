//! The mbarrier instructions: initialization, arrivals (local, remote, with transaction
//! bytes, on cp.async completion), announcing bytes, and the phase tests.

use super::tma::Bytes;
use super::{Check, OperandError, TypedInstr};
use crate::ptx::operand::Operand;
use crate::ptx::ops::{Mbarrier, Memory, Op};
use crate::ptx::reg::{Reg, RegClass};
use crate::ptx::types::{Scope, Sem, Space};

/// The largest arrival count an mbarrier holds (2^20 - 1).
const MAX_COUNT: u32 = (1 << 20) - 1;

/// `mbarrier.init.shared::cta.b64 [bar], count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MbarInit {
    /// The barrier (shared-window address).
    pub bar: Reg,
    /// Arrivals that complete a phase.
    pub count: u32,
}

impl TypedInstr for MbarInit {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("mbarrier.init");
        if !(1..=MAX_COUNT).contains(&self.count) {
            return Err(c.range("count", i64::from(self.count), "1 to 2^20 - 1"));
        }
        let ops = vec![c.shared("bar", self.bar)?, Operand::from(self.count)];
        Ok((Mbarrier::Init(Space::SharedCta).into(), ops))
    }
}

/// `mbarrier.arrive{.expect_tx}{.sem.scope}.space.b64 _, [bar]{, bytes}`: one arrival,
/// with `expect_tx` also announcing the bytes complete_tx operations will deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MbarArrive {
    /// The barrier: this CTA's (a shared::cta address) or one mapped into another CTA of
    /// the cluster (a shared::cluster address from `mapa`).
    pub bar: Reg,
    /// Whether `bar` is a shared::cluster address.
    pub remote: bool,
    /// `.sem.scope`, when the arrival must order more than the CTA's own accesses.
    pub order: Option<(Sem, Scope)>,
    /// Transaction bytes announced with the arrival.
    pub expect_tx: Option<Bytes>,
}

impl TypedInstr for MbarArrive {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("mbarrier.arrive");
        let mut ops = vec![Operand::Sink, c.shared("bar", self.bar)?];
        if let Some(tx) = self.expect_tx {
            ops.push(tx.operand(&c, "expect_tx")?);
        }
        let space = if self.remote { Space::SharedCluster } else { Space::SharedCta };
        let op = Mbarrier::Arrive { expect_tx: self.expect_tx.is_some(), order: self.order, space };
        Ok((op.into(), ops))
    }
}

/// `mbarrier.expect_tx.sem.scope.shared::cta.b64 [bar], bytes`: announces bytes without
/// arriving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MbarExpectTx {
    /// The barrier (shared-window address).
    pub bar: Reg,
    /// Transaction bytes.
    pub bytes: u32,
    /// Ordering.
    pub order: (Sem, Scope),
}

impl TypedInstr for MbarExpectTx {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("mbarrier.expect_tx");
        let ops = vec![c.shared("bar", self.bar)?, Operand::from(self.bytes)];
        Ok((Mbarrier::ExpectTx { order: self.order, space: Space::SharedCta }.into(), ops))
    }
}

/// How a phase test waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// `try_wait`: may suspend the thread for a while before answering.
    Try,
    /// `try_wait.acquire.cluster`: as `Try`, acquiring at cluster scope (for a phase that
    /// arrivals from other CTAs of the cluster complete, releasing their writes).
    TryCluster,
    /// `test_wait`: answers at once (a peek).
    Test,
}

/// `mbarrier.{try,test}_wait.parity.shared::cta.b64 ready, [bar], parity`: whether the
/// phase of `parity` has completed.
#[derive(Clone, Debug, PartialEq)]
pub struct MbarWait {
    /// Suspending or not.
    pub kind: WaitKind,
    /// The answer (`.pred`).
    pub ready: Reg,
    /// The barrier (shared-window address).
    pub bar: Reg,
    /// The phase parity: a `.b32` register or the immediate 0 or 1.
    pub parity: Operand,
}

impl TypedInstr for MbarWait {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("mbarrier.wait.parity");
        let parity = match self.parity {
            Operand::Imm(p @ (0 | 1)) => Operand::Imm(p),
            Operand::Imm(p) => return Err(c.range("parity", p, "0 or 1")),
            other => c.value32("parity", other)?,
        };
        let ops = vec![
            c.reg("ready", self.ready, &[RegClass::Pred])?,
            c.shared("bar", self.bar)?,
            parity,
        ];
        let op = match self.kind {
            WaitKind::Try => Mbarrier::TryWaitParity(Space::SharedCta),
            WaitKind::TryCluster => Mbarrier::TryWaitParityCluster(Space::SharedCta),
            WaitKind::Test => Mbarrier::TestWaitParity(Space::SharedCta),
        };
        Ok((op.into(), ops))
    }
}

/// `cp.async.mbarrier.arrive{.noinc}.shared::cta.b64 [bar]`: an arrival when this thread's
/// prior cp.async operations complete; `noinc` counts it against the barrier's initial
/// count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpAsyncArrive {
    /// The barrier (shared-window address).
    pub bar: Reg,
    /// `.noinc`.
    pub noinc: bool,
}

impl TypedInstr for CpAsyncArrive {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("cp.async.mbarrier.arrive");
        let op = Memory::CpAsyncArrive { noinc: self.noinc, space: Space::SharedCta };
        Ok((op.into(), vec![c.shared("bar", self.bar)?]))
    }
}
