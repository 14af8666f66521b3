//! Typed device buffers from host slices and back: what `ForwardIo` holds (bf16
//! activations and output, i32 expert ids, f32 router weights), little-endian as the kernels
//! read them, without packing bytes by hand.

use half::bf16;

use super::error::LayerError;
use super::memory::DeviceSlice;
use crate::backend::Backend;

/// An element type the layer's buffers hold, with its little-endian device encoding.
pub trait DeviceElement: Copy + private::Sealed {
    /// Its name in errors.
    const NAME: &'static str;
    /// Bytes per element on the device.
    const BYTES: usize;
    /// Appends its little-endian bytes.
    fn write_le(self, out: &mut Vec<u8>);
    /// Reads one element from exactly [`Self::BYTES`] little-endian bytes.
    fn read_le(bytes: &[u8]) -> Self;
}

mod private {
    /// Only the encodings the kernels read are elements.
    pub trait Sealed {}
    impl Sealed for half::bf16 {}
    impl Sealed for f32 {}
    impl Sealed for i32 {}
}

impl DeviceElement for bf16 {
    const NAME: &'static str = "bf16";
    const BYTES: usize = 2;
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn read_le(b: &[u8]) -> Self {
        bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))
    }
}

impl DeviceElement for f32 {
    const NAME: &'static str = "f32";
    const BYTES: usize = 4;
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn read_le(b: &[u8]) -> Self {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl DeviceElement for i32 {
    const NAME: &'static str = "i32";
    const BYTES: usize = 4;
    fn write_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn read_le(b: &[u8]) -> Self {
        i32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// A typed buffer request the helpers refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostBufferError {
    /// A slice whose size is not a whole number of elements.
    #[error(
        "a {bytes}-byte device slice is not a whole number of {element} ({element_bytes} B each)"
    )]
    PartialElement {
        /// The element type asked for.
        element: &'static str,
        /// Its size.
        element_bytes: usize,
        /// The slice's size.
        bytes: u64,
    },
    /// More elements than this host can address in bytes.
    #[error("{len} {element} elements do not fit this host's address space")]
    TooLarge {
        /// The element type.
        element: &'static str,
        /// Elements asked for.
        len: u64,
    },
}

/// Typed allocation, upload and download on any [`Backend`] (`use` it, then call it on the
/// backend: `sim.upload_slice(&x)?`).
pub trait HostBuffers: Backend {
    /// A new device buffer holding `values` (waits until they are there).
    fn upload_slice<T: DeviceElement>(&mut self, values: &[T]) -> Result<DeviceSlice, LayerError> {
        let mut bytes = Vec::with_capacity(bytes_of::<T>(values.len())?);
        for v in values {
            v.write_le(&mut bytes);
        }
        let ptr = self.upload_new(&bytes)?;
        Ok(DeviceSlice::new(ptr, bytes.len() as u64))
    }

    /// A new zeroed device buffer of `len` elements (an output the kernels overwrite).
    fn alloc_slice<T: DeviceElement>(&mut self, len: usize) -> Result<DeviceSlice, LayerError> {
        let bytes = bytes_of::<T>(len)?;
        Ok(DeviceSlice::new(self.alloc(bytes)?, bytes as u64))
    }

    /// Every element of `slice` (waits for the stream's work).
    fn download_slice<T: DeviceElement>(
        &mut self,
        slice: DeviceSlice,
    ) -> Result<Vec<T>, LayerError> {
        let partial = HostBufferError::PartialElement {
            element: T::NAME,
            element_bytes: T::BYTES,
            bytes: slice.bytes,
        };
        if !slice.bytes.is_multiple_of(T::BYTES as u64) {
            return Err(partial.into());
        }
        let len = usize::try_from(slice.bytes).map_err(|_| HostBufferError::TooLarge {
            element: T::NAME,
            len: slice.bytes / T::BYTES as u64,
        })?;
        let raw = self.download(slice.ptr, len)?;
        Ok(raw.chunks_exact(T::BYTES).map(T::read_le).collect())
    }
}

impl<B: Backend + ?Sized> HostBuffers for B {}

fn bytes_of<T: DeviceElement>(len: usize) -> Result<usize, HostBufferError> {
    len.checked_mul(T::BYTES).ok_or(HostBufferError::TooLarge { element: T::NAME, len: len as u64 })
}
