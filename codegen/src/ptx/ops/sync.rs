//! Barriers, mbarriers, fences, programmatic dependent launch and warp collectives.

use std::fmt;

use crate::ptx::types::{Scope, Sem, Space, Ty};

/// The mbarrier operations (all on `.b64` barriers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mbarrier {
    /// `mbarrier.init` with an expected arrival count.
    Init(Space),
    /// `mbarrier.arrive{.expect_tx}{.sem.scope}`: one arrival, with `expect_tx` also
    /// announcing transaction bytes that complete_tx operations will deliver.
    Arrive {
        /// `.expect_tx`.
        expect_tx: bool,
        /// `.sem.scope`, when the arrival must order more than the CTA's own accesses.
        order: Option<(Sem, Scope)>,
        /// The barrier's state space.
        space: Space,
    },
    /// `mbarrier.expect_tx.sem.scope`: announces bytes without arriving.
    ExpectTx {
        /// Ordering.
        order: (Sem, Scope),
        /// The barrier's state space.
        space: Space,
    },
    /// `mbarrier.try_wait.parity`: whether the phase of the given parity has completed
    /// (may suspend the thread for a while first).
    TryWaitParity(Space),
    /// `mbarrier.try_wait.parity.acquire.cluster`: the wait acquires at cluster scope, so
    /// what another CTA released with its arrival is visible after it.
    TryWaitParityCluster(Space),
    /// `mbarrier.test_wait.parity`: the same test, never suspending (a peek).
    TestWaitParity(Space),
}

/// Fences.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fence {
    /// `fence.mbarrier_init.release.cluster`: makes barrier initialization visible to the
    /// cluster and to the async proxy.
    MbarrierInit,
    /// `fence.proxy.async.space`: orders generic-proxy accesses before async-proxy ones
    /// (TMA, tcgen05) on the same memory.
    ProxyAsync(Space),
}

/// `bar` (named CTA barriers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bar {
    /// `bar.sync id{, count}`.
    Sync,
    /// `bar.arrive id, count`.
    Arrive,
    /// `bar.warp.sync mask`.
    WarpSync,
}

/// `barrier.cluster.{arrive.release,arrive.relaxed,wait.acquire}.aligned`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterBarrier {
    /// Arrive, releasing this thread's prior accesses to the cluster (`MEMBAR.ALL.GPU` in
    /// SASS).
    ArriveRelease,
    /// Arrive, ordering nothing but execution.
    ArriveRelaxed,
    /// Wait, acquiring the other CTAs' released accesses.
    WaitAcquire,
}

/// `griddepcontrol` (programmatic dependent launch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GridDep {
    /// Lets the next kernel in the stream start its prologue.
    LaunchDependents,
    /// Waits until the previous kernel's memory is visible.
    Wait,
}

/// `shfl.sync` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

/// `vote.sync` modes (`ballot` gives a `.b32`, the others a `.pred`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum VoteMode {
    All,
    Any,
    Ballot,
}

/// `redux.sync` operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ReduxOp {
    Add,
    Min,
    Max,
    Xor,
}

/// The synchronization and control families of [`super::Op`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sync {
    /// `bra` (`.uni` when every thread of the warp takes it).
    Bra {
        /// `.uni`.
        uni: bool,
    },
    /// `ret`.
    Ret,
    /// Named CTA barriers.
    Bar(Bar),
    /// Cluster barrier halves.
    ClusterBarrier(ClusterBarrier),
    /// A fence.
    Fence(Fence),
    /// Programmatic dependent launch.
    GridDep(GridDep),
    /// `elect.sync`: one lane of the member mask.
    Elect,
    /// `shfl.sync.mode.b32`.
    Shfl(ShflMode),
    /// `vote.sync.mode`.
    Vote(VoteMode),
    /// `redux.sync.op.ty`.
    Redux(ReduxOp, Ty),
    /// An mbarrier operation.
    Mbarrier(Mbarrier),
}

impl fmt::Display for Mbarrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mbarrier::Init(space) => write!(f, "mbarrier.init{space}.b64"),
            Mbarrier::Arrive { expect_tx, order, space } => {
                f.write_str("mbarrier.arrive")?;
                if *expect_tx {
                    f.write_str(".expect_tx")?;
                }
                if let Some((sem, scope)) = order {
                    write!(f, "{sem}{scope}")?;
                }
                write!(f, "{space}.b64")
            }
            Mbarrier::ExpectTx { order: (sem, scope), space } => {
                write!(f, "mbarrier.expect_tx{sem}{scope}{space}.b64")
            }
            Mbarrier::TryWaitParity(space) => write!(f, "mbarrier.try_wait.parity{space}.b64"),
            Mbarrier::TryWaitParityCluster(space) => {
                write!(f, "mbarrier.try_wait.parity.acquire.cluster{space}.b64")
            }
            Mbarrier::TestWaitParity(space) => write!(f, "mbarrier.test_wait.parity{space}.b64"),
        }
    }
}

impl fmt::Display for Sync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sync::Bra { uni } => f.write_str(if *uni { "bra.uni" } else { "bra" }),
            Sync::Ret => f.write_str("ret"),
            Sync::Bar(b) => f.write_str(match b {
                Bar::Sync => "bar.sync",
                Bar::Arrive => "bar.arrive",
                Bar::WarpSync => "bar.warp.sync",
            }),
            Sync::ClusterBarrier(c) => f.write_str(match c {
                ClusterBarrier::ArriveRelease => "barrier.cluster.arrive.release.aligned",
                ClusterBarrier::ArriveRelaxed => "barrier.cluster.arrive.relaxed.aligned",
                ClusterBarrier::WaitAcquire => "barrier.cluster.wait.acquire.aligned",
            }),
            Sync::Fence(Fence::MbarrierInit) => f.write_str("fence.mbarrier_init.release.cluster"),
            Sync::Fence(Fence::ProxyAsync(space)) => write!(f, "fence.proxy.async{space}"),
            Sync::GridDep(g) => f.write_str(match g {
                GridDep::LaunchDependents => "griddepcontrol.launch_dependents",
                GridDep::Wait => "griddepcontrol.wait",
            }),
            Sync::Elect => f.write_str("elect.sync"),
            Sync::Shfl(m) => {
                let m = match m {
                    ShflMode::Up => "up",
                    ShflMode::Down => "down",
                    ShflMode::Bfly => "bfly",
                    ShflMode::Idx => "idx",
                };
                write!(f, "shfl.sync.{m}.b32")
            }
            Sync::Vote(m) => f.write_str(match m {
                VoteMode::All => "vote.sync.all.pred",
                VoteMode::Any => "vote.sync.any.pred",
                VoteMode::Ballot => "vote.sync.ballot.b32",
            }),
            Sync::Redux(op, ty) => {
                let op = match op {
                    ReduxOp::Add => "add",
                    ReduxOp::Min => "min",
                    ReduxOp::Max => "max",
                    ReduxOp::Xor => "xor",
                };
                write!(f, "redux.sync.{op}{ty}")
            }
            Sync::Mbarrier(m) => write!(f, "{m}"),
        }
    }
}
