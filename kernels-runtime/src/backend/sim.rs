//! The simulator backend (feature `sim`): runs the generated kernels in moegen-sim. Work
//! executes when issued (the stream is the call order), so "asynchronous" operations are
//! complete on return; graph capture records launches and memsets and replays them in order.

use std::collections::HashMap;

use moegen_dsl::abi::{KernelInfo, SimtTarget};
use moegen_dsl::gpu::clusters_on_gpcs;
use moegen_sim::{Arg, Device, LaunchConfig, Module, TensorMap, TmaDataType, launch, parse_module};

use super::{
    Backend, BackendError, BackendStats, DevicePtr, EventId, GraphId, KernelArg, LaunchShape,
    TensorMapSpec, TmaElement, UsageError,
};

/// SMs the simulated device reports unless told otherwise (a B200's count).
pub const DEFAULT_SM_COUNT: u32 = 148;

/// One recorded operation of a captured graph.
#[derive(Clone, Debug)]
enum Recorded {
    Launch { kernel: &'static KernelInfo, shape: LaunchShape, args: Vec<KernelArg> },
    Memset { ptr: DevicePtr, value: u8, bytes: usize },
}

/// Runs kernels in moegen-sim.
pub struct SimBackend {
    device: Device,
    modules: HashMap<usize, Module>,
    replaced: HashMap<String, Module>,
    target: SimtTarget,
    sm_count: u32,
    /// SMs of each GPC, when set: clusters pack per GPC (`resident_clusters`).
    gpc_sms: Option<Vec<u32>>,
    seed: Option<u64>,
    capture: Option<Vec<Recorded>>,
    /// Recorded graphs; `None` once dropped (ids are never reused).
    graphs: Vec<Option<Vec<Recorded>>>,
    events: Vec<u64>,
    stats: BackendStats,
    profile: bool,
    /// Per-launch instruction profiles (kernel name, profile), when enabled with
    /// [`SimBackend::with_profile`].
    pub profiles: Vec<(&'static str, moegen_sim::Profile)>,
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
            gpc_sms: None,
            seed: None,
            capture: None,
            graphs: Vec::new(),
            events: Vec::new(),
            stats: BackendStats::default(),
            profile: false,
            profiles: Vec::new(),
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
    /// SMs means fewer simulated CTAs, each looping over more work), as one pool: GPCs given
    /// before ([`Self::with_gpcs`]) are dropped.
    pub fn with_sm_count(mut self, sm_count: u32) -> Self {
        self.sm_count = sm_count.max(1);
        self.gpc_sms = None;
        self
    }

    /// The same device with its SMs in GPCs of `gpc_sms` SMs each (their sum becomes the SM
    /// count): a cluster's CTAs share a GPC, so a GPC holds ⌊its SMs × CTAs per SM /
    /// cluster⌋ clusters at once, as a GH100 does (`Backend::resident_clusters`). Without
    /// it the simulated device packs clusters over all its SMs. GPCs of no SM are left out;
    /// with none left the device keeps its SM count as one pool.
    pub fn with_gpcs(mut self, gpc_sms: &[u32]) -> Self {
        let gpcs: Vec<u32> = gpc_sms.iter().copied().filter(|&s| s > 0).collect();
        if gpcs.is_empty() {
            self.gpc_sms = None;
        } else {
            self.sm_count = gpcs.iter().sum();
            self.gpc_sms = Some(gpcs);
        }
        self
    }

    /// The same device recording every launch's per-warp instruction profile into
    /// [`SimBackend::profiles`] (what `gen stats` reads per warp role).
    pub fn with_profile(mut self) -> Self {
        self.profile = true;
        self
    }

    /// Runs `ptx` whenever `kernel` is launched, instead of the generated module: fault
    /// injection, so tests can prove that a planted defect is caught.
    pub fn replace_kernel(&mut self, kernel: &str, ptx: &str) -> Result<(), BackendError> {
        let m = parse_module(ptx)?;
        self.replaced.insert(kernel.to_owned(), m);
        Ok(())
    }

    fn not_capturing(&self, what: &'static str) -> Result<(), BackendError> {
        if self.capture.is_some() {
            return Err(UsageError::DuringCapture { operation: what }.into());
        }
        Ok(())
    }

    fn run_launch(
        &mut self,
        kernel: &'static KernelInfo,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        // Modules are keyed by the address of their static text: parsed once.
        let key = kernel.ptx.as_ptr() as usize;
        let module = match self.replaced.get(kernel.name) {
            Some(m) => m,
            None => match self.modules.entry(key) {
                std::collections::hash_map::Entry::Occupied(slot) => slot.into_mut(),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(parse_module(kernel.ptx)?)
                }
            },
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
        cfg.profile = self.profile;
        let stats = launch(&mut self.device, module, kernel.name, &cfg, &args)?;
        self.thread_instructions += stats.thread_instructions;
        self.mma_instructions += stats.mma_instructions;
        if let Some(p) = stats.profile {
            self.profiles.push((kernel.name, p));
        }
        self.stats.launches += 1;
        Ok(())
    }

    fn run_memset(&mut self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<(), BackendError> {
        let dst = self.device.slice_mut(ptr.0, bytes).ok_or(UsageError::OutOfBounds {
            operation: "memset",
            ptr: ptr.0,
            bytes,
        })?;
        dst.fill(value);
        Ok(())
    }
}

impl Backend for SimBackend {
    fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, BackendError> {
        self.not_capturing("allocation")?;
        self.stats.allocations += 1;
        Ok(DevicePtr(self.device.alloc(bytes)))
    }

    fn free(&mut self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.not_capturing("free")?;
        if !self.device.free(ptr.0) {
            return Err(UsageError::NotAnAllocation { ptr: ptr.0 }.into());
        }
        self.stats.frees += 1;
        // Counted as the CUDA backend's free is: it waits for the stream.
        self.stats.synchronizations += 1;
        Ok(())
    }

    fn upload(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), BackendError> {
        self.not_capturing("upload")?;
        let dst = self.device.slice_mut(ptr.0, bytes.len()).ok_or(UsageError::OutOfBounds {
            operation: "upload",
            ptr: ptr.0,
            bytes: bytes.len(),
        })?;
        dst.copy_from_slice(bytes);
        self.stats.uploads += 1;
        // Counted as the CUDA backend's upload is: it waits for the stream.
        self.stats.synchronizations += 1;
        Ok(())
    }

    fn download(&mut self, ptr: DevicePtr, len: usize) -> Result<Vec<u8>, BackendError> {
        self.not_capturing("download")?;
        self.stats.synchronizations += 1;
        let out = self.device.download(ptr.0, len);
        Ok(out.ok_or(UsageError::OutOfBounds { operation: "download", ptr: ptr.0, bytes: len })?)
    }

    fn launch(
        &mut self,
        kernel: &'static KernelInfo,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        if let Some(rec) = &mut self.capture {
            rec.push(Recorded::Launch { kernel, shape, args: args.to_vec() });
            return Ok(());
        }
        self.run_launch(kernel, shape, args)
    }

    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<[u8; 128], BackendError> {
        let map = TensorMap {
            dtype: match spec.element {
                TmaElement::U8 => TmaDataType::U8,
                TmaElement::U16 => TmaDataType::U16,
                TmaElement::U4Packed => TmaDataType::U4Packed,
                TmaElement::U4Padded => TmaDataType::U4Padded,
            },
            address: spec.address.0,
            dims: spec.dims.clone(),
            strides: spec.strides.clone(),
            box_dims: spec.box_dims.clone(),
            swizzle: spec.swizzle,
        };
        map.encode().map_err(|e| UsageError::from(e).into())
    }

    fn simt_target(&self) -> SimtTarget {
        self.target
    }

    fn sm_count(&self) -> u32 {
        self.sm_count
    }

    fn resident_clusters(
        &mut self,
        kernel: &'static KernelInfo,
        _dynamic_smem: u32,
    ) -> Result<Option<u32>, BackendError> {
        // The simulator runs any grid; what a GPC would hold follows from the kernel's
        // resource model (its CTAs per SM), as on the hardware from its registers and memory.
        let f = &kernel.launch;
        Ok(self.gpc_sms.as_deref().map(|g| clusters_on_gpcs(g, f.ctas_per_sm, f.cluster)))
    }

    fn memset(&mut self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<(), BackendError> {
        if let Some(rec) = &mut self.capture {
            rec.push(Recorded::Memset { ptr, value, bytes });
            return Ok(());
        }
        self.run_memset(ptr, value, bytes)
    }

    fn synchronize(&mut self) -> Result<(), BackendError> {
        self.not_capturing("synchronize")?;
        self.stats.synchronizations += 1;
        Ok(())
    }

    fn stats(&self) -> BackendStats {
        self.stats
    }

    fn begin_capture(&mut self) -> Result<(), BackendError> {
        self.not_capturing("begin_capture")?;
        self.capture = Some(Vec::new());
        Ok(())
    }

    fn end_capture(&mut self) -> Result<GraphId, BackendError> {
        let rec = self.capture.take().ok_or(UsageError::NotCapturing)?;
        if rec.is_empty() {
            return Err(UsageError::EmptyCapture.into());
        }
        self.graphs.push(Some(rec));
        Ok(GraphId(self.graphs.len() - 1))
    }

    fn drop_graph(&mut self, graph: GraphId) -> Result<(), BackendError> {
        match self.graphs.get_mut(graph.0).and_then(Option::take) {
            Some(_) => Ok(()),
            None => Err(UsageError::UnknownGraph { graph: graph.0 }.into()),
        }
    }

    fn replay(&mut self, graph: GraphId) -> Result<(), BackendError> {
        self.not_capturing("replay")?;
        let ops = self
            .graphs
            .get(graph.0)
            .and_then(Option::clone)
            .ok_or(UsageError::UnknownGraph { graph: graph.0 })?;
        for op in ops {
            match op {
                Recorded::Launch { kernel, shape, args } => {
                    self.run_launch(kernel, shape, &args)?
                }
                Recorded::Memset { ptr, value, bytes } => self.run_memset(ptr, value, bytes)?,
            }
        }
        self.stats.replays += 1;
        Ok(())
    }

    fn record_event(&mut self) -> Result<EventId, BackendError> {
        self.events.push(self.thread_instructions);
        Ok(EventId(self.events.len() - 1))
    }

    fn elapsed_ms(&mut self, start: EventId, end: EventId) -> Result<f32, BackendError> {
        self.not_capturing("elapsed_ms")?;
        let a = *self.events.get(start.0).ok_or(UsageError::UnknownEvent { event: start.0 })?;
        let b = *self.events.get(end.0).ok_or(UsageError::UnknownEvent { event: end.0 })?;
        self.stats.synchronizations += 1;
        Ok(b.saturating_sub(a) as f32 * 1e-9)
    }

    fn device_key(&self) -> String {
        format!("moegen-sim {} {} SMs", self.target, self.sm_count)
    }
}
