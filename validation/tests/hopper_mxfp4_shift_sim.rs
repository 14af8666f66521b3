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
    LayerCase::new(
        shape,
        29,
        ActivationFormat::Bf16,
        WeightFormat::Mxfp4,
        FinalizeMode::Deterministic,
        seed,
        RoutePattern::Spread,
    )
    .with_epilogue(epilogue)
}

#[test]
fn shifted_mxfp4_layers_match_the_reference_and_scale_exactly() {
    // (epilogue, tactic, added to W1's codes, added to W2's codes).
    for (i, (spec, tactic, w1_up, w2_up)) in [
        (EpilogueSpec::PLAIN, "t16:gemm1_sm90_t16n256", 0u8, 100u8),
        (EpilogueSpec::GPT_OSS, "t32:gemm1_sm90_t32n128", 0, 100),
        // W1's shift (α1 · 2^ρ): up and gate codes raised to about 140.
        (EpilogueSpec::PLAIN, "t64:gemm1_sm90_t64n128", 18, 0),
        (EpilogueSpec::GPT_OSS, "t16:gemm1_sm90_t16n128", 18, 100),
    ]
    .into_iter()
    .enumerate()
    {
        let base = problem(case(spec, 90 + i as u64)).unwrap();
        // Every local expert's matrices 2^w1_up and 2^w2_up larger: ρ > 0 where raised.
        // With W1 as given and no biases, the output (linear in W2) is exactly 2^w2_up
        // larger; otherwise the layer is checked through the reference only.
        let mut big = problem(case(spec, 90 + i as u64)).unwrap();
        for m in &mut big.mxfp4 {
            for (t, up) in [(0, w1_up), (1, w1_up), (2, w2_up)] {
                m[t].1.iter_mut().for_each(|s| *s += up);
            }
        }
        let w = big.sm90_weights().unwrap();
        let (a1, a2) = w.kernel_alphas(&big.case.shape).unwrap();
        let shifted = |k: &[f32], a: &[f32]| k.iter().zip(a).all(|(k, a)| k > a);
        assert_eq!(shifted(&a1, &w.alpha1), w1_up > 0, "W1 shifted: {a1:?}");
        assert_eq!(shifted(&a2, &w.alpha2), w2_up > 0, "W2 shifted: {a2:?}");
        let set = KernelSet::builtin();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        let rows = check_tactics_picked(&mut sim, &big, Some(1), Some(tactic), &set).unwrap();
        assert_eq!(rows.len(), 1, "{spec:?}: {tactic}");
        let r = &rows[0];
        assert_eq!(r.identical, r.elements, "{spec:?} {}: max ulp {}", r.tactic, r.max_ulp);
        if !spec.gemm2_bias && w1_up == 0 {
            let b = check_tactics_picked(&mut sim, &base, Some(1), Some(tactic), &set).unwrap();
            let scale = 2f32.powi(i32::from(w2_up));
            for (j, (x, y)) in b[0].output.iter().zip(&r.output).enumerate() {
                assert_eq!(y.to_f32(), x.to_f32() * scale, "{spec:?}: element {j}");
            }
        }
    }
}
