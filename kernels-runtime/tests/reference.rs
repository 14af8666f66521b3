//! The CPU reference: exact accumulation, GEMM1 against f64, the whole layer against the
//! unquantized oracle, finalize modes, and typed errors.

use half::bf16;
use moegen_dsl::epilogue_math::swiglu_f32;
use moegen_dsl::formats::{
    block_amax, e2m1_to_f32, e4m3_to_f32, nibble_at, nvfp4_global_scale, quantize_nvfp4,
};
use moegen_dsl::plan::PlanError;
use moegen_dsl::{FinalizeMode, SwigluInput, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::reference::*;
use moegen_runtime::routing::{ExpertWindow, moe_sort};

mod common;
use common::Rng;

struct Layer {
    shape: MoeShape,
    x: Vec<f32>,
    up: Vec<f32>,
    gate: Vec<f32>,
    down: Vec<f32>,
    routing: Routing,
    acts: Nvfp4Activations,
    weights: PreparedWeights,
}

fn layer(tokens: usize, seed: u64, route: impl Fn(&mut Rng, usize, usize) -> i32) -> Layer {
    layer_k(tokens, 2, seed, route)
}

fn layer_k(
    tokens: usize,
    k: usize,
    seed: u64,
    route: impl Fn(&mut Rng, usize, usize) -> i32,
) -> Layer {
    let (h, i) = (256, 128);
    let shape = MoeShape::new(h, i, ExpertWindow::new(8, 2, 4, k).unwrap()).unwrap();
    let mut rng = Rng(seed);
    let x: Vec<f32> = (0..tokens * h).map(|_| rng.normal()).collect();
    let scale = 1.0 / (h as f32).sqrt();
    let up: Vec<f32> = (0..4 * i * h).map(|_| rng.normal() * scale).collect();
    let gate: Vec<f32> = (0..4 * i * h).map(|_| rng.normal() * scale).collect();
    let down: Vec<f32> = (0..4 * h * i).map(|_| rng.normal() / (i as f32).sqrt()).collect();
    let experts: Vec<i32> = (0..tokens * k).map(|r| route(&mut rng, r / k, r % k)).collect();
    let weights: Vec<f32> = (0..tokens * k).map(|r| 0.1 + (r % k) as f32 / k as f32).collect();
    let gs_x = nvfp4_global_scale(block_amax(&x)).unwrap();
    let acts = quantize_activations(&x, tokens, h, gs_x).unwrap();
    // A calibration of h's range: SwiGLU outputs stay well under 8 for these inputs.
    let weights_p = prepare_weights(&shape, &up, &gate, &down, gs_x, 448.0 * 6.0 / 8.0).unwrap();
    Layer {
        shape,
        x,
        up,
        gate,
        down,
        routing: Routing { tokens, experts, weights },
        acts,
        weights: weights_p,
    }
}

fn distinct_random(rng: &mut Rng, _t: usize, slot: usize) -> i32 {
    // Slot 0 from experts 0..4, slot 1 from 4..8: distinct per token, half of each local.
    (rng.next() % 4) as i32 + 4 * slot as i32
}

#[test]
fn single_mma_dot_is_the_correctly_rounded_exact_sum() {
    let mut rng = Rng(3);
    for _ in 0..2000 {
        let codes: Vec<u8> = (0..64).map(|_| (rng.next() % 16) as u8).collect();
        let codes_b: Vec<u8> = (0..64).map(|_| (rng.next() % 16) as u8).collect();
        let sa: Vec<u8> = (0..4).map(|_| (rng.next() % 0x7F) as u8).collect();
        let sb: Vec<u8> = (0..4).map(|_| (rng.next() % 0x7F) as u8).collect();
        let pack = |c: &[u8]| c.chunks(2).map(|p| p[0] | (p[1] << 4)).collect::<Vec<u8>>();
        let a = DecodedRow::decode(&pack(&codes), sa.iter().copied(), 64);
        let b = DecodedRow::decode(&pack(&codes_b), sb.iter().copied(), 64);
        let exact: f64 = (0..64)
            .map(|k| {
                f64::from(e2m1_to_f32(codes[k]))
                    * f64::from(e2m1_to_f32(codes_b[k]))
                    * f64::from(e4m3_to_f32(sa[k / 16]))
                    * f64::from(e4m3_to_f32(sb[k / 16]))
            })
            .sum();
        assert_eq!(block_scaled_dot(&a, &b), exact as f32);
    }
}

#[test]
fn accumulation_rounds_once_per_mma_in_k_order() {
    let mut rng = Rng(5);
    let k = 1024;
    for _ in 0..200 {
        let codes: Vec<u8> = (0..2 * k).map(|_| (rng.next() % 16) as u8).collect();
        // Scales of very different sizes make the per-MMA rounding visible.
        let scales: Vec<u8> = (0..2 * k / 16).map(|_| (rng.next() % 0x7F) as u8).collect();
        let pack = |c: &[u8]| c.chunks(2).map(|p| p[0] | (p[1] << 4)).collect::<Vec<u8>>();
        let a = DecodedRow::decode(&pack(&codes[..k]), scales[..k / 16].iter().copied(), k);
        let b = DecodedRow::decode(&pack(&codes[k..]), scales[k / 16..].iter().copied(), k);
        // Independent model: f64 chunk sums (exact at these magnitudes), one f32 rounding each.
        let mut acc = 0f32;
        for c in 0..k / MMA_K {
            let chunk: f64 = (c * MMA_K..(c + 1) * MMA_K)
                .map(|j| {
                    f64::from(e2m1_to_f32(codes[j]))
                        * f64::from(e2m1_to_f32(codes[k + j]))
                        * f64::from(e4m3_to_f32(scales[j / 16]))
                        * f64::from(e4m3_to_f32(scales[k / 16 + j / 16]))
                })
                .sum();
            acc = (f64::from(acc) + chunk) as f32;
        }
        assert_eq!(block_scaled_dot(&a, &b), acc);
    }
}

#[test]
fn fixed_point_rounding_is_nearest_even() {
    let unit = 2f32.powi(-20);
    assert_eq!(fixed_to_f32(0), 0.0);
    assert_eq!(fixed_to_f32(3), 3.0 * unit);
    assert_eq!(fixed_to_f32((1 << 24) + 1), 16.0, "tie rounds to even");
    assert_eq!(fixed_to_f32((1 << 24) + 3), 16.0 + 4.0 * unit, "tie rounds to even (up)");
    assert_eq!(fixed_to_f32(-((1 << 25) + 3)), -(32.0 + 4.0 * unit), "above half rounds up");
    assert_eq!(fixed_to_f32(i128::from(i64::MAX)), (i64::MAX as f64 * f64::from(unit)) as f32);
}

#[test]
fn weight_preparation_interleaves_up_and_gate_in_blocks_of_64() {
    let l = layer(4, 1, distinct_random);
    let (h, i) = (l.shape.hidden, l.shape.intermediate);
    for e in 0..4 {
        let up = &l.up[e * i * h..(e + 1) * i * h];
        let gate = &l.gate[e * i * h..(e + 1) * i * h];
        let gs = nvfp4_global_scale(block_amax(up).max(block_amax(gate))).unwrap();
        assert_eq!(l.weights.w1_global_scale[e], gs);
        let qu = quantize_nvfp4(up, i, h, gs).unwrap();
        let qg = quantize_nvfp4(gate, i, h, gs).unwrap();
        let w1 = &l.weights.w1[e * 2 * i * h / 2..(e + 1) * 2 * i * h / 2];
        for j in 0..i {
            let row = (j / 64) * 128 + j % 64;
            assert_eq!(
                &w1[row * h / 2..(row + 1) * h / 2],
                &qu.packed[j * h / 2..(j + 1) * h / 2],
                "up {j}"
            );
            let row = row + 64;
            assert_eq!(
                &w1[row * h / 2..(row + 1) * h / 2],
                &qg.packed[j * h / 2..(j + 1) * h / 2],
                "gate {j}"
            );
        }
        let gs_x = l.acts.global_scale;
        assert_eq!(l.weights.alpha1[e], 1.0 / (gs_x * gs));
    }
}

#[test]
fn gemm1_matches_an_f64_evaluation_of_the_quantized_inputs() {
    let l = layer(37, 2, distinct_random);
    let (h, i, k) = (l.shape.hidden, l.shape.intermediate, 2);
    let sort = moe_sort(&l.routing.experts, 37, &l.shape.window, TileSize::T128).unwrap();
    let out = gemm1_reference(&l.shape, &l.acts, &l.weights, &sort, SwigluInput::F32).unwrap();
    let deq_x = |t: usize, c: usize| {
        f64::from(e2m1_to_f32(nibble_at(&l.acts.packed, t * h + c).unwrap()))
            * f64::from(e4m3_to_f32(l.acts.scales[t * h / 16 + c / 16]))
    };
    let l1 = w1_scale_layout(&l.shape).unwrap();
    let deq_w = |e: usize, r: usize, c: usize| {
        f64::from(e2m1_to_f32(nibble_at(&l.weights.w1, (e * 2 * i + r) * h + c).unwrap()))
            * f64::from(e4m3_to_f32(
                l.weights.w1_scales[e * l1.bytes() + l1.offset(r, c / 16).unwrap()],
            ))
    };
    let g_h = l.weights.fc2_input_scale;
    let mut rows_checked = 0;
    for row in 0..out.rows {
        let Some((e, t, _)) = sort.route_of_row(row, k) else {
            assert!(
                out.packed[row * i / 2..(row + 1) * i / 2].iter().all(|&b| b == 0),
                "padding row {row}"
            );
            continue;
        };
        rows_checked += 1;
        for j in 0..i {
            let ur = (j / 64) * 128 + j % 64;
            let (mut u, mut g) = (0f64, 0f64);
            for c in 0..h {
                u += deq_x(t, c) * deq_w(e, ur, c);
                g += deq_x(t, c) * deq_w(e, ur + 64, c);
            }
            let a = f64::from(l.weights.alpha1[e]);
            let want = f64::from(swiglu_f32((a * u) as f32, (a * g) as f32));
            let sf = e4m3_to_f32(out.scales[out.scale_layout.offset(row, j / 16).unwrap()]);
            let got =
                f64::from(e2m1_to_f32(nibble_at(&out.packed, row * i + j).unwrap()) * sf / g_h);
            // One E2M1 step of the block's scale, plus slack for f32 vs f64 accumulation.
            let bound = f64::from(sf / g_h) + 1e-3 * want.abs() + 1e-6;
            assert!((got - want).abs() <= bound, "row {row} col {j}: {got} vs {want}");
        }
    }
    assert_eq!(rows_checked, sort.expanded_idx_to_permuted_idx.iter().filter(|&&p| p >= 0).count());
}

/// x, up, gate and down as the kernels see them: dequantized from the NVFP4 tensors.
fn dequantized_inputs(l: &Layer) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let (h, i) = (l.shape.hidden, l.shape.intermediate);
    let x: Vec<f32> = (0..l.acts.tokens * h)
        .map(|j| {
            e2m1_to_f32(nibble_at(&l.acts.packed, j).unwrap()) * e4m3_to_f32(l.acts.scales[j / 16])
                / l.acts.global_scale
        })
        .collect();
    let (l1, l2) = (w1_scale_layout(&l.shape).unwrap(), w2_scale_layout(&l.shape).unwrap());
    let (mut up, mut gate, mut down) = (vec![], vec![], vec![]);
    for e in 0..4 {
        let w1 = |r: usize, c: usize| {
            e2m1_to_f32(nibble_at(&l.weights.w1, (e * 2 * i + r) * h + c).unwrap())
                * e4m3_to_f32(l.weights.w1_scales[e * l1.bytes() + l1.offset(r, c / 16).unwrap()])
                / l.weights.w1_global_scale[e]
        };
        for j in 0..i {
            let r = (j / 64) * 128 + j % 64;
            up.extend((0..h).map(|c| w1(r, c)));
            gate.extend((0..h).map(|c| w1(r + 64, c)));
        }
        for r in 0..h {
            down.extend((0..i).map(|c| {
                e2m1_to_f32(nibble_at(&l.weights.w2, (e * h + r) * i + c).unwrap())
                    * e4m3_to_f32(
                        l.weights.w2_scales[e * l2.bytes() + l2.offset(r, c / 16).unwrap()],
                    )
                    / l.weights.w2_global_scale[e]
            }));
        }
    }
    (x, up, gate, down)
}

