//! The CUDA backend's failures: the driver's own error code with the call that returned it,
//! or a machine the backend cannot use.

use cudarc::driver::DriverError;

/// A CUDA failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// No driver library to load (or `MOEGEN_NO_CUDA` hides it).
    #[error(
        "no CUDA driver library (libcuda.so) was found on this machine (or {} is set)",
        super::NO_CUDA_ENV
    )]
    NoDriver,
    /// A device of a generation moegen has no kernels for.
    #[error("compute capability {major}.{minor} has no moegen kernels")]
    UnsupportedDevice {
        /// Major version.
        major: i32,
        /// Minor version.
        minor: i32,
    },
    /// A driver call failed.
    #[error("{call}: {source}")]
    Driver {
        /// The driver call (or the backend operation that made it).
        call: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
    /// A kernel launch failed.
    #[error("cuLaunchKernelEx({kernel}): {source}")]
    Launch {
        /// The kernel.
        kernel: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
}

/// Wraps a driver error with the call that returned it (for `map_err`).
pub(super) fn driver(call: &'static str) -> impl FnOnce(DriverError) -> super::BackendError {
    move |source| CudaError::Driver { call, source }.into()
}
