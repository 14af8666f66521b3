//! Tensor maps encoded by the driver (`cuTensorMapEncodeTiled`), from the backend-neutral
//! [`TensorMapSpec`].

use cudarc::driver::{CudaContext, DriverError, sys};

use super::error::{CudaError, driver};
use crate::backend::{BackendError, TensorMapSpec, TmaElement, UsageError};

/// Encodes `spec` with the driver's `cuTensorMapEncodeTiled` in `ctx`.
pub(super) fn encode(ctx: &CudaContext, spec: &TensorMapSpec) -> Result<[u8; 128], BackendError> {
    let rank = spec.dims.len();
    if rank == 0 || rank > 5 || spec.strides.len() + 1 != rank || spec.box_dims.len() != rank {
        let (strides, box_rank) = (spec.strides.len(), spec.box_dims.len());
        return Err(UsageError::TensorMapShape { rank, strides, box_rank }.into());
    }
    let dtype = match spec.element {
        TmaElement::U8 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        TmaElement::U16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
        TmaElement::U4Packed => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B,
        TmaElement::U4Padded => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B,
    };
    let swizzle = match spec.swizzle {
        0 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        bytes => return Err(UsageError::Swizzle { bytes }.into()),
    };
    let elem_strides = vec![1u32; rank];
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
    // SAFETY: every pointer refers to a live array of `rank` (dims, box, element strides) or
    // `rank - 1` (strides) elements, checked above; `map` is a valid output location; the
    // encoder only reads host memory and does not dereference the global address.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            dtype,
            rank as u32,
            spec.address.0 as *mut std::ffi::c_void,
            spec.dims.as_ptr(),
            spec.strides.as_ptr(),
            spec.box_dims.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r != sys::CUresult::CUDA_SUCCESS {
        let source = DriverError(r);
        return Err(CudaError::Driver { call: "cuTensorMapEncodeTiled", source }.into());
    }
    let mut out = [0u8; 128];
    for (chunk, w) in out.chunks_exact_mut(8).zip(map.opaque) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    Ok(out)
}
