//! Hopper MXFP4 matrices with scales above 2 (UE8M0 codes > 128), through `MoeLayer` on the
//! simulated Hopper: the kernels multiply each placed E2M1 by one bf16 factor 2^126 · scale,
//! so such a matrix is uploaded shifted by 2^−ρ with 2^ρ in its expert's α
//! (`Sm90Weights::kernel_alphas`). The layer equals the reference bit for bit, A16 with
//! plain SwiGLU and with gpt-oss's epilogue, and its output is the unshifted layer's scaled
//! by exactly the power of two the codes were raised by.

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, EpilogueSpec, FinalizeMode};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::KernelSet;
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{LayerCase, RoutePattern, check_tactics_picked, problem};

fn case(epilogue: EpilogueSpec, seed: u64) -> LayerCase {
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    LayerCase {
        shape,
        tokens: 29,
        planned_tokens: 29,
        activations: ActivationFormat::Bf16,
        format: WeightFormat::Mxfp4,
        finalize: FinalizeMode::Deterministic,
        seed,
        routes: RoutePattern::Spread,
        epilogue,
        recipe: None,
    }
}

#[test]
fn shifted_mxfp4_layers_match_the_reference_and_scale_exactly() {
    for (i, (spec, tactic)) in [
        (EpilogueSpec::PLAIN, "t16:gemm1_sm90_t16n256"),
        (EpilogueSpec::GPT_OSS, "t32:gemm1_sm90_t32n128"),
    ]
    .into_iter()
    .enumerate()
    {
        let base = problem(case(spec, 90 + i as u64)).unwrap();
        // Every local expert's down projection 2^100 larger: ρ > 0 for each W2, and the
        // output (linear in W2, biases aside) 2^100 larger. Without biases the relation is
        // exact; with gpt-oss's GEMM2 bias it is checked through the reference only.
        let mut big = problem(case(spec, 90 + i as u64)).unwrap();
        for m in &mut big.mxfp4 {
            m[2].1.iter_mut().for_each(|s| *s += 100);
        }
        let w = big.sm90_weights().unwrap();
        let (_, a2) = w.kernel_alphas(&big.case.shape).unwrap();
        assert!(a2.iter().zip(&w.alpha2).all(|(k, a)| k > a), "every W2 is shifted: {a2:?}");
        let set = KernelSet::builtin();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        let rows = check_tactics_picked(&mut sim, &big, Some(1), Some(tactic), &set).unwrap();
        assert_eq!(rows.len(), 1, "{spec:?}: {tactic}");
        let r = &rows[0];
        assert_eq!(r.identical, r.elements, "{spec:?} {}: max ulp {}", r.tactic, r.max_ulp);
        if !spec.gemm2_bias {
            let b = check_tactics_picked(&mut sim, &base, Some(1), Some(tactic), &set).unwrap();
            let scale = 2f32.powi(100);
            for (j, (x, y)) in b[0].output.iter().zip(&r.output).enumerate() {
                assert_eq!(y.to_f32(), x.to_f32() * scale, "{spec:?}: element {j}");
            }
        }
    }
}
