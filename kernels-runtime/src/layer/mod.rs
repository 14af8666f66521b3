//! The runtime a Rust inference engine calls: a [`MoeLayer`] per model layer (weights once),
//! one [`Workspace`] for all of them, `forward` on the caller's stream, a [`DispatchTable`]
//! per layer (analytic or tuned), CUDA-graph capture. See the README's "Use moegen from your
//! crate".

mod dispatch;
mod error;
mod forward;
mod kernel_set;
mod memory;
mod tune;

pub use dispatch::{
    ChoiceSource, DeviceModel, DispatchTable, SoftwareDequant, applicable, estimate_us,
};
pub use error::LayerError;
pub use forward::{ForwardIo, LayerConfig, MoeLayer, arch_of};
pub use kernel_set::KernelSet;
pub use memory::{DeviceSlice, LayerWeights, WORKSPACE_ALIGN, Workspace, WorkspaceSpec};
pub use tune::{Trial, TuneKey, TuneOptions, TuneReport, autotune, balanced_routing, tune_key};
