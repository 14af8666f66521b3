#![allow(unsafe_code)] // the driver FFI: each unsafe block says why it is sound
//! The CUDA backend (feature `cuda`): the driver API through cudarc, with the library loaded
//! at run time, so building needs no CUDA toolkit. PTX modules are JIT-compiled by the
//! driver on first launch. Work goes on one stream — the backend's own, or the caller's
//! ([`CudaBackend::on_stream`]) — and launches never wait for the device.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaModule, CudaStream, DriverError,
    LaunchConfig, result, sys,
};
use cudarc::nvrtc::Ptx;

use moegen_dsl::abi::{KernelInfo, SimtTarget};

use super::{
    Backend, BackendError, BackendStats, DevicePtr, EventId, GraphId, KernelArg, LaunchShape,
    TensorMapSpec, UsageError,
};

mod error;
mod tensor_map;

pub use error::CudaError;
use error::driver;

/// A launch attribute with every byte zero (the C API's `{0}` initializer).
fn zeroed_attribute() -> sys::CUlaunchAttribute {
    // SAFETY: CUlaunchAttribute is a plain C struct/union of integers, for which all-zero bytes
    // are a valid value.
    unsafe { std::mem::zeroed() }
}

/// One kernel argument's bytes where the driver reads them during the launch call.
enum ArgStorage {
    /// A `.u32` or `.u64`, little-endian in 8 bytes.
    Word([u8; 8]),
    /// A tensor map: passed from 64-byte aligned storage.
    Map(Box<sys::CUtensorMap>),
}

impl ArgStorage {
    fn new(a: &KernelArg) -> Self {
        match a {
            KernelArg::U32(v) => {
                let mut w = [0u8; 8];
                w[..4].copy_from_slice(&v.to_le_bytes());
                ArgStorage::Word(w)
            }
            KernelArg::Ptr(p) => ArgStorage::Word(p.0.to_le_bytes()),
            KernelArg::TensorMap(b) => {
                let mut m = Box::new(sys::CUtensorMap { opaque: [0; 16] });
                for (w, chunk) in m.opaque.iter_mut().zip(b.chunks_exact(8)) {
                    let mut bytes = [0u8; 8];
                    bytes.copy_from_slice(chunk);
                    *w = u64::from_le_bytes(bytes);
                }
                ArgStorage::Map(m)
            }
        }
    }

    fn ptr(&mut self) -> *mut std::ffi::c_void {
        match self {
            ArgStorage::Word(w) => w.as_mut_ptr().cast(),
            ArgStorage::Map(m) => (&mut **m as *mut sys::CUtensorMap).cast(),
        }
    }
}

/// `MOEGEN_NO_CUDA` set to anything but empty or `0`: behave as if no driver were installed
/// (CPU-only runs on a GPU machine, and the tests of the no-driver path).
pub const NO_CUDA_ENV: &str = "MOEGEN_NO_CUDA";

/// Whether the CUDA driver library can be loaded (and `MOEGEN_NO_CUDA` does not hide it);
/// without it every CUDA call would abort.
pub fn driver_present() -> bool {
    if std::env::var_os(NO_CUDA_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return false;
    }
    super::library::loadable(super::library::DRIVER)
}

/// One CUDA device and the stream work is ordered on.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Allocations this backend made (address → bytes); freed on drop.
    owned: HashMap<u64, usize>,
    modules: HashMap<usize, Arc<CudaModule>>,
    /// `resident_clusters`' answers, by kernel text and dynamic shared memory.
    resident: HashMap<(usize, u32), u32>,
    /// Each graph with the kernel launches it holds (counted on replay, as the simulator does).
    /// `None` once dropped (ids are never reused).
    graphs: Vec<Option<(CudaGraph, u64)>>,
    /// Launches recorded by the capture in progress.
    captured_launches: u64,
    events: Vec<CudaEvent>,
    capturing: bool,
    stats: BackendStats,
    target: SimtTarget,
    sm_count: u32,
    driver_version: i32,
    /// Device name.
    pub name: String,
    /// Compute capability.
    pub compute_capability: (i32, i32),
}

