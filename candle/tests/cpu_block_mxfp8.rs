//! gpt-oss's layout with MXFP8 activations (`ActivationFormat::Mxfp8`) on candle's CPU
//! device: moegen's SM100 simulator runs the `kind::mxf8f6f4` kernels, bit for bit moegen's
//! MXFP8 CPU reference of the file as moegen's own loader reads it, in both finalize modes
//! and unlike the bf16 (Hopper) block; activations a layout is not run with are refused
//! naming both.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use common::{E, H, I, LAYER, gpt_oss_tensors, write};
use moegen_candle::{
    ActivationFormat, ActivationParams, CheckpointLayout, ExpertWindow, FinalizeMode, MoeBlock,
    MoeBlockConfig, MoeBlockError, MoeShape,
};
use moegen_runtime::checkpoint_files::{GptOssExperts, SafetensorsFiles};
use moegen_runtime::prelude::*;

const TOKENS: usize = 6;
const GPT_OSS: CheckpointLayout = CheckpointLayout::GptOssMxfp4(ActivationParams::GPT_OSS);

fn shape() -> MoeShape {
    MoeShape::new(H, I, ExpertWindow::new(E, 0, E, 2).unwrap()).unwrap()
}

fn config(
    layout: CheckpointLayout,
    activations: ActivationFormat,
    finalize: FinalizeMode,
) -> MoeBlockConfig {
    MoeBlockConfig { layer: LAYER, shape: shape(), max_tokens: 16, layout, activations, finalize }
}

fn vb(path: &std::path::Path) -> VarBuilder<'static> {
    let bytes = std::fs::read(path).unwrap();
    VarBuilder::from_buffered_safetensors(bytes, DType::BF16, &Device::Cpu).unwrap()
}

/// bf16 inputs (eighths in [-1.5, 1.5]) and two distinct experts per token.
fn inputs() -> (Vec<bf16>, Vec<i32>, Vec<f32>) {
    let x = (0..TOKENS * H).map(|i| bf16::from_f32(((i * 5) % 25) as f32 / 8.0 - 1.5)).collect();
    let ids = (0..TOKENS).flat_map(|t| [(t % E) as i32, ((t + 2) % E) as i32]).collect();
    let w = (0..TOKENS).flat_map(|t| [0.3 + t as f32 / 32.0, 0.7 - t as f32 / 32.0]).collect();
    (x, ids, w)
}

fn forward(block: &MoeBlock, (x, ids, w): &(Vec<bf16>, Vec<i32>, Vec<f32>)) -> Vec<bf16> {
    let cpu = Device::Cpu;
    let xs = Tensor::from_slice(x, (TOKENS, H), &cpu).unwrap();
    let ti = Tensor::from_slice(ids, (TOKENS, 2), &cpu).unwrap();
    let tw = Tensor::from_slice(w, (TOKENS, 2), &cpu).unwrap();
    let out = block.forward(&xs, &ti, &tw).unwrap();
    assert_eq!((out.dims(), out.dtype()), (&[TOKENS, H][..], DType::BF16));
    out.flatten_all().unwrap().to_vec1().unwrap()
}

/// moegen's CPU reference of the SM100 MXFP8 × MXFP4 layer over the file, loaded by
/// moegen's own safetensors reader (not the VarBuilder).
fn reference(
    path: &std::path::Path,
    (x, ids, w): &(Vec<bf16>, Vec<i32>, Vec<f32>),
    finalize: FinalizeMode,
) -> Vec<bf16> {
    let shape = shape();
    let files = SafetensorsFiles::open(&[path]).unwrap();
    let experts = GptOssExperts::load(&files, LAYER, &shape).unwrap();
    let weights = Sm100MxWeights::from_mxfp4(&shape, &experts.tensors())
        .unwrap()
        .with_epilogue(&shape, experts.epilogue(&shape, ActivationParams::GPT_OSS).unwrap())
        .unwrap();
    let acts = quantize_mxfp8_activations(x, TOKENS, H).unwrap();
    let routing = Routing { tokens: TOKENS, experts: ids.clone(), weights: w.clone() };
    let options = ReferenceOptions {
        swiglu_input: SwigluInput::F32,
        recipe: Target::Sm100f.default_recipe(),
        finalize,
    };
    // Each row's GEMMs do not depend on the routing tile (it orders rows, nothing else):
    // the 128-row tile stands for whichever the block dispatches.
    moe_reference_sm100_mx(&shape, &acts, &weights, &routing, TileSize::T128, options)
        .unwrap()
        .output
}

#[test]
fn gpt_oss_mxfp8_block_equals_the_mxfp8_reference_of_the_file() {
    let path = write("gpt_oss_mxfp8_reference", &gpt_oss_tensors(11));
    let inputs = inputs();
    let mut outputs = Vec::new();
    for finalize in [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic] {
        let block =
            MoeBlock::new(&vb(&path), config(GPT_OSS, ActivationFormat::Mxfp8, finalize)).unwrap();
        let out = forward(&block, &inputs);
        assert!(out.iter().any(|v| v.to_f32() != 0.0), "a non-trivial output");
        assert_eq!(out, reference(&path, &inputs, finalize), "{finalize:?}");
        outputs.push(out);
    }
    // Two routes per token add in one order either way.
    assert_eq!(outputs[0], outputs[1]);
    // Hopper's bf16 layer of the same file computes something else: a silent fall-back to
    // it would be seen here.
    let a16 = config(GPT_OSS, ActivationFormat::Bf16, FinalizeMode::BulkReduceAdd);
    let a16 = MoeBlock::new(&vb(&path), a16).unwrap();
    assert_ne!(forward(&a16, &inputs), outputs[0]);
}

#[test]
fn activations_a_layout_is_not_run_with_are_refused_naming_both() {
    let path = write("gpt_oss_mxfp8_activations", &gpt_oss_tensors(12));
    let refused = [
        (GPT_OSS, ActivationFormat::Nvfp4, "GptOssMxfp4"),
        (GPT_OSS, ActivationFormat::Fp8, "GptOssMxfp4"),
        (CheckpointLayout::ModelOptNvfp4, ActivationFormat::Mxfp8, "ModelOptNvfp4"),
        (CheckpointLayout::ModelOptNvfp4, ActivationFormat::Bf16, "ModelOptNvfp4"),
    ];
    for (layout, activations, name) in refused {
        let c = config(layout, activations, FinalizeMode::BulkReduceAdd);
        let e = MoeBlock::new(&vb(&path), c).err().unwrap();
        assert!(
            matches!(e, MoeBlockError::Activations { activations: a, layout: l, .. }
                if a == activations && l == name),
            "{e}"
        );
        let text = e.to_string();
        let head = format!("activations {activations:?} with CheckpointLayout::{name}:");
        assert!(text.starts_with(&head), "{text}");
    }
    let e = MoeBlock::new(
        &vb(&path),
        config(GPT_OSS, ActivationFormat::Fp8, FinalizeMode::BulkReduceAdd),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("Bf16 (Hopper's kernels) or Mxfp8"), "{e}");
}
