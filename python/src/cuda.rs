#![allow(unsafe_code)] // wrapping the caller's raw CUstream: the one block says why it is sound
//! The caller's CUDA stream (torch's current stream, a raw `CUstream`) as the backend's
//! queue for one call.

use moegen_runtime::prelude::*;

use crate::errors::{Error, Result};

/// Runs `f` on `b` with its work queued on the raw stream `stream`, then restores the
/// backend's own stream whatever `f` returned.
pub(crate) fn on_stream<T>(
    b: &mut CudaBackend,
    stream: usize,
    f: impl FnOnce(&mut dyn Backend) -> std::result::Result<T, LayerError>,
) -> Result<T> {
    let ctx = b.stream().context().clone();
    // SAFETY: `stream` is the caller's current stream on this device (the Python side
    // passes `torch.cuda.current_stream(device).cuda_stream`), so it belongs to the device's
    // primary context, which `ctx` is (`CudaBackend::new` retains the primary context, as
    // PyTorch does). The wrapper does not own the stream (dropping it destroys nothing) and
    // is dropped before this function returns, during which the caller keeps its current
    // stream alive. Ordering with the caller's work is the point: everything is queued on
    // the caller's stream.
    let borrowed = unsafe { ctx.wrap_borrowed_stream(stream as cudarc::driver::sys::CUstream) };
    let own = b.set_stream(borrowed).map_err(LayerError::from)?;
    let ran = f(b);
    let restored = b.set_stream(own).map_err(LayerError::from);
    let out = ran.map_err(Error::from)?;
    restored?;
    Ok(out)
}
