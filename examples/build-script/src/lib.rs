//! A downstream crate of moegen: `build.rs` generates the kernels, [`kernels`] includes them,
//! and [`layer::run`] runs an NVFP4 MoE layer with them on moegen's PTX simulator.

/// The demo layer (shared by both examples: `examples/layer-demo`).
pub use moegen_example_layer as layer;

/// The kernels `build.rs` generated: `KERNELS`, `kernels()`, `kernel(name)`, `find(id)` and
/// `MANIFEST_JSON`.
pub mod kernels {
    moegen_dsl::include_kernels!();
}
