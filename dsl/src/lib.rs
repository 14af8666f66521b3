//! moegen-dsl: the vocabulary every other moegen crate speaks.
//!
//! - [`formats`]: E2M1, E4M3, UE8M0 codecs bit-exact to the PTX `cvt` forms, NVFP4/MXFP4
//!   block quantization, the 128x4 and linear scale layouts.
//! - [`tactic`] (and [`sm90_tactics`](mod@sm90_tactics), Hopper's corner of it): the tactic space, built so
//!   that a kernel's MMA M always equals the routing tile size.
//! - [`resources`]: the per-target shared-memory/TMEM model that fixes pipeline depths;
//!   [`sm100_operands`]: what an SM100 K stage holds for each pair of operand formats.
//! - [`options`]: the option enums of a GEMM kernel (format, activations, SwiGLU input,
//!   epilogue recipe, finalize mode); a leaf that imports nothing from the crate.
//! - [`gemm_key`]: [`abi::GemmKey`], the one identity of a GEMM kernel.
//! - [`kernel_desc`]: validated kernel descriptions for codegen, derived from a key.
//! - [`abi`]: the kernel ABI (identity, parameters, tensor maps, launch facts) shared by
//!   codegen and the runtime.
//! - [`plan`]: `max_tiles`, the shared workspace plan, token buckets, expert windows.
//! - [`gpu`]: the GPUs moegen models (B200, H200), one description each.

pub mod abi;
pub mod epilogue_math;
pub mod formats;
pub mod gemm_key;
pub mod gpu;
pub mod kernel_desc;
pub mod options;
pub mod plan;
pub mod resources;
pub mod sm100_operands;
pub mod sm90_tactics;
pub mod tactic;
pub mod target;

pub use kernel_desc::{DescError, Epilogue, KernelDesc, KernelDescBuilder};
pub use options::{
    Activation, ActivationFormat, EpilogueRecipe, EpilogueSpec, FinalizeMode, SwigluInput,
    WeightFormat,
};
pub use resources::{KernelBudget, ResourceError, plan_gemm, plan_gemm_for, plan_gemm_with};
pub use sm90_tactics::{sm90_n_granule, sm90_tactics};
pub use sm100_operands::Sm100Operands;
pub use tactic::{
    Arch, CtaGroup, GemmKind, GemmTactic, MoeTactic, Raster, Schedule, TacticError, TileSize,
    nvfp4_gemms, nvfp4_tactics, tactics_for,
};
pub use target::Target;

/// Includes the kernel module a build script wrote with `moegen_codegen::builder::Builder`
/// (`$OUT_DIR/moegen_kernels.rs`): `KERNELS`, `kernels()`, `kernel(name)`, `find(id)` and
/// `MANIFEST_JSON`, as typed `moegen_dsl::abi::KernelInfo` values.
#[macro_export]
macro_rules! include_kernels {
    () => {
        include!(concat!(env!("OUT_DIR"), "/moegen_kernels.rs"));
    };
}
