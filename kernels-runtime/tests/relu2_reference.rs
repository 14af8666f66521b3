//! ReLU² (ungated, W1 with I rows) in the CPU reference and the f64 oracle: GEMM1 against an
//! f64 evaluation of the quantized inputs, the whole layer against the oracle (with both
//! biases), and the typed refusals of mismatched W1 shapes and of the Hopper layouts.

use moegen_dsl::formats::{block_amax, e2m1_to_f32, e4m3_to_f32, nibble_at, nvfp4_global_scale};
use moegen_dsl::{Activation, ActivationFormat, EpilogueRecipe, SwigluInput, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::reference::*;
use moegen_runtime::routing::{ExpertWindow, moe_sort};

mod common;
use common::Rng;

const TOKENS: usize = 40;

struct Relu2Layer {
    shape: MoeShape,
    x: Vec<f32>,
    w1: Vec<f32>,
    down: Vec<f32>,
    routing: Routing,
    acts: Nvfp4Activations,
    weights: PreparedWeights,
}

/// 8 experts, 4 local (2..6), top-2, H 256, I 128; W1 `[4, I, H]`, no gate.
fn relu2_layer(seed: u64) -> Relu2Layer {
    let (h, i, k) = (256, 128, 2);
    let shape = MoeShape::new(h, i, ExpertWindow::new(8, 2, 4, k).unwrap()).unwrap();
    let mut rng = Rng(seed);
    let x: Vec<f32> = (0..TOKENS * h).map(|_| rng.normal()).collect();
    let w1: Vec<f32> = (0..4 * i * h).map(|_| rng.normal() / (h as f32).sqrt()).collect();
    let down: Vec<f32> = (0..4 * h * i).map(|_| rng.normal() / (i as f32).sqrt()).collect();
    let experts: Vec<i32> =
        (0..TOKENS * k).map(|r| (((r / k) * 3 + (r % k) * 5) % 8) as i32).collect();
    let weights: Vec<f32> = (0..TOKENS * k).map(|r| 0.2 + (r % k) as f32 * 0.5).collect();
    let gs_x = nvfp4_global_scale(block_amax(&x)).unwrap();
    let acts = quantize_activations(&x, TOKENS, h, gs_x).unwrap();
    // relu(x)² of unit-variance pre-activations stays well under 32.
    let weights_p = prepare_relu2_weights(&shape, &w1, &down, gs_x, 448.0 * 6.0 / 32.0).unwrap();
    Relu2Layer {
        shape,
        x,
        w1,
        down,
        routing: Routing { tokens: TOKENS, experts, weights },
        acts,
        weights: weights_p,
    }
}

fn biased(l: &Relu2Layer) -> (ExpertEpilogue, Vec<f32>, Vec<f32>) {
    let (h, i) = (l.shape.hidden, l.shape.intermediate);
    let b1: Vec<f32> = (0..4 * i).map(|j| ((j % 7) as f32 - 3.0) * 0.25).collect();
    let b2: Vec<f32> = (0..4 * h).map(|j| ((j % 5) as f32 - 2.0) * 0.125).collect();
    let ep = ExpertEpilogue::new(
        &l.shape,
        Activation::Relu2,
        vec![],
        Some(b1.clone()),
        Some(b2.clone()),
    )
    .unwrap();
    (ep, b1, b2)
}

#[test]
fn relu2_weights_hold_i_rows_in_h_column_order() {
    let l = relu2_layer(1);
    let (h, i) = (l.shape.hidden, l.shape.intermediate);
    assert_eq!(l.weights.w1.len(), 4 * i * h / 2, "W1 [L, I, H/2]: no gate rows");
    assert_eq!(l.weights.epilogue.spec().activation, Activation::Relu2);
    let l1 = w1_scale_layout_for(&l.shape, Activation::Relu2).unwrap();
    assert_eq!(l.weights.w1_scales.len(), 4 * l1.bytes());
    validate_weights(&l.shape, &l.weights).unwrap();
    // Row r of expert e is W1_e's row r: its largest dequantized value is the source row's.
    for (e, r) in [(0, 0), (1, 63), (2, 64), (3, 127)] {
        let deq = |c: usize| {
            e2m1_to_f32(nibble_at(&l.weights.w1, (e * i + r) * h + c).unwrap())
                * e4m3_to_f32(l.weights.w1_scales[e * l1.bytes() + l1.offset(r, c / 16).unwrap()])
                / l.weights.w1_global_scale[e]
        };
        let src = &l.w1[(e * i + r) * h..(e * i + r + 1) * h];
        let c = (0..h).max_by(|&a, &b| src[a].abs().total_cmp(&src[b].abs())).unwrap();
        assert!((deq(c) - src[c]).abs() <= 0.2 * src[c].abs(), "expert {e} row {r}");
    }
}

#[test]
fn relu2_gemm1_is_the_squared_relu_of_each_row_dot_with_its_bias() {
    let l = relu2_layer(2);
    let (ep, b1, _) = biased(&l);
    let w = l.weights.clone().with_epilogue(&l.shape, ep).unwrap();
    let (h, i, k) = (l.shape.hidden, l.shape.intermediate, 2);
    let sort = moe_sort(&l.routing.experts, TOKENS, &l.shape.window, TileSize::T128).unwrap();
    let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe: EpilogueRecipe::Exact };
    let out = gemm1_reference(&l.shape, &l.acts, &w, &sort, opts).unwrap();
    let l1 = w1_scale_layout_for(&l.shape, Activation::Relu2).unwrap();
    let deq_x = |t: usize, c: usize| {
        f64::from(e2m1_to_f32(nibble_at(&l.acts.packed, t * h + c).unwrap()))
            * f64::from(e4m3_to_f32(l.acts.scales[t * h / 16 + c / 16]))
    };
    let deq_w = |e: usize, r: usize, c: usize| {
        f64::from(e2m1_to_f32(nibble_at(&w.w1, (e * i + r) * h + c).unwrap()))
            * f64::from(e4m3_to_f32(w.w1_scales[e * l1.bytes() + l1.offset(r, c / 16).unwrap()]))
    };
    let g_h = w.fc2_input_scale;
    let (mut checked, mut zeros) = (0, 0);
    for row in 0..out.rows {
        let Some((e, t, _)) = sort.route_of_row(row, k) else { continue };
        for j in 0..i {
            let acc: f64 = (0..h).map(|c| deq_x(t, c) * deq_w(e, j, c)).sum();
            let pre = f64::from(w.alpha1[e]) * acc + f64::from(b1[e * i + j]);
            let want = pre.max(0.0).powi(2);
            let sf = e4m3_to_f32(out.scales[out.scale_layout.offset(row, j / 16).unwrap()]);
            let code = nibble_at(&out.packed, row * i + j).unwrap();
            let got = f64::from(e2m1_to_f32(code) * sf / g_h);
            // One E2M1 step of the block's scale, plus slack for f32 vs f64 accumulation.
            let bound = f64::from(sf / g_h) + 1e-3 * want.abs() + 1e-6;
            assert!((got - want).abs() <= bound, "row {row} col {j}: {got} vs {want}");
            // relu: a negative pre-activation is exactly zero (code +0), never negative.
            assert!(got >= 0.0, "row {row} col {j}: {got}");
            zeros += usize::from(pre < 0.0 && code == 0);
            checked += 1;
        }
    }
    assert!(checked > 0 && zeros > checked / 4, "{zeros} of {checked} clipped to zero");
}

