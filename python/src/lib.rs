//! The Rust half of the `moegen` Python package (docs/python.md): `moegen._native.Layer`,
//! one moegen `MoeLayer` built once from host arrays (FlashInfer's NVFP4 tensors or
//! gpt-oss's MXFP4 tensors), run over host arrays on moegen's simulator or over CUDA
//! tensors on the caller's stream (feature `cuda`). The Python half (`moegen/`) turns NumPy
//! arrays and torch tensors into the descriptors this side checks, and registers the
//! `torch.library` op. Nothing here decides a tactic or a check: that is moegen-runtime's;
//! the one kernel choice made here is which set a layer is built from (`kernels.rs`: the
//! built-in set, plus gpt-oss's SM100 MXFP8 GEMMs generated at compile time).

mod activations;
mod arrays;
mod construct;
#[cfg(feature = "cuda")]
mod cuda;
mod device;
mod errors;
mod host;
mod kernels;
mod layer;
mod reference;
mod source;
mod weights;

use pyo3::prelude::*;

/// `moegen._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<layer::Layer>()?;
    m.add_function(wrap_pyfunction!(activations::check_generation_py, m)?)?;
    m.add("CUDA", cfg!(feature = "cuda"))?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
