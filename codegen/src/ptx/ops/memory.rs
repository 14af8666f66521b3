//! Loads, stores, atomics, asynchronous copies (cp.async, bulk and tensor copies) and
//! cluster address mapping.

use std::fmt;

use crate::ptx::types::{CtaGroup, Space, Ty, VecWidth};

/// A load or store: `ld|st.space{.vN}.ty`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// State space.
    pub space: Space,
    /// Vector width, if a vector access.
    pub vec: Option<VecWidth>,
    /// Element type.
    pub ty: Ty,
}

impl Access {
    /// A scalar access.
    pub const fn scalar(space: Space, ty: Ty) -> Self {
        Access { space, vec: None, ty }
    }
    /// A vector access.
    pub const fn vector(space: Space, vec: VecWidth, ty: Ty) -> Self {
        Access { space, vec: Some(vec), ty }
    }
}

/// The operation of `atom` and `red`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum AtomOp {
    Add,
    Max,
    Min,
    And,
}

/// Cache policy of a `cp.async` (`.ca` caches in L1, `.cg` only in L2; `.cg` needs 16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum CacheOp {
    Ca,
    Cg,
    /// `.cg` with `.L2::128B`: the L2 fetches the whole 128-byte line (a hint).
    CgPrefetch128,
    /// `.ca` with `.L2::128B`: small copies that walk along a row, so the line's next bytes
    /// are in L2 for the copies that follow (a hint).
    CaPrefetch128,
}

/// The bulk (TMA engine) copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bulk {
    /// A tensor tile from global into shared memory, completing bytes on an mbarrier;
    /// `multicast` replicates it to the CTAs of a mask, `cta_group` lets the barrier be the
    /// pair leader's.
    TensorLoad {
        /// Tensor rank (1–5).
        dims: u8,
        /// `.multicast::cluster` (an extra ctaMask operand).
        multicast: bool,
        /// `.cta_group::N`, for loads feeding a 2-CTA MMA.
        cta_group: Option<CtaGroup>,
    },
    /// A contiguous copy from global into shared memory, completing bytes on an mbarrier.
    Load,
    /// A tensor tile from shared into global memory, tracked by bulk groups.
    TensorStore {
        /// Tensor rank.
        dims: u8,
    },
    /// A contiguous copy from shared into global memory, tracked by bulk groups.
    Store,
    /// A contiguous reduce-add of packed elements from shared into global memory.
    ReduceAdd {
        /// Element type (`.bf16` is added with `.noftz`, the only mode it has).
        ty: Ty,
    },
    /// Closes the bulk group of the operations issued so far.
    CommitGroup,
    /// Waits until at most N bulk groups are pending; `read` only until their sources
    /// have been read.
    WaitGroup {
        /// `.read`.
        read: bool,
    },
}

/// The memory families of [`super::Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Memory {
    /// `ld`.
    Ld(Access),
    /// `st`.
    St(Access),
    /// `atom.space.op.ty` (returns the old value).
    Atom(Space, AtomOp, Ty),
    /// `red.space.op.ty` (no result).
    Red(Space, AtomOp, Ty),
    /// `cp.async.{ca,cg}.shared.global` with a source size (zero-fills the rest).
    CpAsync(CacheOp),
    /// `cp.async.mbarrier.arrive{.noinc}.space.b64`: an arrival when this thread's prior
    /// cp.async operations complete; `noinc` counts it against the barrier's initial count.
    CpAsyncArrive {
        /// `.noinc`.
        noinc: bool,
        /// The barrier's state space.
        space: Space,
    },
    /// A bulk copy.
    Bulk(Bulk),
    /// `mapa.space.ty`: a shared address in another CTA of the cluster.
    Mapa(Space, Ty),
    /// `prefetch.tensormap [a]`: brings a tensor map (generic address) into the cache the
    /// TMA unit reads descriptors from.
    PrefetchTensormap,
}

impl fmt::Display for AtomOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AtomOp::Add => ".add",
            AtomOp::Max => ".max",
            AtomOp::Min => ".min",
            AtomOp::And => ".and",
        })
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.space)?;
        if let Some(v) = self.vec {
            write!(f, "{v}")?;
        }
        write!(f, "{}", self.ty)
    }
}

impl fmt::Display for Bulk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bulk::TensorLoad { dims, multicast, cta_group } => {
                write!(
                    f,
                    "cp.async.bulk.tensor.{dims}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                )?;
                if *multicast {
                    f.write_str(".multicast::cluster")?;
                }
                if let Some(g) = cta_group {
                    write!(f, "{g}")?;
                }
                Ok(())
            }
            Bulk::Load => {
                f.write_str("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")
            }
            Bulk::TensorStore { dims } => {
                write!(f, "cp.async.bulk.tensor.{dims}d.global.shared::cta.tile.bulk_group")
            }
            Bulk::Store => f.write_str("cp.async.bulk.global.shared::cta.bulk_group"),
            Bulk::ReduceAdd { ty } => {
                let noftz = if *ty == Ty::Bf16 { ".noftz" } else { "" };
                write!(f, "cp.reduce.async.bulk.global.shared::cta.bulk_group.add{noftz}{ty}")
            }
            Bulk::CommitGroup => f.write_str("cp.async.bulk.commit_group"),
            Bulk::WaitGroup { read } => {
                f.write_str("cp.async.bulk.wait_group")?;
                if *read { f.write_str(".read") } else { Ok(()) }
            }
        }
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Memory::Ld(a) => write!(f, "ld{a}"),
            Memory::St(a) => write!(f, "st{a}"),
            Memory::Atom(space, op, ty) => write!(f, "atom{space}{op}{ty}"),
            Memory::Red(space, op, ty) => write!(f, "red{space}{op}{ty}"),
            Memory::CpAsync(c) => {
                let (c, hint) = match c {
                    CacheOp::Ca => ("ca", ""),
                    CacheOp::Cg => ("cg", ""),
                    CacheOp::CgPrefetch128 => ("cg", ".L2::128B"),
                    CacheOp::CaPrefetch128 => ("ca", ".L2::128B"),
                };
                write!(f, "cp.async.{c}.shared.global{hint}")
            }
            Memory::CpAsyncArrive { noinc, space } => {
                let noinc = if *noinc { ".noinc" } else { "" };
                write!(f, "cp.async.mbarrier.arrive{noinc}{space}.b64")
            }
            Memory::Bulk(b) => write!(f, "{b}"),
            Memory::Mapa(space, ty) => write!(f, "mapa{space}{ty}"),
            Memory::PrefetchTensormap => f.write_str("prefetch.tensormap"),
        }
    }
}

/// `ld.space.ty`.
pub const fn ld(space: Space, ty: Ty) -> Memory {
    Memory::Ld(Access::scalar(space, ty))
}

/// `st.space.ty`.
pub const fn st(space: Space, ty: Ty) -> Memory {
    Memory::St(Access::scalar(space, ty))
}
