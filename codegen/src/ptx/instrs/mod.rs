//! Typed operands for the complex instructions: one struct per instruction with its operands
//! as named fields (a TMEM address, a descriptor, a barrier, a predicate that enables
//! accumulation), checked when the builder lowers it to an opcode and its operands in PTX
//! order. A field of the wrong register class or count is an [`OperandError`]; a missing one
//! does not compile; modifiers that follow from the operands (a multicast mask, a tensor's
//! rank, `.expect_tx`) are derived, so they cannot disagree with them.
//!
//! The builder refuses these opcodes when given positional operands
//! ([`super::KernelBuilder::emit`]), so each is built in exactly one way.

mod cp_async;
mod mbarrier;
mod tcgen05;
mod tma;
mod tmem;
mod warp;
mod wgmma;

pub use cp_async::CpAsync;
pub use mbarrier::{CpAsyncArrive, MbarArrive, MbarExpectTx, MbarInit, MbarWait, WaitKind};
pub use tcgen05::{Tcgen05Alloc, Tcgen05Commit, Tcgen05Cp, Tcgen05Dealloc, Tcgen05Ld, Tcgen05Mma};
pub use tma::{BulkLoad, BulkStore, BulkWait, Bytes, TmaLoad, TmaStore};
pub use tmem::TmemAddr;
pub use warp::{Elect, Shfl};
pub use wgmma::{SetMaxNReg, WgmmaMma, WgmmaMmaE4m3, WgmmaWait};

use super::operand::Operand;
use super::ops::Op;
use super::reg::{Reg, RegClass};

/// An instruction with named operands, lowered to its opcode and its operands in PTX order.
pub trait TypedInstr {
    /// The opcode and operands, or the first operand that does not fit the instruction.
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError>;
}

/// An operand that does not fit its instruction.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OperandError {
    /// A register of the wrong class.
    #[error("{instr}: {field} is {found}, expected a register of class {expected:?}")]
    Class {
        /// Instruction.
        instr: &'static str,
        /// Field.
        field: &'static str,
        /// The classes the field accepts.
        expected: &'static [RegClass],
        /// What was given.
        found: String,
    },
    /// A register list of the wrong length.
    #[error("{instr}: {field} has {found} registers, expected {expected}")]
    Count {
        /// Instruction.
        instr: &'static str,
        /// Field.
        field: &'static str,
        /// The length the instruction's shape needs.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// A value outside what the instruction encodes.
    #[error("{instr}: {field} = {value} is out of range ({range})")]
    Range {
        /// Instruction.
        instr: &'static str,
        /// Field.
        field: &'static str,
        /// The value given.
        value: i64,
        /// The accepted values.
        range: &'static str,
    },
}

/// Whether an MMA adds into its accumulator: under a predicate (false on a tile's first K
/// step), or always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accumulate {
    /// When the predicate register holds.
    When(Reg),
    /// Always (the immediate 1).
    Always,
}

/// Field checks of one instruction, naming it in their errors.
pub(crate) struct Check(pub(crate) &'static str);

impl Check {
    /// `r` itself, if of one of `classes`.
    pub(crate) fn reg(
        &self,
        field: &'static str,
        r: Reg,
        classes: &'static [RegClass],
    ) -> Result<Operand, OperandError> {
        if classes.contains(&r.class) {
            Ok(Operand::Reg(r))
        } else {
            Err(self.class(field, classes, format!("{r}")))
        }
    }

    /// `[r]`, for a 32-bit shared-window address.
    pub(crate) fn shared(&self, field: &'static str, r: Reg) -> Result<Operand, OperandError> {
        Ok(self.reg(field, r, &[RegClass::B32])?.at(0))
    }

    /// `[r]`, for a 64-bit global address.
    pub(crate) fn global(&self, field: &'static str, r: Reg) -> Result<Operand, OperandError> {
        Ok(self.reg(field, r, &[RegClass::B64])?.at(0))
    }

    /// A 32-bit value: a `.b32` register or an immediate.
    pub(crate) fn value32(&self, field: &'static str, v: Operand) -> Result<Operand, OperandError> {
        match v {
            Operand::Reg(r) => self.reg(field, r, &[RegClass::B32]),
            Operand::Imm(x) if i32::try_from(x).is_ok() || u32::try_from(x).is_ok() => Ok(v),
            Operand::Hex(_) => Ok(v),
            other => Err(self.class(field, &[RegClass::B32], format!("{other}"))),
        }
    }

    /// A register list of exactly `n` registers, each of one of `classes`.
    pub(crate) fn regs(
        &self,
        field: &'static str,
        regs: &[Reg],
        n: usize,
        classes: &'static [RegClass],
    ) -> Result<Operand, OperandError> {
        if regs.len() != n {
            return Err(OperandError::Count {
                instr: self.0,
                field,
                expected: n,
                found: regs.len(),
            });
        }
        for &r in regs {
            self.reg(field, r, classes)?;
        }
        Ok(Operand::regs(regs))
    }

    /// The predicate operand of `acc`.
    pub(crate) fn accumulate(
        &self,
        field: &'static str,
        acc: Accumulate,
    ) -> Result<Operand, OperandError> {
        match acc {
            Accumulate::When(p) => self.reg(field, p, &[RegClass::Pred]),
            Accumulate::Always => Ok(Operand::Imm(1)),
        }
    }

    /// A value out of the instruction's range.
    pub(crate) fn range(
        &self,
        field: &'static str,
        value: i64,
        range: &'static str,
    ) -> OperandError {
        OperandError::Range { instr: self.0, field, value, range }
    }

    fn class(
        &self,
        field: &'static str,
        expected: &'static [RegClass],
        found: String,
    ) -> OperandError {
        OperandError::Class { instr: self.0, field, expected, found }
    }
}

/// Whether `op` has a typed-operand struct here (and so must be built through it).
pub(crate) fn is_typed(op: &Op) -> bool {
    use super::ops::{Bulk, Memory, Sync, Tcgen05, Wgmma};
    match op {
        Op::Tcgen05(t) => matches!(
            t,
            Tcgen05::Alloc(_)
                | Tcgen05::Dealloc(_)
                | Tcgen05::Cp(..)
                | Tcgen05::Mma(..)
                | Tcgen05::Commit { .. }
                | Tcgen05::Ld(..)
        ),
        Op::Memory(Memory::Bulk(b)) => !matches!(b, Bulk::CommitGroup),
        Op::Memory(m) => matches!(m, Memory::CpAsync(_) | Memory::CpAsyncArrive { .. }),
        Op::Sync(s) => matches!(s, Sync::Mbarrier(_) | Sync::Shfl(_) | Sync::Elect),
        Op::Wgmma(w) => !matches!(w, Wgmma::Fence | Wgmma::CommitGroup),
        Op::Alu(_) => false,
    }
}
