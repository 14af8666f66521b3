//! A downstream crate of moegen: `build.rs` generates the kernels, [`kernels`] includes them,
//! and [`layer::run`] runs an NVFP4 MoE layer with them on moegen's PTX simulator.

pub mod layer;

/// The kernels `build.rs` generated: `KERNELS`, `kernels()`, `kernel(name)`, `find(id)` and
/// `MANIFEST_JSON`.
pub mod kernels {
    moegen_dsl::include_kernels!();
}
