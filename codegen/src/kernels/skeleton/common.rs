//! The values every role of a GEMM reads, made once by the target's prologue.

use super::scheduler::TileScheduler;
use crate::ptx::Reg;

/// What every role reads: the skeleton's (thread coordinates, the dynamic shared array's
/// address, the schedule) and the target's own (`T`).
#[derive(Clone, Copy, Debug)]
pub struct Common<T> {
    /// Thread index.
    pub tid: Reg,
    /// Warp index.
    pub warp: Reg,
    /// Lane within the warp.
    pub lane: Reg,
    /// Shared-window address of the dynamic shared array.
    pub smem: Reg,
    /// The work units and K stages.
    pub sched: TileScheduler,
    /// What only this target's roles read.
    pub target: T,
}
