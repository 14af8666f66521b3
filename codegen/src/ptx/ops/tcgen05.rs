//! The fifth-generation tensor-core instructions (sm_100 family): tensor-memory allocation,
//! copies into it, block-scaled MMA, commits, loads and their ordering fences.

use std::fmt;

use crate::ptx::types::CtaGroup;

/// The MMA kinds moegen emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MmaKind {
    /// `kind::mxf4nvf4` with `.block_scale.block16`: E2M1 operands, one UE4M3 scale per 16
    /// K elements (NVFP4). `.block16` is the spelling sm_100f accepts (`.scale_vec::4X` is
    /// sm_100a only).
    Mxf4Nvf4Block16,
    /// `kind::mxf8f6f4` with `.block_scale.block32`: E4M3 A × E2M1 B (padded to a byte per
    /// value in shared memory), one UE8M0 scale per 32 K elements, K = 32 per MMA; the
    /// instruction descriptor's SF ids pick each MMA's scale byte (docs/sm100-mxf8f6f4.md).
    Mxf8f6f4Block32,
}

/// `tcgen05.cp` shapes and their multicast over warps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpShape {
    /// `.32x128b.warpx4`: 32 lanes × 128 bits replicated to the four lane quarters, the
    /// scale-factor layout the MMA reads.
    Rows32x128bWarpx4,
}

/// `tcgen05.ld` shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LdShape {
    /// `.32x32b`: thread t of the warp reads lane 32·(warp % 4) + t.
    Lanes32x32b,
}

/// Repetitions of a `tcgen05.ld` shape along columns (`.x1` … `.x128`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum LdRepeat {
    X1,
    X2,
    X4,
    X8,
    X16,
    X32,
    X64,
    X128,
}

impl LdRepeat {
    /// Registers (columns) one thread receives.
    pub fn count(self) -> u32 {
        match self {
            LdRepeat::X1 => 1,
            LdRepeat::X2 => 2,
            LdRepeat::X4 => 4,
            LdRepeat::X8 => 8,
            LdRepeat::X16 => 16,
            LdRepeat::X32 => 32,
            LdRepeat::X64 => 64,
            LdRepeat::X128 => 128,
        }
    }
}

/// The tcgen05 family of [`super::Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tcgen05 {
    /// Allocates tensor-memory columns; the address lands in shared memory.
    Alloc(CtaGroup),
    /// Frees them.
    Dealloc(CtaGroup),
    /// Promises no further allocation by this CTA.
    RelinquishAllocPermit(CtaGroup),
    /// Shared memory (by descriptor) into tensor memory.
    Cp(CtaGroup, CpShape),
    /// A block-scaled MMA into a tensor-memory accumulator.
    Mma(CtaGroup, MmaKind),
    /// Arrives once on an mbarrier when this thread's prior tcgen05 operations complete;
    /// `multicast` signals the same offset in every CTA of a mask.
    Commit {
        /// CTA group (must match the operations it tracks).
        group: CtaGroup,
        /// `.multicast::cluster`.
        multicast: bool,
    },
    /// Tensor memory into registers (asynchronous until [`Tcgen05::WaitLd`]).
    Ld(LdShape, LdRepeat),
    /// Waits for this thread's prior `tcgen05.ld`.
    WaitLd,
    /// Orders prior tcgen05 work before a following thread synchronization.
    FenceBeforeThreadSync,
    /// Orders following tcgen05 work after a preceding thread synchronization.
    FenceAfterThreadSync,
}

impl fmt::Display for Tcgen05 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tcgen05::Alloc(g) => write!(f, "tcgen05.alloc{g}.sync.aligned.shared::cta.b32"),
            Tcgen05::Dealloc(g) => write!(f, "tcgen05.dealloc{g}.sync.aligned.b32"),
            Tcgen05::RelinquishAllocPermit(g) => {
                write!(f, "tcgen05.relinquish_alloc_permit{g}.sync.aligned")
            }
            Tcgen05::Cp(g, CpShape::Rows32x128bWarpx4) => {
                write!(f, "tcgen05.cp{g}.32x128b.warpx4")
            }
            Tcgen05::Mma(g, MmaKind::Mxf4Nvf4Block16) => {
                write!(f, "tcgen05.mma{g}.kind::mxf4nvf4.block_scale.block16")
            }
            Tcgen05::Mma(g, MmaKind::Mxf8f6f4Block32) => {
                write!(f, "tcgen05.mma{g}.kind::mxf8f6f4.block_scale.block32")
            }
            Tcgen05::Commit { group, multicast } => {
                write!(f, "tcgen05.commit{group}.mbarrier::arrive::one.shared::cluster")?;
                if *multicast {
                    f.write_str(".multicast::cluster")?;
                }
                f.write_str(".b64")
            }
            Tcgen05::Ld(LdShape::Lanes32x32b, n) => {
                write!(f, "tcgen05.ld.sync.aligned.32x32b.x{}.b32", n.count())
            }
            Tcgen05::WaitLd => f.write_str("tcgen05.wait::ld.sync.aligned"),
            Tcgen05::FenceBeforeThreadSync => f.write_str("tcgen05.fence::before_thread_sync"),
            Tcgen05::FenceAfterThreadSync => f.write_str("tcgen05.fence::after_thread_sync"),
        }
    }
}