#[test]
fn relu2_layer_tracks_its_f64_oracle_with_both_biases() {
    let l = relu2_layer(3);
    let (ep, _, _) = biased(&l);
    let w = l.weights.clone().with_epilogue(&l.shape, ep.clone()).unwrap();
    for recipe in [EpilogueRecipe::Exact, EpilogueRecipe::Fast] {
        let opts = ReferenceOptions { recipe, ..Default::default() };
        let run = moe_reference(&l.shape, &l.acts, &w, &l.routing, TileSize::T128, opts).unwrap();
        let got: Vec<f64> = run.output.iter().map(|b| f64::from(b.to_f32())).collect();
        let oracle =
            oracle_moe_epilogue(&l.shape, &l.x, &l.w1, &[], &l.down, &l.routing, &ep).unwrap();
        let err = relative_l2_error(&got, &oracle);
        assert!(err < 0.3, "{recipe:?}: relative L2 error against the oracle {err}");
        assert!(err > 1e-3, "{recipe:?}: quantization skipped? {err}");
        // The same weights under SwiGLU's oracle (W1 as up, W1 as gate) are far off: the
        // activation is ReLU²'s.
        let swiglu = ExpertEpilogue::new(&l.shape, Activation::Swiglu, vec![], None, None).unwrap();
        let other = oracle_moe_epilogue(&l.shape, &l.x, &l.w1, &l.w1, &l.down, &l.routing, &swiglu)
            .unwrap();
        assert!(relative_l2_error(&got, &other) > 0.5);
    }
    let exact = ReferenceOptions { recipe: EpilogueRecipe::Exact, ..Default::default() };
    let a = moe_reference(&l.shape, &l.acts, &w, &l.routing, TileSize::T128, exact).unwrap();
    let b = moe_reference(&l.shape, &l.acts, &w, &l.routing, TileSize::T256, exact).unwrap();
    assert_eq!(a.output, b.output, "tiling must not change any bit");
}

