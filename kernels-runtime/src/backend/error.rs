//! What a backend call can fail with: the simulator's or the driver's own error, kept typed,
//! or a misuse of the backend by the host code, naming the argument at fault.

/// A backend failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The simulator refused a module or faulted in a launch.
    #[cfg(feature = "sim")]
    #[error("simulator: {0}")]
    Sim(#[from] moegen_sim::SimError),
    /// The CUDA driver reported an error.
    #[cfg(feature = "cuda")]
    #[error("cuda: {0}")]
    Cuda(#[from] super::cuda::CudaError),
    /// A host-side misuse (unknown pointer or graph, wrong size, a call during capture).
    #[error(transparent)]
    Usage(#[from] UsageError),
}

/// A backend called with arguments it refuses; each variant names the argument at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// An operation a stream capture may not hold (it would wait or allocate).
    #[error("{operation} during graph capture")]
    DuringCapture {
        /// The operation refused.
        operation: &'static str,
    },
    /// `end_capture` without a capture in progress.
    #[error("end_capture without begin_capture")]
    NotCapturing,
    /// A capture that recorded nothing: there is no graph to make of it.
    #[error("the capture recorded no work")]
    EmptyCapture,
    /// A graph id this backend never returned, or one already dropped.
    #[error("no graph {graph}")]
    UnknownGraph {
        /// The id.
        graph: usize,
    },
    /// An event id this backend never returned.
    #[error("unknown event {event}")]
    UnknownEvent {
        /// The id.
        event: usize,
    },
    /// `free` of an address where none of this backend's allocations starts.
    #[error("free of {ptr:#x}: no allocation of this backend starts there")]
    NotAnAllocation {
        /// The address.
        ptr: u64,
    },
    /// A copy or memset outside this backend's allocations.
    #[error("{operation} of {bytes} B at {ptr:#x} is not inside an allocation of this backend")]
    OutOfBounds {
        /// `upload`, `download` or `memset`.
        operation: &'static str,
        /// The address.
        ptr: u64,
        /// The length.
        bytes: usize,
    },
    /// A launch whose argument count differs from the kernel's parameters.
    #[error("{kernel} takes {expected} arguments, {given} given")]
    ArgumentCount {
        /// The kernel.
        kernel: &'static str,
        /// Its parameters.
        expected: usize,
        /// Arguments given.
        given: usize,
    },
    /// A tensor map whose rank, strides or box disagree.
    #[error("tensor map of rank {rank} with {strides} strides and a box of rank {box_rank}")]
    TensorMapShape {
        /// Dimensions given.
        rank: usize,
        /// Strides given (rank − 1 wanted).
        strides: usize,
        /// Box dimensions given (rank wanted).
        box_rank: usize,
    },
    /// A tensor map swizzle span other than 0, 32, 64 or 128 bytes.
    #[error("tensor map swizzle of {bytes} B (0, 32, 64 or 128)")]
    Swizzle {
        /// The span given.
        bytes: u32,
    },
    /// `CudaBackend::set_stream` with a stream of another context than the backend's (its
    /// modules, allocations and graphs belong to that context).
    #[error("set_stream: the stream belongs to another CUDA context than the backend's")]
    ForeignStream,
    /// A tensor map the simulator's encoder refuses (`cuTensorMapEncodeTiled`'s rules).
    #[cfg(feature = "sim")]
    #[error("tensor map: {0}")]
    TensorMap(#[from] moegen_sim::TensorMapError),
}