// SAFETY: the backend is not `Send` by itself only because cudarc's `CudaGraph` holds raw
// driver handles (`CUgraph`, `CUgraphExec`); its context, streams, modules, events and the
// addresses it owns are plain handles too. CUDA driver handles are not tied to the thread
// that made them: every driver call here that needs a context binds the backend's context to
// the calling thread first (cudarc's safe calls do the same), and the rest take a stream or
// an address. Every method takes `&mut self` or only reads, so moving a backend to another
// thread never shares it. Engines keep a layer's backend behind a mutex in a `Send` model
// (moegen-candle's `MoeBlock`, the Python package's layer).
unsafe impl Send for CudaBackend {}

impl CudaBackend {
    /// Opens device `ordinal` with a stream of its own.
    pub fn new(ordinal: usize) -> Result<Self, BackendError> {
        if !driver_present() {
            return Err(CudaError::NoDriver.into());
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("cuCtxCreate"))?;
        // A created stream, not the legacy default one: graph capture refuses the latter.
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        Self::on_stream(stream)
    }

    /// Works on the caller's stream (and its context): every launch, memset and graph replay
    /// is ordered after the caller's earlier work on it.
    pub fn on_stream(stream: Arc<CudaStream>) -> Result<Self, BackendError> {
        let ctx = stream.context().clone();
        let compute_capability =
            ctx.compute_capability().map_err(driver("cuDeviceGetAttribute(compute capability)"))?;
        let target = match compute_capability.0 {
            9 => SimtTarget::Sm90a,
            10 => SimtTarget::Sm100f,
            _ => {
                let (major, minor) = compute_capability;
                return Err(CudaError::UnsupportedDevice { major, minor }.into());
            }
        };
        let name = ctx.name().map_err(driver("cuDeviceGetName"))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(driver("cuDeviceGetAttribute(SM count)"))?;
        let mut driver_version = 0i32;
        // SAFETY: writes one int through a valid pointer.
        unsafe { sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(driver("cuDriverGetVersion"))?;
        Ok(Self {
            ctx,
            stream,
            owned: HashMap::new(),
            modules: HashMap::new(),
            resident: HashMap::new(),
            graphs: Vec::new(),
            captured_launches: 0,
            events: Vec::new(),
            capturing: false,
            stats: BackendStats::default(),
            target,
            sm_count: u32::try_from(sm_count).unwrap_or(1).max(1),
            driver_version,
            name,
            compute_capability,
        })
    }

    /// Waits for the stream with the driver call itself: cudarc's `synchronize` first
    /// returns any error an earlier drop recorded on the context, without waiting, and a
    /// copy in flight must be waited for whatever else went wrong.
    fn wait_for_stream(&mut self) -> Result<(), BackendError> {
        self.stats.synchronizations += 1;
        // SAFETY: the stream belongs to this backend's context, which the caller bound to
        // this thread before queueing the work waited for.
        unsafe { result::stream::synchronize(self.stream.cu_stream()) }
            .map_err(driver("cuStreamSynchronize"))
    }

    /// The stream work is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Orders all later work on `stream` instead (a stream of the backend's context), and
    /// returns the stream used so far. For a caller whose stream changes from call to call,
    /// as a framework's "current stream" does (PyTorch captures CUDA graphs on a side
    /// stream): modules, allocations and graphs stay, only the queue changes. Nothing is
    /// waited for; ordering between the two streams is the caller's. Refused during this
    /// backend's own capture (the capture belongs to the current stream).
    pub fn set_stream(&mut self, stream: Arc<CudaStream>) -> Result<Arc<CudaStream>, BackendError> {
        self.not_capturing("set_stream")?;
        if stream.context().cu_ctx() != self.ctx.cu_ctx() {
            return Err(UsageError::ForeignStream.into());
        }
        Ok(std::mem::replace(&mut self.stream, stream))
    }

    /// `info`'s function (its module loaded on first use), allowed `dynamic_smem` bytes.
    fn function(
        &mut self,
        info: &'static KernelInfo,
        dynamic_smem: u32,
    ) -> Result<CudaFunction, BackendError> {
        let key = info.ptx.as_ptr() as usize;
        let module = match self.modules.entry(key) {
            std::collections::hash_map::Entry::Occupied(slot) => slot.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let m = self.ctx.load_module(Ptx::from_src(info.ptx));
                slot.insert(m.map_err(driver("cuModuleLoadData"))?)
            }
        };
        let f = module.load_function(info.name).map_err(driver("cuModuleGetFunction"))?;
        if dynamic_smem > 48 * 1024 {
            f.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic_smem as i32,
            )
            .map_err(driver("cuFuncSetAttribute"))?;
        }
        Ok(f)
    }

    fn not_capturing(&self, what: &'static str) -> Result<(), BackendError> {
        if self.capturing {
            return Err(UsageError::DuringCapture { operation: what }.into());
        }
        Ok(())
    }

    /// Checks that `[ptr, ptr+len)` lies in one of this backend's allocations (external
    /// pointers are the caller's to size; copies only touch our own memory).
    fn check_owned(
        &self,
        operation: &'static str,
        ptr: DevicePtr,
        len: usize,
    ) -> Result<(), BackendError> {
        let inside = self.owned.iter().any(|(&base, &bytes)| {
            ptr.0 >= base && ptr.0.checked_add(len as u64).is_some_and(|e| e <= base + bytes as u64)
        });
        if inside {
            Ok(())
        } else {
            Err(UsageError::OutOfBounds { operation, ptr: ptr.0, bytes: len }.into())
        }
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        self.graphs.clear();
        self.events.clear();
        // An error the drops above recorded must not stop the frees below.
        let _ = self.ctx.check_err();
        if self.ctx.bind_to_thread().is_ok() {
            let _ = self.stream.synchronize();
            for &ptr in self.owned.keys() {
                // SAFETY: `ptr` was returned by cuMemAlloc in this context and is freed once;
                // the stream has finished every use of it.
                let _ = unsafe { result::free_sync(ptr) };
            }
        }
    }
}

