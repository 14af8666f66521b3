//! moegen-runtime: everything on the host side of the MoE layer that needs no GPU.
//!
//! - [`sizing`]: `max_tiles` and the padded row count every buffer and grid derive from.
//! - [`workspace`]: one workspace plan that serves every tile size and layer.
//! - [`buckets`]: token buckets for autotuning, with an uncapped round-up mapper.
//! - [`routing`]: the routing sort's six index maps.
//! - [`reference`]: the CPU reference of the whole NVFP4 layer, an f64 oracle, and the
//!   weight preparation a checkpoint needs.

pub mod backend;
pub mod buckets;
pub mod corpus;
pub mod device_layer;
pub mod device_ops;
pub mod error;
pub mod reference;
pub mod routing;
pub mod sizing;
pub mod workspace;

pub use error::{Result, RuntimeError};
