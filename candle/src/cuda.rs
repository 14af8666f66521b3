//! The CUDA device's pass: moegen's kernels read and write candle's device memory on
//! candle's stream (the backend was made with `CudaBackend::on_stream(device.cuda_stream())`).

use candle_core::cuda_backend::cudarc::driver::DevicePtr as _;
use candle_core::{DType, Storage, Tensor};
use half::bf16;
use moegen_runtime::prelude::*;

use crate::block::candle;
use crate::error::MoeBlockError;

/// The device address and byte length of a contiguous CUDA tensor's elements.
fn slice_of<T: candle_core::cuda_backend::CudaDType>(
    input: &'static str,
    t: &Tensor,
    stream: &candle_core::cuda_backend::cudarc::driver::CudaStream,
) -> Result<DeviceSlice, MoeBlockError> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cuda) = &*storage else {
        return Err(MoeBlockError::Device {
            input,
            actual: format!("{:?}", t.device().location()),
            expected: "a CUDA device".into(),
        });
    };
    let slice = cuda.as_cuda_slice::<T>().map_err(candle)?;
    // cudarc's access record is dropped before moegen launches: candle runs every operation
    // of a device on this one stream, so stream order alone orders them.
    let (base, _record) = slice.device_ptr(stream);
    let elem = std::mem::size_of::<T>() as u64;
    let ptr = base + layout.start_offset() as u64 * elem;
    Ok(DeviceSlice::new(DevicePtr(ptr), layout.shape().elem_count() as u64 * elem))
}

/// Runs `layer` over candle's CUDA tensors; allocates only the output (through candle) and
/// waits for nothing.
pub(crate) fn forward(
    b: &mut dyn Backend,
    layer: &MoeLayer,
    ws: &Workspace,
    (xs, ids, weights): (&Tensor, &Tensor, &Tensor),
    tokens: usize,
    stream: &candle_core::cuda_backend::cudarc::driver::CudaStream,
) -> Result<Tensor, MoeBlockError> {
    let hidden = xs.dims().last().copied().unwrap_or(0);
    let xs = xs.contiguous().map_err(candle)?;
    // The kernels overwrite every element of the output.
    let out = Tensor::zeros((tokens, hidden), DType::BF16, xs.device()).map_err(candle)?;
    let io = ForwardIo {
        tokens,
        activations: slice_of::<bf16>("xs", &xs, stream)?,
        expert_ids: slice_of::<i32>("topk_ids", ids, stream)?,
        expert_weights: slice_of::<f32>("topk_weights", weights, stream)?,
        output: slice_of::<bf16>("output", &out, stream)?,
    };
    layer.forward(b, ws, &io)?;
    Ok(out)
}
