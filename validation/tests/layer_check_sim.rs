//! gpu-check's layer part, on the simulator: the runtime's `MoeLayer` with several tactics
//! equals the reference bit for bit, and the comparison itself notices a wrong output.

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, EpilogueRecipe, EpilogueSpec, FinalizeMode, TileSize};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{
    GraphCheck, LayerCase, LayerCheckError, Problem, RoutePattern, TacticRow, bf16_ulps,
    builtin_with_epilogue, check_graph_replay, check_tactics, check_tactics_in,
    check_tactics_picked, device_checked_errors, finalize_slack, problem,
};

/// A deterministic, plain-SwiGLU case of `tokens` tokens (planned for as many) whose routes
/// spread over the local experts.
fn spread(
    shape: MoeShape,
    tokens: usize,
    activations: ActivationFormat,
    format: WeightFormat,
    seed: u64,
) -> LayerCase {
    LayerCase::new(
        shape,
        tokens,
        activations,
        format,
        FinalizeMode::Deterministic,
        seed,
        RoutePattern::Spread,
    )
}

#[test]
fn ulps_are_counted_on_the_ordered_line() {
    let b = bf16::from_f32;
    assert_eq!(bf16_ulps(b(1.0), b(1.0)), 0);
    assert_eq!(bf16_ulps(b(0.0), b(-0.0)), 0);
    assert_eq!(bf16_ulps(b(1.0), bf16::from_bits(b(1.0).to_bits() + 3)), 3);
    // Across zero: the smallest subnormals either side are two ulps apart.
    assert_eq!(bf16_ulps(bf16::from_bits(1), bf16::from_bits(0x8001)), 2);
    assert_eq!(bf16_ulps(bf16::NAN, b(1.0)), u32::MAX);
    assert_eq!(bf16_ulps(bf16::NAN, bf16::NAN), 0);
}

#[test]
fn the_bulk_order_slack_follows_the_derivation() {
    let c = [1.0f32, -1.0, 0.5, 0.25];
    let det = finalize_slack(&c, 1, 4, 1, FinalizeMode::Deterministic);
    assert_eq!(det, vec![0.0]);
    assert_eq!(finalize_slack(&c[..2], 1, 2, 1, FinalizeMode::BulkReduceAdd), vec![0.0]);
    let bulk = finalize_slack(&c, 1, 4, 1, FinalizeMode::BulkReduceAdd);
    assert_eq!(bulk, vec![2.0 * 3.0 * 2.75 / 256.0]);
}

/// The built-in set's SM100 tactics (at most `max`) on a plain NVFP4 case of H × I, the
/// case, and the rows.
fn sm100_rows(
    h: usize,
    i: usize,
    tokens: usize,
    seed: u64,
    max: Option<usize>,
) -> (LayerCase, Vec<TacticRow>) {
    let shape = MoeShape::new(h, i, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let case = spread(shape, tokens, ActivationFormat::Nvfp4, WeightFormat::Nvfp4, seed);
    let p = problem(case).unwrap();
    let mut sim = SimBackend::new().with_sm_count(4);
    (case, check_tactics(&mut sim, &p, max).unwrap())
}

#[test]
fn sm100_layer_tactics_match_the_reference_bit_for_bit() {
    let (case, rows) = sm100_rows(512, 256, 5, 9, Some(2));
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r.identical, r.elements, "{}", r.tactic);
        assert_eq!(r.max_ulp, 0);
        assert!(r.rel_l2_vs_oracle < 0.3, "{}: {}", r.tactic, r.rel_l2_vs_oracle);
        assert_eq!(r.rel_l2_vs_oracle, r.reference_vs_oracle);
    }
    // A reference for other data differs: the comparison is not vacuous.
    let other = problem(LayerCase { seed: 10, ..case }).unwrap();
    let want = other.reference(moegen_dsl::Arch::Sm100, TileSize::T128.into()).unwrap();
    assert_ne!(want, rows[0].output);
}

/// H 320 and I 192, multiples of 64 only, through `MoeLayer` with the built-in set: GEMM1's
/// last K stage holds one of four MMAs and its 2I = 384 ends half-way into an N 256 block;
/// GEMM2's only K stage is partial and its H ends 64 columns into the last N block (with
/// N 128 in a 2-wide cluster, the cluster's second block lies wholly past H). Every tactic
/// equals the SM100 reference bit for bit.
#[test]
fn sm100_layer_tails_match_the_reference_bit_for_bit() {
    let (_, rows) = sm100_rows(320, 192, 7, 31, None);
    assert_eq!(rows.len(), 16, "every SM100 tactic serves H 320, I 192");
    for r in &rows {
        assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
        assert!(r.rel_l2_vs_oracle < 0.3, "{}: {}", r.tactic, r.rel_l2_vs_oracle);
    }
}

