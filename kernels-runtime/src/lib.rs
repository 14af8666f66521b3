//! moegen-runtime: running the generated NVFP4 MoE kernels.
//!
//! - [`prelude`]: what a layer needs, in one `use` (the README's "From zero to a layer").
//! - [`backend`]: the [`backend::Backend`] trait, with a CUDA backend (feature `cuda`,
//!   default) and a simulator backend (feature `sim`).
//! - [`layer`]: the layer API an engine calls: weights once, one workspace, `forward` on the
//!   caller's stream, dispatch per token bucket, autotuning, CUDA graphs.
//! - [`launch`]: every launch built from the kernel's typed ABI.
//! - [`device_ops`]: the routing sort, activation quantization and deterministic finalize
//!   on a device.
//! - [`ep`]: expert parallelism: a layer's experts over several GPUs, with the collective
//!   around each rank's window (NCCL behind feature `nccl`).
//! - [`error_record`]: the device-side error record decoded into typed errors.
//! - [`routing`]: the routing sort's six index maps on the CPU.
//! - [`checkpoint_files`]: a layer's experts from safetensors checkpoints (gpt-oss MXFP4,
//!   ModelOpt NVFP4) into the import types of [`reference`](mod@reference).
//! - [`reference`](mod@reference): the CPU reference of the whole NVFP4 layer, an f64 oracle, and the
//!   weight preparation a checkpoint needs.
//!
//! Sizing, the workspace plan and token buckets are `moegen_dsl::plan`.

pub mod backend;
pub mod checkpoint_files;
pub mod device_ops;
pub mod ep;
pub mod error;
pub mod error_record;
pub mod launch;
pub mod layer;
pub mod prelude;
pub mod reference;
pub mod routing;

pub use error::{Result, RuntimeError};

pub use moegen_dsl::include_kernels;
