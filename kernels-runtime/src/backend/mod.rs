//! One interface to run generated kernels: the simulator ([`sim::SimBackend`]) or CUDA
//! (`cuda::CudaBackend`, feature `cuda`). Host code such as [`crate::device_ops`] is written
//! once against [`Backend`], so tests on the simulator exercise the path the GPU takes.

pub mod sim;

#[cfg(feature = "cuda")]
pub mod cuda;

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
    /// `.f32`.
    F32(f32),
    /// A by-value struct (a 128-byte tensor map).
    Bytes(Vec<u8>),
}

/// Launch shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// CTAs (x).
    pub grid: u32,
    /// Threads per CTA (x).
    pub block: u32,
    /// Dynamic shared memory bytes.
    pub dynamic_smem: u32,
}

/// A backend failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The simulator reported an error.
    #[error("simulator: {0}")]
    Sim(String),
    /// The CUDA driver reported an error.
    #[error("cuda: {0}")]
    Cuda(String),
    /// A host-side misuse (unknown pointer, wrong size).
    #[error("{0}")]
    Usage(String),
}

/// Element type of a tensor map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmaElement {
    /// UINT8.
    U8,
    /// UINT16 (scale-factor atoms).
    U16,
    /// Packed 4-bit, two per byte (16U4_ALIGN8B; dimension 0 counts 4-bit elements).
    U4Packed,
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

/// What a device must offer to run moegen's kernels.
pub trait Backend {
    /// Allocates `bytes` zeroed bytes.
    fn alloc(&mut self, bytes: usize) -> Result<DevicePtr, BackendError>;
    /// Copies host bytes to `ptr`.
    fn upload(&mut self, ptr: DevicePtr, bytes: &[u8]) -> Result<(), BackendError>;
    /// Copies `len` bytes from `ptr`.
    fn download(&mut self, ptr: DevicePtr, len: usize) -> Result<Vec<u8>, BackendError>;
    /// Runs `kernel` from the PTX module `ptx` and waits for it.
    fn launch(
        &mut self,
        ptx: &'static str,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), BackendError>;
    /// Launches with a cluster of `cluster` CTAs along x (the kernel's `.reqnctapercluster`).
    fn launch_cluster(
        &mut self,
        ptx: &'static str,
        kernel: &str,
        shape: LaunchShape,
        cluster: u32,
        args: &[KernelArg],
    ) -> Result<(), BackendError>;
    /// Encodes a tensor map for this device (128 bytes, passed by value).
    fn encode_tensor_map(&mut self, spec: &TensorMapSpec) -> Result<Vec<u8>, BackendError>;
    /// Which generated kernel flavour this device runs (`sm100` or `sm90`).
    fn kernel_tag(&self) -> &'static str;

    /// Allocates and fills.
    fn upload_new(&mut self, bytes: &[u8]) -> Result<DevicePtr, BackendError> {
        let p = self.alloc(bytes.len())?;
        self.upload(p, bytes)?;
        Ok(p)
    }
}
