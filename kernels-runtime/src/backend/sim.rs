//! The simulator backend.

use std::collections::HashMap;

use moegen_sim::{Arg, Device, LaunchConfig, Module, TensorMap, TmaDataType, launch, parse_module};

use super::{Backend, BackendError, DevicePtr, KernelArg, LaunchShape, TensorMapSpec, TmaElement};

/// Runs kernels in moegen-sim.
#[derive(Default)]
pub struct SimBackend {
    device: Device,
    modules: HashMap<usize, Module>,
    replaced: HashMap<String, Module>,
    hopper: bool,
    seed: Option<u64>,
    /// Thread-instructions executed so far.
    pub thread_instructions: u64,
    /// Block-scaled MMA instructions executed so far.
    pub mma_instructions: u64,
}

impl SimBackend {
    /// A fresh simulated device running the SM100 flavour of the SIMT kernels.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh simulated device whose warp schedule is fuzzed with `seed`.
    pub fn fuzzed(seed: u64) -> Self {
        Self { seed: Some(seed), ..Self::default() }
    }

    /// A fresh simulated device running the sm_90a flavour, to compare with an H100/H200.
    pub fn hopper() -> Self {
        Self { hopper: true, ..Self::default() }
    }

    /// Runs `ptx` whenever `kernel` is launched, instead of the generated module: fault
    /// injection, so tests can prove that a planted defect is caught.
    pub fn replace_kernel(&mut self, kernel: &str, ptx: &str) -> Result<(), BackendError> {
        let m = parse_module(ptx).map_err(|e| BackendError::Sim(e.to_string()))?;
        self.replaced.insert(kernel.to_owned(), m);
        Ok(())
    }
}

impl Backend for SimBackend {
    fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, BackendError> {
        Ok(DevicePtr(self.device.alloc(bytes)))
    }

    fn upload(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), BackendError> {
        let dst = self.device.slice_mut(ptr.0, bytes.len()).ok_or_else(|| {
            BackendError::Usage(format!(
                "upload of {} B to {:#x} is out of bounds",
                bytes.len(),
                ptr.0
            ))
        })?;
        dst.copy_from_slice(bytes);
        Ok(())
    }

    fn download(&mut self, ptr: DevicePtr, len: usize) -> Result<Vec<u8>, BackendError> {
        self.device.download(ptr.0, len).ok_or_else(|| {
            BackendError::Usage(format!("download of {len} B from {:#x} is out of bounds", ptr.0))
        })
    }

    fn launch(
        &mut self,
        ptx: &'static str,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        self.launch_cluster(ptx, kernel, shape, 1, args)
    }

    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<Vec<u8>, BackendError> {
        let map = TensorMap {
            dtype: match spec.element {
                TmaElement::U8 => TmaDataType::U8,
                TmaElement::U16 => TmaDataType::U16,
                TmaElement::U4Packed => TmaDataType::U4Packed,
            },
            address: spec.address.0,
            dims: spec.dims.clone(),
            strides: spec.strides.clone(),
            box_dims: spec.box_dims.clone(),
            swizzle: spec.swizzle,
        };
        map.encode().map(|b| b.to_vec()).map_err(BackendError::Usage)
    }

    fn launch_cluster(
        &mut self,
        ptx: &'static str,
        kernel: &str,
        shape: LaunchShape,
        cluster: u32,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        // Modules are keyed by the address of their static text: parsed once.
        let key = ptx.as_ptr() as usize;
        if let std::collections::hash_map::Entry::Vacant(slot) = self.modules.entry(key) {
            slot.insert(parse_module(ptx).map_err(|e| BackendError::Sim(e.to_string()))?);
        }
        let module = self.replaced.get(kernel).unwrap_or(&self.modules[&key]);
        let args: Vec<Arg> = args
            .iter()
            .map(|a| match a {
                KernelArg::U32(v) => Arg::U32(*v),
                KernelArg::Ptr(p) => Arg::U64(p.0),
                KernelArg::F32(v) => Arg::F32(*v),
                KernelArg::Bytes(b) => Arg::Bytes(b.clone()),
            })
            .collect();
        let mut cfg = LaunchConfig::new(shape.grid, shape.block, shape.dynamic_smem as usize);
        cfg.cluster = cluster;
        cfg.seed = self.seed;
        let stats = launch(&mut self.device, module, kernel, &cfg, &args)
            .map_err(|e| BackendError::Sim(e.to_string()))?;
        self.thread_instructions += stats.thread_instructions;
        self.mma_instructions += stats.mma_instructions;
        Ok(())
    }

    fn kernel_tag(&self) -> &'static str {
        if self.hopper { "sm90" } else { "sm100" }
    }
}
