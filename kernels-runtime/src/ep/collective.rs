//! The collective operations expert parallelism needs, and nothing more: an all-gather
//! (mode a's tokens), a bf16 sum reduce-scatter (mode a's partial outputs or route rows)
//! and an all-to-all of fixed per-peer blocks (mode b's dispatch and combine). One process
//! drives one or several ranks; each operation takes, per driven rank in [`Collective::driven`]
//! order, that rank's backend and buffers, and is enqueued on each rank's stream without a
//! host wait (on NCCL), so a step can be captured into one CUDA graph per rank.

use crate::backend::{Backend, BackendError, DevicePtr};

/// A collective failure.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CollectiveError {
    /// A per-rank list whose length is not the number of driven ranks.
    #[error("{what}: {given} entries, {expected} driven ranks")]
    RankCount {
        /// Which list.
        what: &'static str,
        /// Entries given.
        given: usize,
        /// Driven ranks.
        expected: usize,
    },
    /// A size the operation cannot move (odd bytes for bf16, above the library's range).
    #[error("{what}: {reason}")]
    Size {
        /// Which size.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The library or the devices refused the operation.
    #[error("{operation}: {reason}")]
    Library {
        /// The call.
        operation: &'static str,
        /// What it said.
        reason: String,
    },
    /// A rank's device failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Send and receive buffers of one driven rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// What this rank sends.
    pub send: DevicePtr,
    /// Where it receives.
    pub recv: DevicePtr,
}

/// Collective operations over `world()` ranks, of which this process drives `driven()`.
pub trait Collective {
    /// Ranks in the communicator (`G`).
    fn world(&self) -> usize;
    /// The ranks this process drives, in the order of every per-rank argument.
    fn driven(&self) -> &[usize];
    /// Each rank sends `bytes`; every rank receives all ranks' in rank order
    /// (`world()·bytes`).
    fn all_gather(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        bytes: usize,
    ) -> Result<(), CollectiveError>;
    /// Each rank sends `world()·elements` bf16 values; rank `r` receives the element-wise
    /// sum over ranks of block `r` (`elements` values). The order of the additions is the
    /// library's: exact when at most one rank contributes a non-zero value per element.
    fn reduce_scatter_bf16(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        elements: usize,
    ) -> Result<(), CollectiveError>;
    /// Each rank sends block `q` (`bytes`) of its send buffer to rank `q` and receives rank
    /// `p`'s block for it at block `p` of its receive buffer.
    fn all_to_all(
        &mut self,
        backends: &mut [&mut dyn Backend],
        bufs: &[Exchange],
        bytes: usize,
    ) -> Result<(), CollectiveError>;
}

/// Checks a per-driven-rank list's length.
pub(crate) fn check_count(
    what: &'static str,
    given: usize,
    expected: usize,
) -> Result<(), CollectiveError> {
    if given == expected {
        Ok(())
    } else {
        Err(CollectiveError::RankCount { what, given, expected })
    }
}
