//! moegen-sim: a functional PTX simulator.
//!
//! It parses PTX text and decodes every instruction once into a typed operation
//! ([`parse_module`]), refusing any opcode, modifier or operand form it does not model, then
//! executes one launch at a time ([`launch`]) on a simulated device's global memory
//! ([`Device`]). Semantics come from the PTX ISA, never from moegen-codegen. It models the
//! SIMT subset of moegen's kernels and the SM100 asynchronous machinery they use (mbarriers,
//! cp.async, TMA, bulk copies, tcgen05 with the NVFP4 and MXFP8 × MXFP4 block-scaled MMAs);
//! descriptor fields it does not model must hold the one value it does. Out-of-bounds
//! accesses, races with asynchronous copies and deadlocks are errors. docs/simulator.md has
//! the details.

pub mod approx;
mod decode;
mod error;
mod exec;
mod memory;
pub mod minifloat;
mod parse;
mod profile;
mod syntax;

pub use approx::{ex2_approx_ftz_model, ex2_approx_model, rcp_approx_ftz_model, rcp_approx_model};
pub use decode::Inst;
pub use error::{SimError, TensorMapError, TmemError};
pub use exec::tensor_map::{TensorMap, TmaDataType};
pub use exec::{
    Arg, FP8_KEEP_BITS, FP8_RESULT_BITS, LaunchConfig, LaunchStats, launch, wgmma_k16_model,
    wgmma_k32_e4m3_model,
};
pub use memory::Device;
pub use parse::{Kernel, Module, ParamDecl, parse_module};
pub use profile::{Category, Profile, WarpProfile};
pub use syntax::Opnd;
