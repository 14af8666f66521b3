//! NVIDIA ModelOpt's NVFP4 exports (e.g. `nvidia/DeepSeek-R1-FP4`; see docs/formats.md for
//! the sources).
//!
//! For layer L, expert e and projection p in `gate_proj`, `up_proj`, `down_proj`, under
//! `model.layers.{L}.mlp.experts.{e}.{p}.`, with `[out, in]` = `[I, H]` for gate and up,
//! `[H, I]` for down:
//!
//! | tensor | dtype | shape |
//! | --- | --- | --- |
//! | `weight` | U8 | `[out, in/2]`: two E2M1 codes a byte, element 2j low |
//! | `weight_scale` | F8_E4M3 (or U8) | `[out, in/16]`, linear |
//! | `weight_scale_2` | F32 | `[]` or `[1]` |
//! | `input_scale` | F32 | `[]` or `[1]` |
//!
//! ModelOpt dequantizes `w = e2m1 · weight_scale · weight_scale_2` and quantizes a
//! projection's input `x` with the global scale `1 / input_scale` (`input_scale` is the
//! calibrated `amax / (6 · 448)`). moegen writes `value = e2m1 · scale / global_scale`, so a
//! weight's global scale is `1 / weight_scale_2` and the activations' is `1 / input_scale`.

use std::collections::BTreeMap;

use moegen_dsl::formats::{NVFP4_BLOCK, Nvfp4Matrix};
use moegen_dsl::plan::MoeShape;
use safetensors::Dtype;

use super::files::check_shape;
use super::source::{TensorSource, checked, read};
use super::{check_codes, experts_prefix};
use crate::error::{Result, RuntimeError};
use crate::reference::{CheckpointScales, ExpertTensors, Nvfp4Tensor};

/// One layer's local experts from a ModelOpt NVFP4 export: NVFP4 matrices in moegen's layout
/// and the checkpoint's activation scales.
#[derive(Clone, Debug)]
pub struct ModelOptNvfp4Experts {
    /// The layer loaded.
    pub layer: usize,
    /// Global id of `experts[0]` (the window's offset).
    pub first_expert: usize,
    /// Per local expert: `up` and `gate` `[I, H]`, `down` `[H, I]`: the file's packed values
    /// and linear E4M3 scale codes, `global_scale = 1 / weight_scale_2`.
    pub experts: Vec<ExpertTensors<Nvfp4Matrix>>,
    /// Per local expert each projection's `input_scale` as the file stores it (ModelOpt's
    /// convention: the activation's dequantization factor, `amax / (6 · 448)`).
    pub input_scales: Vec<ExpertTensors<f32>>,
}

/// One projection's tensors: suffix, rows, cols.
fn projections(h: usize, i: usize) -> ExpertTensors<(&'static str, usize, usize)> {
    ExpertTensors { up: ("up_proj", i, h), gate: ("gate_proj", i, h), down: ("down_proj", h, i) }
}

const WEIGHT: &[Dtype] = &[Dtype::U8];
const BLOCK_SCALES: &[Dtype] = &[Dtype::F8_E4M3, Dtype::U8];
const SCALAR: &[Dtype] = &[Dtype::F32];

fn e4m3_code(code: u8) -> Option<&'static str> {
    if code & 0x7F == 0x7F {
        Some("NaN")
    } else if code & 0x80 != 0 {
        Some("negative (NVFP4 block scales are unsigned)")
    } else {
        None
    }
}

/// Checks a scalar's metadata: F32, shape `[]` or `[1]`.
fn check_scalar(files: &(impl TensorSource + ?Sized), name: &str) -> Result<()> {
    let (_, shape) = checked(files, name, SCALAR, "F32")?;
    if shape.is_empty() || shape == [1] { Ok(()) } else { check_shape(name, &shape, &[]) }
}

/// Reads a checked scalar; it must be positive and finite.
fn scalar(files: &(impl TensorSource + ?Sized), name: &str) -> Result<f32> {
    let b = read(files, name)?.bytes;
    let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(RuntimeError::TensorScale { tensor: name.to_string(), value: v })
    }
}

