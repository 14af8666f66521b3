//! What can go wrong partitioning experts over ranks, planning the per-rank buffers or
//! running an expert-parallel step: every variant names the input at fault.

use moegen_dsl::plan::PlanError;

use crate::backend::BackendError;
use crate::device_ops::DeviceOpError;
use crate::layer::LayerError;

/// An expert-parallel failure.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EpError {
    /// Zero ranks.
    #[error("ranks must be positive")]
    ZeroRanks,
    /// The experts cannot be cut into equal contiguous windows.
    #[error("experts: {experts} experts do not split into {ranks} equal windows")]
    ExpertsNotDivisible {
        /// Experts of the layer.
        experts: usize,
        /// Ranks.
        ranks: usize,
    },
    /// A rank outside `[0, ranks)`.
    #[error("rank {rank} is outside the {ranks} ranks")]
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// The world size.
        ranks: usize,
    },
    /// A per-rank list (backends, workspaces, forward buffers, layers) whose length is not
    /// the number of ranks this process drives.
    #[error("{what}: {given} given, this process drives {expected} ranks")]
    RankCount {
        /// Which list.
        what: &'static str,
        /// Its length.
        given: usize,
        /// The driven ranks.
        expected: usize,
    },
    /// The ranks of one step were given different token counts (every collective moves the
    /// same rows from every rank: an engine pads to the largest count, as vLLM does).
    #[error("tokens: rank {rank} has {tokens} tokens, rank {first_rank} has {first}")]
    UnequalTokens {
        /// The rank that differs.
        rank: usize,
        /// Its tokens.
        tokens: usize,
        /// The first driven rank.
        first_rank: usize,
        /// Its tokens.
        first: usize,
    },
    /// More tokens on a rank than the expert-parallel workspace was planned for.
    #[error("tokens: {tokens} on a rank exceed the planned {max} per rank")]
    TooManyTokens {
        /// Tokens given.
        tokens: usize,
        /// The plan's per-rank maximum.
        max: usize,
    },
    /// A rank's layer, workspace or buffers do not match the partition or the plan.
    #[error("rank {rank}: {reason}")]
    Mismatch {
        /// The rank.
        rank: usize,
        /// What does not match.
        reason: String,
    },
    /// An expert id outside `[0, experts)` in host-side routing.
    #[error("expert id {id} at token {token}, slot {slot} is outside [0, {experts})")]
    ExpertOutOfRange {
        /// Token.
        token: usize,
        /// Slot.
        slot: usize,
        /// The id.
        id: i32,
        /// Experts of the layer.
        experts: usize,
    },
    /// A routing table whose length is not `tokens · top_k`.
    #[error("expert ids: {given} given, {tokens} tokens × top-{top_k} need {needed}")]
    RoutingLength {
        /// Entries given.
        given: usize,
        /// Tokens.
        tokens: usize,
        /// Routes per token.
        top_k: usize,
        /// Entries needed.
        needed: usize,
    },
    /// More ranks than this machine shows GPUs (one process driving one GPU per rank).
    #[error("ranks: {ranks} ranks need {ranks} GPUs, {visible} visible")]
    NotEnoughDevices {
        /// Ranks asked for.
        ranks: usize,
        /// GPUs the driver shows.
        visible: usize,
    },
    /// More routes for one peer than its block of the all-to-all holds (mode (b): the plan
    /// was made for fewer tokens per rank than were run).
    #[error("rank {rank}: {routes} routes exceed its all-to-all block of {per_peer}")]
    PeerOverflow {
        /// The owner rank.
        rank: usize,
        /// Routes of this step's tokens it owns.
        routes: usize,
        /// Slots per peer block.
        per_peer: usize,
    },
    /// A rank's step refused its input (`error`, naming the token and slot on that rank):
    /// what mode (b)'s error check reports, each rank packing its own tokens.
    #[error("rank {rank}: {error}")]
    OnRank {
        /// The home rank of the input.
        rank: usize,
        /// What is wrong with it.
        error: Box<EpError>,
    },
    /// Invalid routing input (a duplicate expert of a token, a non-finite router weight, a
    /// buffer of the wrong length), named as the single layer names it.
    #[error(transparent)]
    Input(#[from] crate::error::RuntimeError),
    /// A size the planning arithmetic rejects.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The rank's layer failed.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// The device failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The collective failed.
    #[error(transparent)]
    Collective(#[from] super::CollectiveError),
    /// A mode (b) kernel could not be launched (missing from the kernel set, a binding its
    /// ABI refuses) or left a record this version cannot decode.
    #[error(transparent)]
    Device(DeviceOpError),
}

impl From<DeviceOpError> for EpError {
    /// Invalid input and device failures keep the variants the rest of the layer uses.
    fn from(e: DeviceOpError) -> Self {
        match e {
            DeviceOpError::Input(e) => EpError::Input(e),
            DeviceOpError::Backend(e) => EpError::Backend(e),
            other => EpError::Device(other),
        }
    }
}