impl Backend for CudaBackend {
    fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, BackendError> {
        self.not_capturing("allocation")?;
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: plain allocation in the bound context; the pointer is owned by `self`.
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(driver("cuMemAlloc"))?;
        self.owned.insert(ptr, bytes.max(1));
        self.stats.allocations += 1;
        // Freshly allocated memory is zeroed, as the simulator's is.
        self.memset(DevicePtr(ptr), 0, bytes)?;
        Ok(DevicePtr(ptr))
    }

    fn free(&mut self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.not_capturing("free")?;
        if !self.owned.contains_key(&ptr.0) {
            return Err(UsageError::NotAnAllocation { ptr: ptr.0 }.into());
        }
        // Launches already queued may still read or write it.
        self.synchronize()?;
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // Forgotten before the call, so neither a retry nor `Drop` frees it twice, even when
        // cuMemFree reports an earlier asynchronous error after freeing.
        self.owned.remove(&ptr.0);
        self.stats.frees += 1;
        // SAFETY: `ptr` was returned by cuMemAlloc in this context (it was in `owned`, and
        // is no longer, so this is its only free), and the stream has finished every use of
        // it.
        unsafe { result::free_sync(ptr.0) }.map_err(driver("cuMemFree"))
    }

    fn upload(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), BackendError> {
        self.not_capturing("upload")?;
        self.check_owned("upload", ptr, bytes.len())?;
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // On the backend's stream, not the legacy synchronous copy: that one is not ordered
        // with a non-blocking stream, so the zeroing memset `alloc` queued there (or any
        // earlier stream work on the buffer) could land after it and wipe the upload. This
        // happened on the H200 behind a large workspace's memset (docs/validation.md).
        // SAFETY: the destination range lies in an allocation of ours (checked); the source
        // slice outlives the call, and `wait_for_stream` below returns only once the stream
        // has finished the copy or failed (after which it runs nothing more), so the device
        // never reads the slice after this function returns.
        unsafe { result::memcpy_htod_async(ptr.0, bytes, self.stream.cu_stream()) }
            .map_err(driver("cuMemcpyHtoDAsync"))?;
        self.stats.uploads += 1;
        self.wait_for_stream()
    }

