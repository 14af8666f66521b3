//! One interface to run generated kernels: the simulator (`sim::SimBackend`, feature `sim`)
//! or CUDA (`cuda::CudaBackend`, feature `cuda`). Host code such as [`crate::device_ops`] is
//! written once against [`Backend`], so tests on the simulator exercise the path the GPU
//! takes.

#[cfg(feature = "sim")]
pub mod sim;

#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub(crate) mod library;

mod error;

pub use error::{BackendError, UsageError};

use moegen_dsl::abi::{KernelInfo, SimtTarget};

pub use moegen_dsl::abi::TmaElement;

/// A device address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevicePtr(pub u64);

/// A kernel argument.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelArg {
    /// `.u32`.
    U32(u32),
    /// `.u64` device pointer.
    Ptr(DevicePtr),
    /// A by-value 128-byte tensor map.
    TensorMap(Box<[u8; 128]>),
}

impl KernelArg {
    /// The PTX parameter type this argument fills.
    pub fn ty(&self) -> moegen_dsl::abi::ParamType {
        use moegen_dsl::abi::ParamType;
        match self {
            KernelArg::U32(_) => ParamType::U32,
            KernelArg::Ptr(_) => ParamType::U64,
            KernelArg::TensorMap(_) => ParamType::TensorMap,
        }
    }
}

/// Launch shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// CTAs (x), a multiple of `cluster`.
    pub grid: u32,
    /// Threads per CTA (x).
    pub block: u32,
    /// CTAs per cluster (x); 1 without clusters.
    pub cluster: u32,
    /// Dynamic shared memory bytes.
    pub dynamic_smem: u32,
}

/// A tiled tensor map, as `cuTensorMapEncodeTiled` takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMapSpec {
    /// Element type.
    pub element: TmaElement,
    /// Global base.
    pub address: DevicePtr,
    /// Elements per dimension, innermost first.
    pub dims: Vec<u64>,
    /// Byte strides of dimensions 1..
    pub strides: Vec<u64>,
    /// Box elements per dimension.
    pub box_dims: Vec<u32>,
    /// Swizzle span: 0, 32, 64 or 128 bytes.
    pub swizzle: u32,
}

/// Counters every backend keeps, so a test can prove that a run path allocates nothing and
/// never waits for the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendStats {
    /// Device allocations.
    pub allocations: u64,
    /// Allocations freed.
    pub frees: u64,
    /// Host waits for the device (synchronize, upload, download, free, event timing).
    pub synchronizations: u64,
    /// Kernel launches (replayed graph nodes included).
    pub launches: u64,
    /// Host-to-device copies.
    pub uploads: u64,
    /// Graph replays.
    pub replays: u64,
}

/// A captured launch sequence (a CUDA graph, or the simulator's recording).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphId(pub usize);

/// A point in the stream's work, for timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub usize);

