//! The block on candle's CPU device (moegen's simulator): the VarBuilder path loads what
//! moegen's file loader loads, the pass equals moegen's CPU reference, and bad inputs are
//! refused naming the input.

mod common;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use common::{E, H, I, LAYER, gpt_oss_tensors, name, write};
use moegen_candle::{
    ActivationFormat, ActivationParams, CheckpointLayout, ExpertWindow, FinalizeMode, MoeBlock,
    MoeBlockConfig, MoeBlockError, MoeShape,
};
use moegen_runtime::checkpoint_files::{GptOssExperts, SafetensorsFiles};
use moegen_runtime::prelude::*;
use moegen_runtime::reference::{Sm90Weights, moe_reference_sm90};

const TOKENS: usize = 6;

fn shape() -> MoeShape {
    MoeShape::new(H, I, ExpertWindow::new(E, 0, E, 2).unwrap()).unwrap()
}

fn config() -> MoeBlockConfig {
    MoeBlockConfig {
        layer: LAYER,
        shape: shape(),
        max_tokens: 16,
        layout: CheckpointLayout::GptOssMxfp4(ActivationParams::GPT_OSS),
        activations: ActivationFormat::Bf16,
        finalize: FinalizeMode::BulkReduceAdd,
    }
}

fn vb(path: &std::path::Path) -> VarBuilder<'static> {
    let bytes = std::fs::read(path).unwrap();
    VarBuilder::from_buffered_safetensors(bytes, DType::BF16, &Device::Cpu).unwrap()
}

fn inputs() -> (Vec<bf16>, Vec<i32>, Vec<f32>) {
    let x = (0..TOKENS * H).map(|i| bf16::from_f32(((i * 7) % 23) as f32 / 8.0 - 1.4)).collect();
    let ids = (0..TOKENS).flat_map(|t| [(t % E) as i32, ((t + 1) % E) as i32]).collect();
    let w = (0..TOKENS).flat_map(|t| [0.25 + t as f32 / 32.0, 0.75 - t as f32 / 32.0]).collect();
    (x, ids, w)
}

fn tensors(x: &[bf16], ids: &[i32], w: &[f32]) -> (Tensor, Tensor, Tensor) {
    let cpu = Device::Cpu;
    (
        Tensor::from_slice(x, (TOKENS, H), &cpu).unwrap(),
        Tensor::from_slice(ids, (TOKENS, 2), &cpu).unwrap(),
        Tensor::from_slice(w, (TOKENS, 2), &cpu).unwrap(),
    )
}

#[test]
fn gpt_oss_block_equals_the_cpu_reference_of_the_file() {
    let path = write("gpt_oss_reference", &gpt_oss_tensors(1));
    let block = MoeBlock::new(&vb(&path), config()).unwrap();
    let (x, ids, w) = inputs();
    let (xs, ti, tw) = tensors(&x, &ids, &w);
    let out = block.forward(&xs, &ti, &tw).unwrap();
    assert_eq!(out.dims(), [TOKENS, H]);
    assert_eq!(out.dtype(), DType::BF16);
    let out: Vec<bf16> = out.flatten_all().unwrap().to_vec1().unwrap();

    // The same layer from moegen's own file loader, through the CPU reference.
    let shape = shape();
    let files = SafetensorsFiles::open(&[&path]).unwrap();
    let experts = GptOssExperts::load(&files, LAYER, &shape).unwrap();
    let weights =
        Sm90Weights::from_mxfp4(&shape, &experts.tensors(), ActivationFormat::Bf16, 1.0, 1.0)
            .unwrap()
            .with_epilogue(&shape, experts.epilogue(&shape, ActivationParams::GPT_OSS).unwrap())
            .unwrap();
    let routing = Routing { tokens: TOKENS, experts: ids.clone(), weights: w.clone() };
    let reference = moe_reference_sm90(
        &shape,
        &x,
        1.0,
        &weights,
        &routing,
        TileSize::T64.into(),
        SwigluInput::F32,
        FinalizeMode::BulkReduceAdd,
    )
    .unwrap();
    assert!(out.iter().any(|v| v.to_f32() != 0.0), "a non-trivial output");
    assert_eq!(out, reference.output, "the block differs from moegen's CPU reference");

    // The fixed-order finalize: its own reduction kernel over a scratch, the same sums here
    // (two routes per token add in one order either way).
    let det = MoeBlockConfig { finalize: FinalizeMode::Deterministic, ..config() };
    let det = MoeBlock::new(&vb(&path), det).unwrap();
    let again = det.forward(&xs, &ti, &tw).unwrap().flatten_all().unwrap();
    assert_eq!(again.to_vec1::<bf16>().unwrap(), out, "deterministic finalize");

    // U32 and I64 ids are the same ids.
    let cpu = Device::Cpu;
    for dtype in [DType::U32, DType::I64] {
        let ti = Tensor::from_slice(&ids, (TOKENS, 2), &cpu).unwrap().to_dtype(dtype).unwrap();
        let again = block.forward(&xs, &ti, &tw).unwrap().flatten_all().unwrap();
        assert_eq!(again.to_vec1::<bf16>().unwrap(), out, "ids as {dtype:?}");
    }
}