#[test]
fn routing_edge_cases_match_the_reference() {
    let shape = MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    for (routes, finalize) in [
        (RoutePattern::OneExpert, FinalizeMode::Deterministic),
        (RoutePattern::SomeEmpty, FinalizeMode::BulkReduceAdd),
        (RoutePattern::NoneLocal, FinalizeMode::BulkReduceAdd),
    ] {
        let case = LayerCase::new(
            shape,
            7,
            ActivationFormat::Nvfp4,
            WeightFormat::Nvfp4,
            finalize,
            4,
            routes,
        );
        let p = problem(case).unwrap();
        let local = |e: &i32| (2..6).contains(e);
        let ids = &p.routing.experts;
        match routes {
            RoutePattern::OneExpert => {
                assert!(ids.iter().filter(|e| local(e)).all(|&e| e == 2));
                assert_eq!(ids.iter().filter(|e| local(e)).count(), 7);
            }
            RoutePattern::SomeEmpty => assert!(!ids.iter().any(|&e| e == 3 || e == 5)),
            _ => assert!(!ids.iter().any(local)),
        }
        let mut sim = SimBackend::new().with_sm_count(4);
        let rows = check_tactics(&mut sim, &p, Some(1)).unwrap();
        assert_eq!(rows[0].identical, rows[0].elements, "{routes:?}");
        if routes == RoutePattern::NoneLocal {
            assert!(rows[0].output.iter().all(|v| v.to_f32() == 0.0));
        }
    }
}

#[test]
fn hopper_layer_tactics_match_the_reference_bit_for_bit() {
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let case = spread(shape, 37, ActivationFormat::Nvfp4, WeightFormat::Nvfp4, 3);
    let p = problem(case).unwrap();
    let mut sim = SimBackend::hopper().with_sm_count(4);
    // H 320 = 256 + 64 and 2I 384 = 256 + 128 are multiples of the granules, not of the
    // wide Ns: all 24 cooperative tactics apply, the wide ones with a partial last N block.
    // Five of them (evenly spaced in the tactic order; ping-pong has its own test) cover
    // every kind of partial block: GEMM1 N 256 with its second consumer past 2I (t16, t32),
    // GEMM2 N 128 with the consumer's second m64 block past H (t16, t128), GEMM2 N 256 with
    // the first consumer half and the second wholly past H (t64).
    let rows = check_tactics_in(&mut sim, &p, Some(5), &cooperative()).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.tactic.as_str()).collect();
    assert_eq!(
        names,
        [
            "t16:gemm1_sm90_t16n128:gemm2_sm90_t16n64",
            "t16:gemm1_sm90_t16n256:gemm2_sm90_t16n128",
            "t32:gemm1_sm90_t32n256:gemm2_sm90_t32n64",
            "t64:gemm1_sm90_t64n128:gemm2_sm90_t64n256",
            "t128:gemm1_sm90_t128n128:gemm2_sm90_t128n128",
        ]
    );
    for r in &rows {
        assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
    }
}

/// A8 (FP8 activations on the E4M3 tensor cores): both quantizers, both GEMMs with the
/// E4M3 wgmma and the factors, against the A8 reference bit for bit, K ending in a partial
/// 128-wide stage in both GEMMs (H 320, I 192).
#[test]
fn hopper_a8_layer_tactics_match_the_reference_bit_for_bit() {
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let case = spread(shape, 37, ActivationFormat::Fp8, WeightFormat::Mxfp4, 17);
    let p = problem(case).unwrap();
    let mut sim = SimBackend::hopper().with_sm_count(4);
    let rows = check_tactics_in(&mut sim, &p, Some(3), &cooperative()).unwrap();
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
        // E4M3 activations cost a few percent against the unquantized oracle, no more.
        assert!(r.rel_l2_vs_oracle < 0.3, "{}: {}", r.tactic, r.rel_l2_vs_oracle);
    }
    // The A16 reference of the same weights differs: the A8 arithmetic was checked.
    let a16 = problem(LayerCase { activations: ActivationFormat::Bf16, ..case }).unwrap();
    let want16 = a16.reference(moegen_dsl::Arch::Sm90, TileSize::T16.into()).unwrap();
    assert_ne!(want16, rows[0].output);
}

