//! moegen-runtime's checkpoint loaders reading through a candle `VarBuilder`.

use std::cell::RefCell;
use std::collections::HashMap;

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use candle_nn::VarBuilder;
use moegen_runtime::checkpoint_files::TensorSource;
use moegen_runtime::error::{Result, RuntimeError};
use safetensors::Dtype;

/// A [`TensorSource`] over a `VarBuilder`'s tensors, read on the CPU (the loaders repack the
/// 4-bit weights on the host before moegen uploads them, so they never visit the GPU twice).
///
/// A `VarBuilder` converts every tensor to the dtype it is asked for and does not say which
/// dtype the file holds, so a tensor is read as the first of the layout's dtypes the
/// conversion accepts, F32 before any narrower float (BF16 widens to F32 exactly). What
/// cannot be told apart this way is a limit of this source (docs/candle.md): block scales
/// stored as U8 codes where the layout prefers F8_E4M3 are converted as numbers.
pub(crate) struct VarBuilderSource<'a> {
    vb: VarBuilder<'a>,
    /// Tensors read so far: the loaders describe a tensor, then read it expert by expert.
    loaded: RefCell<HashMap<String, Tensor>>,
}

fn candle_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::U8 => DType::U8,
        Dtype::F8_E4M3 => DType::F8E4M3,
        Dtype::F8_E8M0 => DType::F8E8M0,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        _ => return None,
    })
}

fn st_dtype(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::U8 => Dtype::U8,
        DType::F8E4M3 => Dtype::F8_E4M3,
        DType::F8E8M0 => Dtype::F8_E8M0,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        _ => return None,
    })
}

fn candle_error(name: &str, e: candle_core::Error) -> RuntimeError {
    RuntimeError::CheckpointFile { path: name.to_string(), reason: e.to_string() }
}

/// The little-endian bytes of a contiguous CPU tensor.
fn bytes(name: &str, t: &Tensor) -> Result<Vec<u8>> {
    let t = t.contiguous().map_err(|e| candle_error(name, e))?;
    let (storage, layout) = t.storage_and_layout();
    let range = layout.start_offset()..layout.start_offset() + layout.shape().elem_count();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(RuntimeError::CheckpointFile {
            path: name.to_string(),
            reason: "read on a device other than the CPU".into(),
        });
    };
    Ok(match cpu {
        CpuStorage::U8(v) | CpuStorage::F8E8M0(v) => v[range].to_vec(),
        CpuStorage::F8E4M3(v) => v[range].iter().map(|x| x.to_bits()).collect(),
        CpuStorage::BF16(v) => v[range].iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuStorage::F32(v) => v[range].iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => {
            return Err(RuntimeError::CheckpointFile {
                path: name.to_string(),
                reason: format!("unexpected element type {:?}", t.dtype()),
            });
        }
    })
}

impl<'a> VarBuilderSource<'a> {
    pub(crate) fn new(vb: &VarBuilder<'a>) -> Self {
        Self { vb: vb.clone().set_device(Device::Cpu), loaded: RefCell::new(HashMap::new()) }
    }

    /// Reads `name` as the first of `accepted` the VarBuilder converts to.
    fn load(&self, name: &str, accepted: &[Dtype]) -> Result<Option<Tensor>> {
        if let Some(t) = self.loaded.borrow().get(name) {
            return Ok(Some(t.clone()));
        }
        if !self.vb.contains_tensor(name) {
            return Ok(None);
        }
        let mut order: Vec<Dtype> = accepted.to_vec();
        // Widening first: a BF16 file read as F32 is exact, an F32 file read as BF16 is not.
        order.sort_by_key(|d| *d != Dtype::F32);
        let mut last = None;
        for d in order {
            let Some(dtype) = candle_dtype(d) else { continue };
            match self.vb.get_unchecked_dtype(name, dtype) {
                Ok(t) => {
                    self.loaded.borrow_mut().insert(name.to_string(), t.clone());
                    return Ok(Some(t));
                }
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => candle_error(name, e),
            None => RuntimeError::CheckpointFile {
                path: name.to_string(),
                reason: "none of the layout's dtypes can be read through a VarBuilder".into(),
            },
        })
    }
}

impl TensorSource for VarBuilderSource<'_> {
    fn describe(&self, name: &str, accepted: &[Dtype]) -> Result<Option<(Dtype, Vec<usize>)>> {
        let Some(t) = self.load(name, accepted)? else { return Ok(None) };
        let dtype = st_dtype(t.dtype()).ok_or_else(|| RuntimeError::CheckpointFile {
            path: name.to_string(),
            reason: format!("unexpected element type {:?}", t.dtype()),
        })?;
        Ok(Some((dtype, t.dims().to_vec())))
    }

    fn read_outer(&self, name: &str, first: usize, count: usize) -> Result<Vec<u8>> {
        let t = self
            .load(name, &[])?
            .ok_or_else(|| RuntimeError::MissingTensor { tensor: name.to_string() })?;
        if t.rank() == 0 {
            return bytes(name, &t);
        }
        let part = t.narrow(0, first, count).map_err(|e| candle_error(name, e))?;
        bytes(name, &part)
    }
}
