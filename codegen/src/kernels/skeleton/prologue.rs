//! The first things every role of a GEMM runs: its thread coordinates and, by thread 0,
//! the rings' barrier initialization.

use crate::ptx::ops::Fence;
use crate::ptx::{Cmp, KernelBuilder, Reg, SReg};

/// A thread's place in its CTA.
#[derive(Clone, Copy, Debug)]
pub struct Threads {
    /// Thread index.
    pub tid: Reg,
    /// Warp index.
    pub warp: Reg,
    /// Lane within the warp.
    pub lane: Reg,
}

/// The thread, warp and lane indices.
pub fn threads(b: &mut KernelBuilder) -> Threads {
    let tid = b.sreg(SReg::TidX);
    let warp = b.shr_u32(tid, 5u32);
    let lane = b.and_b32(tid, 31u32);
    Threads { tid, warp, lane }
}

/// Thread 0 initializes the barriers (`init`) and fences the initialization; every other
/// thread skips ahead (the caller's CTA or cluster barrier then publishes it).
pub fn init_barriers(b: &mut KernelBuilder, t: &Threads, init: impl FnOnce(&mut KernelBuilder)) {
    let not0 = b.setp_u32(Cmp::Ne, t.tid, 0u32);
    let after_init = b.new_label("after_init");
    b.bra_if(not0, &after_init);
    init(b);
    b.emit(Fence::MbarrierInit, vec![]);
    b.label(&after_init);
}