/// A bf16 MXFP4 spread case of `tokens` tokens on a small Hopper layer, graph-checked on a
/// 4-SM simulator: graph replay gave the eager bytes, and the launch counters agree.
fn graph_replayed(tokens: usize, seed: u64) -> (LayerCase, Problem, SimBackend, GraphCheck) {
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let case = spread(shape, tokens, ActivationFormat::Bf16, WeightFormat::Mxfp4, seed);
    let p = problem(case).unwrap();
    let mut sim = SimBackend::hopper().with_sm_count(4);
    let g = check_graph_replay(&mut sim, &p).unwrap();
    assert!(g.identical && g.counted, "{g:?}");
    (case, p, sim, g)
}

#[test]
fn the_graph_check_replays_the_eager_bytes_and_refuses_the_bulk_reduce() {
    let (case, _, mut sim, g) = graph_replayed(6, 4);
    // Sort (one launch: 12 routes fit one block), GEMM1, GEMM2, finalize: bf16 activations
    // need no quantization kernel.
    assert_eq!(g.eager_launches, 4);
    assert_eq!(g.bytes, 6 * 320 * 2);
    assert!(!g.tactic.is_empty());
    let bulk = problem(LayerCase { finalize: FinalizeMode::BulkReduceAdd, ..case }).unwrap();
    let e = check_graph_replay(&mut sim, &bulk).unwrap_err();
    assert!(matches!(e, LayerCheckError::NotDeterministic { .. }), "{e}");
    assert!(e.to_string().contains("deterministic finalize"), "{e}");
}

/// More routes than one block holds (520 tokens, top 2: 1040 routes): the forward runs the
/// sort's three passes instead of its one-launch form, and the layer still equals the
/// reference bit for bit, graph replay included.
#[test]
fn the_three_pass_sort_serves_batches_past_one_block() {
    let (_, p, mut sim, g) = graph_replayed(520, 11);
    // Sort (three passes), GEMM1, GEMM2, finalize.
    assert_eq!(g.eager_launches, 6);
    let rows = check_tactics_in(&mut sim, &p, Some(1), &cooperative()).unwrap();
    assert_eq!(
        rows[0].identical, rows[0].elements,
        "{}: max ulp {}",
        rows[0].tactic, rows[0].max_ulp
    );
}

/// A workspace and dispatch table planned for far more tokens than the pass runs (an engine
/// plans for its largest batch): bit-identical to the reference on both generations, graph
/// replay equal to eager, every allocation given back, and a plan below the pass refused.
#[test]
fn a_layer_planned_for_a_larger_batch_runs_a_small_one_exactly() {
    use moegen_runtime::backend::Backend;
    let cases = [
        (MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap(), 3, true),
        (MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap(), 5, false),
    ];
    for (shape, tokens, sm100) in cases {
        let case = LayerCase::new(
            shape,
            tokens,
            ActivationFormat::Nvfp4,
            WeightFormat::Nvfp4,
            FinalizeMode::Deterministic,
            16,
            RoutePattern::Spread,
        )
        .planned(4096);
        let p = problem(case).unwrap();
        let mut sim = if sm100 { SimBackend::new() } else { SimBackend::hopper() }.with_sm_count(4);
        let before = sim.stats();
        let rows = check_tactics(&mut sim, &p, Some(1)).unwrap();
        assert_eq!(rows[0].identical, rows[0].elements, "{}", case.label());
        let g = check_graph_replay(&mut sim, &p).unwrap();
        assert!(g.identical, "{g:?}");
        let after = sim.stats();
        assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
        let under = LayerCase { planned_tokens: tokens - 1, ..case };
        let e = check_tactics(&mut sim, &problem(under).unwrap(), Some(1)).unwrap_err();
        assert!(matches!(e, LayerCheckError::PlannedTooFew { .. }), "{e}");
        assert!(e.to_string().contains("planned for fewer tokens"), "{e}");
    }
}

