//! moegen's MoE layer as a candle op (docs/candle.md).
//!
//! [`MoeBlock::new`] loads one layer's experts through a candle `VarBuilder` (gpt-oss's
//! MXFP4 layout or ModelOpt's NVFP4 layout, read and checked by moegen-runtime's loaders),
//! and [`MoeBlock::forward`] runs moegen's `MoeLayer` over candle tensors: on candle's CUDA
//! device on its stream and memory (feature `cuda`), on its CPU device through moegen's
//! simulator. gpt-oss's experts run with bf16 activations (Hopper's kernels) or MXFP8 ones
//! (SM100's, `MoeBlockConfig::activations`). Nothing here decides a tactic or a check: that
//! is `MoeLayer`'s.

mod block;
#[cfg(feature = "cuda")]
mod cuda;
mod error;
mod host;
mod ids;
mod kernels;
mod mode;
mod source;

pub use block::{CheckpointLayout, MoeBlock, MoeBlockConfig};
pub use error::MoeBlockError;
pub use moegen_dsl::epilogue_math::ActivationParams;
pub use moegen_dsl::{ActivationFormat, Arch, FinalizeMode};
pub use moegen_runtime::layer::{ExpertWindow, MoeShape};