/// The experts of `prefix` in the files: one past the largest id, and a tensor of that id.
/// A source that cannot list its names is probed for the layout's weights of ids
/// `0..=experts` (one past the shape's count, to find a source holding too many).
fn file_experts(
    files: &(impl TensorSource + ?Sized),
    prefix: &str,
    experts: usize,
) -> Result<(usize, Option<String>)> {
    let Some(names) = files.names() else {
        let mut last = None;
        for e in 0..=experts {
            for p in ["down_proj", "gate_proj", "up_proj"] {
                let n = format!("{prefix}{e}.{p}.weight");
                if last.as_ref().is_none_or(|(id, _)| *id < e)
                    && files.describe(&n, WEIGHT)?.is_some()
                {
                    last = Some((e, n));
                }
            }
        }
        return Ok(last.map_or((0, None), |(id, n)| (id + 1, Some(n))));
    };
    let mut by_id: BTreeMap<usize, &str> = BTreeMap::new();
    for name in &names {
        let Some(rest) = name.strip_prefix(prefix) else { continue };
        let Some(Ok(id)) = rest.split('.').next().map(str::parse::<usize>) else { continue };
        let slot = by_id.entry(id).or_insert(name);
        *slot = (*slot).min(name);
    }
    Ok(match by_id.last_key_value() {
        Some((&id, &name)) => (id + 1, Some(name.to_string())),
        None => (0, None),
    })
}

