//! A gpt-oss-20b-shaped layer on the simulated SM100 (NVFP4 weights × NVFP4 activations):
//! H = I = 2880 (a multiple of 64, not of 128 or 256: GEMM1 ends K in a stage of 64 and
//! its 2I = 5760 half-way into the last N 256 block; GEMM2's H ends 64 columns into its
//! last N 128 or 256 block), 32 experts with top 4 (a window of 4 local ones, so the host
//! data stays small), gpt-oss's clamped SwiGLU (α 1.702, β 1, limit 7) and both biases,
//! through `MoeLayer` with the kernels generated as a build script would. Every tactic
//! whose GEMMs are generated here equals the SM100 CPU reference bit for bit and tracks the
//! f64 oracle.

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, Arch, EpilogueSpec, FinalizeMode, MoeTactic};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{
    LayerCase, RoutePattern, builtin_with_epilogue, check_tactics_in, problem,
};

/// The SM100 tactic with this routing tile, GEMM1 N and GEMM2 [N, cluster N].
fn tactic(tile: u32, n1: u32, n2: [u32; 2]) -> MoeTactic {
    moegen_dsl::tactics_for(Arch::Sm100)
        .into_iter()
        .find(|t| {
            t.tile().rows() == tile
                && t.gemm1().mma_tiler()[1] == n1
                && t.gemm2().mma_tiler()[1] == n2[0]
                && t.gemm2().cluster()[1] == n2[1]
        })
        .unwrap()
}

#[test]
fn a_gpt_oss_shaped_layer_matches_the_reference_bit_for_bit() {
    let shape = MoeShape::new(2880, 2880, ExpertWindow::new(32, 4, 4, 4).unwrap()).unwrap();
    // 1-CTA: GEMM1 N 256 (23 blocks, the last holding one (up, gate) pair), GEMM2 N 128 in
    // 2-wide clusters (23 blocks: the last cluster's second lies past H). 2-CTA: N 256
    // both, GEMM2's 12 blocks in 2-wide clusters.
    let tactics = [tactic(128, 256, [128, 2]), tactic(256, 256, [256, 2])];
    let spec = EpilogueSpec::GPT_OSS;
    let gemms: Vec<_> = tactics.iter().flat_map(|t| [*t.gemm1(), *t.gemm2()]).collect();
    let set = builtin_with_epilogue(&gemms, spec, "sm_100f", |b| b).unwrap();
    let case = LayerCase {
        shape,
        tokens: 6,
        planned_tokens: 6,
        activations: ActivationFormat::Nvfp4,
        format: WeightFormat::Nvfp4,
        finalize: FinalizeMode::Deterministic,
        seed: 2880,
        routes: RoutePattern::Spread,
        epilogue: spec,
        recipe: None,
    };
    let p = problem(case).unwrap();
    let mut sim = SimBackend::new().with_sm_count(8);
    let rows = check_tactics_in(&mut sim, &p, None, &set).unwrap();
    for t in &tactics {
        assert!(rows.iter().any(|r| r.tactic == t.to_string()), "{t} did not run");
    }
    for r in &rows {
        assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
        assert!(r.elements == 6 * 2880, "{}: {} elements", r.tactic, r.elements);
        assert!(r.reference_vs_oracle < 0.3, "{}: {}", r.tactic, r.reference_vs_oracle);
    }
}