fn to_f64(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|b| f64::from(b.to_f32())).collect()
}

#[test]
fn whole_layer_tracks_the_unquantized_oracle_and_ignores_tile_size() {
    let l = layer(64, 4, distinct_random);
    let run128 = moe_reference(
        &l.shape,
        &l.acts,
        &l.weights,
        &l.routing,
        TileSize::T128,
        ReferenceOptions::default(),
    )
    .unwrap();
    let run256 = moe_reference(
        &l.shape,
        &l.acts,
        &l.weights,
        &l.routing,
        TileSize::T256,
        ReferenceOptions::default(),
    )
    .unwrap();
    assert_eq!(run128.output, run256.output, "tiling must not change any bit");
    let oracle = oracle_moe(&l.shape, &l.x, &l.up, &l.gate, &l.down, &l.routing).unwrap();
    let err = relative_l2_error(&to_f64(&run128.output), &oracle);
    // Activations, h and both weights are each NVFP4-rounded (~10% rms per element for
    // Gaussian data); the errors add in quadrature.
    assert!(err < 0.3, "relative L2 error against the unquantized oracle {err}");
    assert!(err > 1e-3, "an error this small means quantization was skipped: {err}");
    // Against f64 arithmetic on the same quantized inputs, only h's requantization and the
    // bf16 output remain.
    let (x, up, gate, down) = dequantized_inputs(&l);
    let deq = oracle_moe(&l.shape, &x, &up, &gate, &down, &l.routing).unwrap();
    let err_deq = relative_l2_error(&to_f64(&run128.output), &deq);
    eprintln!(
        "relative L2 error: {err:.4} vs unquantized, {err_deq:.4} vs quantized inputs in f64"
    );
    assert!(err_deq < 0.15, "relative L2 error against the dequantized oracle {err_deq}");
    assert!(err_deq < err);
    // Tokens with no local route stay exactly zero.
    for t in 0..64 {
        let local = (0..2).any(|s| (2..6).contains(&l.routing.experts[t * 2 + s]));
        let row = &run128.output[t * 256..(t + 1) * 256];
        if !local {
            assert!(row.iter().all(|v| v.to_f32() == 0.0), "token {t}");
        } else {
            assert!(row.iter().any(|v| v.to_f32() != 0.0), "token {t}");
        }
    }
}