#[test]
fn bad_inputs_are_refused_naming_the_input() {
    let path = write("gpt_oss_refusals", &gpt_oss_tensors(2));
    let block = MoeBlock::new(&vb(&path), config()).unwrap();
    let (x, ids, w) = inputs();
    let (xs, ti, tw) = tensors(&x, &ids, &w);
    let err = |r: Result<Tensor, MoeBlockError>| r.unwrap_err();

    let e = err(block.try_forward(&xs.to_dtype(DType::F32).unwrap(), &ti, &tw));
    assert!(matches!(e, MoeBlockError::Dtype { input: "xs", .. }), "{e}");
    let e = err(block.try_forward(&xs.narrow(1, 0, H / 2).unwrap(), &ti, &tw));
    assert!(matches!(e, MoeBlockError::Shape { input: "xs", .. }), "{e}");
    let e = err(block.try_forward(&xs, &ti.narrow(0, 0, 2).unwrap(), &tw));
    assert!(matches!(e, MoeBlockError::Shape { input: "topk_ids", .. }), "{e}");
    let e = err(block.try_forward(&xs, &ti, &tw.to_dtype(DType::BF16).unwrap()));
    assert!(matches!(e, MoeBlockError::Dtype { input: "topk_weights", .. }), "{e}");
    let e = err(block.try_forward(&xs, &ti.to_dtype(DType::F32).unwrap(), &tw));
    assert!(matches!(e, MoeBlockError::Dtype { input: "topk_ids", .. }), "{e}");

    // An I64 id that a cast to i32 would wrap onto expert 1.
    let mut wide: Vec<i64> = ids.iter().map(|&v| v as i64).collect();
    wide[3] = (1i64 << 32) + 1;
    let t64 = Tensor::from_slice(&wide, (TOKENS, 2), &Device::Cpu).unwrap();
    let e = err(block.try_forward(&xs, &t64, &tw));
    assert!(matches!(e, MoeBlockError::IdRange { token: 1, slot: 1, .. }), "{e}");

    // An id past the experts: the routing kernels' check, decoded by moegen.
    let mut bad = ids.clone();
    bad[4] = E as i32 + 3;
    let tb = Tensor::from_slice(&bad, (TOKENS, 2), &Device::Cpu).unwrap();
    let e = err(block.try_forward(&xs, &tb, &tw));
    assert!(matches!(e, MoeBlockError::Layer(_)), "{e}");
    assert!(e.to_string().contains("token 2"), "{e}");

    // Through candle's error: moegen's message.
    let e = block.forward(&xs.to_dtype(DType::F32).unwrap(), &ti, &tw).unwrap_err();
    assert!(e.to_string().contains("xs: dtype F32, expected BF16"), "{e}");
}

#[test]
fn a_checkpoint_missing_a_tensor_is_refused_naming_it() {
    let mut t = gpt_oss_tensors(3);
    t.remove(&name("down_proj_scales"));
    let path = write("gpt_oss_missing", &t);
    let e = MoeBlock::new(&vb(&path), config()).err().unwrap();
    assert!(e.to_string().contains(&name("down_proj_scales")), "{e}");

    let mut t = gpt_oss_tensors(4);
    let short = t[&name("down_proj_bias")].narrow(1, 0, H / 2).unwrap();
    t.insert(name("down_proj_bias"), short);
    let path = write("gpt_oss_shape", &t);
    let e = MoeBlock::new(&vb(&path), config()).err().unwrap();
    assert!(e.to_string().contains(&name("down_proj_bias")), "{e}");
}