impl ModelOptNvfp4Experts {
    /// Loads layer `layer`'s experts `shape.window` from `files`. The files may hold fewer
    /// experts than the model (an expert-parallel rank's shards) but must hold the window's,
    /// and none past the shape's expert count. An expert whose `up` and `gate`
    /// `weight_scale_2` differ is refused ([`RuntimeError::CheckpointGlobalScales`]): GEMM1
    /// applies one global scale to both halves of W1.
    /// `files` is a [`super::SafetensorsFiles`] or any other [`TensorSource`].
    pub fn load(
        files: &(impl TensorSource + ?Sized),
        layer: usize,
        shape: &MoeShape,
    ) -> Result<Self> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let w = &shape.window;
        let (first, local) = (w.offset(), w.local());
        let prefix = experts_prefix(layer);
        let (count, last) = file_experts(files, &prefix, w.num_experts())?;
        if count < first + local {
            return Err(RuntimeError::ExpertWindowOutsideFile {
                tensor: format!("{prefix}{}.gate_proj.weight", count.max(first)),
                offset: first,
                local,
                file_experts: count,
            });
        }
        if count > w.num_experts() {
            return Err(RuntimeError::ExpertCount {
                tensor: last.unwrap_or_default(),
                expected: w.num_experts(),
                actual: count,
            });
        }
        let name = |e: usize, p: &str, t: &str| format!("{prefix}{e}.{p}.{t}");
        let projs = projections(h, i);
        let each = [projs.up, projs.gate, projs.down];
        // Every tensor's metadata first: nothing is read from a checkpoint that cannot load.
        for e in first..first + local {
            for (p, rows, cols) in each {
                let n = name(e, p, "weight");
                check_shape(&n, &checked(files, &n, WEIGHT, "U8")?.1, &[rows, cols / 2])?;
                let n = name(e, p, "weight_scale");
                let (_, s) = checked(files, &n, BLOCK_SCALES, "F8_E4M3 or U8")?;
                check_shape(&n, &s, &[rows, cols / NVFP4_BLOCK])?;
                check_scalar(files, &name(e, p, "weight_scale_2"))?;
                check_scalar(files, &name(e, p, "input_scale"))?;
            }
        }
        let matrix =
            |e: usize, (p, rows, cols): (&str, usize, usize)| -> Result<(Nvfp4Matrix, f32)> {
                let packed = read(files, &name(e, p, "weight"))?.bytes;
                let scales = read(files, &name(e, p, "weight_scale"))?;
                check_codes(&scales, 0, e4m3_code)?;
                let ws2_name = name(e, p, "weight_scale_2");
                let ws2 = scalar(files, &ws2_name)?;
                let global_scale = 1.0 / ws2;
                if !global_scale.is_finite() {
                    return Err(RuntimeError::TensorScale { tensor: ws2_name, value: ws2 });
                }
                let m = Nvfp4Matrix { rows, cols, packed, scales: scales.bytes, global_scale };
                Ok((m, ws2))
            };
        let mut experts = Vec::with_capacity(local);
        let mut input_scales = Vec::with_capacity(local);
        for e in first..first + local {
            let (up, up_ws2) = matrix(e, projs.up)?;
            let (gate, gate_ws2) = matrix(e, projs.gate)?;
            let (down, _) = matrix(e, projs.down)?;
            if up_ws2 != gate_ws2 {
                return Err(RuntimeError::CheckpointGlobalScales {
                    expert: e,
                    up: name(e, projs.up.0, "weight_scale_2"),
                    up_value: up_ws2,
                    gate: name(e, projs.gate.0, "weight_scale_2"),
                    gate_value: gate_ws2,
                });
            }
            experts.push(ExpertTensors { up, gate, down });
            input_scales.push(ExpertTensors {
                up: scalar(files, &name(e, projs.up.0, "input_scale"))?,
                gate: scalar(files, &name(e, projs.gate.0, "input_scale"))?,
                down: scalar(files, &name(e, projs.down.0, "input_scale"))?,
            });
        }
        Ok(Self { layer, first_expert: first, experts, input_scales })
    }

    /// The experts as [`crate::reference::import_nvfp4`] takes them (linear scales), in local
    /// order.
    pub fn tensors(&self) -> Vec<ExpertTensors<Nvfp4Tensor<'_>>> {
        fn t(m: &Nvfp4Matrix) -> Nvfp4Tensor<'_> {
            Nvfp4Tensor {
                packed: &m.packed,
                scales: &m.scales,
                layout: CheckpointScales::Linear,
                global_scale: m.global_scale,
            }
        }
        self.experts
            .iter()
            .map(|x| ExpertTensors { up: t(&x.up), gate: t(&x.gate), down: t(&x.down) })
            .collect()
    }

    /// [`Self::input_scale`] and [`Self::fc2_input_scale`] over every expert of the layer
    /// (`0..shape.window.num_experts()`, each one's `input_scale`s must be in `files`), not
    /// only the window: what vLLM's backends that share one activation scale across experts
    /// take, so that every expert-parallel rank quantizes its activations alike.
    pub fn model_input_scales(
        files: &(impl TensorSource + ?Sized),
        layer: usize,
        shape: &MoeShape,
    ) -> Result<(f32, f32)> {
        let prefix = experts_prefix(layer);
        let (mut gate_up, mut down) = (0f32, 0f32);
        for e in 0..shape.window.num_experts() {
            for p in ["gate_proj", "up_proj", "down_proj"] {
                let n = format!("{prefix}{e}.{p}.input_scale");
                check_scalar(files, &n)?;
                let v = scalar(files, &n)?;
                if p == "down_proj" {
                    down = down.max(v);
                } else {
                    gate_up = gate_up.max(v);
                }
            }
        }
        Ok((1.0 / gate_up, 1.0 / down))
    }

    /// GEMM1's activation global scale in moegen's convention (`input_scale` of
    /// [`crate::reference::import_nvfp4`], the `gs_x` activations are quantized with):
    /// `1 / max` over the window's experts of their `gate_proj` and `up_proj` `input_scale`.
    /// vLLM's ModelOpt NVFP4 MoE loader likewise takes the max of gate's and up's scale per
    /// expert (`w13_input_scale.max(dim=1)`), and the max over experts where its kernel takes
    /// one scale for all of them; moegen takes one for all experts. For the max over the
    /// whole layer see [`Self::model_input_scales`].
    pub fn input_scale(&self) -> f32 {
        let max = self.input_scales.iter().map(|s| s.up.max(s.gate)).fold(0.0, f32::max);
        1.0 / max
    }

    /// GEMM2's input global scale in moegen's convention (`fc2_input_scale` of
    /// [`crate::reference::import_nvfp4`], the `gs_h` GEMM1 requantizes its output with):
    /// `1 / max` over the local experts of their `down_proj` `input_scale`.
    pub fn fc2_input_scale(&self) -> f32 {
        1.0 / self.input_scales.iter().map(|s| s.down).fold(0.0, f32::max)
    }
}
