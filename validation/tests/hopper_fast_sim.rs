//! Hopper's Fast recipe (MUFU `ex2`/`rcp` in GEMM1's activation) through `MoeLayer` on the
//! simulated Hopper: its GEMM1s, generated at run time (`hopper_fast_gemm1s`; not in the
//! default set), give the Fast reference's output bit for bit, A16 and A8, plain SwiGLU and
//! gpt-oss's epilogue, and the hardware check's h comparison finds the simulator's h exactly
//! the model's. The recipe changes results (Fast ≠ Exact), and the h tolerance accepts only
//! what it derives.

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode, TileSize};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{
    FastHCheck, LayerCase, RoutePattern, builtin_with_hopper_fast, check_tactics_picked,
    compare_fast_h, fast_epsilon_h, fast_h_candidates, hopper_fast_gemm1s, problem,
};

fn case(activations: ActivationFormat, epilogue: EpilogueSpec, seed: u64) -> LayerCase {
    // H 320 and I 192: K ends in a partial 128-wide stage in both GEMMs; 2I = 384 leaves
    // the N 256 GEMM1's second unit half past the rows.
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    LayerCase::new(
        shape,
        29,
        activations,
        WeightFormat::Mxfp4,
        FinalizeMode::Deterministic,
        seed,
        RoutePattern::Spread,
    )
    .with_epilogue(epilogue)
    .with_recipe(EpilogueRecipe::Fast)
}

#[test]
fn fast_gemm1s_are_generated_for_a16_and_a8_only_and_use_mufu() {
    let made = hopper_fast_gemm1s().unwrap();
    // 11 GEMM1 tactics (T16..T128 × N128/N256, T128 N128 ping-pong, T16 N128 split over 2 and
    // 4) × A16, A8 × 2 epilogues.
    assert_eq!(made.len(), 44, "{:?}", made.iter().map(|k| k.name).collect::<Vec<_>>());
    for k in &made {
        assert!(k.name.contains("_fast"), "{}", k.name);
        assert!(k.name.contains("_a16") || k.name.contains("_a8"), "{}", k.name);
        assert!(k.ptx.contains("ex2.approx.ftz.f32"), "{}: no MUFU ex2", k.name);
        assert!(k.ptx.contains("rcp.approx.ftz.f32"), "{}: no MUFU rcp", k.name);
    }
    // A second call hands out the same kernels (generated once per process).
    let again = hopper_fast_gemm1s().unwrap();
    assert!(made.iter().zip(&again).all(|(a, b)| std::ptr::eq(*a, *b)));
}

#[test]
fn hopper_fast_layers_match_the_fast_reference_bit_for_bit() {
    let set = builtin_with_hopper_fast().unwrap();
    for (i, (acts, spec, tactic)) in [
        (ActivationFormat::Bf16, EpilogueSpec::PLAIN, "t16:gemm1_sm90_t16n256"),
        (ActivationFormat::Fp8, EpilogueSpec::GPT_OSS, "t16:gemm1_sm90_t16n128"),
        (ActivationFormat::Bf16, EpilogueSpec::GPT_OSS, "t32:gemm1_sm90_t32n128"),
        // The ping-pong GEMM1 (two consumers taking alternate units) with the Fast recipe.
        (ActivationFormat::Fp8, EpilogueSpec::PLAIN, "t128:gemm1_sm90_t128n128_pp"),
    ]
    .into_iter()
    .enumerate()
    {
        let p = problem(case(acts, spec, 80 + i as u64)).unwrap();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        let rows = check_tactics_picked(&mut sim, &p, Some(1), Some(tactic), &set).unwrap();
        assert_eq!(rows.len(), 1, "{acts:?} {spec:?}: {tactic}");
        let r = &rows[0];
        assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
        // The simulator is the model: its h is the model's bit for bit.
        let f = r.fast_h.expect("a Fast row carries its h check");
        assert_eq!((f.outside, f.moved), (0, 0), "{}: {f:?}", r.tactic);
        assert_eq!(f.identical, f.elements, "{f:?}");
        assert_eq!(
            f.elements,
            p.routing.experts.iter().filter(|&&e| (2..6).contains(&e)).count() * 192
        );
        assert_eq!(r.rel_l2_vs_reference, 0.0, "{}", r.tactic);
        // Both recipes are within a few f32 ulps of SwiGLU, so after h's bf16 rounding the
        // outputs rarely differ; the outputs stay close to the Exact ones.
        let exact = problem(LayerCase { recipe: None, ..p.case }).unwrap();
        let e = exact.reference(Arch::Sm90, TileSize::T16.into()).unwrap();
        let l2 = |v: &[bf16]| v.iter().map(|x| f64::from(x.to_f32())).collect::<Vec<_>>();
        let rel = moegen_runtime::reference::relative_l2_error(&l2(&r.output), &l2(&e));
        assert!(rel < 1e-2, "{acts:?} {spec:?}: Fast vs Exact {rel}");
        // The recipe is another arithmetic: GEMM1's f32 h differs from Exact's somewhere.
        let differ = fast_vs_exact_h(&p);
        assert!(differ > 0, "{acts:?} {spec:?}: Fast computed the Exact h");
        // Only the Fast GEMM1s serve a Fast layer: the built-in set alone has none.
        let builtin = moegen_runtime::layer::KernelSet::builtin();
        let err = check_tactics_picked(&mut sim, &p, Some(1), Some(tactic), &builtin)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("recipe"), "{acts:?} {spec:?}: {err}");
    }
}

