//! The runtime a Rust inference engine calls: a [`MoeLayer`] per model layer (weights once),
//! one [`Workspace`] for all of them, `forward` on the caller's stream, a [`DispatchTable`]
//! per layer (analytic or tuned), CUDA-graph capture. See the README's "Use moegen from your
//! crate".

mod candidates;
mod dispatch;
mod error;
mod forward;
mod host_buffers;
mod host_pass;
mod kernel_set;
mod live_tiles;
mod memory;
mod refused;
mod route_counts;
mod tune;
mod workspace_refusal;

pub use candidates::{CandidateReport, NoCandidates, Rejected, Rejection};
pub use dispatch::{
    ChoiceSource, DeviceModel, DispatchTable, RouteSpread, SPLIT_HANDOFF_CLOCKS, SoftwareDequant,
    applicable, estimate_us,
};
pub use error::LayerError;
pub use forward::{ForwardIo, LayerConfig, MoeLayer, arch_of};
pub use host_buffers::{DeviceElement, HostBufferError, HostBuffers};
pub use kernel_set::KernelSet;
pub use live_tiles::{LIVE_TILE_MASK_BITS, UnitSpread, wide_gemm1_mask};
pub use memory::{DeviceSlice, LayerWeights, WORKSPACE_ALIGN, Workspace, WorkspaceSpec};
pub use refused::Refused;
pub use tune::{
    LOCAL_ROUTES_PER_BUCKET, MAX_ROUTING_DRAWS, ROUTING_GENERATOR, TUNE_ROUTING_SEED, TUNE_TIMING,
    Trial, TuneKey, TuneOptions, TuneReport, autotune, balanced_routing, routing_draws, tune_key,
    uniform_routing,
};
pub use workspace_refusal::{WorkspaceRefusal, check_spec};

// The vocabulary the layer API's signatures speak, so that one `use moegen_runtime::layer::*`
// names everything a layer needs.
pub use moegen_dsl::plan::{ExpertWindow, MoeShape};
pub use moegen_dsl::{
    ActivationFormat, Arch, EpilogueRecipe, FinalizeMode, MoeTactic, SwigluInput, Target, TileSize,
    WeightFormat,
};