/// A8's refusals: weights made for FP8 activations are not uploaded in the A16 layout, and a
/// layer with more than 256 experts per token is refused (one thread of the quantizer's
/// block per slot hands out a token's FP8 scale), each with a typed error naming what is at
/// fault.
#[test]
fn a8_refuses_a16_uploads_and_more_than_256_slots() {
    use moegen_runtime::RuntimeError;
    use moegen_runtime::layer::{LayerError, LayerWeights};
    let shape = MoeShape::new(256, 128, ExpertWindow::new(8, 0, 4, 2).unwrap()).unwrap();
    let case = spread(shape, 3, ActivationFormat::Fp8, WeightFormat::Mxfp4, 4);
    let p = problem(case).unwrap();
    let mut sim = SimBackend::hopper();
    let w = p.sm90_weights().unwrap();
    let e = LayerWeights::upload_sm90(&mut sim, &shape, &w, 1.0).unwrap_err();
    assert!(
        matches!(
            e,
            LayerError::Input(RuntimeError::UnsupportedActivations {
                what: "LayerWeights::upload_sm90",
                ..
            })
        ),
        "{e}"
    );
    LayerWeights::upload_sm90_a8(&mut sim, &shape, &p.sm90_a8_weights().unwrap()).unwrap();

    // 40 experts per token (more than a warp's lanes) run, bit for bit.
    let many = MoeShape::new(256, 128, ExpertWindow::new(40, 0, 40, 40).unwrap()).unwrap();
    let p = problem(LayerCase { shape: many, ..case }).unwrap();
    let rows = check_tactics(&mut sim, &p, Some(1)).unwrap();
    assert_eq!(rows[0].identical, rows[0].elements, "{}", p.case.label());

    let wide = MoeShape::new(256, 128, ExpertWindow::new(260, 0, 4, 257).unwrap()).unwrap();
    let p = problem(LayerCase { shape: wide, ..case }).unwrap();
    let e = check_tactics(&mut sim, &p, Some(1)).unwrap_err();
    assert!(
        matches!(&e, LayerCheckError::Layer { source, .. }
            if matches!(**source, LayerError::Input(RuntimeError::UnsupportedActivations { what: "top_k", .. }))),
        "{e}"
    );
}

/// gpt-oss's epilogue (clamped SwiGLU with per-expert α, β, limit; GEMM1 and GEMM2 biases)
/// on both MXFP4 variants, with partial last N blocks in both GEMMs (H 320, I 192): the layer
/// equals its reference bit for bit, the reference is near the f64 oracle, and each part of
/// the epilogue changes the output (a layer run without it is far from this oracle).
#[test]
fn gpt_oss_epilogue_matches_the_reference_bit_for_bit() {
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    for (activations, finalize, seed) in [
        (ActivationFormat::Bf16, FinalizeMode::Deterministic, 31),
        (ActivationFormat::Fp8, FinalizeMode::BulkReduceAdd, 32),
    ] {
        let case = LayerCase::new(
            shape,
            19,
            activations,
            WeightFormat::Mxfp4,
            finalize,
            seed,
            RoutePattern::Spread,
        )
        .with_epilogue(EpilogueSpec::GPT_OSS);
        let p = problem(case).unwrap();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        // Every shipped tactic: GEMM1 N 128 (one consumer) and N 256 (two, the second past 2I
        // in the partial last block), GEMM2 N 64 and N 128 (two m64 blocks, the second past
        // H), at every tile size.
        let rows = check_tactics(&mut sim, &p, None).unwrap();
        assert_eq!(
            rows.len(),
            25,
            "4 tiles × GEMM1 N 128/256 × GEMM2 N 64/128, T 128 GEMM1 N 128 ping-pong × both, \
             T 16/32 GEMM1 N 128 paired with N 256 × both, and T 16's splits of 2 in either \
             GEMM or both (K 320 and 192 have 3 and 2 stages of 128: no split of 4)"
        );
        // The oracle has the unquantized weights: MXFP4 alone costs ~20 % here. With the
        // epilogue the reference stays as close to its oracle as the plain layer does to
        // its own; a misplaced bias or parameter would not.
        let plain = problem(LayerCase { epilogue: EpilogueSpec::PLAIN, ..case }).unwrap();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        let plain_err = check_tactics(&mut sim, &plain, Some(1)).unwrap()[0].reference_vs_oracle;
        for r in &rows {
            assert_eq!(r.beyond_slack, 0, "{}: max ulp {}", r.tactic, r.max_ulp);
            if finalize == FinalizeMode::Deterministic {
                assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
            }
            assert!(
                r.reference_vs_oracle < 1.2 * plain_err,
                "{}: {} (plain {plain_err})",
                r.tactic,
                r.reference_vs_oracle
            );
        }
        // Without the epilogue data the same weights give another layer.
        for other in [
            EpilogueSpec::PLAIN,
            EpilogueSpec { gemm1_bias: false, ..EpilogueSpec::GPT_OSS },
            EpilogueSpec { gemm2_bias: false, ..EpilogueSpec::GPT_OSS },
            EpilogueSpec { activation: moegen_dsl::Activation::Swiglu, ..EpilogueSpec::GPT_OSS },
        ] {
            let q = problem(LayerCase { epilogue: other, ..case }).unwrap();
            let diff = moegen_runtime::reference::relative_l2_error(&q.oracle, &p.oracle);
            assert!(diff > 0.01, "{other:?}: {diff}");
        }
    }
}

