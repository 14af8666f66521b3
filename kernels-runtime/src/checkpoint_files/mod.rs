//! Loading a layer's experts from a checkpoint's safetensors files into the host-side import
//! types of [`crate::reference`] ([`ExpertTensors`] of [`Mxfp4Tensor`] or [`Nvfp4Tensor`]),
//! for [`crate::reference::import_mxfp4`], [`crate::reference::import_nvfp4`] and
//! [`crate::reference::Sm90Weights::from_mxfp4`].
//!
//! Two published layouts (docs/formats.md, "Checkpoint files (safetensors)"):
//!
//! - [`GptOssExperts`]: gpt-oss's MXFP4 experts (Hugging Face `openai/gpt-oss-20b` and
//!   `-120b`): per layer one stacked tensor per projection, `gate` and `up` interleaved by row.
//! - [`ModelOptNvfp4Experts`]: NVIDIA ModelOpt's NVFP4 exports: per expert and projection a
//!   packed weight, E4M3 block scales, a global `weight_scale_2` and an activation
//!   `input_scale`.
//!
//! Only the window's experts are read ([`MoeShape::window`]), and of a large shard only their
//! bytes. Every tensor is checked before use: a missing tensor, a wrong dtype or shape, a NaN
//! or negative scale code, a non-finite value, an expert window the files do not hold are
//! typed [`RuntimeError`]s naming the tensor. Nothing is rounded or dropped: the packed values
//! and scale codes are the file's bytes.
//!
//! [`ExpertTensors`]: crate::reference::ExpertTensors
//! [`Mxfp4Tensor`]: crate::reference::Mxfp4Tensor
//! [`Nvfp4Tensor`]: crate::reference::Nvfp4Tensor
//! [`MoeShape::window`]: moegen_dsl::plan::MoeShape

mod files;
mod gpt_oss;
mod modelopt;
mod source;

pub use files::SafetensorsFiles;
pub use gpt_oss::GptOssExperts;
pub use modelopt::ModelOptNvfp4Experts;
pub use source::TensorSource;

use half::bf16;
use safetensors::Dtype;

use crate::error::{Result, RuntimeError};
use files::Loaded;

/// The prefix of layer `layer`'s expert tensors in both layouts.
fn experts_prefix(layer: usize) -> String {
    format!("model.layers.{layer}.mlp.experts.")
}

/// Little-endian floats of a BF16 or F32 tensor as f32 (BF16 widens exactly), checked finite;
/// `base` is the element index of `t.bytes[0]` in the whole tensor, for the error.
fn floats(t: &Loaded, dtype: Dtype, base: usize) -> Result<Vec<f32>> {
    let v: Vec<f32> = match dtype {
        Dtype::BF16 => {
            t.bytes.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
        }
        _ => {
            t.bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
        }
    };
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(RuntimeError::TensorNonFinite { tensor: t.name.clone(), offset: base + i });
    }
    Ok(v)
}

/// Checks scale codes with `bad` (which names what is wrong with a code); `base` as in
/// [`floats`].
fn check_codes(t: &Loaded, base: usize, bad: impl Fn(u8) -> Option<&'static str>) -> Result<()> {
    for (i, &code) in t.bytes.iter().enumerate() {
        if let Some(reason) = bad(code) {
            return Err(RuntimeError::TensorScaleCode {
                tensor: t.name.clone(),
                offset: base + i,
                code,
                reason,
            });
        }
    }
    Ok(())
}