    fn download(&mut self, ptr: DevicePtr, len: usize) -> Result<Vec<u8>, BackendError> {
        self.not_capturing("download")?;
        self.check_owned("download", ptr, len)?;
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let mut out = vec![0u8; len];
        // On the stream, like `upload`: ordered after all work queued on it, also work an
        // engine queued on a stream it shares with this backend.
        // SAFETY: the source range lies in an allocation of ours (checked); `out` has `len`
        // bytes and is kept alive (leaked, on any failure) until the stream has finished
        // the copy, so the device never writes into freed memory.
        let copied = unsafe { result::memcpy_dtoh_async(&mut out, ptr.0, self.stream.cu_stream()) }
            .map_err(driver("cuMemcpyDtoHAsync"))
            .and_then(|()| self.wait_for_stream());
        if let Err(e) = copied {
            std::mem::forget(out);
            return Err(e);
        }
        Ok(out)
    }

    fn memset(&mut self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<(), BackendError> {
        if bytes == 0 {
            return Ok(());
        }
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: the caller vouches for `[ptr, ptr+bytes)` (our allocations, or an engine's
        // buffer whose size it declared); the operation is stream-ordered.
        unsafe { result::memset_d8_async(ptr.0, value, bytes, self.stream.cu_stream()) }
            .map_err(driver("cuMemsetD8Async"))
    }

    fn synchronize(&mut self) -> Result<(), BackendError> {
        self.not_capturing("synchronize")?;
        self.stats.synchronizations += 1;
        self.stream.synchronize().map_err(driver("cuStreamSynchronize"))
    }

    fn stats(&self) -> BackendStats {
        self.stats
    }

    fn simt_target(&self) -> SimtTarget {
        self.target
    }

    fn sm_count(&self) -> u32 {
        self.sm_count
    }

    fn resident_clusters(
        &mut self,
        info: &'static KernelInfo,
        dynamic_smem: u32,
    ) -> Result<Option<u32>, BackendError> {
        let cluster = info.launch.cluster;
        let key = (info.ptx.as_ptr() as usize, dynamic_smem);
        if let Some(&n) = self.resident.get(&key) {
            return Ok(Some(n));
        }
        let f = self.function(info, dynamic_smem)?;
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        let n = if cluster <= 1 {
            let per_sm = f
                .occupancy_max_active_blocks_per_multiprocessor(
                    info.launch.threads,
                    dynamic_smem as usize,
                    None,
                )
                .map_err(driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
            per_sm.saturating_mul(self.sm_count)
        } else {
            // One cluster's grid: the driver counts how many such clusters fit at once from
            // the function's registers, the shared memory and the GPCs' SMs. The cluster's
            // size is the kernel's own `.reqnctapercluster` (validation/tests/abi_launch.rs
            // holds every clustered kernel to it), so the query names none.
            let cfg = LaunchConfig {
                grid_dim: (cluster, 1, 1),
                block_dim: (info.launch.threads, 1, 1),
                shared_mem_bytes: dynamic_smem,
            };
            f.occupancy_max_active_clusters(cfg, &self.stream)
                .map_err(driver("cuOccupancyMaxActiveClusters"))?
        };
        self.resident.insert(key, n);
        Ok(Some(n))
    }

    fn device_key(&self) -> String {
        format!(
            "{} sm_{}{} driver {}",
            self.name, self.compute_capability.0, self.compute_capability.1, self.driver_version
        )
    }

    fn begin_capture(&mut self) -> Result<(), BackendError> {
        self.not_capturing("begin_capture")?;
        self.stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("cuStreamBeginCapture"))?;
        self.capturing = true;
        self.captured_launches = 0;
        Ok(())
    }

    fn end_capture(&mut self) -> Result<GraphId, BackendError> {
        if !self.capturing {
            return Err(UsageError::NotCapturing.into());
        }
        self.capturing = false;
        let graph = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(driver("cuStreamEndCapture"))?
            .ok_or(UsageError::EmptyCapture)?;
        self.graphs.push(Some((graph, self.captured_launches)));
        Ok(GraphId(self.graphs.len() - 1))
    }

    fn drop_graph(&mut self, graph: GraphId) -> Result<(), BackendError> {
        // Dropping the executable graph destroys it; a replay still in flight completes
        // first (the driver frees it asynchronously).
        let Some(g) = self.graphs.get_mut(graph.0).and_then(Option::take) else {
            return Err(UsageError::UnknownGraph { graph: graph.0 }.into());
        };
        drop(g);
        // cudarc records a failed destroy on the context instead of returning it: report it
        // here, not at the next unrelated call.
        self.ctx.check_err().map_err(driver("cuGraphExecDestroy"))
    }

    fn replay(&mut self, graph: GraphId) -> Result<(), BackendError> {
        self.not_capturing("replay")?;
        let (g, launches) = self
            .graphs
            .get(graph.0)
            .and_then(Option::as_ref)
            .ok_or(UsageError::UnknownGraph { graph: graph.0 })?;
        g.launch().map_err(driver("cuGraphLaunch"))?;
        self.stats.launches += launches;
        self.stats.replays += 1;
        Ok(())
    }

    fn record_event(&mut self) -> Result<EventId, BackendError> {
        let e = self
            .stream
            .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(driver("cuEventRecord"))?;
        self.events.push(e);
        Ok(EventId(self.events.len() - 1))
    }

    fn elapsed_ms(&mut self, start: EventId, end: EventId) -> Result<f32, BackendError> {
        self.not_capturing("elapsed_ms")?;
        let a = self.events.get(start.0).ok_or(UsageError::UnknownEvent { event: start.0 })?;
        let b = self.events.get(end.0).ok_or(UsageError::UnknownEvent { event: end.0 })?;
        self.stats.synchronizations += 1;
        a.elapsed_ms(b).map_err(driver("cuEventElapsedTime"))
    }

    fn launch(
        &mut self,
        info: &'static KernelInfo,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError> {
        let kernel = info.name;
        if args.len() != info.params.len() {
            return Err(UsageError::ArgumentCount {
                kernel,
                expected: info.params.len(),
                given: args.len(),
            }
            .into());
        }
        let f = self.function(info, shape.dynamic_smem)?;
        // Argument storage that outlives the launch call; the driver copies the values when
        // the launch is enqueued (or recorded into a graph).
        let mut held: Vec<ArgStorage> = args.iter().map(ArgStorage::new).collect();
        let mut ptrs: Vec<*mut std::ffi::c_void> = held.iter_mut().map(ArgStorage::ptr).collect();
        let mut attrs = [zeroed_attribute(), zeroed_attribute()];
        let mut used = 0;
        if shape.cluster > 1 {
            let a = &mut attrs[used];
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            a.value.clusterDim.x = shape.cluster;
            a.value.clusterDim.y = 1;
            a.value.clusterDim.z = 1;
            used += 1;
        }
        if info.launch.programmatic {
            // The kernel waits (griddepcontrol.wait) before it reads what the previous
            // kernel wrote, so it may be scheduled while that kernel drains.
            let a = &mut attrs[used];
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            a.value.programmaticStreamSerializationAllowed = 1;
            used += 1;
        }
        let cfg = sys::CUlaunchConfig {
            gridDimX: shape.grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: shape.block,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: shape.dynamic_smem,
            hStream: self.stream.cu_stream(),
            attrs: attrs.as_mut_ptr(),
            numAttrs: used as u32,
        };
        self.ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: `ptrs` holds one pointer per kernel parameter, in the kernel's ABI order
        // (count checked above), each to storage of the parameter's size (u32/u64
        // little-endian, or a 64-byte aligned CUtensorMap) that lives until this call
        // returns, by which time the driver has copied the values; `cfg` and `attrs` outlive
        // the call; the function belongs to this context.
        let r = unsafe {
            sys::cuLaunchKernelEx(&cfg, f.cu_function(), ptrs.as_mut_ptr(), std::ptr::null_mut())
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(CudaError::Launch { kernel, source: DriverError(r) }.into());
        }
        if self.capturing {
            self.captured_launches += 1;
        } else {
            self.stats.launches += 1;
        }
        Ok(())
    }

    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<[u8; 128], BackendError> {
        tensor_map::encode(&self.ctx, spec)
    }
}