/// The epilogues the built-in set does not ship (GeGLU, one bias without the other, the A4
/// path with activation parameters), generated here as a build script would and run through
/// the layer in the simulator: bit for bit the reference.
#[test]
fn generated_epilogue_variants_match_the_reference_bit_for_bit() {
    use moegen_dsl::{Activation, GemmKind, GemmTactic, Target};
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let variants = [
        (
            ActivationFormat::Bf16,
            EpilogueSpec { activation: Activation::GegluTanh, ..EpilogueSpec::PLAIN },
        ),
        (
            ActivationFormat::Nvfp4,
            EpilogueSpec {
                activation: Activation::SwigluClamped,
                gemm1_bias: true,
                gemm2_bias: false,
            },
        ),
        (ActivationFormat::Bf16, EpilogueSpec { gemm2_bias: true, ..EpilogueSpec::PLAIN }),
    ];
    for (i, (activations, spec)) in variants.into_iter().enumerate() {
        let gemms: Vec<GemmTactic> = [(GemmKind::Gemm1, 128), (GemmKind::Gemm2, 64)]
            .map(|(kind, n)| GemmTactic::new_sm90(kind, 16, n).unwrap())
            .to_vec();
        let set = builtin_with_epilogue(&gemms, spec, "sm_90a", |b| {
            b.target(Target::Sm90a).format(WeightFormat::Nvfp4).activations(activations)
        })
        .unwrap();
        let case = LayerCase::new(
            shape,
            23,
            activations,
            WeightFormat::Nvfp4,
            FinalizeMode::Deterministic,
            40 + i as u64,
            RoutePattern::Spread,
        )
        .with_epilogue(spec);
        let p = problem(case).unwrap();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        let rows = check_tactics_in(&mut sim, &p, None, &set).unwrap();
        // As near its oracle as the plain layer is to its own (the 4-bit weights' cost).
        let plain = problem(LayerCase { epilogue: EpilogueSpec::PLAIN, ..case }).unwrap();
        let r = plain.reference(moegen_dsl::Arch::Sm90, TileSize::T16.into()).unwrap();
        let r: Vec<f64> = r.iter().map(|v| f64::from(v.to_f32())).collect();
        let plain_err = moegen_runtime::reference::relative_l2_error(&r, &plain.oracle);
        // Only tactics of the generated kernels (a built-in partner for the GEMM whose
        // epilogue is plain).
        assert!(!rows.is_empty(), "{spec:?}");
        for r in &rows {
            let generated = ["gemm1_sm90_t16n128", "gemm2_sm90_t16n64"];
            assert!(generated.iter().any(|g| r.tactic.contains(g)), "{}", r.tactic);
            assert_eq!(r.identical, r.elements, "{spec:?} {}: max ulp {}", r.tactic, r.max_ulp);
            assert!(
                r.reference_vs_oracle < 1.2 * plain_err + 0.01,
                "{spec:?}: {} (plain {plain_err})",
                r.reference_vs_oracle
            );
        }
    }
}