fn run_layer(l: &Layer, swiglu_input: SwigluInput, finalize: FinalizeMode) -> Vec<bf16> {
    let opts = ReferenceOptions { swiglu_input, finalize, ..Default::default() };
    moe_reference(&l.shape, &l.acts, &l.weights, &l.routing, TileSize::T128, opts).unwrap().output
}

#[test]
fn finalize_modes_coincide_for_two_routes_and_differ_for_more() {
    // With k = 2 both modes round c0 + c1 once (c0 is already bf16, and f32 is wide enough
    // that rounding through it is innocuous), so they agree bit for bit.
    // Both routes local and distinct: slot 0 on expert 2 or 4, slot 1 on 3 or 5.
    let l = layer(48, 6, |rng, _, slot| 2 + slot as i32 + 2 * (rng.next() % 2) as i32);
    let det = run_layer(&l, SwigluInput::F32, FinalizeMode::Deterministic);
    assert_eq!(run_layer(&l, SwigluInput::F32, FinalizeMode::BulkReduceAdd), det);
    // k = 4: per-add bf16 rounding differs from one rounding of the f32 sum.
    let l = layer_k(64, 4, 7, |_, _, slot| 2 + slot as i32);
    let sort = moe_sort(&l.routing.experts, 64, &l.shape.window, TileSize::T128).unwrap();
    let g1 = gemm1_reference(&l.shape, &l.acts, &l.weights, &sort, SwigluInput::F32).unwrap();
    let c = gemm2_contributions(&l.shape, &g1, &l.weights, &sort, &l.routing).unwrap();
    let det = finalize(&c, 64, 4, 256, FinalizeMode::Deterministic).unwrap();
    let bulk = finalize(&c, 64, 4, 256, FinalizeMode::BulkReduceAdd).unwrap();
    assert_eq!(det, run_layer(&l, SwigluInput::F32, FinalizeMode::Deterministic));
    assert_eq!(bulk, run_layer(&l, SwigluInput::F32, FinalizeMode::BulkReduceAdd));
    let mut differ = 0;
    for (n, (a, b)) in bulk.iter().zip(&det).enumerate() {
        // Each of the k−1 extra bf16 roundings moves a partial sum by at most half an ulp
        // (2^-8 relative: bf16 keeps 8 bits) of a partial sum, itself at most Σ|c|; plus the final rounding.
        let (t, col) = (n / 256, n % 256);
        let mass: f32 = (0..4).map(|s| c[(t * 4 + s) * 256 + col].abs()).sum();
        let (a, b) = (a.to_f32(), b.to_f32());
        assert!((a - b).abs() <= mass * 4.0 * 2f32.powi(-8), "{a} vs {b} (Σ|c| = {mass})");
        differ += usize::from(a != b);
    }
    assert!(differ > 0, "the modes round differently somewhere");
}

