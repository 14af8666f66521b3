//! The SM100 MXFP8 × MXFP4 kernels (`kind::mxf8f6f4`), end to end in moegen-sim: the
//! routing sort → the `quantize_mxfp8` activation quantizer → GEMM1 (gather, MMAs, epilogue
//! with MXFP8 requantization) → GEMM2 [→ the deterministic reduction], against the CPU
//! reference (`moe_reference_sm100_mx`) bit for bit, with the MMA count checked.

use half::bf16;
use moegen_dsl::epilogue_math::ActivationParams;
use moegen_dsl::{Activation, EpilogueRecipe, FinalizeMode, MoeTactic, SwigluInput, nvfp4_tactics};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::reference::*;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::device_layer_mx::{
    DeviceMxRun, MxActivations, MxLayerInputs, device_mx_layer,
};

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

struct Problem {
    shape: MoeShape,
    x: Vec<bf16>,
    weights: Sm100MxWeights,
    routing: Routing,
}

/// H 320 and I 192: both K dimensions end in a partial 128-wide stage (64 of 128) and GEMM1's
/// 2I = 384 and GEMM2's H = 320 end in partial N blocks at N 256.
fn problem(
    tokens: usize,
    seed: u64,
    epilogue: Option<&dyn Fn(&MoeShape) -> ExpertEpilogue>,
) -> Problem {
    problem_sized(320, 192, tokens, seed, epilogue)
}

fn problem_sized(
    h: usize,
    i: usize,
    tokens: usize,
    seed: u64,
    epilogue: Option<&dyn Fn(&MoeShape) -> ExpertEpilogue>,
) -> Problem {
    let (experts, offset, local, k) = (8, 2, 4, 2);
    let shape = MoeShape::new(h, i, ExpertWindow::new(experts, offset, local, k).unwrap()).unwrap();
    let mut r = Rng(seed);
    let x: Vec<bf16> = (0..tokens * h).map(|_| bf16::from_f32(r.normal() * 3.0)).collect();
    let s = 1.0 / (h as f32).sqrt();
    let relu2 = epilogue.is_some_and(|e| !e(&shape).spec().activation.gated());
    let weights = if relu2 {
        let w1: Vec<f32> = (0..local * i * h).map(|_| r.normal() * s).collect();
        let down: Vec<f32> = (0..local * h * i).map(|_| r.normal() / (i as f32).sqrt()).collect();
        Sm100MxWeights::quantize_relu2(&shape, &w1, &down).unwrap().0
    } else {
        let up: Vec<f32> = (0..local * i * h).map(|_| r.normal() * s).collect();
        let gate: Vec<f32> = (0..local * i * h).map(|_| r.normal() * s).collect();
        let down: Vec<f32> = (0..local * h * i).map(|_| r.normal() / (i as f32).sqrt()).collect();
        Sm100MxWeights::quantize(&shape, &up, &gate, &down).unwrap().0
    };
    let alphas: Vec<f32> = (0..local).map(|e| 0.75 + 0.125 * e as f32).collect();
    let mut weights = weights.with_alphas(&shape, alphas.clone(), alphas).unwrap();
    if let Some(ep) = epilogue {
        weights = weights.with_epilogue(&shape, ep(&shape)).unwrap();
    }
    let experts: Vec<i32> =
        (0..tokens * k).map(|j| ((r.next() >> 33) % 4) as i32 + 4 * (j % k) as i32).collect();
    let rw: Vec<f32> = (0..tokens * k).map(|j| 0.125 + (j % k) as f32 * 0.25).collect();
    Problem { shape, x, weights, routing: Routing { tokens, experts, weights: rw } }
}

