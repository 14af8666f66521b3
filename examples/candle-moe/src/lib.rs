//! What the example and the benchmark share: a gpt-oss-layout checkpoint of stand-in bytes,
//! the same experts dequantized, and candle's own per-expert matmul MoE over them.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use moegen_candle::{ActivationParams, MoeShape};
use moegen_runtime::checkpoint_files::{GptOssExperts, SafetensorsFiles};

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// moegen against candle's MoE over the dequantized experts in f32: both see the same bf16
/// input and the same weights exactly (MXFP4 dequantizes exactly to f32), so what differs is
/// moegen's bf16 roundings: h before GEMM2, each route's contribution added into the bf16
/// output, and the output itself, each within 2^-9 relative, at most ~3 · 2^-9 ≈ 0.6 %
/// together, against candle's f32 throughout (accumulation order is far below that). 1 %
/// leaves room for that order; a wrong layout, expert or bias is off by tens of percent
/// (the quantization error of 4-bit weights against unquantized ones is itself 10–20 %).
pub const BOUND: f32 = 0.01;

/// A layer's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Dims {
    pub hidden: usize,
    pub intermediate: usize,
    pub experts: usize,
    pub top_k: usize,
}

/// Deterministic stand-in numbers for a checkpoint and a batch.
pub struct Rng(pub u64);

impl Rng {
    pub fn byte(&mut self) -> u8 {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u8
    }

    /// Uniform in `0..n` (n well below 2^31; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: usize) -> usize {
        let hi = u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()]);
        hi as usize % n
    }
}

/// gpt-oss's experts for layer 0: E2M1 codes, UE8M0 scales 2^-7..2^-4, bf16 biases.
pub fn checkpoint(d: Dims, seed: u64) -> Result<HashMap<String, Tensor>> {
    let (h, i, e, cpu) = (d.hidden, d.intermediate, d.experts, Device::Cpu);
    let mut r = Rng(seed);
    let mut bytes =
        |n: usize, f: fn(u8) -> u8| -> Vec<u8> { (0..n).map(|_| f(r.byte())).collect() };
    let gate_up = bytes(e * 2 * i * h / 2, |b| b);
    let gate_up_scales = bytes(e * 2 * i * h / 32, |b| 120 + b % 4);
    let down = bytes(e * h * i / 2, |b| b);
    let down_scales = bytes(e * h * i / 32, |b| 120 + b % 4);
    let bias =
        |n: usize| -> Vec<f32> { (0..n).map(|j| ((j * 37) % 64) as f32 / 256.0 - 0.125).collect() };
    let p = |t: &str| format!("model.layers.0.mlp.experts.{t}");
    Ok(HashMap::from([
        (p("gate_up_proj_blocks"), Tensor::from_vec(gate_up, (e, 2 * i, h / 32, 16), &cpu)?),
        (p("gate_up_proj_scales"), Tensor::from_vec(gate_up_scales, (e, 2 * i, h / 32), &cpu)?),
        (
            p("gate_up_proj_bias"),
            Tensor::from_vec(bias(e * 2 * i), (e, 2 * i), &cpu)?.to_dtype(DType::BF16)?,
        ),
        (p("down_proj_blocks"), Tensor::from_vec(down, (e, h, i / 32, 16), &cpu)?),
        (p("down_proj_scales"), Tensor::from_vec(down_scales, (e, h, i / 32), &cpu)?),
        (p("down_proj_bias"), Tensor::from_vec(bias(e * h), (e, h), &cpu)?.to_dtype(DType::BF16)?),
    ]))
}

/// One expert's dequantized weights and biases: gate and up `[I, H]`, down `[H, I]`.
pub struct Expert {
    pub gate: Tensor,
    pub up: Tensor,
    pub down: Tensor,
    pub gate_bias: Tensor,
    pub up_bias: Tensor,
    pub down_bias: Tensor,
}

