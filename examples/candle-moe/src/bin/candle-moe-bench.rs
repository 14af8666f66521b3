//! moegen's MoE block against candle's own per-expert matmul MoE, in one process on one
//! device: output (both against candle's MoE in f32 over the same experts dequantized) and
//! time per forward. Prints a table and writes JSON.
//!
//! ```text
//! candle-moe-bench [--device cuda|cpu] [--shape gpt-oss-20b|small] [--tokens 1,16,128]
//!                  [--iters 20] [--warmup 3] [--json candle-moe-bench.json]
//! ```
//!
//! candle's side runs as candle-transformers' MoE blocks run: bf16 weights (the model's dtype),
//! the routing read back to the host each forward (`to_vec2`), one gather, two matmuls, the
//! activation and an `index_add` per expert. moegen's side is `MoeBlock::forward` (bf16
//! activations × MXFP4 weights on Hopper, the analytic dispatch table's tactic per N; I32 ids, its hot path,
//! and the U32 ids candle's top-k gives checked to give the same output). Each timed forward
//! ends with `Device::synchronize`; the figure is the median.

use std::fmt::Write as _;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use moegen_candle::{
    ActivationFormat, ActivationParams, CheckpointLayout, ExpertWindow, FinalizeMode, MoeBlock,
    MoeBlockConfig, MoeShape,
};
use moegen_example_candle_moe::{
    BOUND, Dims, Result, Rng, candle_moe, checkpoint, dequantized_experts, relative_l2,
};

/// gpt-oss-20b's MoE layer: 32 experts, top-4, H = I = 2880.
const GPT_OSS_20B: Dims = Dims { hidden: 2880, intermediate: 2880, experts: 32, top_k: 4 };
/// Small enough for the simulator (the CPU run CI makes).
const SMALL: Dims = Dims { hidden: 256, intermediate: 128, experts: 8, top_k: 2 };

struct Args {
    device: String,
    shape: String,
    dims: Dims,
    tokens: Vec<usize>,
    iters: usize,
    warmup: usize,
    json: String,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        device: "cuda".into(),
        shape: "gpt-oss-20b".into(),
        dims: GPT_OSS_20B,
        tokens: vec![1, 16, 128, 1024, 4096],
        iters: 20,
        warmup: 3,
        json: "candle-moe-bench.json".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let count = |v: String, what: &str| -> Result<usize> {
            match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{what} must be a positive integer, got {v:?}").into()),
            }
        };
        match flag.as_str() {
            "--device" => a.device = value()?,
            "--shape" => {
                a.shape = value()?;
                a.dims = match a.shape.as_str() {
                    "gpt-oss-20b" => GPT_OSS_20B,
                    "small" => SMALL,
                    s => return Err(format!("--shape {s:?}: gpt-oss-20b or small").into()),
                };
            }
            "--tokens" => {
                a.tokens = value()?
                    .split(',')
                    .map(|t| count(t.to_string(), "--tokens"))
                    .collect::<Result<_>>()?;
            }
            "--iters" => a.iters = count(value()?, "--iters")?,
            "--warmup" => a.warmup = value()?.parse().map_err(|_| "--warmup: an integer")?,
            "--json" => a.json = value()?,
            f => return Err(format!("unknown argument {f:?} (see the file's doc comment)").into()),
        }
    }
    Ok(a)
}

/// A router's output: k distinct experts per token, positive weights summing to 1.
fn routing(tokens: usize, d: Dims, r: &mut Rng) -> (Vec<Vec<u32>>, Vec<Vec<f32>>) {
    (0..tokens)
        .map(|_| {
            let mut ids = Vec::with_capacity(d.top_k);
            while ids.len() < d.top_k {
                let e = r.below(d.experts) as u32;
                if !ids.contains(&e) {
                    ids.push(e);
                }
            }
            let w: Vec<f32> = (0..d.top_k).map(|_| 1.0 + r.below(64) as f32).collect();
            let sum: f32 = w.iter().sum();
            (ids, w.into_iter().map(|w| w / sum).collect())
        })
        .unzip()
}

/// Median milliseconds of `iters` runs of `f`, each ended by a device synchronize.
fn time(
    device: &Device,
    warmup: usize,
    iters: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
        device.synchronize()?;
    }
    let mut ms = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        f()?;
        device.synchronize()?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

