// src/lib.rs: the module build.rs wrote, included from OUT_DIR.

/// The kernels `build.rs` generated: `KERNELS`, `kernels()`, `kernel(name)`, `find(id)` and
/// `MANIFEST_JSON`, which `moegen_runtime::layer::KernelSet::new` takes.
pub mod kernels {
    moegen_dsl::include_kernels!();
}