fn check(p: &Problem, tactic: &MoeTactic, opts: ReferenceOptions, clusters: u32) -> DeviceMxRun {
    let acts = quantize_mxfp8_activations(&p.x, p.routing.tokens, p.shape.hidden).unwrap();
    let want = moe_reference_sm100_mx(&p.shape, &acts, &p.weights, &p.routing, tactic.tile(), opts)
        .unwrap();
    let mut sim = SimBackend::new();
    let inputs = MxLayerInputs {
        shape: &p.shape,
        acts: MxActivations::Bf16(&p.x),
        weights: &p.weights,
        routing: &p.routing,
    };
    let got = device_mx_layer(&mut sim, &inputs, tactic, opts, clusters)
        .unwrap_or_else(|e| panic!("{tactic}: {e}"));
    assert_eq!(got.activations, acts, "{tactic}: quantize_mxfp8 against the reference");
    assert_eq!(got.sort, want.sort, "{tactic}: routing sort");
    let live_tiles = want.sort.num_non_exiting_tiles as u64;
    if live_tiles > 0 {
        // K/32 MMAs per tile and N block (2-CTA counts one per pair); a last partial N
        // block, and a cluster's block wholly past the dimension, count whole.
        let (h, i) = (p.shape.hidden as u64, p.shape.intermediate as u64);
        let rows1 = p.weights.epilogue.w1_rows(p.shape.intermediate) as u64;
        let blocks = |n_dim: u64, g: &moegen_dsl::GemmTactic| {
            let cn = u64::from(g.cluster()[1]);
            n_dim.div_ceil(u64::from(g.mma_tiler()[1])).div_ceil(cn) * cn
        };
        let per_tile =
            blocks(rows1, tactic.gemm1()) * (h / 32) + blocks(h, tactic.gemm2()) * (i / 32);
        assert_eq!(sim.mma_instructions, live_tiles * per_tile, "{tactic}: MMA count");
    }
    let i = p.shape.intermediate;
    let blocks = i / 32;
    let mut rows_checked = 0;
    for row in 0..want.gemm1.rows {
        if want.sort.route_of_row(row, p.shape.top_k()).is_none() {
            continue;
        }
        rows_checked += 1;
        assert_eq!(
            got.gemm1.codes[row * i..(row + 1) * i],
            want.gemm1.codes[row * i..(row + 1) * i],
            "{tactic}: GEMM1 row {row}"
        );
        for c in 0..blocks {
            let o = want.gemm1.scale_layout.offset(row, c).unwrap();
            assert_eq!(got.gemm1.scales[o], want.gemm1.scales[o], "{tactic}: h scale {row}/{c}");
        }
    }
    let local_routes = want.sort.expanded_idx_to_permuted_idx.iter().filter(|&&r| r >= 0).count();
    assert_eq!(rows_checked, local_routes);
    // k = 2: the bulk reduce-add's order cannot change the result, so both modes are exact.
    assert_eq!(got.output, want.output, "{tactic}: output");
    assert!(got.output.iter().any(|v| v.to_f32() != 0.0), "{tactic}: an all-zero output");
    got
}

#[test]
fn every_tactic_runs_bit_exact_with_k_and_n_tails() {
    let opts = ReferenceOptions::default();
    for (n, clusters) in [(5, 2), (70, 3)] {
        let p = problem(n, 7 + n as u64, None);
        for t in nvfp4_tactics() {
            check(&p, &t, opts, clusters);
        }
    }
}

#[test]
fn both_recipes_and_finalize_modes() {
    let p = problem(40, 3, None);
    // One tactic per GEMM1 (each GEMM1 has its Exact kernel), each with some GEMM2.
    let mut gemm1s = Vec::new();
    let tactics: Vec<MoeTactic> = nvfp4_tactics()
        .into_iter()
        .filter(|t| {
            let new = !gemm1s.contains(t.gemm1());
            gemm1s.push(*t.gemm1());
            new
        })
        .collect();
    assert_eq!(tactics.len(), 4);
    for t in &tactics {
        for recipe in [EpilogueRecipe::Fast, EpilogueRecipe::Exact] {
            for finalize in [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic] {
                let opts = ReferenceOptions { recipe, finalize, ..Default::default() };
                check(&p, t, opts, 2);
            }
        }
        // GEMM1's pre-activations rounded to bf16 (the `_bf16glu` kernels).
        let opts = ReferenceOptions { swiglu_input: SwigluInput::Bf16, ..Default::default() };
        check(&p, t, opts, 2);
    }
}

#[test]
fn whole_stages_without_tails() {
    // H 512 and I 128: both K dimensions whole 128-wide stages, GEMM1's 2I = 256 and GEMM2's
    // H whole N blocks.
    let p = problem_sized(512, 128, 24, 21, None);
    for t in nvfp4_tactics() {
        check(&p, &t, ReferenceOptions::default(), 2);
    }
}

