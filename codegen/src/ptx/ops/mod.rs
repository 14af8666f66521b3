//! Instruction families as typed values: every opcode moegen emits is one of these, with its
//! modifiers as enums, and is spelled in exactly one place (the `Display` impls).

pub mod alu;
pub mod memory;
pub mod sync;
pub mod tcgen05;
pub mod wgmma;

use std::fmt;

pub use alu::{Alu, Cvt, FloatOp, IntOp};
pub use memory::{Access, AtomOp, Bulk, CacheOp, Memory};
pub use sync::{Bar, ClusterBarrier, Fence, GridDep, Mbarrier, ReduxOp, ShflMode, Sync, VoteMode};
pub use tcgen05::{CpShape, LdRepeat, LdShape, MmaKind, Tcgen05};
pub use wgmma::Wgmma;

/// An opcode with its modifiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Arithmetic, comparisons, moves, conversions.
    Alu(Alu),
    /// Loads, stores, atomics, asynchronous copies.
    Memory(Memory),
    /// Control flow, barriers, fences, warp collectives.
    Sync(Sync),
    /// Tensor-core (tcgen05) instructions.
    Tcgen05(Tcgen05),
    /// Hopper warpgroup instructions (wgmma, setmaxnreg).
    Wgmma(Wgmma),
}

impl From<Alu> for Op {
    fn from(v: Alu) -> Self {
        Op::Alu(v)
    }
}
impl From<Memory> for Op {
    fn from(v: Memory) -> Self {
        Op::Memory(v)
    }
}
impl From<Sync> for Op {
    fn from(v: Sync) -> Self {
        Op::Sync(v)
    }
}
impl From<Tcgen05> for Op {
    fn from(v: Tcgen05) -> Self {
        Op::Tcgen05(v)
    }
}
impl From<Wgmma> for Op {
    fn from(v: Wgmma) -> Self {
        Op::Wgmma(v)
    }
}
impl From<Bulk> for Op {
    fn from(v: Bulk) -> Self {
        Op::Memory(Memory::Bulk(v))
    }
}
impl From<Mbarrier> for Op {
    fn from(v: Mbarrier) -> Self {
        Op::Sync(Sync::Mbarrier(v))
    }
}
impl From<Fence> for Op {
    fn from(v: Fence) -> Self {
        Op::Sync(Sync::Fence(v))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Alu(o) => write!(f, "{o}"),
            Op::Memory(o) => write!(f, "{o}"),
            Op::Sync(o) => write!(f, "{o}"),
            Op::Tcgen05(o) => write!(f, "{o}"),
            Op::Wgmma(o) => write!(f, "{o}"),
        }
    }
}
