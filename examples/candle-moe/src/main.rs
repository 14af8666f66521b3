//! A small MoE block in gpt-oss's checkpoint layout, run by moegen through candle on the CPU
//! (moegen's simulator runs the Hopper kernels), beside candle's own per-expert matmul MoE
//! over the same experts dequantized. On a GPU, only the device changes.

use std::collections::HashMap;

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use moegen_candle::{
    ActivationParams, CheckpointLayout, ExpertWindow, MoeBlock, MoeBlockConfig, MoeShape,
};
use moegen_runtime::checkpoint_files::{GptOssExperts, SafetensorsFiles};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const HIDDEN: usize = 256;
const INTERMEDIATE: usize = 128;
const EXPERTS: usize = 8;
const TOP_K: usize = 2;
const TOKENS: usize = 12;

/// moegen against candle's MoE over the dequantized experts: both see the same bf16 input
/// and the same weights exactly (MXFP4 dequantizes exactly to f32), so what differs is
/// moegen's bf16 roundings: h before GEMM2, each route's contribution added into the bf16
/// output, and the output itself, each within 2^-9 relative, at most ~3 · 2^-9 ≈ 0.6 %
/// together, against candle's f32 throughout (accumulation order is far below that). 1 %
/// leaves room for that order; a wrong layout, expert or bias is off by tens of percent
/// (the quantization error of 4-bit weights against unquantized ones is itself 10–20 %).
const BOUND: f32 = 0.01;

/// Deterministic stand-in bytes for a checkpoint.
struct Rng(u64);

impl Rng {
    fn byte(&mut self) -> u8 {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) as u8
    }
}

/// gpt-oss's experts for layer 0: E2M1 codes, UE8M0 scales 2^-7..2^-4, bf16 biases.
fn checkpoint(seed: u64) -> Result<HashMap<String, Tensor>> {
    let (h, i, e, cpu) = (HIDDEN, INTERMEDIATE, EXPERTS, Device::Cpu);
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

/// One expert's dequantized weights and biases, f32: gate and up `[I, H]`, down `[H, I]`.
struct Expert {
    gate: Tensor,
    up: Tensor,
    down: Tensor,
    gate_bias: Tensor,
    up_bias: Tensor,
    down_bias: Tensor,
}

/// candle's MoE as candle-transformers' MoE blocks write it: per expert, gather its tokens,
/// two matmuls around the activation, scale by the router weight and `index_add` back. The
/// activation is gpt-oss's clamped SwiGLU: (clamp(up, ±limit) + β) · g · σ(α g) with
/// g = min(gate, limit).
fn candle_moe(
    xs: &Tensor,
    ids: &[Vec<u32>],
    weights: &[Vec<f32>],
    experts: &[Expert],
    p: ActivationParams,
) -> Result<Tensor> {
    let xs = xs.to_dtype(DType::F32)?;
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
        let scale = Tensor::from_vec(scale, (n, 1), xs.device())?;
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

fn main() -> Result<()> {
    let device = Device::Cpu;
    let path =
        std::env::temp_dir().join(format!("moegen-candle-moe-{}.safetensors", std::process::id()));
    candle_core::safetensors::save(&checkpoint(5)?, &path)?;

    // The block, loaded once through a VarBuilder (a model would pass `vb.pp(...)` of its
    // own; `from_mmaped_safetensors` works as well).
    let vb = VarBuilder::from_buffered_safetensors(std::fs::read(&path)?, DType::BF16, &device)?;
    let shape =
        MoeShape::new(HIDDEN, INTERMEDIATE, ExpertWindow::new(EXPERTS, 0, EXPERTS, TOP_K)?)?;
    let params = ActivationParams::GPT_OSS;
    let config = MoeBlockConfig {
        layer: 0,
        shape,
        max_tokens: 64,
        layout: CheckpointLayout::GptOssMxfp4(params),
    };
    let block = MoeBlock::new(&vb, config)?;

    // A batch and its routing (a router's top-k: distinct experts per token).
    let x: Vec<f32> = (0..TOKENS * HIDDEN).map(|j| ((j * 13) % 29) as f32 / 8.0 - 1.75).collect();
    let xs = Tensor::from_vec(x, (TOKENS, HIDDEN), &device)?.to_dtype(DType::BF16)?;
    let ids: Vec<Vec<u32>> =
        (0..TOKENS).map(|t| vec![(t % EXPERTS) as u32, ((t * 3 + 1) % EXPERTS) as u32]).collect();
    let ids: Vec<Vec<u32>> = ids
        .into_iter()
        .map(|v| if v[0] == v[1] { vec![v[0], (v[0] + 1) % EXPERTS as u32] } else { v })
        .collect();
    let weights: Vec<Vec<f32>> =
        (0..TOKENS).map(|t| vec![0.6 + t as f32 / 64.0, 0.4 - t as f32 / 64.0]).collect();
    let topk_ids = Tensor::new(ids.clone(), &device)?;
    let topk_weights = Tensor::new(weights.clone(), &device)?;

    let out = block.forward(&xs, &topk_ids, &topk_weights)?;

    // The same experts dequantized, through candle's own MoE.
    let files = SafetensorsFiles::open(&[&path])?;
    let loaded = GptOssExperts::load(&files, 0, &shape)?;
    let t = |v: Vec<f32>, rows: usize, cols: usize| Tensor::from_vec(v, (rows, cols), &device);
    let experts = loaded
        .experts
        .iter()
        .zip(&loaded.biases)
        .map(|(m, b)| {
            Ok(Expert {
                gate: t(m.gate.dequantize(), INTERMEDIATE, HIDDEN)?,
                up: t(m.up.dequantize(), INTERMEDIATE, HIDDEN)?,
                down: t(m.down.dequantize(), HIDDEN, INTERMEDIATE)?,
                gate_bias: Tensor::new(b.gate.as_slice(), &device)?,
                up_bias: Tensor::new(b.up.as_slice(), &device)?,
                down_bias: Tensor::new(b.down.as_slice(), &device)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let reference = candle_moe(&xs, &ids, &weights, &experts, params)?;
    std::fs::remove_file(&path)?;

    let diff = (out.to_dtype(DType::F32)? - &reference)?;
    let norm = |t: &Tensor| -> Result<f32> { Ok(t.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?) };
    let error = norm(&diff)? / norm(&reference)?;
    println!("{TOKENS} tokens, H {HIDDEN}, I {INTERMEDIATE}, {EXPERTS} experts, top-{TOP_K}");
    println!(
        "moegen out[0, 0..4] = {:?}",
        out.i((0, 0..4))?.to_dtype(DType::F32)?.to_vec1::<f32>()?
    );
    println!("candle out[0, 0..4] = {:?}", reference.i((0, 0..4))?.to_vec1::<f32>()?);
    println!("relative L2 error vs candle's matmul MoE: {error:.5} (bound {BOUND})");
    // A NaN error fails too.
    if error.is_nan() || error > BOUND {
        return Err(format!("relative L2 error {error} exceeds {BOUND}").into());
    }
    Ok(())
}
