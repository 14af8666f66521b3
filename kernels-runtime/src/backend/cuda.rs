#![allow(unsafe_code)] // the driver FFI: each unsafe block says why it is sound
//! The CUDA backend (feature `cuda`): cudarc with the driver loaded at run time, so building
//! needs no CUDA toolkit. PTX modules are JIT-compiled by the driver on first launch.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule, CudaSlice, CudaStream, DevicePtr as _};
use cudarc::nvrtc::Ptx;

use moegen_dsl::abi::{KernelInfo, SimtTarget};

use super::{Backend, BackendError, DevicePtr, KernelArg, LaunchShape, TensorMapSpec, TmaElement};

/// A launch attribute with every byte zero (the C API's `{0}` initializer).
fn unsafe_zeroed_attribute() -> cudarc::driver::sys::CUlaunchAttribute {
    // SAFETY: CUlaunchAttribute is a plain C struct/union of integers, for which all-zero bytes
    // are a valid value.
    unsafe { std::mem::zeroed() }
}

fn cuda_err(e: impl std::fmt::Debug) -> BackendError {
    BackendError::Cuda(format!("{e:?}"))
}

/// One CUDA device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    buffers: HashMap<u64, CudaSlice<u8>>,
    modules: HashMap<usize, Arc<CudaModule>>,
    target: SimtTarget,
    sm_count: u32,
    /// Device name.
    pub name: String,
    /// Compute capability.
    pub compute_capability: (i32, i32),
}

impl CudaBackend {
    /// Opens device `ordinal`; picks the sm90 or sm100 kernel flavour from its capability.
    pub fn new(ordinal: usize) -> Result<Self, BackendError> {
        let ctx = CudaContext::new(ordinal).map_err(cuda_err)?;
        let stream = ctx.default_stream();
        let compute_capability = ctx.compute_capability().map_err(cuda_err)?;
        let target = match compute_capability.0 {
            9 => SimtTarget::Sm90a,
            10 => SimtTarget::Sm100f,
            other => {
                return Err(BackendError::Cuda(format!(
                    "compute capability {other}.x has no moegen kernels"
                )));
            }
        };
        let name = ctx.name().map_err(cuda_err)?;
        let sm_count = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
            .map_err(cuda_err)?;
        Ok(Self {
            ctx,
            stream,
            buffers: HashMap::new(),
            modules: HashMap::new(),
            target,
            sm_count: u32::try_from(sm_count).unwrap_or(1).max(1),
            name,
            compute_capability,
        })
    }

    fn buffer(&mut self, ptr: DevicePtr) -> Result<&mut CudaSlice<u8>, BackendError> {
        self.buffers.get_mut(&ptr.0).ok_or_else(|| {
            BackendError::Usage(format!("{:#x} is not the start of an allocation", ptr.0))
        })
    }
}

impl Backend for CudaBackend {
    fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, BackendError> {
        let s = self.stream.alloc_zeros::<u8>(bytes.max(1)).map_err(cuda_err)?;
        let addr = {
            let (p, _sync) = s.device_ptr(&self.stream);
            p
        };
        self.buffers.insert(addr, s);
        Ok(DevicePtr(addr))
    }

    fn upload(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), BackendError> {
        let stream = self.stream.clone();
        let buf = self.buffer(ptr)?;
        if bytes.len() > buf.len() {
            return Err(BackendError::Usage(format!(
                "upload of {} B into {} B",
                bytes.len(),
                buf.len()
            )));
        }
        let mut view = buf.slice_mut(0..bytes.len());
        stream.memcpy_htod(bytes, &mut view).map_err(cuda_err)
    }

    fn download(&mut self, ptr: DevicePtr, len: usize) -> Result<Vec<u8>, BackendError> {
        let stream = self.stream.clone();
        let buf = self.buffer(ptr)?;
        if len > buf.len() {
            return Err(BackendError::Usage(format!("download of {len} B from {} B", buf.len())));
        }
        let mut out = vec![0u8; len];
        stream.memcpy_dtoh(&buf.slice(0..len), &mut out).map_err(cuda_err)?;
        stream.synchronize().map_err(cuda_err)?;
        Ok(out)
    }

    fn simt_target(&self) -> SimtTarget {
        self.target
    }

    fn sm_count(&self) -> u32 {
        self.sm_count
    }