/// The checkpoint's experts decoded by moegen-runtime's loader (independent of the block's
/// device path), dequantized to f32 and held as `dtype` on `device`.
pub fn dequantized_experts(
    path: &Path,
    shape: &MoeShape,
    dtype: DType,
    device: &Device,
) -> Result<Vec<Expert>> {
    let files = SafetensorsFiles::open(&[path])?;
    let loaded = GptOssExperts::load(&files, 0, shape)?;
    let (h, i) = (shape.hidden, shape.intermediate);
    let t = |v: Vec<f32>, dims: &[usize]| -> Result<Tensor> {
        Ok(Tensor::from_vec(v, dims, &Device::Cpu)?.to_dtype(dtype)?.to_device(device)?)
    };
    loaded
        .experts
        .iter()
        .zip(&loaded.biases)
        .map(|(m, b)| {
            Ok(Expert {
                gate: t(m.gate.dequantize(), &[i, h])?,
                up: t(m.up.dequantize(), &[i, h])?,
                down: t(m.down.dequantize(), &[h, i])?,
                gate_bias: t(b.gate.clone(), &[i])?,
                up_bias: t(b.up.clone(), &[i])?,
                down_bias: t(b.down.clone(), &[h])?,
            })
        })
        .collect()
}

/// candle's MoE as candle-transformers' MoE blocks write it (Mixtral's `SparseMoeBlock`, the
/// DeepSeek and Qwen MoE blocks): per expert, gather its tokens, two matmuls around the
/// activation, scale by the router weight and `index_add` back, all in the experts' dtype
/// (a model's dtype: bf16 on a GPU). The activation is gpt-oss's clamped SwiGLU:
/// (clamp(up, ±limit) + β) · g · σ(α g) with g = min(gate, limit).
pub fn candle_moe(
    xs: &Tensor,
    ids: &[Vec<u32>],
    weights: &[Vec<f32>],
    experts: &[Expert],
    p: ActivationParams,
) -> Result<Tensor> {
    let dtype = experts.first().map_or(DType::F32, |e| e.gate.dtype());
    let xs = xs.to_dtype(dtype)?;
    let mut ys = xs.zeros_like()?;
    for (e, w) in experts.iter().enumerate() {
        let (mut rows, mut scale) = (Vec::new(), Vec::new());
        for (t, (ids, ws)) in ids.iter().zip(weights).enumerate() {
            for (&id, &wt) in ids.iter().zip(ws) {
                if id as usize == e {
                    rows.push(t as u32);
                    scale.push(wt);
                }
            }
        }
        if rows.is_empty() {
            continue;
        }
        let n = rows.len();
        let rows = Tensor::new(rows.as_slice(), xs.device())?;
        let scale = Tensor::from_vec(scale, (n, 1), xs.device())?.to_dtype(dtype)?;
        let x = xs.index_select(&rows, 0)?;
        let gate = x.matmul(&w.gate.t()?)?.broadcast_add(&w.gate_bias)?.minimum(p.limit as f64)?;
        let up = x.matmul(&w.up.t()?)?.broadcast_add(&w.up_bias)?.clamp(-p.limit, p.limit)?;
        let glu = (&gate * candle_nn::ops::sigmoid(&(&gate * p.alpha as f64)?)?)?;
        let h = ((up + p.beta as f64)? * glu)?;
        let y = h.matmul(&w.down.t()?)?.broadcast_add(&w.down_bias)?.broadcast_mul(&scale)?;
        ys = ys.index_add(&rows, &y, 0)?;
    }
    Ok(ys)
}

/// ‖a − b‖₂ / ‖b‖₂ in f32 (NaN when either holds a NaN).
pub fn relative_l2(a: &Tensor, b: &Tensor) -> Result<f32> {
    let (a, b) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
    let norm = |t: &Tensor| -> Result<f32> { Ok(t.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?) };
    Ok(norm(&(a - &b)?)? / norm(&b)?)
}