/// The value of a call that must succeed (without printing what it returns).
fn accepted<T>(r: Result<T, RuntimeError>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// The error of a call that must fail (without printing the weights it might return).
fn refused<T>(r: Result<T, RuntimeError>) -> RuntimeError {
    match r {
        Err(e) => e,
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn mismatched_w1_shapes_are_typed_errors_naming_the_tensor() {
    let l = relu2_layer(4);
    let (h, i) = (l.shape.hidden, l.shape.intermediate);
    // Gated weights (W1 with 2I rows) given a ReLU² epilogue, and the reverse.
    let up: Vec<f32> = l.w1.clone();
    let gated = prepare_weights(&l.shape, &up, &up, &l.down, 1.0, 1.0).unwrap();
    let relu2 = ExpertEpilogue::new(&l.shape, Activation::Relu2, vec![], None, None).unwrap();
    let e = refused(gated.clone().with_epilogue(&l.shape, relu2.clone()));
    assert!(
        matches!(e, RuntimeError::BufferLength { what: "W1", expected, actual }
            if expected == 4 * i * h / 2 && actual == 4 * 2 * i * h / 2),
        "{e}"
    );
    let e = refused(l.weights.clone().with_epilogue(&l.shape, ExpertEpilogue::default()));
    assert!(matches!(e, RuntimeError::BufferLength { what: "W1", .. }), "{e}");
    // Struct-built weights: validation checks W1 against the epilogue they carry.
    let mut forged = gated.clone();
    forged.epilogue = relu2;
    let e = validate_weights(&l.shape, &forged).unwrap_err();
    assert!(matches!(e, RuntimeError::BufferLength { what: "W1", .. }), "{e}");
    let sort = moe_sort(&l.routing.experts, TOKENS, &l.shape.window, TileSize::T128).unwrap();
    let e = refused(gemm1_reference(&l.shape, &l.acts, &forged, &sort, SwigluInput::F32));
    assert!(matches!(e, RuntimeError::BufferLength { what: "W1", .. }), "{e}");
    // A 2I-row W1 handed to the ReLU² preparation.
    let two_i: Vec<f32> = [l.w1.clone(), l.w1.clone()].concat();
    let e = refused(prepare_relu2_weights(&l.shape, &two_i, &l.down, 1.0, 1.0));
    assert!(matches!(e, RuntimeError::BufferLength { what: "W1 weights", .. }), "{e}");
    // GEMM1's bias has one value per W1 row: I per expert, not 2I.
    let e =
        ExpertEpilogue::new(&l.shape, Activation::Relu2, vec![], Some(vec![0.0; 4 * 2 * i]), None)
            .unwrap_err();
    assert!(matches!(e, RuntimeError::BufferLength { what: "GEMM1 bias", .. }), "{e}");
    // The oracle's ReLU² takes no gate weights.
    let ep = ExpertEpilogue::new(&l.shape, Activation::Relu2, vec![], None, None).unwrap();
    let e =
        oracle_moe_epilogue(&l.shape, &l.x, &l.w1, &l.w1, &l.down, &l.routing, &ep).unwrap_err();
    assert!(matches!(e, RuntimeError::BufferLength { what: "gate weights", .. }), "{e}");
}

#[test]
fn hopper_weights_take_relu2_and_gemm2_refuses_the_option() {
    use moegen_dsl::KernelDescBuilder;
    let l = relu2_layer(5);
    let (h, i) = (l.shape.hidden, l.shape.intermediate);
    // Hopper A16/A4: the I-row W1 in the fragment layout (a 64-row tile multiple).
    let w = Sm90Weights::from_prepared(&l.shape, &l.weights, ActivationFormat::Bf16)
        .unwrap_or_else(|e| panic!("{e}"));
    let [w1, s1, _, _] = w.fragment_layout(&l.shape).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((w1.len(), s1.len()), (4 * i * h / 2, 4 * i * h / 16));
    // Gated Hopper weights (W1 with 2I rows) given a ReLU² epilogue: refused naming W1.
    let gated = prepare_weights(&l.shape, &l.w1, &l.w1, &l.down, 1.0, 1.0).unwrap();
    let gated = accepted(Sm90Weights::from_prepared(&l.shape, &gated, ActivationFormat::Bf16));
    let relu2 = ExpertEpilogue::new(&l.shape, Activation::Relu2, vec![], None, None).unwrap();
    let e = refused(gated.with_epilogue(&l.shape, relu2));
    assert!(matches!(e, RuntimeError::BufferLength { what: "W1", .. }), "{e}");
    // A8 takes MXFP4 weights, ReLU² or not.
    let e = refused(Sm90A8Weights::from_sm90(&l.shape, &w));
    assert!(matches!(e, RuntimeError::UnsupportedActivations { .. }), "{e}");
    // GEMM2 takes no activation: ReLU² is GEMM1's option.
    let t = moegen_dsl::tactics_for(moegen_dsl::Arch::Sm100)[0];
    let e = KernelDescBuilder::new(*t.gemm2()).activation(Activation::Relu2).build().unwrap_err();
    assert!(e.to_string().contains("activation"), "{e}");
}
