//! gpt-oss's MXFP4 experts, as the Hugging Face checkpoints `openai/gpt-oss-20b` and
//! `openai/gpt-oss-120b` store them (see docs/formats.md for the sources).
//!
//! For layer L, under `model.layers.{L}.mlp.experts.`:
//!
//! | tensor | dtype | shape |
//! | --- | --- | --- |
//! | `gate_up_proj_blocks` | U8 | `[E, 2I, H/32, 16]`: two E2M1 codes a byte, element 2j low |
//! | `gate_up_proj_scales` | U8 (or F8_E8M0) | `[E, 2I, H/32]`: UE8M0, 2^(code − 127) |
//! | `gate_up_proj_bias` | BF16 (or F32) | `[E, 2I]` |
//! | `down_proj_blocks` | U8 | `[E, H, I/32, 16]` |
//! | `down_proj_scales` | U8 (or F8_E8M0) | `[E, H, I/32]` |
//! | `down_proj_bias` | BF16 (or F32) | `[E, H]` |
//!
//! Row r of `gate_up` is gate row r/2 for even r and up row r/2 for odd r (Hugging Face's
//! `GptOssExperts` takes `gate_up[..., ::2]` as gate, `[..., 1::2]` as up). Each row's
//! `H/32 · 16` bytes are exactly moegen's packing of one `[H]` row (element 2j in the low
//! nibble), so the matrices are the file's bytes, rows de-interleaved.

use moegen_dsl::formats::{MXFP4_BLOCK, Mxfp4Matrix, UE8M0_NAN};
use moegen_dsl::plan::{MoeShape, PlanError};
use safetensors::Dtype;

use super::files::check_shape;
use super::source::{TensorSource, checked, read_outer};
use super::{check_codes, experts_prefix, floats};
use crate::error::{Result, RuntimeError};
use crate::reference::{CheckpointScales, ExpertEpilogue, ExpertTensors, Mxfp4Tensor};
use moegen_dsl::Activation;
use moegen_dsl::epilogue_math::ActivationParams;

/// One layer's local experts from a gpt-oss checkpoint: MXFP4 matrices in moegen's layout
/// and the projections' biases.
#[derive(Clone, Debug)]
pub struct GptOssExperts {
    /// The layer loaded.
    pub layer: usize,
    /// Global id of `experts[0]` (the window's offset).
    pub first_expert: usize,
    /// Per local expert: `up` and `gate` `[I, H]`, `down` `[H, I]`, packed E2M1 with linear
    /// UE8M0 scales (`[rows, cols / 32]`).
    pub experts: Vec<ExpertTensors<Mxfp4Matrix>>,
    /// Per local expert the biases added to each projection's output: `up` and `gate` `[I]`
    /// (de-interleaved like the weights), `down` `[H]`, as f32 (BF16 widens exactly). The
    /// layer adds them ([`Self::epilogue`]).
    pub biases: Vec<ExpertTensors<Vec<f32>>>,
}

const BLOCKS: &[Dtype] = &[Dtype::U8];
const SCALES: &[Dtype] = &[Dtype::U8, Dtype::F8_E8M0];
const BIASES: &[Dtype] = &[Dtype::BF16, Dtype::F32];

/// Checks a stacked `[E, trailing…]` tensor: dtype, trailing dims, then that E covers the
/// window and equals the layer's expert count.
fn check_stacked(
    files: &(impl TensorSource + ?Sized),
    name: &str,
    dtypes: &[Dtype],
    expected: &'static str,
    trailing: &[usize],
    shape: &MoeShape,
) -> Result<Dtype> {
    let (dtype, actual) = checked(files, name, dtypes, expected)?;
    let actual = actual.as_slice();
    let w = &shape.window;
    let mut full = vec![w.num_experts()];
    full.extend_from_slice(trailing);
    if actual.len() != full.len() || actual[1..] != *trailing {
        check_shape(name, actual, &full)?;
    }
    let file_experts = actual[0];
    if file_experts < w.offset() + w.local() {
        return Err(RuntimeError::ExpertWindowOutsideFile {
            tensor: name.to_string(),
            offset: w.offset(),
            local: w.local(),
            file_experts,
        });
    }
    if file_experts != w.num_experts() {
        return Err(RuntimeError::ExpertCount {
            tensor: name.to_string(),
            expected: w.num_experts(),
            actual: file_experts,
        });
    }
    Ok(dtype)
}

fn nan_code(code: u8) -> Option<&'static str> {
    (code == UE8M0_NAN).then_some("NaN")
}

/// Rows `parity`, `parity + 2`, … of `[rows, width]` bytes.
fn every_other_row(bytes: &[u8], width: usize, parity: usize) -> Vec<u8> {
    bytes.chunks_exact(width).skip(parity).step_by(2).flatten().copied().collect()
}

