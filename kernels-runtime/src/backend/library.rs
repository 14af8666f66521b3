#![allow(unsafe_code)] // dlopen of a system library: the one block says why it is sound
//! Whether a CUDA library can be loaded, asked before cudarc's first call into it: with
//! run-time loading cudarc aborts the process when the library is missing, so the backend
//! and the NCCL collective refuse with a typed error instead.
//!
//! Asked with libloading directly, under the names cudarc's loader tries that exist in
//! practice, not through cudarc's `is_culib_present`: that one exists only when cudarc is
//! built with run-time loading, and another crate of the build (candle-core's `cuda`
//! feature) may have it link the library instead; then the library is a load-time
//! dependency of the process and is present whenever this code runs.

/// The CUDA driver (`libcuda`).
#[cfg(unix)]
pub(crate) const DRIVER: &[&str] = &["libcuda.so", "libcuda.so.1"];
/// The CUDA driver (`nvcuda`).
#[cfg(windows)]
pub(crate) const DRIVER: &[&str] = &["nvcuda.dll"];

/// NCCL, under the name cudarc loads (pip's wheels ship only `libnccl.so.2`, which cudarc
/// does not try: link it as `libnccl.so`, docs/expert-parallel.md).
#[cfg(all(unix, feature = "nccl"))]
pub(crate) const NCCL: &[&str] = &["libnccl.so"];
/// NCCL has no Windows build.
#[cfg(all(windows, feature = "nccl"))]
pub(crate) const NCCL: &[&str] = &[];

/// Whether one of `names` can be loaded.
pub(crate) fn loadable(names: &[&str]) -> bool {
    names.iter().any(|name| {
        // SAFETY: loading runs the library's initializers, exactly what cudarc's own loader
        // (and, when linked, the process's start-up) runs for these CUDA libraries; the handle
        // is closed again at once and no symbol is called.
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}
