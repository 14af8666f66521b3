//! The simulator backend.

use std::collections::HashMap;

use moegen_dsl::abi::{KernelInfo, SimtTarget};
use moegen_sim::{Arg, Device, LaunchConfig, Module, TensorMap, TmaDataType, launch, parse_module};

use super::{Backend, BackendError, DevicePtr, KernelArg, LaunchShape, TensorMapSpec, TmaElement};

/// SMs the simulated device reports unless told otherwise (a B200's count).
pub const DEFAULT_SM_COUNT: u32 = 148;

/// Runs kernels in moegen-sim.
pub struct SimBackend {
    device: Device,
    modules: HashMap<usize, Module>,
    replaced: HashMap<String, Module>,
    target: SimtTarget,
    sm_count: u32,
    seed: Option<u64>,
    /// Thread-instructions executed so far.
    pub thread_instructions: u64,
    /// Block-scaled MMA instructions executed so far.
    pub mma_instructions: u64,
}

impl Default for SimBackend {
    fn default() -> Self {
        Self {
            device: Device::default(),
            modules: HashMap::new(),
            replaced: HashMap::new(),
            target: SimtTarget::Sm100f,
            sm_count: DEFAULT_SM_COUNT,
            seed: None,
            thread_instructions: 0,
            mma_instructions: 0,
        }
    }
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
        Self { target: SimtTarget::Sm90a, ..Self::default() }
    }

    /// The same device reporting `sm_count` SMs (persistent grids are sized from it; fewer
    /// SMs means fewer simulated CTAs, each looping over more work).
    pub fn with_sm_count(mut self, sm_count: u32) -> Self {
        self.sm_count = sm_count.max(1);
        self
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

    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<[u8; 128], BackendError> {
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
        map.encode().map_err(BackendError::Usage)
    }

    fn launch(
        &mut self,
        kernel: &'static KernelInfo,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        // Modules are keyed by the address of their static text: parsed once.
        let key = kernel.ptx.as_ptr() as usize;
        if let std::collections::hash_map::Entry::Vacant(slot) = self.modules.entry(key) {
            slot.insert(parse_module(kernel.ptx).map_err(|e| BackendError::Sim(e.to_string()))?);
        }
        let module = match self.replaced.get(kernel.name) {
            Some(m) => m,
            None => self
                .modules
                .get(&key)
                .ok_or_else(|| BackendError::Sim(format!("{} was not parsed", kernel.name)))?,
        };
        let args: Vec<Arg> = args
            .iter()
            .map(|a| match a {
                KernelArg::U32(v) => Arg::U32(*v),
                KernelArg::Ptr(p) => Arg::U64(p.0),
                KernelArg::TensorMap(b) => Arg::Bytes(b.to_vec()),
            })
            .collect();
        let mut cfg = LaunchConfig::new(shape.grid, shape.block, shape.dynamic_smem as usize);
        cfg.cluster = shape.cluster;
        cfg.seed = self.seed;
        let stats = launch(&mut self.device, module, kernel.name, &cfg, &args)
            .map_err(|e| BackendError::Sim(e.to_string()))?;
        self.thread_instructions += stats.thread_instructions;
        self.mma_instructions += stats.mma_instructions;
        Ok(())
    }

    fn simt_target(&self) -> SimtTarget {
        self.target
    }

    fn sm_count(&self) -> u32 {
        self.sm_count
    }
}
