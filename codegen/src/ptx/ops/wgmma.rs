//! The Hopper warpgroup instructions (sm_90a): `wgmma` with A from registers and B from a
//! shared-memory descriptor, its register fence and groups, and `setmaxnreg`, which moves
//! registers between the warpgroups of a warp-specialized kernel.

use std::fmt;

/// The wgmma family of [`super::Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wgmma {
    /// `wgmma.fence.sync.aligned`: orders this warpgroup's earlier register writes (A
    /// fragments, accumulators) before the asynchronous wgmma that reads them.
    Fence,
    /// `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 d, a, b-desc, scale-d,
    /// imm-scale-a, imm-scale-b, imm-trans-b`: D (64 × n, f32, n/2 registers per thread)
    /// ← A (64 × 16 bf16, four b32 registers per thread) · B (16 × n bf16, K-major in shared
    /// memory) + D when scale-d holds.
    MmaBf16RegA {
        /// N: 8 ..= 256 in steps of 8.
        n: u32,
    },
    /// `wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 d, a, b-desc, scale-d,
    /// imm-scale-a, imm-scale-b`: D ← A (64 × 32 E4M3, four b32 registers per thread) · B
    /// (32 × n E4M3, K-major in shared memory) + D when scale-d holds (no transpose
    /// operand: 8-bit B is K-major only).
    MmaE4m3RegA {
        /// N: 8 ..= 256 in steps of 8.
        n: u32,
    },
    /// `wgmma.commit_group.sync.aligned`: closes a group of the wgmmas issued so far.
    CommitGroup,
    /// `wgmma.wait_group.sync.aligned N`: waits until at most N groups are pending.
    WaitGroup,
    /// `setmaxnreg.{inc,dec}.sync.aligned.u32 count`: this warpgroup's per-thread register
    /// budget grows (from the CTA's pool) or shrinks (into it).
    SetMaxNReg {
        /// `.inc` (true) or `.dec`.
        inc: bool,
    },
}

impl fmt::Display for Wgmma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wgmma::Fence => f.write_str("wgmma.fence.sync.aligned"),
            Wgmma::MmaBf16RegA { n } => {
                write!(f, "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16")
            }
            Wgmma::MmaE4m3RegA { n } => {
                write!(f, "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3")
            }
            Wgmma::CommitGroup => f.write_str("wgmma.commit_group.sync.aligned"),
            Wgmma::WaitGroup => f.write_str("wgmma.wait_group.sync.aligned"),
            Wgmma::SetMaxNReg { inc } => {
                let action = if *inc { "inc" } else { "dec" };
                write!(f, "setmaxnreg.{action}.sync.aligned.u32")
            }
        }
    }
}
