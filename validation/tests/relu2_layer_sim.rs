//! ReLU² (ungated: W1 with I rows) through `MoeLayer` on the simulated Hopper and SM100: its
//! GEMM1s, generated here as a build script would (they are not in the default set), give
//! the CPU reference's output bit for bit (Hopper: A16, A4 and A8, NVFP4 and MXFP4, on an
//! I whose N 256 units end in a partial block; SM100: N 128 and the 2-CTA N 256), with and
//! without both
//! biases; the layer tracks ReLU²'s own f64 oracle.

use moegen_dsl::abi::{KernelInfo, WeightFormat};
use moegen_dsl::{
    Activation, ActivationFormat, Arch, EpilogueSpec, FinalizeMode, GemmKind, GemmTactic,
    KernelDescBuilder, Target, TileSize,
};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::KernelSet;
use moegen_runtime::reference::{MoeShape, relative_l2_error};
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{
    LayerCase, RoutePattern, builtin_with_epilogue, check_tactics_in, generated_kernel, problem,
};

/// A Hopper kernel built from `b`, generated as a build script would.
fn generated(b: KernelDescBuilder) -> &'static KernelInfo {
    generated_kernel(&b.build().unwrap(), "sm_90a").unwrap()
}

#[test]
fn hopper_relu2_layers_match_the_reference_bit_for_bit() {
    // I = 384: the N 256 GEMM1's second unit holds 128 of its 256 rows (the consumer past I
    // stores nothing); N 128 divides it.
    let shape = MoeShape::new(320, 384, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let relu2 = EpilogueSpec { activation: Activation::Relu2, ..EpilogueSpec::PLAIN };
    let both = EpilogueSpec { gemm1_bias: true, gemm2_bias: true, ..relu2 };
    for (i, (activations, format, spec)) in [
        (ActivationFormat::Bf16, WeightFormat::Nvfp4, relu2),
        (ActivationFormat::Nvfp4, WeightFormat::Nvfp4, both),
        // MXFP4 weights kept MXFP4 (`Sm90Weights::from_mxfp4_relu2`), A16 and A8.
        (ActivationFormat::Bf16, WeightFormat::Mxfp4, both),
        (ActivationFormat::Fp8, WeightFormat::Mxfp4, both),
    ]
    .into_iter()
    .enumerate()
    {
        let gemms: Vec<GemmTactic> =
            [(GemmKind::Gemm1, 128), (GemmKind::Gemm1, 256), (GemmKind::Gemm2, 64)]
                .map(|(kind, n)| GemmTactic::new_sm90(kind, 16, n).unwrap())
                .to_vec();
        let set = builtin_with_epilogue(&gemms, spec, "sm_90a", |b| {
            b.target(Target::Sm90a).format(format).activations(activations)
        })
        .unwrap();
        let case = LayerCase::new(
            shape,
            23,
            activations,
            format,
            FinalizeMode::Deterministic,
            70 + i as u64,
            RoutePattern::Spread,
        )
        .with_epilogue(spec);
        let p = problem(case).unwrap();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        let rows = check_tactics_in(&mut sim, &p, None, &set).unwrap();
        // Only the generated ReLU² GEMM1s can serve the layer: both widths ran.
        for g in ["gemm1_sm90_t16n128", "gemm1_sm90_t16n256"] {
            assert!(rows.iter().any(|r| r.tactic.contains(g)), "{spec:?}: no {g}");
        }
        for r in &rows {
            assert!(r.tactic.contains("gemm1_sm90_t16n"), "{}", r.tactic);
            assert_eq!(r.identical, r.elements, "{spec:?} {}: max ulp {}", r.tactic, r.max_ulp);
            // The 4-bit weights' cost, as for the gated layers (ReLU²'s h has a wider range).
            assert!(r.reference_vs_oracle < 0.3, "{spec:?}: {}", r.reference_vs_oracle);
        }
        // Another activation on the same data is another layer: the reference is ReLU²'s.
        let r = p.reference(Arch::Sm90, TileSize::T16.into()).unwrap();
        let r: Vec<f64> = r.iter().map(|v| f64::from(v.to_f32())).collect();
        let swiglu = problem(LayerCase { epilogue: EpilogueSpec::PLAIN, ..case }).unwrap();
        assert!(relative_l2_error(&r, &swiglu.oracle) > 0.5, "{spec:?}");
    }
}

/// GEMM1's N for ReLU² is I, not 2I: an I that is no multiple of the Hopper GEMM1's N
/// granule (128) is not covered, and the refusal says I, not 2 × I.
#[test]
fn relu2_tactic_coverage_counts_i_rows() {
    use moegen_runtime::layer::{LayerConfig, MoeLayer, Rejection};
    let relu2 = EpilogueSpec { activation: Activation::Relu2, ..EpilogueSpec::PLAIN };
    let mut extra: Vec<&'static KernelInfo> = Vec::new();
    for (kind, n) in [(GemmKind::Gemm1, 128), (GemmKind::Gemm2, 64)] {
        let t = GemmTactic::new_sm90(kind, 16, n).unwrap();
        let b = KernelDescBuilder::new(t).target(Target::Sm90a).format(WeightFormat::Nvfp4);
        let b = match kind {
            GemmKind::Gemm1 => b.activations(ActivationFormat::Bf16).activation(Activation::Relu2),
            GemmKind::Gemm2 => b.activations(ActivationFormat::Bf16),
        };
        extra.push(generated(b));
    }
    let set = KernelSet::new(KernelSet::builtin().kernels().iter().copied().chain(extra));
    let config = |i| LayerConfig {
        activations: ActivationFormat::Bf16,
        epilogue: relu2,
        ..LayerConfig::new(MoeShape::new(320, i, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap())
    };
    let explain =
        |i| MoeLayer::explain_candidates(&config(i), &set, 64, Arch::Sm90, WeightFormat::Nvfp4);
    let ok = explain(384);
    assert!(ok.accepted.iter().any(|t| t.gemm1().mma_tiler()[1] == 128), "{ok:?}");
    let no = explain(192);
    assert!(no.accepted.is_empty(), "{no:?}");
    let why = no
        .rejected
        .iter()
        .find_map(|r| match &r.reason {
            e @ Rejection::NotCovered { rows_per_value: 1, value: 192, .. } => Some(e.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{no:?}"));
    assert!(why.contains("intermediate size = 192") && !why.contains("2 ×"), "{why}");
}

/// ReLU² on the simulated SM100 (Fast recipe, as the layer runs it), generated here as a
/// build script would: a 1-CTA N 128 GEMM1 and a 2-CTA N 256 one (whose two accumulator
/// buffers overlap, so the epilogue walks each tile's halves in a buffer-dependent order
/// and stores each half as it completes), with and without both biases: the layer equals
/// the SM100 CPU reference bit for bit and tracks ReLU²'s f64 oracle.
#[test]
fn sm100_relu2_layers_match_the_reference_bit_for_bit() {
    let shape = MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let tactics: Vec<_> = moegen_dsl::tactics_for(Arch::Sm100)
        .into_iter()
        .filter(|t| {
            let g1 = t.gemm1();
            (t.tile().rows() == 128 && g1.mma_tiler() == [128, 128])
                || (g1.mma_tiler() == [256, 256] && g1.cluster() == [2, 1])
        })
        .collect();
    let relu2 = EpilogueSpec { activation: Activation::Relu2, ..EpilogueSpec::PLAIN };
    let both = EpilogueSpec { gemm1_bias: true, gemm2_bias: true, ..relu2 };
    for (i, spec) in [relu2, both].into_iter().enumerate() {
        let gemms: Vec<GemmTactic> =
            tactics.iter().flat_map(|t| [*t.gemm1(), *t.gemm2()]).collect();
        let set = builtin_with_epilogue(&gemms, spec, "sm_100f", |b| b).unwrap();
        let case = LayerCase::new(
            shape,
            5,
            ActivationFormat::Nvfp4,
            WeightFormat::Nvfp4,
            FinalizeMode::Deterministic,
            80 + i as u64,
            RoutePattern::Spread,
        )
        .with_epilogue(spec);
        let p = problem(case).unwrap();
        let mut sim = SimBackend::new().with_sm_count(4);
        let rows = check_tactics_in(&mut sim, &p, None, &set).unwrap();
        for g in ["n128", "n256"] {
            assert!(rows.iter().any(|r| r.tactic.contains(g)), "{spec:?}: no GEMM1 {g}");
        }
        for r in &rows {
            assert_eq!(r.identical, r.elements, "{spec:?} {}: max ulp {}", r.tactic, r.max_ulp);
            assert!(r.reference_vs_oracle < 0.3, "{spec:?}: {}", r.reference_vs_oracle);
        }
    }
}
