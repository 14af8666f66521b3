//! moegen-sim: a functional PTX simulator.
//!
//! It parses PTX text ([`parse_module`]) and executes one launch at a time ([`launch`]) on a
//! simulated device's global memory ([`Device`]). Semantics come from the PTX ISA, never
//! from moegen-codegen. Today it models the SIMT subset the routing-sort, quantization and
//! finalize kernels use: integer and IEEE f32 arithmetic, the cvt forms of the NVFP4
//! epilogue, predicates, branches with divergence and reconvergence, global/shared/param
//! memory, shared and global atomics, and `bar.sync`. Anything else fails with the
//! instruction and its line; out-of-bounds accesses and deadlocks are errors.

mod error;
mod exec;
mod memory;
mod parse;

pub use error::SimError;
pub use exec::tensor_map::{TensorMap, TmaDataType};
pub use exec::{Arg, LaunchConfig, LaunchStats, launch};
pub use memory::Device;
pub use parse::{Inst, Kernel, Module, Opnd, ParamDecl, parse_module};