#[test]
fn swiglu_input_precision_is_explicit() {
    let l = layer(48, 8, distinct_random);
    let f = run_layer(&l, SwigluInput::F32, FinalizeMode::Deterministic);
    let b = run_layer(&l, SwigluInput::Bf16, FinalizeMode::Deterministic);
    assert_ne!(b, f, "rounding SwiGLU's inputs to bf16 is observable");
    let oracle = oracle_moe(&l.shape, &l.x, &l.up, &l.gate, &l.down, &l.routing).unwrap();
    let (ef, eb) =
        (relative_l2_error(&to_f64(&f), &oracle), relative_l2_error(&to_f64(&b), &oracle));
    assert!((ef - eb).abs() < 0.02, "bf16 SwiGLU inputs change the error little: {ef} vs {eb}");
}

#[test]
fn bad_inputs_are_typed_errors() {
    let l = layer(8, 9, distinct_random);
    let opts = ReferenceOptions::default();
    let mut r = l.routing.clone();
    r.weights[3] = f32::NAN;
    assert!(matches!(
        moe_reference(&l.shape, &l.acts, &l.weights, &r, TileSize::T128, opts),
        Err(RuntimeError::NonFiniteRouterWeight { token, slot })
            if token * l.shape.top_k() + slot == 3
    ));
    let mut r = l.routing.clone();
    r.experts[0] = 8;
    assert!(matches!(
        moe_reference(&l.shape, &l.acts, &l.weights, &r, TileSize::T128, opts),
        Err(RuntimeError::ExpertOutOfRange { .. })
    ));
    // A token naming one expert twice is refused by the reference and the oracle alike.
    let k = l.shape.top_k();
    let mut r = l.routing.clone();
    r.experts[k + 1] = r.experts[k];
    let dup = RuntimeError::DuplicateExpert {
        token: 1,
        slot: 1,
        earlier_slot: 0,
        expert: i64::from(r.experts[k]),
    };
    assert_eq!(
        moe_reference(&l.shape, &l.acts, &l.weights, &r, TileSize::T128, opts).err(),
        Some(dup.clone())
    );
    assert_eq!(oracle_moe(&l.shape, &l.x, &l.up, &l.gate, &l.down, &r).err(), Some(dup));
    let mut neg = l.weights.clone();
    neg.w1_scales[5] = 0xB8; // −1.0 in E4M3: the sign bit of an unsigned UE4M3 code
    assert!(matches!(
        moe_reference(&l.shape, &l.acts, &neg, &l.routing, TileSize::T128, opts),
        Err(RuntimeError::NegativeScaleCode { what: "W1 scales", offset: 5 })
    ));
    assert!(matches!(
        Sm90Weights::from_prepared(&l.shape, &neg, moegen_dsl::ActivationFormat::Bf16),
        Err(RuntimeError::NegativeScaleCode { .. })
    ));
    let mut w = l.weights.clone();
    w.w2_scales[17] = 0x7F;
    assert!(matches!(
        moe_reference(&l.shape, &l.acts, &w, &l.routing, TileSize::T128, opts),
        Err(RuntimeError::NanScaleCode { what: "W2 scales", offset: 17 })
    ));
    let mut w = l.weights.clone();
    w.w1.pop();
    assert!(matches!(
        moe_reference(&l.shape, &l.acts, &w, &l.routing, TileSize::T128, opts),
        Err(RuntimeError::BufferLength { .. })
    ));
    let mut r = l.routing.clone();
    r.tokens = 7;
    assert!(moe_reference(&l.shape, &l.acts, &l.weights, &r, TileSize::T128, opts).is_err());
    let w = ExpertWindow::new(8, 0, 4, 2).unwrap();
    assert!(matches!(MoeShape::new(250, 128, w), Err(PlanError::Alignment { .. })));
    assert!(matches!(MoeShape::new(256, 96, w), Err(PlanError::Alignment { .. })));
    assert!(matches!(MoeShape::new(0, 128, w), Err(PlanError::Zero { .. })));
    assert!(matches!(
        MoeShape::new(usize::MAX / 2, 128, w),
        Err(PlanError::Overflow { .. }) | Err(PlanError::Alignment { .. })
    ));
    assert!(matches!(
        prepare_weights(&l.shape, &l.up, &l.gate, &l.down, 0.0, 1.0),
        Err(RuntimeError::BadScale { .. })
    ));
    assert!(matches!(
        prepare_weights(&l.shape, &l.up[1..], &l.gate, &l.down, 1.0, 1.0),
        Err(RuntimeError::BufferLength { .. })
    ));
    let mut up = l.up.clone();
    up[0] = f32::INFINITY;
    assert!(prepare_weights(&l.shape, &up, &l.gate, &l.down, 1.0, 1.0).is_err());
}