    fn launch(
        &mut self,
        info: &'static KernelInfo,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        use cudarc::driver::sys;
        let kernel = info.name;
        let cluster = shape.cluster;
        let key = info.ptx.as_ptr() as usize;
        if let std::collections::hash_map::Entry::Vacant(slot) = self.modules.entry(key) {
            slot.insert(self.ctx.load_module(Ptx::from_src(info.ptx)).map_err(cuda_err)?);
        }
        let module = self
            .modules
            .get(&key)
            .ok_or_else(|| BackendError::Cuda(format!("{kernel}: module not loaded")))?;
        let f = module.load_function(kernel).map_err(cuda_err)?;
        if shape.dynamic_smem > 48 * 1024 {
            f.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shape.dynamic_smem as i32,
            )
            .map_err(cuda_err)?;
        }
        // Argument storage that outlives the launch; the driver reads each through a pointer.
        let mut held: Vec<Vec<u8>> = args
            .iter()
            .map(|a| match a {
                KernelArg::U32(v) => v.to_le_bytes().to_vec(),
                KernelArg::Ptr(p) => p.0.to_le_bytes().to_vec(),
                // Tensor maps must be 64-byte aligned: copied into an aligned buffer below.
                KernelArg::TensorMap(_) => Vec::new(),
            })
            .collect();
        let mut aligned: Vec<Box<sys::CUtensorMap>> = Vec::new();
        let mut ptrs: Vec<*mut std::ffi::c_void> = Vec::with_capacity(held.len());
        for (a, h) in args.iter().zip(held.iter_mut()) {
            if let KernelArg::TensorMap(b) = a {
                let mut m = Box::new(sys::CUtensorMap { opaque: [0; 16] });
                for (i, w) in m.opaque.iter_mut().enumerate() {
                    *w = u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
                }
                ptrs.push(&mut *m as *mut sys::CUtensorMap as *mut std::ffi::c_void);
                aligned.push(m);
            } else {
                ptrs.push(h.as_mut_ptr() as *mut std::ffi::c_void);
            }
        }
        let mut attr: sys::CUlaunchAttribute = unsafe_zeroed_attribute();
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = cluster;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = 1;
        let cfg = sys::CUlaunchConfig {
            gridDimX: shape.grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: shape.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shape.dynamic_smem,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: u32::from(cluster > 1),
        };
        self.ctx.bind_to_thread().map_err(cuda_err)?;
        // SAFETY: `ptrs` holds one pointer per kernel parameter, in the manifest's order, each
        // to storage of the parameter's size (u32/u64/f32 little-endian bytes, or a 64-byte
        // aligned CUtensorMap) that lives until after the synchronize below; `cfg` and `attr`
        // outlive the call; the function belongs to this context.
        let r = unsafe {
            sys::cuLaunchKernelEx(&cfg, f.cu_function(), ptrs.as_mut_ptr(), std::ptr::null_mut())
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(BackendError::Cuda(format!("cuLaunchKernelEx({kernel}): {r:?}")));
        }
        self.stream.synchronize().map_err(cuda_err)?;
        drop(aligned);
        Ok(())
    }

    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<[u8; 128], BackendError> {
        use cudarc::driver::sys;
        let rank = spec.dims.len();
        if rank == 0 || rank > 5 || spec.strides.len() + 1 != rank || spec.box_dims.len() != rank {
            return Err(BackendError::Usage(format!(
                "tensor map of rank {rank} with mismatched strides or box"
            )));
        }
        let dtype = match spec.element {
            TmaElement::U8 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
            TmaElement::U16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT16,
            TmaElement::U4Packed => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B,
        };
        let swizzle = match spec.swizzle {
            0 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
            32 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
            64 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
            128 => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            s => return Err(BackendError::Usage(format!("swizzle {s}"))),
        };
        let elem_strides = vec![1u32; rank];
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        self.ctx.bind_to_thread().map_err(cuda_err)?;
        // SAFETY: every pointer refers to a live array of `rank` (dims, box, element strides) or
        // `rank - 1` (strides) elements, checked above; `map` is a valid output location; the
        // global address is a device pointer of this backend.
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
            return Err(BackendError::Cuda(format!("cuTensorMapEncodeTiled: {r:?}")));
        }
        let mut out = [0u8; 128];
        for (chunk, w) in out.chunks_exact_mut(8).zip(map.opaque) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        Ok(out)
    }
}
