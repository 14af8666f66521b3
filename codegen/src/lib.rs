//! moegen-codegen: turns kernel descriptions into PTX and the files around it.
//!
//! - [`kernel_set`] and [`kernels`]: kernel builders per family, rendered through [`ptx`].
//! - [`emit`]: the generated crate (or a build script's module) written byte-identically.
//! - [`builder`]: the build-script route (`Builder` → `OUT_DIR` → `include_kernels!()`).
//! - [`check`], [`ptxas`], [`tools`]: assembling with NVIDIA's ptxas and reading SASS.
//! - [`report`]: the tables `gen` prints; [`perf`]: the per-role figures and the analytic
//!   model (`gen stats`, `gen model`).

pub mod builder;
pub mod check;
pub mod emit;
pub mod kernel_set;
pub mod kernels;
pub mod manifest;
pub mod perf;
pub mod ptx;
pub mod ptxas;
pub mod report;
pub mod rust_expr;
pub mod tools;
