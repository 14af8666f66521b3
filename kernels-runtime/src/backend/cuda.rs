#![allow(unsafe_code)] // the driver FFI: each unsafe block says why it is sound
//! The CUDA backend (feature `cuda`): cudarc with the driver loaded at run time, so building
//! needs no CUDA toolkit. PTX modules are JIT-compiled by the driver on first launch.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaModule, CudaSlice, CudaStream, DevicePtr as _, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use super::{Backend, BackendError, DevicePtr, KernelArg, LaunchShape, TensorMapSpec};

fn cuda_err(e: impl std::fmt::Debug) -> BackendError {
    BackendError::Cuda(format!("{e:?}"))
}

/// One CUDA device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    buffers: HashMap<u64, CudaSlice<u8>>,
    modules: HashMap<usize, Arc<CudaModule>>,
    tag: &'static str,
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
        let tag = match compute_capability.0 {
            9 => "sm90",
            10 => "sm100",
            other => {
                return Err(BackendError::Cuda(format!(
                    "compute capability {other}.x has no moegen kernels"
                )));
            }
        };
        let name = ctx.name().map_err(cuda_err)?;
        Ok(Self {
            ctx,
            stream,
            buffers: HashMap::new(),
            modules: HashMap::new(),
            tag,
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

/// Argument values kept alive while the driver reads them.
enum Held {
    U32(u32),
    U64(u64),
    F32(f32),
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

    fn launch(
        &mut self,
        ptx: &'static str,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        let key = ptx.as_ptr() as usize;
        if let std::collections::hash_map::Entry::Vacant(slot) = self.modules.entry(key) {
            slot.insert(self.ctx.load_module(Ptx::from_src(ptx)).map_err(cuda_err)?);
        }
        let f = self.modules[&key].load_function(kernel).map_err(cuda_err)?;
        let held: Vec<Held> = args
            .iter()
            .map(|a| match a {
                KernelArg::U32(v) => Ok(Held::U32(*v)),
                KernelArg::Ptr(p) => Ok(Held::U64(p.0)),
                KernelArg::F32(v) => Ok(Held::F32(*v)),
                KernelArg::Bytes(_) => Err(BackendError::Usage(
                    "by-value struct arguments are not supported yet".into(),
                )),
            })
            .collect::<Result<_, _>>()?;
        let mut builder = self.stream.launch_builder(&f);
        for h in &held {
            match h {
                Held::U32(v) => builder.arg(v),
                Held::U64(v) => builder.arg(v),
                Held::F32(v) => builder.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (shape.grid, 1, 1),
            block_dim: (shape.block, 1, 1),
            shared_mem_bytes: shape.dynamic_smem,
        };
        // SAFETY: the arguments match the kernel's parameter list as the manifest declares it
        // (device_ops builds them from the same list), every pointer argument is the start of
        // a live allocation of this backend sized by the caller for the kernel, and `held`
        // outlives the launch, which is synchronized before returning.
        unsafe { builder.launch(cfg) }.map_err(cuda_err)?;
        self.stream.synchronize().map_err(cuda_err)
    }

    fn kernel_tag(&self) -> &'static str {
        self.tag
    }

    fn launch_cluster(
        &mut self,
        ptx: &'static str,
        kernel: &str,
        shape: LaunchShape,
        cluster: u32,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        if cluster != 1 {
            // Cluster launches (cuLaunchKernelEx) arrive with the SM100 GEMM path.
            return Err(BackendError::Usage("cluster launches are not wired to CUDA yet".into()));
        }
        self.launch(ptx, kernel, shape, args)
    }

    fn encode_tensor_map(&mut self, _spec: &TensorMapSpec) -> Result<Vec<u8>, BackendError> {
        Err(BackendError::Usage("cuTensorMapEncodeTiled is not wired to CUDA yet".into()))
    }
}
