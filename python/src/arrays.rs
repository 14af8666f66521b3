//! Arrays as Python hands them over: host arrays as bytes with their dtype and shape (CPU
//! inputs and weights), device tensors as an address with their dtype, shape, layout and
//! device (the torch op). Each is checked here against what moegen takes before any byte or
//! address reaches it.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{Error, Result};

/// An element type by its NumPy/PyTorch name, and its size in bytes.
pub(crate) fn element_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "uint8" | "int8" | "float8_e4m3fn" | "float8_e8m0fnu" => 1,
        "uint16" | "int16" | "bfloat16" | "float16" => 2,
        "uint32" | "int32" | "float32" => 4,
        "uint64" | "int64" | "float64" => 8,
        _ => return None,
    })
}

/// A host array: `(name, dtype, shape, bytes)` from `moegen._arrays.host`, the bytes in
/// row-major order, little-endian.
pub(crate) struct HostArray {
    pub(crate) name: String,
    pub(crate) dtype: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<u8>,
}

impl<'a, 'py> FromPyObject<'a, 'py> for HostArray {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let (name, dtype, shape, data): (String, String, Vec<usize>, Bound<'py, PyBytes>) =
            ob.extract()?;
        Ok(HostArray { name, dtype, shape, data: data.as_bytes().to_vec() })
    }
}

fn elements(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

impl HostArray {
    /// Checks that the bytes hold exactly `shape` elements of `dtype`.
    pub(crate) fn checked(self) -> Result<Self> {
        let size = element_size(&self.dtype).ok_or_else(|| Error::Dtype {
            input: self.name.clone(),
            actual: self.dtype.clone(),
            expected: "a numeric dtype",
        })?;
        let expected = elements(&self.shape).and_then(|n| n.checked_mul(size));
        if expected != Some(self.data.len()) {
            return Err(Error::Bytes {
                input: self.name,
                actual: self.data.len(),
                expected: expected.unwrap_or(usize::MAX),
                dtype: self.dtype,
                shape: self.shape,
            });
        }
        Ok(self)
    }

    /// Refuses a dtype other than those in `accepted` (`expected` spells them).
    pub(crate) fn dtype_in(&self, accepted: &[&str], expected: &'static str) -> Result<()> {
        if accepted.contains(&self.dtype.as_str()) {
            Ok(())
        } else {
            Err(Error::Dtype { input: self.name.clone(), actual: self.dtype.clone(), expected })
        }
    }

    /// Refuses a shape other than `shape` (`expected` spells it).
    pub(crate) fn shape_is(&self, shape: &[usize], expected: impl Fn() -> String) -> Result<()> {
        if self.shape == shape {
            Ok(())
        } else {
            Err(Error::Shape {
                input: self.name.clone(),
                actual: self.shape.clone(),
                expected: expected(),
            })
        }
    }

    /// The elements as little-endian f32 (a `float32` array).
    pub(crate) fn f32s(&self) -> Vec<f32> {
        self.data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }
}

/// A device tensor: `(name, dtype, shape, contiguous, device, address)` from
/// `moegen._arrays.device` (a torch CUDA tensor's `data_ptr()`).
pub(crate) struct DeviceTensor {
    pub(crate) name: String,
    pub(crate) dtype: String,
    pub(crate) shape: Vec<usize>,
    pub(crate) contiguous: bool,
    pub(crate) device: String,
    pub(crate) ptr: u64,
}

impl<'a, 'py> FromPyObject<'a, 'py> for DeviceTensor {
    type Error = PyErr;

    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let (name, dtype, shape, contiguous, device, ptr) = ob.extract()?;
        Ok(DeviceTensor { name, dtype, shape, contiguous, device, ptr })
    }
}

impl DeviceTensor {
    /// Checks device, dtype, shape and layout; returns the byte length.
    pub(crate) fn checked(
        &self,
        device: &str,
        dtype: &'static str,
        shape: &[usize],
        expected: impl Fn() -> String,
    ) -> Result<u64> {
        if self.device != device {
            return Err(Error::Device {
                input: self.name.clone(),
                actual: self.device.clone(),
                expected: device.to_string(),
            });
        }
        if self.dtype != dtype {
            return Err(Error::Dtype {
                input: self.name.clone(),
                actual: self.dtype.clone(),
                expected: dtype,
            });
        }
        if self.shape != shape {
            return Err(Error::Shape {
                input: self.name.clone(),
                actual: self.shape.clone(),
                expected: expected(),
            });
        }
        if !self.contiguous {
            return Err(Error::NotContiguous { input: self.name.clone() });
        }
        let bytes = elements(shape).and_then(|n| n.checked_mul(element_size(dtype)?));
        bytes.map(|b| b as u64).ok_or_else(|| Error::Shape {
            input: self.name.clone(),
            actual: self.shape.clone(),
            expected: "a size that fits in memory".into(),
        })
    }
}
