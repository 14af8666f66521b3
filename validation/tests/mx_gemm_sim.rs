//! The SM100 MXFP8 × MXFP4 kernels (`kind::mxf8f6f4`), end to end in moegen-sim: the
//! routing sort → the `quantize_mxfp8` activation quantizer → GEMM1 (gather, MMAs, epilogue
//! with MXFP8 requantization) → GEMM2 [→ the deterministic reduction], against the CPU
//! reference (`moe_reference_sm100_mx`) bit for bit, with the MMA count checked.

use half::bf16;
use moegen_dsl::epilogue_math::ActivationParams;
use moegen_dsl::{Activation, EpilogueRecipe, FinalizeMode, MoeTactic, nvfp4_tactics};
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
    let (h, i, experts, offset, local, k) = (320, 192, 8, 2, 4, 2);
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
    for t in nvfp4_tactics().iter().filter(|t| t.gemm1().cluster()[1] == 1).take(4) {
        for recipe in [EpilogueRecipe::Fast, EpilogueRecipe::Exact] {
            for finalize in [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic] {
                let opts = ReferenceOptions { recipe, finalize, ..Default::default() };
                check(&p, t, opts, 2);
            }
        }
    }
}

fn gpt_oss(shape: &MoeShape) -> ExpertEpilogue {
    let l = shape.local_experts();
    let params = vec![ActivationParams { alpha: 1.702, beta: 1.0, limit: 7.0 }; l];
    let b1: Vec<f32> =
        (0..l * 2 * shape.intermediate).map(|j| ((j % 13) as f32 - 6.0) * 0.05).collect();
    let b2: Vec<f32> = (0..l * shape.hidden).map(|j| ((j % 7) as f32 - 3.0) * 0.03).collect();
    ExpertEpilogue::new(shape, Activation::SwigluClamped, params, Some(b1), Some(b2)).unwrap()
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
