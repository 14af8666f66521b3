//! A small MoE block in gpt-oss's checkpoint layout, run by moegen through candle on the CPU
//! (moegen's simulator runs the Hopper kernels), beside candle's own per-expert matmul MoE
//! over the same experts dequantized. On a GPU, only the device changes
//! (`candle-moe-bench --device cuda` does that at gpt-oss-20b's size, and times both).

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use moegen_candle::{
    ActivationFormat, ActivationParams, CheckpointLayout, ExpertWindow, FinalizeMode, MoeBlock,
    MoeBlockConfig, MoeShape,
};
use moegen_example_candle_moe::{
    BOUND, Dims, Result, candle_moe, checkpoint, dequantized_experts, relative_l2,
};

const DIMS: Dims = Dims { hidden: 256, intermediate: 128, experts: 8, top_k: 2 };
const TOKENS: usize = 12;

fn main() -> Result<()> {
    let Dims { hidden, intermediate, experts, top_k } = DIMS;
    let device = Device::Cpu;
    let path =
        std::env::temp_dir().join(format!("moegen-candle-moe-{}.safetensors", std::process::id()));
    candle_core::safetensors::save(&checkpoint(DIMS, 5)?, &path)?;

    // The block, loaded once through a VarBuilder (a model would pass `vb.pp(...)` of its
    // own; `from_mmaped_safetensors` works as well).
    let vb = VarBuilder::from_buffered_safetensors(std::fs::read(&path)?, DType::BF16, &device)?;
    let shape =
        MoeShape::new(hidden, intermediate, ExpertWindow::new(experts, 0, experts, top_k)?)?;
    let params = ActivationParams::GPT_OSS;
    let config = MoeBlockConfig {
        layer: 0,
        shape,
        max_tokens: 64,
        layout: CheckpointLayout::GptOssMxfp4(params),
        activations: ActivationFormat::Bf16, // Hopper's kernels; Mxfp8: SM100's
        finalize: FinalizeMode::BulkReduceAdd,
    };
    let block = MoeBlock::new(&vb, config)?;

    // A batch and its routing (a router's top-k: distinct experts per token).
    let x: Vec<f32> = (0..TOKENS * hidden).map(|j| ((j * 13) % 29) as f32 / 8.0 - 1.75).collect();
    let xs = Tensor::from_vec(x, (TOKENS, hidden), &device)?.to_dtype(DType::BF16)?;
    let ids: Vec<Vec<u32>> =
        (0..TOKENS).map(|t| vec![(t % experts) as u32, ((t * 3 + 1) % experts) as u32]).collect();
    let ids: Vec<Vec<u32>> = ids
        .into_iter()
        .map(|v| if v[0] == v[1] { vec![v[0], (v[0] + 1) % experts as u32] } else { v })
        .collect();
    let weights: Vec<Vec<f32>> =
        (0..TOKENS).map(|t| vec![0.6 + t as f32 / 64.0, 0.4 - t as f32 / 64.0]).collect();
    let topk_ids = Tensor::new(ids.clone(), &device)?;
    let topk_weights = Tensor::new(weights.clone(), &device)?;

    let out = block.forward(&xs, &topk_ids, &topk_weights)?;

    // The same experts dequantized, through candle's own MoE in f32.
    let reference = dequantized_experts(&path, &shape, DType::F32, &device)?;
    let reference = candle_moe(&xs, &ids, &weights, &reference, params)?;
    std::fs::remove_file(&path)?;

    let error = relative_l2(&out, &reference)?;
    println!("{TOKENS} tokens, H {hidden}, I {intermediate}, {experts} experts, top-{top_k}");
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
