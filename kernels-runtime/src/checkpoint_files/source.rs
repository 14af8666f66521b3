//! Where the loaders read tensors from: [`TensorSource`], implemented by
//! [`super::SafetensorsFiles`] and by anything else that can name a tensor's dtype and shape and
//! hand over its bytes (moegen-candle's source over a candle `VarBuilder`).

use safetensors::Dtype;

use super::files::Loaded;
use crate::error::{Result, RuntimeError};

/// Tensors by name, as the checkpoint loaders ([`super::GptOssExperts::load`],
/// [`super::ModelOptNvfp4Experts::load`]) read them. The loaders do every check (dtype,
/// shape, codes, values); a source only describes and reads.
pub trait TensorSource {
    /// The dtype and shape of `name`, or `None` when the source does not hold it. `accepted`
    /// lists the dtypes the layout takes for this tensor, most preferred first (empty when
    /// the tensor was described before): a source that converts on reading (a candle
    /// `VarBuilder` converts to the dtype it is asked for) reads it as one of them.
    fn describe(&self, name: &str, accepted: &[Dtype]) -> Result<Option<(Dtype, Vec<usize>)>>;

    /// The little-endian bytes of elements `[first, first + count)` of the outermost
    /// dimension of `name` (a scalar: `0..1`), in the dtype [`Self::describe`] reported.
    fn read_outer(&self, name: &str, first: usize, count: usize) -> Result<Vec<u8>>;

    /// Every tensor name, when the source can list them; `None` when it can only answer for
    /// a name (a `VarBuilder`): loaders then probe the names their layout defines.
    fn names(&self) -> Option<Vec<String>> {
        None
    }
}

/// The dtype and shape of `name`, checked to be one of `dtypes` (`expected` spells them).
pub(crate) fn checked(
    src: &(impl TensorSource + ?Sized),
    name: &str,
    dtypes: &[Dtype],
    expected: &'static str,
) -> Result<(Dtype, Vec<usize>)> {
    let (dtype, shape) = src
        .describe(name, dtypes)?
        .ok_or_else(|| RuntimeError::MissingTensor { tensor: name.to_string() })?;
    if !dtypes.contains(&dtype) {
        return Err(RuntimeError::TensorDtype {
            tensor: name.to_string(),
            expected,
            actual: format!("{dtype:?}"),
        });
    }
    Ok((dtype, shape))
}

/// Elements `[first, first + count)` of the outermost dimension of a [`checked`] tensor;
/// a source that returns another byte count is refused, naming the tensor.
pub(crate) fn read_outer(
    src: &(impl TensorSource + ?Sized),
    name: &str,
    first: usize,
    count: usize,
) -> Result<Loaded> {
    let (dtype, shape) = src
        .describe(name, &[])?
        .ok_or_else(|| RuntimeError::MissingTensor { tensor: name.to_string() })?;
    let outer = shape.first().copied().unwrap_or(1).max(1);
    let elements: usize = shape.iter().product();
    let expected = elements / outer * count * dtype.bitsize().div_ceil(8);
    let bytes = src.read_outer(name, first, count)?;
    if bytes.len() != expected {
        return Err(RuntimeError::CheckpointFile {
            path: name.to_string(),
            reason: format!("the source returned {} bytes, expected {expected}", bytes.len()),
        });
    }
    Ok(Loaded { name: name.to_string(), bytes })
}

/// A whole [`checked`] tensor.
pub(crate) fn read(src: &(impl TensorSource + ?Sized), name: &str) -> Result<Loaded> {
    let outer = match src.describe(name, &[])? {
        Some((_, shape)) => shape.first().copied().unwrap_or(1).max(1),
        None => return Err(RuntimeError::MissingTensor { tensor: name.to_string() }),
    };
    read_outer(src, name, 0, outer)
}
