//! moegen-runtime's gpt-oss loader reading tensors handed over from Python.

use std::collections::HashMap;

use moegen_runtime::checkpoint_files::TensorSource;
use moegen_runtime::error::{Result, RuntimeError};
use safetensors::Dtype;

use crate::arrays::HostArray;

/// A [`TensorSource`] over host arrays by checkpoint name: the loader does every check
/// (dtype, shape, codes), this only describes and slices.
pub(crate) struct ArraySource {
    arrays: HashMap<String, HostArray>,
}

fn st_dtype(dtype: &str) -> Option<Dtype> {
    Some(match dtype {
        "uint8" => Dtype::U8,
        "float8_e4m3fn" => Dtype::F8_E4M3,
        "float8_e8m0fnu" => Dtype::F8_E8M0,
        "bfloat16" => Dtype::BF16,
        "float32" => Dtype::F32,
        _ => return None,
    })
}

impl ArraySource {
    pub(crate) fn new(arrays: impl IntoIterator<Item = (String, HostArray)>) -> Self {
        Self { arrays: arrays.into_iter().collect() }
    }

    fn get(&self, name: &str) -> Result<&HostArray> {
        self.arrays.get(name).ok_or_else(|| RuntimeError::MissingTensor { tensor: name.into() })
    }
}

impl TensorSource for ArraySource {
    fn describe(&self, name: &str, _accepted: &[Dtype]) -> Result<Option<(Dtype, Vec<usize>)>> {
        let Some(a) = self.arrays.get(name) else { return Ok(None) };
        let dtype = st_dtype(&a.dtype).ok_or_else(|| RuntimeError::TensorDtype {
            tensor: name.to_string(),
            expected: "uint8, float8_e4m3fn, float8_e8m0fnu, bfloat16 or float32",
            actual: a.dtype.clone(),
        })?;
        Ok(Some((dtype, a.shape.clone())))
    }

    fn read_outer(&self, name: &str, first: usize, count: usize) -> Result<Vec<u8>> {
        let a = self.get(name)?;
        let Some((&outer, _)) = a.shape.split_first() else { return Ok(a.data.clone()) };
        // The bytes were checked against dtype and shape when they arrived.
        let row = a.data.len().checked_div(outer).unwrap_or(0);
        let end = first.checked_add(count).filter(|&e| e <= outer).ok_or_else(|| {
            RuntimeError::CheckpointFile {
                path: name.to_string(),
                reason: format!("rows {first}..{first}+{count} of {outer}"),
            }
        })?;
        Ok(a.data[first * row..end * row].to_vec())
    }
}