#[test]
fn quantize_mxfp8_matches_the_reference_on_special_values() {
    use moegen_dsl::abi::{Buffer, Scalar, SimtFamily};
    use moegen_runtime::backend::Backend;
    use moegen_runtime::device_ops::{run, simt_kernel};
    use moegen_runtime::launch::{Bindings, GridInputs};
    let (tokens, h) = (3, 320);
    let mut r = Rng(77);
    let mut x: Vec<bf16> = (0..tokens * h).map(|_| bf16::from_f32(r.normal())).collect();
    // Block by block: NaN, ±inf, all zeros (and −0), bf16 subnormals, a dynamic range wider
    // than E4M3's (its small values underflow), the largest finite bf16, exactly 448·2^k.
    let blocks: Vec<Vec<f32>> = vec![
        vec![f32::NAN, 1.0],
        vec![f32::INFINITY, -2.0],
        vec![f32::NEG_INFINITY],
        vec![0.0, -0.0],
        vec![f32::from_bits(0x0001_0000), -f32::from_bits(0x0040_0000)],
        vec![1.0e30, 1.0e-30, -3.0e-20, 7.0],
        vec![f32::from_bits(0x7F7F_0000), 1.0],
        vec![448.0, 224.0, -896.0],
    ];
    for (j, vals) in blocks.iter().enumerate() {
        let at = (j % tokens) * h + 32 * (j / tokens + 1);
        for (q, v) in x[at..at + 32].iter_mut().enumerate() {
            *v = bf16::from_f32(vals.get(q).copied().unwrap_or(if j == 3 { 0.0 } else { 0.5 }));
        }
    }
    let want = quantize_mxfp8_activations(&x, tokens, h).unwrap();
    let mut sim = SimBackend::new();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let cols = want.scale_cols().unwrap();
    let d_x = sim.upload_new(&bytes).unwrap();
    let d_q = sim.upload_new(&vec![0xFF; tokens * h]).unwrap();
    let d_s = sim.upload_new(&vec![0xFF; tokens * cols]).unwrap();
    let bind = Bindings::new()
        .buffer(Buffer::ActivationsBf16, d_x)
        .buffer(Buffer::Activations, d_q)
        .buffer(Buffer::ActivationScales, d_s)
        .scalar(Scalar::Tokens, tokens as u64)
        .unwrap()
        .scalar(Scalar::Hidden, h as u64)
        .unwrap();
    let k = simt_kernel(&sim, SimtFamily::QuantizeMxfp8).unwrap();
    let grid = GridInputs { tokens: tokens as u64, hidden: h as u64, ..Default::default() };
    run(&mut sim, k, &bind, &grid).unwrap();
    assert_eq!(sim.download(d_q, tokens * h).unwrap(), want.codes);
    assert_eq!(sim.download(d_s, tokens * cols).unwrap(), want.scales);
    // The blocks above did reach the special cases.
    assert!(want.scales.contains(&(121 + 127)), "a NaN block");
    assert!(want.scales.contains(&(120 + 127)), "an infinite block");
    assert!(want.scales.contains(&1), "an all-zero block");
    assert!(want.codes.iter().any(|&c| c & 0x7F == 0x7E), "a saturated value");
}

fn gpt_oss(shape: &MoeShape) -> ExpertEpilogue {
    let l = shape.local_experts();
    let params = vec![ActivationParams { alpha: 1.702, beta: 1.0, limit: 7.0 }; l];
    ExpertEpilogue::new(shape, Activation::SwigluClamped, params, Some(b1(shape)), Some(b2(shape)))
        .unwrap()
}

fn b1(shape: &MoeShape) -> Vec<f32> {
    let n = shape.local_experts() * 2 * shape.intermediate;
    (0..n).map(|j| ((j % 13) as f32 - 6.0) * 0.05).collect()
}

fn b2(shape: &MoeShape) -> Vec<f32> {
    (0..shape.local_experts() * shape.hidden).map(|j| ((j % 7) as f32 - 3.0) * 0.03).collect()
}

/// Plain SwiGLU with a GEMM1 bias only.
fn swiglu_bias(shape: &MoeShape) -> ExpertEpilogue {
    ExpertEpilogue::new(shape, Activation::Swiglu, vec![], Some(b1(shape)), None).unwrap()
}

/// gpt-oss's clamp without biases (limit 1: most pre-activations clamped).
fn clamp_only(shape: &MoeShape) -> ExpertEpilogue {
    let l = shape.local_experts();
    let params = vec![ActivationParams { alpha: 1.702, beta: 1.0, limit: 1.0 }; l];
    ExpertEpilogue::new(shape, Activation::SwigluClamped, params, None, None).unwrap()
}

fn relu2(shape: &MoeShape) -> ExpertEpilogue {
    ExpertEpilogue::new(shape, Activation::Relu2, vec![], None, None).unwrap()
}

#[test]
fn gpt_oss_and_relu2_epilogues() {
    let tactics = nvfp4_tactics();
    // A 1-CTA and a 2-CTA tactic.
    let picks: Vec<&MoeTactic> = [[128, 128], [256, 256]]
        .iter()
        .filter_map(|mma| tactics.iter().find(|t| t.gemm1().mma_tiler() == *mma))
        .collect();
    assert_eq!(picks.len(), 2);
    for ep in [&gpt_oss as &dyn Fn(&MoeShape) -> ExpertEpilogue, &relu2] {
        let p = problem(33, 11, Some(ep));
        for t in &picks {
            let opts =
                ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
            check(&p, t, opts, 2);
        }
    }
}

/// The epilogues that read their step's accumulators in halves and their biases a quad at a
/// time (a bias, a clamp), with each recipe.
#[test]
fn bias_and_clamp_epilogues_with_each_recipe() {
    let tactics = nvfp4_tactics();
    let picks: Vec<&MoeTactic> = [[128, 256], [256, 128]]
        .iter()
        .filter_map(|mma| tactics.iter().find(|t| t.gemm1().mma_tiler() == *mma))
        .collect();
    assert_eq!(picks.len(), 2);
    let eps = [&gpt_oss as &dyn Fn(&MoeShape) -> ExpertEpilogue, &swiglu_bias, &clamp_only];
    for (k, ep) in eps.into_iter().enumerate() {
        let p = problem(29, 20 + k as u64, Some(ep));
        for t in &picks {
            for recipe in [EpilogueRecipe::Fast, EpilogueRecipe::Exact] {
                check(&p, t, ReferenceOptions { recipe, ..Default::default() }, 2);
            }
        }
    }
}
