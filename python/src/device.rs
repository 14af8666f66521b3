//! The backend a layer runs on: moegen's simulator for CPU arrays, moegen's CUDA backend
//! for CUDA tensors (feature `cuda`), switched per call onto the caller's stream.

use moegen_runtime::backend::sim::SimBackend;
#[cfg(feature = "cuda")]
use moegen_runtime::prelude::CudaBackend;
use moegen_runtime::prelude::*;

use crate::errors::{Error, Result};

/// Where a layer lives.
pub(crate) enum Gpu {
    /// moegen's simulator (the CPU).
    Sim(SimBackend),
    /// A CUDA device: moegen's backend with a stream of its own for uploads, switched onto
    /// the caller's stream for each pass.
    #[cfg(feature = "cuda")]
    Cuda(CudaBackend),
}

/// The weights' generation on the simulator: SM100 runs NVFP4 (FlashInfer's CuTe-DSL MoE
/// targets Blackwell) and MXFP4 with MXFP8 activations (`kind::mxf8f6f4`), Hopper runs MXFP4
/// with bf16 activations (the only generation whose kernels take bf16 activations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SimGeneration {
    /// `SimBackend::new()`.
    Sm100,
    /// `SimBackend::hopper()`.
    Hopper,
}

impl Gpu {
    /// Opens `device` (`cpu`, `cuda` or `cuda:N`, as torch spells devices).
    pub(crate) fn open(device: &str, sim: SimGeneration) -> Result<Self> {
        if device == "cpu" {
            return Ok(Gpu::Sim(match sim {
                SimGeneration::Sm100 => SimBackend::new(),
                SimGeneration::Hopper => SimBackend::hopper(),
            }));
        }
        let ordinal = match device.strip_prefix("cuda") {
            Some("") => Some(0),
            Some(rest) => rest.strip_prefix(':').and_then(|n| n.parse::<usize>().ok()),
            None => None,
        };
        let Some(ordinal) = ordinal else {
            return Err(Error::Unsupported {
                what: format!("device {device:?}"),
                reason: "moegen runs on \"cpu\" (its simulator) and \"cuda:N\"",
            });
        };
        Self::cuda(device, ordinal)
    }

    #[cfg(feature = "cuda")]
    fn cuda(_device: &str, ordinal: usize) -> Result<Self> {
        // The device's primary context (the one PyTorch uses), with a stream of moegen's
        // own for the uploads at construction.
        let b = CudaBackend::new(ordinal).map_err(LayerError::from)?;
        Ok(Gpu::Cuda(b))
    }

    #[cfg(not(feature = "cuda"))]
    fn cuda(device: &str, _ordinal: usize) -> Result<Self> {
        Err(Error::Unsupported {
            what: format!("device {device:?}"),
            reason: "this moegen wheel was built without its `cuda` feature \
                     (maturin build --release --features cuda)",
        })
    }

    /// The backend, as the layer API takes it.
    pub(crate) fn backend(&mut self) -> &mut dyn Backend {
        match self {
            Gpu::Sim(b) => b,
            #[cfg(feature = "cuda")]
            Gpu::Cuda(b) => b,
        }
    }

    /// Runs `f` with the backend's work ordered on the raw CUDA stream `stream` (the
    /// caller's current stream), then puts the backend's own stream back. On the simulator
    /// `stream` is not used: there is one queue.
    pub(crate) fn on_stream<T>(
        &mut self,
        stream: usize,
        f: impl FnOnce(&mut dyn Backend) -> std::result::Result<T, LayerError>,
    ) -> Result<T> {
        match self {
            Gpu::Sim(b) => {
                let _ = stream;
                Ok(f(b)?)
            }
            #[cfg(feature = "cuda")]
            Gpu::Cuda(b) => crate::cuda::on_stream(b, stream, f),
        }
    }
}

#[cfg(feature = "cuda")]
impl Drop for Gpu {
    fn drop(&mut self) {
        if let Gpu::Cuda(b) = self {
            // The caller's streams may still read the weights or the workspace, which the
            // backend frees when it drops: wait for the whole context first.
            let _ = b.stream().context().synchronize();
        }
    }
}