#[test]
fn bf16_weights_are_accepted() {
    let l = layer(4, 10, distinct_random);
    let to_bf = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>();
    let (u, g, d) = (to_bf(&l.up), to_bf(&l.gate), to_bf(&l.down));
    let w = prepare_weights(&l.shape, &u, &g, &d, l.acts.global_scale, l.weights.fc2_input_scale)
        .unwrap();
    validate_weights(&l.shape, &w).unwrap();
    let xb = to_bf(&l.x);
    let a = quantize_activations(&xb, 4, 256, l.acts.global_scale).unwrap();
    assert_eq!(a.packed.len(), 4 * 128);
}

#[test]
fn epilogue_data_is_checked_against_the_shape() {
    use moegen_dsl::Activation;
    use moegen_dsl::epilogue_math::ActivationParams;
    let shape = MoeShape::new(256, 128, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let p = vec![ActivationParams::GPT_OSS; 4];
    let (b1, b2) = (vec![0.5f32; 4 * 256], vec![0.25f32; 4 * 256]);
    let ok = ExpertEpilogue::new(
        &shape,
        Activation::SwigluClamped,
        p.clone(),
        Some(b1.clone()),
        Some(b2.clone()),
    )
    .unwrap();
    assert_eq!(ok.gemm1_bias(&shape, 3, 127), Some((0.5, 0.5)));
    assert_eq!(ok.gemm2_bias(&shape, 3, 255), Some(0.25));
    let e = |a, p: Vec<ActivationParams>, b1: Option<Vec<f32>>, b2: Option<Vec<f32>>| {
        ExpertEpilogue::new(&shape, a, p, b1, b2).unwrap_err()
    };
    // One parameter set per local expert, none for an activation that reads none.
    assert!(matches!(
        e(Activation::SwigluClamped, p[..3].to_vec(), None, None),
        RuntimeError::BufferLength { what: "activation parameters", expected: 4, actual: 3 }
    ));
    assert!(matches!(
        e(Activation::GegluTanh, p.clone(), None, None),
        RuntimeError::BufferLength { what: "activation parameters", expected: 0, .. }
    ));
    let zero = vec![ActivationParams { limit: 0.0, ..ActivationParams::GPT_OSS }; 4];
    assert!(matches!(
        e(Activation::SwigluClamped, zero, None, None),
        RuntimeError::BadScale { what: "activation limit", .. }
    ));
    assert!(matches!(
        e(Activation::Swiglu, vec![], Some(b1[1..].to_vec()), None),
        RuntimeError::BufferLength { what: "GEMM1 bias", .. }
    ));
    let mut nan = b2.clone();
    nan[7] = f32::NAN;
    assert!(matches!(
        e(Activation::Swiglu, vec![], None, Some(nan)),
        RuntimeError::NonFinite { what: "GEMM2 bias" }
    ));
}