/// The epilogues on SM100 (tcgen05; both recipes' GEMM1, the Fast one unfolding α1 for a
/// clamp or a bias), generated here as a build script would: the layer in the simulator
/// equals the SM100 reference bit for bit, and stays as near its oracle as the plain layer.
#[test]
fn sm100_epilogues_match_the_reference_bit_for_bit() {
    use moegen_dsl::{Activation, Arch, GemmKind, KernelDescBuilder};
    let shape = MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    // GEMM1 N 128 (one step per tile) and N 256 (two, the accumulator released after the
    // first).
    let tactics: Vec<_> = [[128, 128], [128, 256]]
        .map(|mma| {
            moegen_dsl::tactics_for(Arch::Sm100)
                .into_iter()
                .find(|t| t.tile().rows() == 128 && t.gemm1().mma_tiler() == mma)
                .unwrap()
        })
        .into();
    for (i, spec) in [
        EpilogueSpec::GPT_OSS,
        EpilogueSpec { activation: Activation::GegluTanh, gemm1_bias: true, gemm2_bias: false },
        // α1 stays folded in GEMM1 (plain SwiGLU, no GEMM1 bias), GEMM2 adds its bias.
        EpilogueSpec { gemm2_bias: true, ..EpilogueSpec::PLAIN },
        // The same GEMM1 with a bias: unfolded.
        EpilogueSpec { gemm1_bias: true, ..EpilogueSpec::PLAIN },
    ]
    .into_iter()
    .enumerate()
    {
        let gemms: Vec<_> = tactics.iter().flat_map(|t| [*t.gemm1(), *t.gemm2()]).collect();
        let case = LayerCase::new(
            shape,
            5,
            ActivationFormat::Nvfp4,
            WeightFormat::Nvfp4,
            FinalizeMode::Deterministic,
            50 + i as u64,
            RoutePattern::Spread,
        )
        .with_epilogue(spec);
        let plain = problem(LayerCase { epilogue: EpilogueSpec::PLAIN, ..case }).unwrap();
        let r = plain.reference(Arch::Sm100, TileSize::T128.into()).unwrap();
        let r: Vec<f64> = r.iter().map(|v| f64::from(v.to_f32())).collect();
        let plain_err = moegen_runtime::reference::relative_l2_error(&r, &plain.oracle);
        // The default (Fast) recipe, and the Exact one where GEMM1 reads its inputs as the
        // element loop asks (a clamp or a bias).
        let exact = spec.gemm1_bias || spec.activation == Activation::SwigluClamped;
        let recipes: &[_] = if exact { &[None, Some(EpilogueRecipe::Exact)] } else { &[None] };
        for &recipe in recipes {
            let gemm1 = |b: &KernelDescBuilder| b.tactic().kind() == GemmKind::Gemm1;
            let set = builtin_with_epilogue(&gemms, spec, "sm_100f", |b| match recipe {
                Some(r) if gemm1(&b) => b.recipe(r),
                _ => b,
            })
            .unwrap();
            let p = problem(LayerCase { recipe, ..case }).unwrap();
            let mut sim = SimBackend::new().with_sm_count(4);
            let rows = check_tactics_in(&mut sim, &p, None, &set).unwrap();
            for t in &tactics {
                let ran = rows.iter().any(|r| r.tactic == t.to_string());
                assert!(ran, "{spec:?} {recipe:?}: {t} did not run");
            }
            for r in &rows {
                let t = &r.tactic;
                assert_eq!(r.identical, r.elements, "{spec:?} {recipe:?} {t}: ulp {}", r.max_ulp);
                assert!(
                    r.reference_vs_oracle < 1.2 * plain_err + 0.01,
                    "{spec:?}: {} (plain {plain_err})",
                    r.reference_vs_oracle
                );
            }
        }
    }
}