fn main() -> Result<()> {
    let a = parse_args()?;
    let device = match a.device.as_str() {
        "cuda" => Device::new_cuda(0)?,
        "cpu" => Device::Cpu,
        d => return Err(format!("--device {d:?}: cuda or cpu").into()),
    };
    let d = a.dims;
    let max_tokens = *a.tokens.iter().max().ok_or("--tokens is empty")?;
    let path = std::env::temp_dir()
        .join(format!("moegen-candle-moe-bench-{}.safetensors", std::process::id()));
    candle_core::safetensors::save(&checkpoint(d, 7)?, &path)?;
    let shape = MoeShape::new(
        d.hidden,
        d.intermediate,
        ExpertWindow::new(d.experts, 0, d.experts, d.top_k)?,
    )?;
    let params = ActivationParams::GPT_OSS;
    let vb = VarBuilder::from_buffered_safetensors(std::fs::read(&path)?, DType::BF16, &device)?;
    let block = MoeBlock::new(
        &vb,
        MoeBlockConfig {
            layer: 0,
            shape,
            max_tokens,
            layout: CheckpointLayout::GptOssMxfp4(params),
            activations: ActivationFormat::Bf16,
            // A fixed summation order: the U32-against-I32 check below compares bits, which
            // the bulk reduce-add's run-time order (top-4 on a GPU) does not keep (found on
            // an H100, 2026-12-06).
            finalize: FinalizeMode::Deterministic,
        },
    )?;
    let bf16 = dequantized_experts(&path, &shape, DType::BF16, &device)?;
    let f32s = dequantized_experts(&path, &shape, DType::F32, &device)?;
    drop(vb);
    std::fs::remove_file(&path)?;

    println!(
        "{} on {}: H {}, I {}, {} experts, top-{}; median of {} (warm-up {})",
        a.shape, a.device, d.hidden, d.intermediate, d.experts, d.top_k, a.iters, a.warmup
    );
    println!(
        "| tokens | moegen ms | candle bf16 ms | candle / moegen | moegen err vs f32 | candle bf16 err vs f32 |"
    );
    println!("|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    let mut worst = 0f32;
    let mut r = Rng(11);
    for &n in &a.tokens {
        let x: Vec<f32> = (0..n * d.hidden).map(|_| r.below(113) as f32 / 32.0 - 1.75).collect();
        let xs = Tensor::from_vec(x, (n, d.hidden), &Device::Cpu)?
            .to_dtype(DType::BF16)?
            .to_device(&device)?;
        let (ids, weights) = routing(n, d, &mut r);
        // candle's top-k (`arg_sort_last_dim`) gives U32 ids; moegen's hot path takes I32
        // (docs/candle.md): both are given, and must give the same output.
        let topk_ids = Tensor::new(ids.clone(), &device)?;
        let ids_i32: Vec<Vec<i32>> =
            ids.iter().map(|r| r.iter().map(|&e| e as i32).collect()).collect();
        let topk_ids_i32 = Tensor::new(ids_i32, &device)?;
        let topk_weights = Tensor::new(weights.clone(), &device)?;

        let reference = candle_moe(&xs, &ids, &weights, &f32s, params)?;
        let ours = block.forward(&xs, &topk_ids_i32, &topk_weights)?;
        let from_u32 = block.forward(&xs, &topk_ids, &topk_weights)?;
        if relative_l2(&from_u32, &ours)? != 0.0 {
            return Err(format!("N = {n}: U32 ids gave another output than I32 ids").into());
        }
        block.check_errors()?;
        let theirs = candle_moe(&xs, &ids, &weights, &bf16, params)?;
        let (err_ours, err_theirs) =
            (relative_l2(&ours, &reference)?, relative_l2(&theirs, &reference)?);
        worst = if err_ours.is_nan() { f32::NAN } else { worst.max(err_ours) };

        let t_ours = time(&device, a.warmup, a.iters, || {
            block.forward(&xs, &topk_ids_i32, &topk_weights)?;
            Ok(())
        })?;
        let t_theirs = time(&device, a.warmup, a.iters, || {
            // candle-transformers reads the router's choice back to the host every forward.
            let ids = topk_ids.to_vec2::<u32>()?;
            let weights = topk_weights.to_vec2::<f32>()?;
            candle_moe(&xs, &ids, &weights, &bf16, params)?;
            Ok(())
        })?;
        println!(
            "| {n} | {t_ours:.4} | {t_theirs:.4} | {:.2} | {err_ours:.5} | {err_theirs:.5} |",
            t_theirs / t_ours
        );
        rows.push(format!(
            "{{\"tokens\": {n}, \"moegen_ms\": {t_ours}, \"candle_bf16_ms\": {t_theirs}, \
             \"moegen_rel_l2_vs_f32\": {err_ours}, \"candle_bf16_rel_l2_vs_f32\": {err_theirs}}}"
        ));
    }
    let mut json = String::new();
    write!(
        json,
        "{{\"shape\": \"{}\", \"device\": \"{}\", \"hidden\": {}, \"intermediate\": {}, \
         \"experts\": {}, \"top_k\": {}, \"iters\": {}, \"warmup\": {}, \"bound\": {BOUND}, \
         \"rows\": [{}]}}",
        a.shape,
        a.device,
        d.hidden,
        d.intermediate,
        d.experts,
        d.top_k,
        a.iters,
        a.warmup,
        rows.join(", ")
    )?;
    std::fs::write(&a.json, json + "\n")?;
    println!("wrote {}", a.json);
    if worst.is_nan() || worst > BOUND {
        return Err(format!("moegen's relative L2 error {worst} exceeds {BOUND}").into());
    }
    Ok(())
}