/// What a device must offer to run moegen's kernels. Work is ordered on one stream (the
/// caller's, for the CUDA backend); launches, memsets, events and graph replays never wait
/// for the device; uploads, downloads, `free`, `synchronize` and `elapsed_ms` do.
pub trait Backend {
    /// Allocates `bytes` zeroed bytes.
    fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, BackendError>;
    /// Frees an allocation of this backend (`ptr` as [`Self::alloc`] returned it) once the
    /// stream's work so far is done (a host wait on the CUDA backend); refused while
    /// capturing and for any other address. Graphs captured over it must not be replayed
    /// afterwards. Whatever is not freed is freed when the backend is dropped.
    fn free(&mut self, ptr: DevicePtr) -> Result<(), BackendError>;
    /// Copies host bytes to `ptr` in stream order (after every earlier operation on the
    /// stream, such as `alloc`'s zeroing) and waits until they are there.
    fn upload(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), BackendError>;
    /// Copies `len` bytes from `ptr`.
    fn download(&mut self, ptr: DevicePtr, len: usize) -> Result<Vec<u8>, BackendError>;
    /// Launches `kernel` with `args` (in its ABI order).
    fn launch(
        &mut self,
        kernel: &'static KernelInfo,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError>;
    /// Encodes a tensor map for this device (128 bytes, passed by value).
    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<[u8; 128], BackendError>;
    /// Which flavour of the SIMT kernels this device runs.
    fn simt_target(&self) -> SimtTarget;
    /// Streaming multiprocessors (persistent grids are sized from it).
    fn sm_count(&self) -> u32;
    /// How many clusters of `kernel` (launched with `dynamic_smem` bytes; CTAs, for a kernel
    /// without clusters) the device runs at once. A cluster's CTAs share one GPC, so GPCs
    /// whose CTA slots do not divide into clusters hold fewer than `sm_count` × CTAs per SM
    /// / cluster, and a persistent grid sized that way would leave clusters waiting for a
    /// second wave. `None` where the backend has no count of its own (the simulator without
    /// GPCs): `sm_count` × the kernel's CTAs per SM / cluster then.
    fn resident_clusters(
        &mut self,
        kernel: &'static KernelInfo,
        dynamic_smem: u32,
    ) -> Result<Option<u32>, BackendError>;
    /// Sets `bytes` bytes at `ptr` to `value`, in stream order (capturable).
    fn memset(&mut self, ptr: DevicePtr, value: u8, bytes: usize) -> Result<(), BackendError>;
    /// Waits until the stream's work is done.
    fn synchronize(&mut self) -> Result<(), BackendError>;
    /// The backend's counters.
    fn stats(&self) -> BackendStats;
    /// Starts recording the stream's launches and memsets into a graph instead of running
    /// them; allocation, upload and download fail while recording.
    fn begin_capture(&mut self) -> Result<(), BackendError>;
    /// Ends the recording and returns the graph.
    fn end_capture(&mut self) -> Result<GraphId, BackendError>;
    /// Runs a recorded graph in stream order.
    fn replay(&mut self, graph: GraphId) -> Result<(), BackendError>;
    /// Destroys a recorded graph (a replay in flight still completes); replaying or dropping
    /// it again is an error. Graphs not dropped live as long as the backend.
    fn drop_graph(&mut self, graph: GraphId) -> Result<(), BackendError>;
    /// Records an event at the current point of the stream.
    fn record_event(&mut self) -> Result<EventId, BackendError>;
    /// Milliseconds of stream work between two events (waits for `end`). The simulator
    /// reports simulated thread-instructions / 10⁹ instead of time: deterministic, so tuning
    /// on it is reproducible.
    fn elapsed_ms(&mut self, start: EventId, end: EventId) -> Result<f32, BackendError>;
    /// What the autotuner's cache is keyed by: device name, architecture and driver.
    fn device_key(&self) -> String;

    /// Allocates and fills (a failed upload frees the allocation again).
    fn upload_new(&mut self, bytes: &[u8]) -> Result<DevicePtr, BackendError> {
        let p = self.alloc(bytes.len())?;
        if let Err(e) = self.upload(p, bytes) {
            // The upload's error is the one to report.
            let _ = self.free(p);
            return Err(e);
        }
        Ok(p)
    }

    /// Allocates and fills one buffer per part; when one fails, frees those already made and
    /// returns its error.
    fn upload_all(&mut self, parts: &[&[u8]]) -> Result<Vec<DevicePtr>, BackendError> {
        let mut done = Vec::with_capacity(parts.len());
        for bytes in parts {
            match self.upload_new(bytes) {
                Ok(p) => done.push(p),
                Err(e) => {
                    // The upload's error is the one to report.
                    let _ = self.free_all(&done);
                    return Err(e);
                }
            }
        }
        Ok(done)
    }

    /// Frees each of `ptrs`, all of them even when one fails; returns the first error.
    fn free_all(&mut self, ptrs: &[DevicePtr]) -> Result<(), BackendError> {
        let mut first = Ok(());
        for &p in ptrs {
            let r = self.free(p);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}