/// The epilogues' N and K tails on SM100: H 320, I 192 with gpt-oss's SwiGLU and both
/// biases, GeGLU with a GEMM1 bias and ReLU² with both (W1 of I rows: its N 256 block holds
/// 192 of them, its second half none), in a 1-CTA tactic whose GEMM2 cluster's second N
/// 128 block lies past H and in a 2-CTA one: bit for bit against the SM100 reference. The
/// bias reads of the blocks past the dimension stay inside the bias arrays (the simulator
/// refuses any access outside an allocation).
#[test]
fn sm100_epilogue_tails_match_the_reference_bit_for_bit() {
    use moegen_dsl::{Activation, Arch};
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let pick = |rows: u32, g1: [u32; 2], g2: [u32; 2]| {
        moegen_dsl::tactics_for(Arch::Sm100)
            .into_iter()
            .find(|t| {
                t.tile().rows() == rows
                    && t.gemm1().mma_tiler()[1] == g1[1]
                    && t.gemm2().mma_tiler()[1] == g2[0]
                    && t.gemm2().cluster()[1] == g2[1]
                    && t.gemm1().cluster()[0] == g1[0]
            })
            .unwrap()
    };
    // [CTA group, GEMM1 N] and [GEMM2 N, cluster N].
    let tactics = [pick(128, [1, 256], [128, 2]), pick(256, [2, 256], [256, 2])];
    let relu2 = EpilogueSpec { activation: Activation::Relu2, gemm1_bias: true, gemm2_bias: true };
    for (i, spec) in [
        EpilogueSpec::GPT_OSS,
        EpilogueSpec { activation: Activation::GegluTanh, gemm1_bias: true, gemm2_bias: false },
        relu2,
    ]
    .into_iter()
    .enumerate()
    {
        let gemms: Vec<_> = tactics.iter().flat_map(|t| [*t.gemm1(), *t.gemm2()]).collect();
        let set = builtin_with_epilogue(&gemms, spec, "sm_100f", |b| b).unwrap();
        let plain = spread(shape, 9, ActivationFormat::Nvfp4, WeightFormat::Nvfp4, 70 + i as u64);
        let p = problem(LayerCase { epilogue: spec, ..plain }).unwrap();
        let mut sim = SimBackend::new().with_sm_count(4);
        let rows = check_tactics_in(&mut sim, &p, None, &set).unwrap();
        for t in &tactics {
            assert!(rows.iter().any(|r| r.tactic == t.to_string()), "{spec:?}: {t} did not run");
        }
        for r in &rows {
            assert_eq!(r.identical, r.elements, "{spec:?} {}: max ulp {}", r.tactic, r.max_ulp);
            assert!(r.reference_vs_oracle < 0.3, "{spec:?}: {}", r.reference_vs_oracle);
        }
    }
}

/// The ping-pong GEMM1 (two consumers taking alternate N 128 units of a CTA from one stage
/// ring; docs/hopper-schedule.md) in A16 and A8, with its planned ring and with a ring
/// shallower than K (3 stages for A16's 5 K stages, 2 for A8's 3), so the consumers' cursors
/// skip the other's stages across several wraps and the turn barriers must order the
/// units: the layer equals the reference bit for bit. 2I 384 is 3 units per routing tile;
/// 37 tokens (top 2 of 8 experts, 4 local) give a T 128 tile to each local expert with
/// routes (3 or 4 tiles), so the 4 simulated SMs' CTAs (one per SM) get 2 or 3 units each
/// and at least one gets 3 (an odd count: consumer 0 takes two, consumer 1 one).
#[test]
fn hopper_pingpong_gemm1_matches_the_reference_bit_for_bit() {
    use moegen_dsl::abi::{KernelId, KernelInfo};
    use moegen_dsl::{Arch, GemmKind, GemmTactic, KernelDescBuilder, Schedule, Target};
    use moegen_runtime::layer::KernelSet;
    let shape = MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let pp = GemmTactic::new_sm90_scheduled(GemmKind::Gemm1, 128, 128, Schedule::PingPong).unwrap();
    for (activations, format, shallow, seed) in [
        (ActivationFormat::Bf16, WeightFormat::Nvfp4, 3, 61),
        (ActivationFormat::Fp8, WeightFormat::Mxfp4, 2, 62),
    ] {
        let g1 = KernelDescBuilder::new(pp)
            .target(Target::Sm90a)
            .format(format)
            .activations(activations);
        let is_sm90_gemm1 = |k: &&'static KernelInfo| matches!(k.id, KernelId::Gemm(g) if g.gemm == GemmKind::Gemm1 && g.arch() == Arch::Sm90);
        let builtin = KernelSet::builtin();
        let others = || builtin.kernels().iter().copied().filter(|k| !is_sm90_gemm1(k));
        let planned = builtin
            .kernels()
            .iter()
            .copied()
            .filter(is_sm90_gemm1)
            .filter(|k| matches!(k.id, KernelId::Gemm(g) if g.schedule == Schedule::PingPong));
        let sets = [
            KernelSet::new(others().chain(planned)),
            KernelSet::new(others().chain([generated(g1.depths(shallow, 1), "sm_90a")])),
        ];
        for (depths, set) in ["planned", "shallow"].into_iter().zip(&sets) {
            let case = LayerCase::new(
                shape,
                37,
                activations,
                format,
                FinalizeMode::Deterministic,
                seed,
                RoutePattern::Spread,
            );
            let p = problem(case).unwrap();
            let mut sim = SimBackend::hopper().with_sm_count(4);
            let rows = check_tactics_in(&mut sim, &p, Some(1), set).unwrap();
            assert_eq!(rows.len(), 1, "{activations:?} {depths}");
            let r = &rows[0];
            assert!(r.tactic.contains("gemm1_sm90_t128n128_pp"), "{}", r.tactic);
            assert_eq!(
                r.identical, r.elements,
                "{activations:?} {depths} {}: max ulp {}",
                r.tactic, r.max_ulp
            );
        }
    }
}