/// How many f32 h values of the case differ between the two recipes.
fn fast_vs_exact_h(p: &moegen_validation::layer_check::Problem) -> usize {
    use moegen_runtime::reference::{
        Gemm1Options, SplitK, sm90_a8_gemm1_h, sm90_activations, sm90_gemm1_h,
    };
    use moegen_runtime::routing::moe_sort;
    let c = &p.case;
    let sort = moe_sort(&p.routing.experts, c.tokens, &c.shape.window, TileSize::T16).unwrap();
    let h = |recipe| {
        if c.activations == ActivationFormat::Fp8 {
            let w = p.sm90_a8_weights().unwrap();
            sm90_a8_gemm1_h(&c.shape, &p.x, &w, &sort, recipe, SplitK::NONE).unwrap()
        } else {
            let w = p.sm90_weights().unwrap();
            let a = sm90_activations(&p.x, c.tokens, c.shape.hidden, c.activations, p.input_scale)
                .unwrap();
            let opts = Gemm1Options { recipe, ..Default::default() };
            sm90_gemm1_h(&c.shape, &a, &w, &sort, opts, SplitK::NONE).unwrap()
        }
    };
    let (f, e) = (h(EpilogueRecipe::Fast), h(EpilogueRecipe::Exact));
    f.iter().zip(&e).filter(|(a, b)| a.to_bits() != b.to_bits()).count()
}

#[test]
fn the_fast_h_tolerance_allows_only_the_neighbour_across_a_nearby_boundary() {
    // 1 + 2^-8 is the midpoint between bf16 1.0 and 1 + 2^-7: a model value a hair below it
    // rounds to 1.0, and the device (within ε_h) may land on either side.
    let mid = 1.0f32 + 2f32.powi(-8);
    let near = f32::from_bits(mid.to_bits() - 1);
    let (lo, hi) = fast_h_candidates(near);
    assert_eq!((lo.to_f32(), hi.to_f32()), (1.0, 1.0 + 2f32.powi(-7)));
    // Far from a boundary there is one value.
    let (lo, hi) = fast_h_candidates(1.0 + 2f32.powi(-10));
    assert_eq!(lo, hi);
    // ε_h is what the measured ulps give: (2·2 + 2·1 + 8)·2^-24.
    assert_eq!(fast_epsilon_h(), 14.0 * 2f64.powi(-24));

    let far = 1.0 + 2f32.powi(-10);
    let model = [near, far, 3.0];
    // One route (expanded 0) at reference row 0 and device row 1 (another order).
    let ref_e2p = [0, -1];
    let dev = |a: f32, b: f32, c: f32| {
        let mut v = vec![bf16::ZERO; 6];
        v[3..].copy_from_slice(&[bf16::from_f32(a), bf16::from_f32(b), bf16::from_f32(c)]);
        v
    };
    let moved = dev(1.0 + 2f32.powi(-7), far, 3.0);
    let (c, laid) = compare_fast_h(&model, &ref_e2p, &moved, &[1, -1], 3);
    assert_eq!(c, FastHCheck { elements: 3, identical: 2, at_risk: 1, moved: 1, outside: 0 });
    assert_eq!(laid[0].to_f32(), 1.0 + 2f32.powi(-7));
    // The same step where nothing is near a boundary is outside the tolerance.
    let wrong = dev(1.0, 1.0 + 2f32.powi(-7), 3.0);
    let (c, _) = compare_fast_h(&model, &ref_e2p, &wrong, &[1, -1], 3);
    assert_eq!(c.outside, 1, "{c:?}");
    // Two steps at the risky element are outside too.
    let two = dev(1.0 + 2f32.powi(-6), far, 3.0);
    assert_eq!(compare_fast_h(&model, &ref_e2p, &two, &[1, -1], 3).0.outside, 1);
    // A tiny model value (the absolute term: a result near the flush-to-zero threshold) may
    // come back as any bf16 of its interval, zero included; its neighbours' sign may not flip
    // beyond it.
    let tiny = [2f32.powi(-120), 0.0, 3.0];
    let (lo, hi) = fast_h_candidates(tiny[0]);
    assert!(lo.to_f32() < 0.0 && hi.to_f32() > 2f32.powi(-120), "{lo} {hi}");
    let flushed = dev(0.0, 0.0, 3.0);
    let (c, _) = compare_fast_h(&tiny, &ref_e2p, &flushed, &[1, -1], 3);
    assert_eq!((c.identical, c.moved, c.outside), (2, 1, 0), "{c:?}");
    let big = dev(2f32.powi(-60), 0.0, 3.0);
    assert_eq!(compare_fast_h(&tiny, &ref_e2p, &big, &[1, -1], 3).0.outside, 1);
    // A route the device dropped (or placed where the model has none) fails all its elements.
    let (c, _) = compare_fast_h(&model, &ref_e2p, &moved, &[-1, 0], 3);
    assert_eq!(c.outside, 6, "{c:?}");
}
