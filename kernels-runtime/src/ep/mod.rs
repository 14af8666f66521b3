//! Expert parallelism: one layer's experts split over `G` ranks (one GPU each), with the
//! collective around each rank's local expert window (docs/expert-parallel.md).
//!
//! - [`EpPartition`]: which rank holds which experts (equal contiguous windows).
//! - [`AllGatherPlan`], [`AllToAllPlan`]: each rank's buffers for the per-rank worst case,
//!   in both modes engines use; [`dispatch_routes`]: mode (b)'s compacted, expert-sorted
//!   dispatch layout on the host; [`pack_routes`], [`gather_rows`], [`combine_unpack`]:
//!   the CPU counterparts of mode (b)'s SIMT kernels, run on a backend by
//!   [`device_ep_pack`], [`device_ep_gather_rows`], [`device_ep_combine_unpack`].
//! - [`Collective`]: the three operations the modes need; [`HostCollective`] runs `G` ranks
//!   in one process through the host (the CPU-side test vehicle over simulator backends),
//!   `NcclCollective` (feature `nccl`) on NCCL.
//! - [`ExpertParallel`] with [`EpWorkspace`]: the layer in either [`EpMode`] (all-gather
//!   (a) or all-to-all (b)), bulk or deterministic finalize, capturable.

mod all_to_all;
mod collective;
mod device;
mod dispatch;
mod error;
mod expert_parallel;
mod host;
mod launch;
mod mode;
#[cfg(feature = "nccl")]
mod nccl;
mod pack;
mod pack_record;
mod partition;
mod plan;
mod rows;
mod workspace;

pub use collective::{Collective, CollectiveError, Exchange};
pub use device::{device_ep_combine_unpack, device_ep_gather_rows, device_ep_pack};
pub use dispatch::{SentRoute, dispatch_routes};
pub use error::EpError;
pub use expert_parallel::ExpertParallel;
pub use host::HostCollective;
pub use mode::{EpMode, EpPlan};
#[cfg(feature = "nccl")]
pub use nccl::{NcclCollective, NcclId, open_devices};
pub use pack::{PackedSend, pack_routes};
pub use partition::EpPartition;
pub use plan::{AllGatherPlan, AllToAllPlan, EpBuffer, EpLayout};
pub use rows::{combine_unpack, gather_rows};
pub use workspace::EpWorkspace;