/// The built-in kernels without the ping-pong GEMMs: the candidates the cooperative tests'
/// tactic spacing was chosen over.
fn cooperative() -> moegen_runtime::layer::KernelSet {
    use moegen_dsl::abi::KernelId;
    let all = moegen_runtime::layer::KernelSet::builtin();
    // The ping-pong and the split-K kernels have tests of their own
    // (`hopper_pingpong_gemm1_matches_the_reference_bit_for_bit`, `split_k_sim.rs`).
    let kept = all.kernels().iter().copied().filter(|k| {
        !matches!(k.id, KernelId::Gemm(g)
            if g.schedule == moegen_dsl::Schedule::PingPong || g.split_k > 1)
    });
    moegen_runtime::layer::KernelSet::new(kept.collect::<Vec<_>>())
}

/// The kernel `b` describes, generated as a build script would.
fn generated(
    b: moegen_dsl::KernelDescBuilder,
    ptx_target: &'static str,
) -> &'static moegen_dsl::abi::KernelInfo {
    moegen_validation::layer_check::generated_kernel(&b.build().unwrap(), ptx_target).unwrap()
}

#[test]
fn a_padding_id_in_device_ids_is_reported_with_its_route_on_both_targets() {
    // A router's NO_ROUTE reaching MoeLayer::forward on the device: only expert
    // parallelism's owner may skip it, so the layer's sort must report it, as it does −1.
    use moegen_dsl::abi::ep::NO_ROUTE;
    use moegen_runtime::RuntimeError;
    use moegen_runtime::layer::LayerError;
    let sm100 = LayerCase::new(
        MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap(),
        4,
        ActivationFormat::Nvfp4,
        WeightFormat::Nvfp4,
        FinalizeMode::Deterministic,
        5,
        // No local route: the GEMMs have no tile, the sort is what is tested.
        RoutePattern::NoneLocal,
    );
    let sm90 = LayerCase {
        shape: MoeShape::new(320, 192, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap(),
        activations: ActivationFormat::Bf16,
        format: WeightFormat::Mxfp4,
        ..sm100
    };
    for (case, sim) in [(sm100, SimBackend::new()), (sm90, SimBackend::hopper())] {
        let mut sim = sim.with_sm_count(4);
        let mut p = problem(case).unwrap();
        assert_eq!(device_checked_errors(&mut sim, &p).unwrap(), Ok(()));
        // Token 2's second slot, and a later one: the first is named.
        p.routing.experts[2 * 2 + 1] = NO_ROUTE;
        p.routing.experts[3 * 2] = NO_ROUTE;
        let want = RuntimeError::ExpertOutOfRange {
            token: 2,
            slot: 1,
            expert: i64::from(NO_ROUTE),
            experts: 8,
        };
        let got = device_checked_errors(&mut sim, &p).unwrap();
        assert_eq!(got, Err(LayerError::Input(want)), "{}", p.case.label());
    }
}

/// gpu-check's `--layer-tactic`: only the tactics whose name holds the text run (then
/// `--layer-tactics` spreads over those), and a text no tactic holds runs nothing.
#[test]
fn picked_tactics_are_the_named_ones() {
    use moegen_runtime::layer::KernelSet;
    let shape = MoeShape::new(256, 128, ExpertWindow::new(4, 0, 4, 2).unwrap()).unwrap();
    let case = spread(shape, 9, ActivationFormat::Bf16, WeightFormat::Mxfp4, 5);
    let p = problem(case).unwrap();
    let mut sim = SimBackend::hopper().with_sm_count(2);
    let set = KernelSet::builtin();
    let rows =
        check_tactics_picked(&mut sim, &p, Some(1), Some("gemm2_sm90_t32n64"), &set).unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].tactic.contains("gemm2_sm90_t32n64"), "{}", rows[0].tactic);
    assert_eq!(rows[0].identical, rows[0].elements);
    let none = check_tactics_picked(&mut sim, &p, None, Some("no such tactic"), &set).unwrap();
    assert!(none.is_empty());
}