impl GptOssExperts {
    /// Loads layer `layer`'s experts `shape.window` from `files` (a [`super::SafetensorsFiles`]
    /// or any other [`TensorSource`]): H and I must be multiples of 32 (MXFP4 blocks) and the
    /// tensors must hold exactly the shape's experts.
    pub fn load(
        files: &(impl TensorSource + ?Sized),
        layer: usize,
        shape: &MoeShape,
    ) -> Result<Self> {
        let (h, i) = (shape.hidden, shape.intermediate);
        for (what, v) in [("hidden size", h), ("intermediate size", i)] {
            if !v.is_multiple_of(MXFP4_BLOCK) {
                return Err(PlanError::Alignment {
                    what,
                    value: v as u64,
                    multiple: MXFP4_BLOCK as u64,
                    why: " (MXFP4 scale blocks)",
                }
                .into());
            }
        }
        let prefix = experts_prefix(layer);
        let name = |t: &str| format!("{prefix}{t}");
        let (gu_b, gu_s, gu_bias) =
            (name("gate_up_proj_blocks"), name("gate_up_proj_scales"), name("gate_up_proj_bias"));
        let (d_b, d_s, d_bias) =
            (name("down_proj_blocks"), name("down_proj_scales"), name("down_proj_bias"));
        let (hb, ib) = (h / MXFP4_BLOCK, i / MXFP4_BLOCK);
        // Every tensor's metadata first: nothing is read from a checkpoint that cannot load.
        check_stacked(files, &gu_b, BLOCKS, "U8", &[2 * i, hb, 16], shape)?;
        check_stacked(files, &gu_s, SCALES, "U8 or F8_E8M0", &[2 * i, hb], shape)?;
        let gu_bias_dtype = check_stacked(files, &gu_bias, BIASES, "BF16 or F32", &[2 * i], shape)?;
        check_stacked(files, &d_b, BLOCKS, "U8", &[h, ib, 16], shape)?;
        check_stacked(files, &d_s, SCALES, "U8 or F8_E8M0", &[h, ib], shape)?;
        let d_bias_dtype = check_stacked(files, &d_bias, BIASES, "BF16 or F32", &[h], shape)?;

        let (first, local) = (shape.window.offset(), shape.window.local());
        let mut experts = Vec::with_capacity(local);
        let mut biases = Vec::with_capacity(local);
        // One expert at a time: a layer of gpt-oss-120b holds a gigabyte of gate_up blocks.
        for g in first..first + local {
            let read = |n: &str| read_outer(files, n, g, 1);
            let (blocks, scales, gu_bias) = (read(&gu_b)?, read(&gu_s)?, read(&gu_bias)?);
            let (down, down_scales, down_bias) = (read(&d_b)?, read(&d_s)?, read(&d_bias)?);
            check_codes(&scales, g * 2 * i * hb, nan_code)?;
            check_codes(&down_scales, g * h * ib, nan_code)?;
            let gu_bias = floats(&gu_bias, gu_bias_dtype, g * 2 * i)?;
            let down_bias = floats(&down_bias, d_bias_dtype, g * h)?;
            let matrix = |parity: usize| Mxfp4Matrix {
                rows: i,
                cols: h,
                packed: every_other_row(&blocks.bytes, h / 2, parity),
                scales: every_other_row(&scales.bytes, hb, parity),
            };
            experts.push(ExpertTensors {
                up: matrix(1),
                gate: matrix(0),
                down: Mxfp4Matrix {
                    rows: h,
                    cols: i,
                    packed: down.bytes,
                    scales: down_scales.bytes,
                },
            });
            biases.push(ExpertTensors {
                up: gu_bias.iter().skip(1).step_by(2).copied().collect(),
                gate: gu_bias.iter().step_by(2).copied().collect(),
                down: down_bias,
            });
        }
        Ok(Self { layer, first_expert: first, experts, biases })
    }

    /// gpt-oss's epilogue for `shape`: clamped SwiGLU with `params` for every expert
    /// (`ActivationParams::GPT_OSS`: α 1.702, β 1, limit 7 — the model's config, not the
    /// checkpoint's tensors) and this layer's GEMM1 and GEMM2 biases, for
    /// [`crate::reference::Sm90Weights::with_epilogue`].
    pub fn epilogue(&self, shape: &MoeShape, params: ActivationParams) -> Result<ExpertEpilogue> {
        let b1: Vec<f32> =
            self.biases.iter().flat_map(|b| b.up.iter().chain(&b.gate).copied()).collect();
        let b2: Vec<f32> = self.biases.iter().flat_map(|b| b.down.iter().copied()).collect();
        let params = vec![params; self.biases.len()];
        ExpertEpilogue::new(shape, Activation::SwigluClamped, params, Some(b1), Some(b2))
    }

    /// The experts as [`crate::reference::import_mxfp4`] and
    /// [`crate::reference::Sm90Weights::from_mxfp4`] take them (linear scales), in local order.
    pub fn tensors(&self) -> Vec<ExpertTensors<Mxfp4Tensor<'_>>> {
        fn t(m: &Mxfp4Matrix) -> Mxfp4Tensor<'_> {
            Mxfp4Tensor { packed: &m.packed, scales: &m.scales, layout: CheckpointScales::Linear }
        }
        self.experts
            .iter()
            .map(|x| ExpertTensors { up: t(&x.up), gate: t(&x.gate), down: t(&x.down) })
            .collect()
    }
}
