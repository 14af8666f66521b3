//! Loading experts from safetensors checkpoints (gpt-oss MXFP4, ModelOpt NVFP4): files
//! written here from random weights, loaded, checked against the test's own decoding of the
//! files' tensors, run through the CPU reference against the f64 oracle, and every refusal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::bf16;
use moegen_dsl::epilogue_math::ActivationParams;
use moegen_dsl::formats::{
    MxScaleRule, block_amax, e2m1_to_f32, e4m3_to_f32, nvfp4_global_scale, quantize_mxfp4,
    quantize_nvfp4, ue8m0_to_f32,
};
use moegen_dsl::{Activation, ActivationFormat, FinalizeMode, SwigluInput, TileSize};
use moegen_runtime::RuntimeError;
use moegen_runtime::checkpoint_files::{GptOssExperts, ModelOptNvfp4Experts, SafetensorsFiles};
use moegen_runtime::reference::*;
use moegen_runtime::routing::ExpertWindow;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

mod common;
use common::Rng;

/// H, I, experts in the files, tokens, the layer the files hold.
const H: usize = 128;
const I: usize = 64;
const E: usize = 6;
const TOKENS: usize = 24;
const LAYER: usize = 1;

/// The local window the layer checks load: global experts 2, 3, 4.
fn shape() -> MoeShape {
    MoeShape::new(H, I, ExpertWindow::new(E, 2, 3, 2).unwrap()).unwrap()
}

/// A file's tensors by name: dtype, shape, little-endian bytes.
type Tensors = BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)>;

fn dir(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("checkpoint_files").join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(path: &Path, t: &Tensors) {
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// Writes `t` as one file of directory `test` and opens it.
fn open(test: &str, t: &Tensors) -> SafetensorsFiles {
    let path = dir(test).join("model.safetensors");
    write(&path, t);
    SafetensorsFiles::open(&[path]).unwrap()
}

/// Random weights of one expert: `up`, `gate` `[I, H]`, `down` `[H, I]`, with a per-expert
/// magnitude so that experts' scales differ.
fn expert_weights(r: &mut Rng, e: usize) -> [Vec<f32>; 3] {
    let s = (1.0 + e as f32 * 0.37) / (H as f32).sqrt();
    let up = (0..I * H).map(|_| r.normal() * s).collect();
    let gate = (0..I * H).map(|_| r.normal() * s * 0.8).collect();
    let down = (0..H * I).map(|_| r.normal() / (I as f32).sqrt()).collect();
    [up, gate, down]
}

fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| bf16::from_f32(x).to_le_bytes()).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|&x| x.to_le_bytes()).collect()
}

// ---- The test's own decoding of the files' tensors (independent of the loader). ----------

/// Element `k` of packed E2M1 bytes: two codes a byte, the even element in the low nibble.
fn e2m1_at(bytes: &[u8], k: usize) -> f32 {
    e2m1_to_f32((bytes[k / 2] >> (4 * (k % 2))) & 0xF)
}

/// gpt-oss: experts `e` of the file as f32 `(up [I, H], gate [I, H], down [H, I])`, read from
/// the 4-D `[E, 2I, H/32, 16]` blocks: rows 2j are gate row j, rows 2j + 1 up row j.
fn decode_gpt_oss(t: &Tensors, e: usize) -> [Vec<f32>; 3] {
    let p = format!("model.layers.{LAYER}.mlp.experts.");
    let get = |n: &str| &t[&format!("{p}{n}")].2;
    let (gb, gs, db, ds) = (
        get("gate_up_proj_blocks"),
        get("gate_up_proj_scales"),
        get("down_proj_blocks"),
        get("down_proj_scales"),
    );
    let value = |blocks: &[u8], scales: &[u8], rows: usize, cols: usize, r: usize, c: usize| {
        let (groups, b, j) = (cols / 32, c / 32, c % 32);
        let byte = blocks[((e * rows + r) * groups + b) * 16 + j / 2];
        let code = (byte >> (4 * (j % 2))) & 0xF;
        e2m1_to_f32(code) * ue8m0_to_f32(scales[(e * rows + r) * groups + b])
    };
    let (mut up, mut gate) = (Vec::with_capacity(I * H), Vec::with_capacity(I * H));
    for row in 0..I {
        for c in 0..H {
            gate.push(value(gb, gs, 2 * I, H, 2 * row, c));
            up.push(value(gb, gs, 2 * I, H, 2 * row + 1, c));
        }
    }
    let down = (0..H * I).map(|k| value(db, ds, H, I, k / I, k % I)).collect();
    [up, gate, down]
}

/// The gpt-oss biases of expert `e` as f32: `(up [I], gate [I], down [H])`.
fn decode_gpt_oss_biases(t: &Tensors, e: usize) -> [Vec<f32>; 3] {
    let p = format!("model.layers.{LAYER}.mlp.experts.");
    let b = |n: &str, k: usize| {
        let bytes = &t[&format!("{p}{n}")].2;
        bf16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]]).to_f32()
    };
    let up = (0..I).map(|j| b("gate_up_proj_bias", e * 2 * I + 2 * j + 1)).collect();
    let gate = (0..I).map(|j| b("gate_up_proj_bias", e * 2 * I + 2 * j)).collect();
    let down = (0..H).map(|j| b("down_proj_bias", e * H + j)).collect();
    [up, gate, down]
}

/// ModelOpt: projection `proj` of expert `e` as f32, `e2m1 · weight_scale · weight_scale_2`.
fn decode_modelopt(t: &Tensors, e: usize, proj: &str, rows: usize, cols: usize) -> Vec<f32> {
    let p = format!("model.layers.{LAYER}.mlp.experts.{e}.{proj}.");
    let get = |n: &str| &t[&format!("{p}{n}")].2;
    let (w, s, s2) = (get("weight"), get("weight_scale"), get("weight_scale_2"));
    let ws2 = f64::from(f32::from_le_bytes(s2[..4].try_into().unwrap()));
    (0..rows * cols)
        .map(|k| {
            let sf = f64::from(e4m3_to_f32(s[k / 16]));
            (f64::from(e2m1_at(w, k)) * sf * ws2) as f32
        })
        .collect()
}

fn modelopt_scalar(t: &Tensors, e: usize, proj: &str, name: &str) -> f32 {
    let b = &t[&format!("model.layers.{LAYER}.mlp.experts.{e}.{proj}.{name}")].2;
    f32::from_le_bytes(b[..4].try_into().unwrap())
}

// ---- Writing the two layouts. --------------------------------------------------------------

/// A gpt-oss layer of `E` experts from random weights (MXFP4-quantized), random biases.
fn gpt_oss_file(seed: u64) -> Tensors {
    let mut r = Rng(seed);
    let (mut gu_b, mut gu_s, mut d_b, mut d_s) = (vec![], vec![], vec![], vec![]);
    let (mut gu_bias, mut d_bias) = (vec![], vec![]);
    for e in 0..E {
        let [up, gate, down] = expert_weights(&mut r, e);
        let mx =
            |v: &[f32], rows, cols| quantize_mxfp4(v, rows, cols, MxScaleRule::NoClip).unwrap();
        let (up, gate, down) = (mx(&up, I, H), mx(&gate, I, H), mx(&down, H, I));
        for j in 0..I {
            for m in [&gate, &up] {
                gu_b.extend_from_slice(&m.packed[j * H / 2..(j + 1) * H / 2]);
                gu_s.extend_from_slice(&m.scales[j * H / 32..(j + 1) * H / 32]);
            }
        }
        d_b.extend_from_slice(&down.packed);
        d_s.extend_from_slice(&down.scales);
        gu_bias.extend((0..2 * I).map(|_| r.normal() * 0.1));
        d_bias.extend((0..H).map(|_| r.normal() * 0.1));
    }
    let p = format!("model.layers.{LAYER}.mlp.experts.");
    let mut t = Tensors::new();
    t.insert(format!("{p}gate_up_proj_blocks"), (Dtype::U8, vec![E, 2 * I, H / 32, 16], gu_b));
    t.insert(format!("{p}gate_up_proj_scales"), (Dtype::U8, vec![E, 2 * I, H / 32], gu_s));
    t.insert(format!("{p}gate_up_proj_bias"), (Dtype::BF16, vec![E, 2 * I], bf16_bytes(&gu_bias)));
    t.insert(format!("{p}down_proj_blocks"), (Dtype::U8, vec![E, H, I / 32, 16], d_b));
    t.insert(format!("{p}down_proj_scales"), (Dtype::U8, vec![E, H, I / 32], d_s));
    t.insert(format!("{p}down_proj_bias"), (Dtype::BF16, vec![E, H], bf16_bytes(&d_bias)));
    // Tensors of other layers and modules are ignored.
    t.insert(
        "model.layers.0.mlp.router.weight".into(),
        (Dtype::F32, vec![2], f32_bytes(&[1.0, 2.0])),
    );
    t
}

/// Input scales of the ModelOpt file: `x_amax / (6 · 448)` times a factor ≤ 1 per expert
/// and projection, exactly 1 for local expert 3's up (the max over the window), 4 for
/// non-local expert 5 (ignored: only the window's experts are read).
fn input_scale_factor(e: usize, proj: &str) -> f32 {
    match (e, proj) {
        (3, "up_proj") | (4, "down_proj") => 1.0,
        (5, _) => 4.0,
        _ => 0.5 + 0.1 * e as f32,
    }
}

/// A ModelOpt NVFP4 layer of `E` experts from random weights: gate and up share
/// `weight_scale_2 = max(amax) / (6 · 448)`, down has its own; `input_scale`s from the
/// activations' and GEMM1 outputs' amax (`x_amax`, `h_amax`).
fn modelopt_file(seed: u64, x_amax: f32, h_amax: f32) -> Tensors {
    let mut r = Rng(seed);
    let mut t = Tensors::new();
    for e in 0..E {
        let [up, gate, down] = expert_weights(&mut r, e);
        let ug = block_amax(&up).max(block_amax(&gate)) / 2688.0;
        let d = block_amax(&down) / 2688.0;
        for (proj, v, rows, cols, ws2) in [
            ("up_proj", &up, I, H, ug),
            ("gate_proj", &gate, I, H, ug),
            ("down_proj", &down, H, I, d),
        ] {
            let q = quantize_nvfp4(v, rows, cols, 1.0 / ws2).unwrap();
            let p = format!("model.layers.{LAYER}.mlp.experts.{e}.{proj}.");
            t.insert(format!("{p}weight"), (Dtype::U8, vec![rows, cols / 2], q.packed));
            // One expert's down stores its E4M3 codes as U8 (accepted too).
            let sd = if (e, proj) == (3, "down_proj") { Dtype::U8 } else { Dtype::F8_E4M3 };
            t.insert(format!("{p}weight_scale"), (sd, vec![rows, cols / 16], q.scales));
            // Scalars as shape [] and (expert 4) [1].
            let sshape = if e == 4 { vec![1] } else { vec![] };
            t.insert(format!("{p}weight_scale_2"), (Dtype::F32, sshape.clone(), f32_bytes(&[ws2])));
            let amax = if proj == "down_proj" { h_amax } else { x_amax };
            let is = amax / 2688.0 * input_scale_factor(e, proj);
            t.insert(format!("{p}input_scale"), (Dtype::F32, sshape, f32_bytes(&[is])));
        }
    }
    // Shared experts and other layers are other prefixes.
    t.insert(
        format!("model.layers.{LAYER}.mlp.shared_experts.up_proj.input_scale"),
        (Dtype::F32, vec![], f32_bytes(&[1.0])),
    );
    t.insert(
        "model.layers.0.mlp.experts.9.up_proj.input_scale".into(),
        (Dtype::F32, vec![], f32_bytes(&[1.0])),
    );
    t
}

// ---- The layer: activations, routing, the oracle. ------------------------------------------

struct Batch {
    x: Vec<f32>,
    routing: Routing,
}

fn batch(seed: u64) -> Batch {
    let mut r = Rng(seed);
    let x: Vec<f32> = (0..TOKENS * H).map(|_| bf16::from_f32(r.normal()).to_f32()).collect();
    let mut experts = Vec::with_capacity(TOKENS * 2);
    let mut weights = Vec::with_capacity(TOKENS * 2);
    for _ in 0..TOKENS {
        let a = (r.next() % E as u64) as usize;
        let b = (a + 1 + (r.next() % (E as u64 - 1)) as usize) % E;
        experts.extend([a as i32, b as i32]);
        let w = 0.2 + (r.next() % 1000) as f32 / 1000.0 * 0.6;
        weights.extend([w, 1.0 - w]);
    }
    Batch { x, routing: Routing { tokens: TOKENS, experts, weights } }
}

/// The local experts' decoded weights stacked `[L, I, H]`, `[L, I, H]`, `[L, H, I]`.
fn stack(per_expert: &[[Vec<f32>; 3]]) -> [Vec<f32>; 3] {
    let mut out = [vec![], vec![], vec![]];
    for w in per_expert {
        for (o, v) in out.iter_mut().zip(w) {
            o.extend_from_slice(v);
        }
    }
    out
}

/// max |up·x ⊙ silu(gate·x)| over every token and expert: GEMM1's output amax.
fn h_amax(x: &[f32], per_expert: &[[Vec<f32>; 3]]) -> f32 {
    let mut amax = 0f32;
    for [up, gate, _] in per_expert {
        for t in 0..x.len() / H {
            let xt = &x[t * H..(t + 1) * H];
            for j in 0..I {
                let dot = |w: &[f32]| {
                    w[j * H..(j + 1) * H].iter().zip(xt).map(|(a, b)| a * b).sum::<f32>()
                };
                let (u, g) = (dot(up), dot(gate));
                amax = amax.max((u * g / (1.0 + (-g).exp())).abs());
            }
        }
    }
    amax
}

/// The NVFP4 activations' values, decoded here: `e2m1 · scale / global_scale`.
fn dequantized(a: &Nvfp4Activations) -> Vec<f32> {
    (0..a.tokens * a.hidden)
        .map(|k| e2m1_at(&a.packed, k) * e4m3_to_f32(a.scales[k / 16]) / a.global_scale)
        .collect()
}

fn to_f64(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| f64::from(x.to_f32())).collect()
}

// ---- gpt-oss. ----------------------------------------------------------------------------

#[test]
fn gpt_oss_experts_load_to_the_values_written() {
    let t = gpt_oss_file(7);
    let files = open("gpt_oss_values", &t);
    let shape = shape();
    let loaded = GptOssExperts::load(&files, LAYER, &shape).unwrap();
    assert_eq!((loaded.layer, loaded.first_expert), (LAYER, 2));
    assert_eq!((loaded.experts.len(), loaded.biases.len()), (3, 3));
    // The loaded matrices in moegen's layout (rows of packed codes, linear scales per 32)
    // decode to exactly the file's values.
    let decode = |packed: &[u8], scales: &[u8], rows: usize, cols: usize| -> Vec<f32> {
        (0..rows * cols)
            .map(|k| {
                e2m1_at(packed, k)
                    * ue8m0_to_f32(scales[(k / cols) * (cols / 32) + (k % cols) / 32])
            })
            .collect()
    };
    for (l, (x, b)) in loaded.experts.iter().zip(&loaded.biases).enumerate() {
        let [up, gate, down] = decode_gpt_oss(&t, 2 + l);
        assert_eq!((x.up.rows, x.up.cols, x.down.rows, x.down.cols), (I, H, H, I));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&decode(&x.up.packed, &x.up.scales, I, H)), bits(&up), "up of {l}");
        assert_eq!(bits(&decode(&x.gate.packed, &x.gate.scales, I, H)), bits(&gate), "gate of {l}");
        assert_eq!(bits(&decode(&x.down.packed, &x.down.scales, H, I)), bits(&down), "down of {l}");
        // The same through the format crate's own dequantization.
        assert_eq!(bits(&x.up.dequantize()), bits(&up));
        let [bu, bg, bd] = decode_gpt_oss_biases(&t, 2 + l);
        assert_eq!((&b.up, &b.gate, &b.down), (&bu, &bg, &bd), "biases of {l}");
    }
    // Borrowed as the import types: linear layout, the owned bytes.
    let tensors = loaded.tensors();
    assert_eq!(tensors.len(), 3);
    assert_eq!(tensors[1].gate.packed, loaded.experts[1].gate.packed.as_slice());
    assert_eq!(tensors[1].down.layout, CheckpointScales::Linear);
}

#[test]
fn gpt_oss_experts_run_the_layer_like_the_oracle() {
    let t = gpt_oss_file(21);
    let files = open("gpt_oss_layer", &t);
    let shape = shape();
    let loaded = GptOssExperts::load(&files, LAYER, &shape).unwrap();
    let tensors = loaded.tensors();
    // The oracle from the test's own decoding of the file, first without the epilogue.
    let per_expert: Vec<_> = (2..5).map(|e| decode_gpt_oss(&t, e)).collect();
    let [up, gate, down] = stack(&per_expert);
    let b = batch(5);
    let oracle = oracle_moe(&shape, &b.x, &up, &gate, &down, &b.routing).unwrap();
    let gs_x = nvfp4_global_scale(block_amax(&b.x)).unwrap();
    let gs_h = nvfp4_global_scale(h_amax(&b.x, &per_expert)).unwrap();
    // Hopper: MXFP4 kept MXFP4, bf16 activations: only bf16 roundings of h and the output.
    let xb: Vec<bf16> = b.x.iter().map(|&v| bf16::from_f32(v)).collect();
    let w = Sm90Weights::from_mxfp4(&shape, &tensors, ActivationFormat::Bf16, gs_x, gs_h).unwrap();
    let a16 = |w: &Sm90Weights| {
        let (tile, glu, det) = (TileSize::T64, SwigluInput::F32, FinalizeMode::Deterministic);
        moe_reference_sm90(&shape, &xb, gs_x, w, &b.routing, tile.into(), glu, det).unwrap().output
    };
    let err16 = relative_l2_error(&to_f64(&a16(&w)), &oracle);
    // Blackwell: MXFP4 converted exactly to NVFP4, NVFP4 activations and h.
    let prepared = import_mxfp4(&shape, &tensors, gs_x, gs_h).unwrap();
    let acts = quantize_activations(&b.x, TOKENS, H, gs_x).unwrap();
    let opts = ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
    let run4 = moe_reference(&shape, &acts, &prepared, &b.routing, TileSize::T128, opts).unwrap();
    let err4 = relative_l2_error(&to_f64(&run4.output), &oracle);
    // The same oracle on the activations as quantized: what is left is h's requantization.
    let oracle_q = oracle_moe(&shape, &dequantized(&acts), &up, &gate, &down, &b.routing).unwrap();
    let err4q = relative_l2_error(&to_f64(&run4.output), &oracle_q);
    eprintln!(
        "gpt-oss layout vs the oracle: SM90 A16 {err16:.5}, SM100 A4 {err4:.5} ({err4q:.5} on the quantized activations)"
    );
    assert!(err16 < 0.01, "SM90 A16 vs oracle {err16}");
    assert!(err4 < 0.25 && err4q < 0.15, "SM100 A4 vs oracle {err4}, {err4q}");

    // gpt-oss's own epilogue on Hopper: clamped SwiGLU and the file's biases, against the
    // oracle given the biases as this test decodes them from the file.
    let params = ActivationParams::GPT_OSS;
    let ep = loaded.epilogue(&shape, params).unwrap();
    let (mut b1, mut b2) = (Vec::new(), Vec::new());
    for e in 2..5 {
        let [bu, bg, bd] = decode_gpt_oss_biases(&t, e);
        b1.extend(bu.iter().chain(&bg));
        b2.extend(bd);
    }
    let own =
        ExpertEpilogue::new(&shape, Activation::SwigluClamped, vec![params; 3], Some(b1), Some(b2))
            .unwrap();
    assert_eq!(ep, own, "the loader's epilogue is the file's biases, de-interleaved");
    let oracle_ep = oracle_moe_epilogue(&shape, &b.x, &up, &gate, &down, &b.routing, &own).unwrap();
    assert!(relative_l2_error(&oracle_ep, &oracle) > 0.05, "the epilogue matters here");
    let w = w.with_epilogue(&shape, ep).unwrap();
    let err_ep = relative_l2_error(&to_f64(&a16(&w)), &oracle_ep);
    assert!(err_ep < 0.01, "SM90 A16 with gpt-oss's epilogue vs oracle {err_ep}");
}

fn gpt_err(test: &str, t: &Tensors, shape: &MoeShape) -> RuntimeError {
    let files = open(test, t);
    GptOssExperts::load(&files, LAYER, shape).unwrap_err()
}

fn gpt_name(n: &str) -> String {
    format!("model.layers.{LAYER}.mlp.experts.{n}")
}

#[test]
fn gpt_oss_refusals_name_the_tensor() {
    let base = gpt_oss_file(3);
    let shape = shape();
    let named = |e: &RuntimeError, n: &str| assert!(e.to_string().contains(n), "{e} names {n}");

    // Missing.
    let mut t = base.clone();
    t.remove(&gpt_name("down_proj_bias"));
    let e = gpt_err("gpt_missing", &t, &shape);
    assert_eq!(e, RuntimeError::MissingTensor { tensor: gpt_name("down_proj_bias") });
    named(&e, &gpt_name("down_proj_bias"));

    // Wrong dtype: scales as I8, a bias as F16.
    let mut t = base.clone();
    t.get_mut(&gpt_name("gate_up_proj_scales")).unwrap().0 = Dtype::I8;
    let e = gpt_err("gpt_dtype_scales", &t, &shape);
    assert_eq!(
        e,
        RuntimeError::TensorDtype {
            tensor: gpt_name("gate_up_proj_scales"),
            expected: "U8 or F8_E8M0",
            actual: "I8".into()
        }
    );
    named(&e, &gpt_name("gate_up_proj_scales"));
    let mut t = base.clone();
    t.get_mut(&gpt_name("gate_up_proj_bias")).unwrap().0 = Dtype::F16;
    let e = gpt_err("gpt_dtype_bias", &t, &shape);
    assert!(
        matches!(&e, RuntimeError::TensorDtype { tensor, .. } if *tensor == gpt_name("gate_up_proj_bias")),
        "{e}"
    );

    // Wrong shape: the same bytes seen as [E, H, I/32 · 2, 8].
    let mut t = base.clone();
    t.get_mut(&gpt_name("down_proj_blocks")).unwrap().1 = vec![E, H, I / 16, 8];
    let e = gpt_err("gpt_shape", &t, &shape);
    assert_eq!(
        e,
        RuntimeError::TensorShape {
            tensor: gpt_name("down_proj_blocks"),
            expected: vec![E, H, I / 32, 16],
            actual: vec![E, H, I / 16, 8],
        }
    );
    named(&e, &gpt_name("down_proj_blocks"));

    // A NaN UE8M0 code (0xFF) in local expert 3 (row 5, block 1), reported at its index in
    // the whole tensor; the same code in expert 0, outside the window, is never read.
    let mut t = base.clone();
    let at = (3 * 2 * I + 5) * (H / 32) + 1;
    t.get_mut(&gpt_name("gate_up_proj_scales")).unwrap().2[at] = 0xFF;
    let e = gpt_err("gpt_nan_scale", &t, &shape);
    assert_eq!(
        e,
        RuntimeError::TensorScaleCode {
            tensor: gpt_name("gate_up_proj_scales"),
            offset: at,
            code: 0xFF,
            reason: "NaN"
        }
    );
    named(&e, &gpt_name("gate_up_proj_scales"));
    let mut t = base.clone();
    let at = 7 * (I / 32);
    t.get_mut(&gpt_name("down_proj_scales")).unwrap().2[at + 4 * H * (I / 32)] = 0xFF;
    let e = gpt_err("gpt_nan_down_scale", &t, &shape);
    assert!(
        matches!(&e, RuntimeError::TensorScaleCode { offset, .. } if *offset == at + 4 * H * (I / 32)),
        "{e}"
    );
    let mut t = base.clone();
    t.get_mut(&gpt_name("down_proj_scales")).unwrap().2[at] = 0xFF;
    assert!(GptOssExperts::load(&open("gpt_nan_outside", &t), LAYER, &shape).is_ok());

    // A NaN bias.
    let mut t = base.clone();
    let at = 4 * H + 9;
    t.get_mut(&gpt_name("down_proj_bias")).unwrap().2[2 * at..2 * at + 2]
        .copy_from_slice(&bf16::NAN.to_le_bytes());
    let e = gpt_err("gpt_nan_bias", &t, &shape);
    assert_eq!(e, RuntimeError::TensorNonFinite { tensor: gpt_name("down_proj_bias"), offset: at });

    // The window past the file's experts: a model of 8 experts, window 4..8, a file of 6.
    let wide = MoeShape::new(H, I, ExpertWindow::new(8, 4, 4, 2).unwrap()).unwrap();
    let e = gpt_err("gpt_window", &base, &wide);
    assert_eq!(
        e,
        RuntimeError::ExpertWindowOutsideFile {
            tensor: gpt_name("gate_up_proj_blocks"),
            offset: 4,
            local: 4,
            file_experts: E,
        }
    );
    named(&e, &gpt_name("gate_up_proj_blocks"));
    // Inside the file's experts, but the shape says 8 where the file holds 6.
    let other = MoeShape::new(H, I, ExpertWindow::new(8, 0, 2, 2).unwrap()).unwrap();
    let e = gpt_err("gpt_count", &base, &other);
    assert_eq!(
        e,
        RuntimeError::ExpertCount {
            tensor: gpt_name("gate_up_proj_blocks"),
            expected: 8,
            actual: E
        }
    );

    // Another layer: its tensors are missing.
    let files = open("gpt_layer", &base);
    let e = GptOssExperts::load(&files, 0, &shape).unwrap_err();
    assert!(
        matches!(&e, RuntimeError::MissingTensor { tensor } if tensor.starts_with("model.layers.0.mlp.experts.")),
        "{e}"
    );

    // H not a multiple of MXFP4's 32.
    let odd = MoeShape::new(H + 16, I, shape.window).unwrap();
    let e = GptOssExperts::load(&files, LAYER, &odd).unwrap_err();
    assert!(matches!(e, RuntimeError::Plan(_)), "{e}");
}

// ---- ModelOpt NVFP4. -----------------------------------------------------------------------

/// The ModelOpt file of the tests, with input scales from a batch's true amax.
fn modelopt_setup(seed: u64) -> (Tensors, Batch) {
    let b = batch(seed + 1);
    // Decode a first version of the file to get GEMM1's output amax for the input scales
    // (the weights do not depend on them).
    let t0 = modelopt_file(seed, 1.0, 1.0);
    let per_expert: Vec<_> = (0..E).map(|e| modelopt_decoded(&t0, e)).collect();
    let t = modelopt_file(seed, block_amax(&b.x), h_amax(&b.x, &per_expert));
    (t, b)
}

fn modelopt_decoded(t: &Tensors, e: usize) -> [Vec<f32>; 3] {
    [
        decode_modelopt(t, e, "up_proj", I, H),
        decode_modelopt(t, e, "gate_proj", I, H),
        decode_modelopt(t, e, "down_proj", H, I),
    ]
}

#[test]
fn modelopt_experts_load_to_the_values_written() {
    let (t, _) = modelopt_setup(40);
    // Two shards, the window's experts split between them.
    let d = dir("modelopt_values");
    let (a, b): (Tensors, Tensors) = t.clone().into_iter().partition(|(n, _)| {
        n.split('.').nth(5).and_then(|id| id.parse::<usize>().ok()).is_some_and(|id| id < 3)
    });
    write(&d.join("model-00001-of-00002.safetensors"), &a);
    write(&d.join("model-00002-of-00002.safetensors"), &b);
    std::fs::write(d.join("model.safetensors.index.json"), "{}").unwrap();
    let files = SafetensorsFiles::open_dir(&d).unwrap();
    assert_eq!(files.paths().len(), 2);
    assert_eq!(files.len(), t.len());
    assert_eq!(
        files.dtype(&format!("model.layers.{LAYER}.mlp.experts.3.down_proj.weight_scale")),
        Some("U8".into())
    );
    let shape = shape();
    let loaded = ModelOptNvfp4Experts::load(&files, LAYER, &shape).unwrap();
    assert_eq!((loaded.layer, loaded.first_expert, loaded.experts.len()), (LAYER, 2, 3));
    for (l, x) in loaded.experts.iter().enumerate() {
        let e = 2 + l;
        for (m, proj, rows, cols) in
            [(&x.up, "up_proj", I, H), (&x.gate, "gate_proj", I, H), (&x.down, "down_proj", H, I)]
        {
            assert_eq!((m.rows, m.cols), (rows, cols));
            // e2m1 · scale is exact: the loaded codes are the file's.
            let p = format!("model.layers.{LAYER}.mlp.experts.{e}.{proj}.");
            let (w, s) = (&t[&format!("{p}weight")].2, &t[&format!("{p}weight_scale")].2);
            for k in 0..rows * cols {
                let file = e2m1_at(w, k) * e4m3_to_f32(s[k / 16]);
                let got = m.scaled_element(k / cols, k % cols).unwrap();
                assert_eq!(got.to_bits(), file.to_bits(), "expert {e} {proj} element {k}");
            }
            // moegen's global scale is 1 / weight_scale_2: 1/g returns weight_scale_2 to
            // within one rounding of each reciprocal.
            let ws2 = modelopt_scalar(&t, e, proj, "weight_scale_2");
            assert_eq!(m.global_scale, 1.0 / ws2);
            assert!((f64::from(1.0 / m.global_scale) / f64::from(ws2) - 1.0).abs() < 3e-7);
            // So the values decode to the file's to within that rounding.
            let mine = decode_modelopt(&t, e, proj, rows, cols);
            for (a, b) in m.dequantize().iter().zip(&mine) {
                assert!((a - b).abs() <= b.abs() * 3.6e-7, "expert {e} {proj}: {a} vs {b}");
            }
        }
        let s = &loaded.input_scales[l];
        assert_eq!(s.up, modelopt_scalar(&t, e, "up_proj", "input_scale"));
        assert_eq!(s.gate, modelopt_scalar(&t, e, "gate_proj", "input_scale"));
        assert_eq!(s.down, modelopt_scalar(&t, e, "down_proj", "input_scale"));
    }
    // One activation scale: 1 / the window's max of gate/up input_scale (expert 3's up);
    // expert 5's larger scales are outside the window.
    assert_eq!(loaded.input_scale(), 1.0 / modelopt_scalar(&t, 3, "up_proj", "input_scale"));
    assert_eq!(loaded.fc2_input_scale(), 1.0 / modelopt_scalar(&t, 4, "down_proj", "input_scale"));
    // Over the whole layer: expert 5's scales are the largest.
    let (gs_x, gs_h) = ModelOptNvfp4Experts::model_input_scales(&files, LAYER, &shape).unwrap();
    assert_eq!(gs_x, 1.0 / modelopt_scalar(&t, 5, "up_proj", "input_scale"));
    assert_eq!(gs_h, 1.0 / modelopt_scalar(&t, 5, "down_proj", "input_scale"));
    let tensors = loaded.tensors();
    assert_eq!(tensors.len(), 3);
    assert_eq!(tensors[2].down.global_scale, loaded.experts[2].down.global_scale);
    assert_eq!(tensors[0].up.scales, loaded.experts[0].up.scales.as_slice());
}

#[test]
fn modelopt_experts_run_the_layer_like_the_oracle() {
    let (t, b) = modelopt_setup(60);
    let files = open("modelopt_layer", &t);
    let shape = shape();
    let loaded = ModelOptNvfp4Experts::load(&files, LAYER, &shape).unwrap();
    let per_expert: Vec<_> = (2..5).map(|e| modelopt_decoded(&t, e)).collect();
    let [up, gate, down] = stack(&per_expert);
    let oracle = oracle_moe(&shape, &b.x, &up, &gate, &down, &b.routing).unwrap();
    let (gs_x, gs_h) = (loaded.input_scale(), loaded.fc2_input_scale());
    let prepared = import_nvfp4(&shape, &loaded.tensors(), gs_x, gs_h).unwrap();
    assert_eq!(prepared.fc2_input_scale, gs_h);
    let acts = quantize_activations(&b.x, TOKENS, H, gs_x).unwrap();
    let opts = ReferenceOptions { finalize: FinalizeMode::Deterministic, ..Default::default() };
    let run = moe_reference(&shape, &acts, &prepared, &b.routing, TileSize::T128, opts).unwrap();
    let err = relative_l2_error(&to_f64(&run.output), &oracle);
    let oracle_q = oracle_moe(&shape, &dequantized(&acts), &up, &gate, &down, &b.routing).unwrap();
    let errq = relative_l2_error(&to_f64(&run.output), &oracle_q);
    eprintln!(
        "ModelOpt layout vs the oracle: SM100 A4 {err:.5} ({errq:.5} on the quantized activations)"
    );
    assert!(err < 0.25 && errq < 0.15, "SM100 A4 vs oracle {err}, {errq}");
    // Hopper, bf16 activations, from the same import.
    let w = Sm90Weights::from_prepared(&shape, &prepared, ActivationFormat::Bf16).unwrap();
    let xb: Vec<bf16> = b.x.iter().map(|&v| bf16::from_f32(v)).collect();
    let run = moe_reference_sm90(
        &shape,
        &xb,
        gs_x,
        &w,
        &b.routing,
        TileSize::T64.into(),
        SwigluInput::F32,
        FinalizeMode::Deterministic,
    )
    .unwrap();
    let err16 = relative_l2_error(&to_f64(&run.output), &oracle);
    eprintln!("ModelOpt layout vs the oracle: SM90 A16 {err16:.5}");
    assert!(err16 < 0.01, "SM90 A16 vs oracle {err16}");
}

fn mo_name(e: usize, proj: &str, n: &str) -> String {
    format!("model.layers.{LAYER}.mlp.experts.{e}.{proj}.{n}")
}

fn mo_err(test: &str, t: &Tensors, shape: &MoeShape) -> RuntimeError {
    let files = open(test, t);
    ModelOptNvfp4Experts::load(&files, LAYER, shape).unwrap_err()
}

#[test]
fn modelopt_refusals_name_the_tensor() {
    let base = modelopt_file(80, 4.0, 2.0);
    let shape = shape();
    let named = |e: &RuntimeError, n: &str| assert!(e.to_string().contains(n), "{e} names {n}");

    // Missing.
    let mut t = base.clone();
    let n = mo_name(3, "up_proj", "weight_scale_2");
    t.remove(&n);
    let e = mo_err("mo_missing", &t, &shape);
    assert_eq!(e, RuntimeError::MissingTensor { tensor: n.clone() });
    named(&e, &n);

    // Wrong dtype: E5M2 block scales, a BF16 input scale.
    let mut t = base.clone();
    let n = mo_name(2, "gate_proj", "weight_scale");
    t.get_mut(&n).unwrap().0 = Dtype::F8_E5M2;
    let e = mo_err("mo_dtype", &t, &shape);
    assert_eq!(
        e,
        RuntimeError::TensorDtype {
            tensor: n.clone(),
            expected: "F8_E4M3 or U8",
            actual: "F8_E5M2".into()
        }
    );
    named(&e, &n);
    let mut t = base.clone();
    let n = mo_name(4, "down_proj", "input_scale");
    *t.get_mut(&n).unwrap() = (Dtype::BF16, vec![], bf16_bytes(&[0.5]));
    let e = mo_err("mo_dtype_scalar", &t, &shape);
    assert_eq!(e, RuntimeError::TensorDtype { tensor: n, expected: "F32", actual: "BF16".into() });

    // Wrong shape: a weight's rows and columns swapped, a scalar of two elements.
    let mut t = base.clone();
    let n = mo_name(2, "down_proj", "weight");
    t.get_mut(&n).unwrap().1 = vec![I / 2, H];
    let e = mo_err("mo_shape", &t, &shape);
    assert_eq!(
        e,
        RuntimeError::TensorShape {
            tensor: n.clone(),
            expected: vec![H, I / 2],
            actual: vec![I / 2, H]
        }
    );
    named(&e, &n);
    let mut t = base.clone();
    let n = mo_name(3, "gate_proj", "weight_scale_2");
    *t.get_mut(&n).unwrap() = (Dtype::F32, vec![2], f32_bytes(&[1.0, 1.0]));
    let e = mo_err("mo_shape_scalar", &t, &shape);
    assert_eq!(e, RuntimeError::TensorShape { tensor: n, expected: vec![], actual: vec![2] });

    // NaN E4M3 codes (0x7F, 0xFF) and a negative one, at their index in the tensor.
    for (k, (code, reason)) in
        [(0x7F, "NaN"), (0xFF, "NaN"), (0x90, "negative (NVFP4 block scales are unsigned)")]
            .into_iter()
            .enumerate()
    {
        let mut t = base.clone();
        let n = mo_name(4, "up_proj", "weight_scale");
        let at = 3 * (H / 16) + 2 + k;
        t.get_mut(&n).unwrap().2[at] = code;
        let e = mo_err(&format!("mo_scale_code_{k}"), &t, &shape);
        assert_eq!(
            e,
            RuntimeError::TensorScaleCode { tensor: n.clone(), offset: at, code, reason }
        );
        named(&e, &n);
    }

    // A zero, a NaN, an infinite scalar scale.
    for (k, (which, v)) in
        [("input_scale", 0.0), ("weight_scale_2", f32::NAN), ("input_scale", f32::INFINITY)]
            .into_iter()
            .enumerate()
    {
        let mut t = base.clone();
        let n = mo_name(2, "down_proj", which);
        t.get_mut(&n).unwrap().2 = f32_bytes(&[v]);
        let e = mo_err(&format!("mo_bad_scalar_{k}"), &t, &shape);
        assert!(
            matches!(&e, RuntimeError::TensorScale { tensor, value } if *tensor == n && value.to_bits() == v.to_bits()),
            "{e}"
        );
        named(&e, &n);
    }

    // Up and gate of expert 3 with different weight_scale_2: GEMM1 applies one.
    let mut t = base.clone();
    let (nu, ng) =
        (mo_name(3, "up_proj", "weight_scale_2"), mo_name(3, "gate_proj", "weight_scale_2"));
    let up = modelopt_scalar(&t, 3, "up_proj", "weight_scale_2");
    t.get_mut(&ng).unwrap().2 = f32_bytes(&[up * 1.5]);
    let e = mo_err("mo_global_scales", &t, &shape);
    assert_eq!(
        e,
        RuntimeError::CheckpointGlobalScales {
            expert: 3,
            up: nu.clone(),
            up_value: up,
            gate: ng.clone(),
            gate_value: up * 1.5
        }
    );
    named(&e, &nu);
    named(&e, &ng);

    // The window past the file's experts (a model of 8, window 4..8, a file of 6).
    let wide = MoeShape::new(H, I, ExpertWindow::new(8, 4, 4, 2).unwrap()).unwrap();
    let e = mo_err("mo_window", &base, &wide);
    assert_eq!(
        e,
        RuntimeError::ExpertWindowOutsideFile {
            tensor: mo_name(6, "gate_proj", "weight"),
            offset: 4,
            local: 4,
            file_experts: E,
        }
    );
    named(&e, &mo_name(6, "gate_proj", "weight"));
    // A file of more experts than the shape's 4.
    let narrow = MoeShape::new(H, I, ExpertWindow::new(4, 0, 2, 2).unwrap()).unwrap();
    let e = mo_err("mo_count", &base, &narrow);
    assert_eq!(
        e,
        RuntimeError::ExpertCount {
            tensor: mo_name(5, "down_proj", "input_scale"),
            expected: 4,
            actual: E
        }
    );
    // Fewer experts than the model, the window inside: an expert-parallel rank's shards.
    let mut t = base.clone();
    t.retain(|n, _| !n.contains(".experts.5."));
    let files = open("mo_rank_shards", &t);
    assert!(ModelOptNvfp4Experts::load(&files, LAYER, &shape).is_ok());
    // ... whose scales over the whole layer cannot be had from them.
    let e = ModelOptNvfp4Experts::model_input_scales(&files, LAYER, &shape).unwrap_err();
    assert_eq!(e, RuntimeError::MissingTensor { tensor: mo_name(5, "gate_proj", "input_scale") });
    // A hole in the window: the missing tensor named.
    let mut t = base.clone();
    t.retain(|n, _| !n.contains(".experts.3.down_proj."));
    let e = mo_err("mo_hole", &t, &shape);
    assert_eq!(e, RuntimeError::MissingTensor { tensor: mo_name(3, "down_proj", "weight") });
}

#[test]
fn files_that_cannot_be_read_are_refused_naming_them() {
    let d = dir("bad_files");
    let t = modelopt_file(90, 1.0, 1.0);
    let good = d.join("a.safetensors");
    write(&good, &t);
    // The same tensors in two files.
    let twice = d.join("b.safetensors");
    write(&twice, &t);
    let e = SafetensorsFiles::open(&[&good, &twice]).unwrap_err();
    assert!(
        matches!(&e, RuntimeError::DuplicateTensor { second, .. } if second.ends_with("b.safetensors")),
        "{e}"
    );
    // Truncated: the header describes more data than the file holds.
    let bytes = std::fs::read(&good).unwrap();
    let cut = d.join("cut.safetensors");
    std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
    let e = SafetensorsFiles::open(&[&cut]).unwrap_err();
    assert!(
        matches!(&e, RuntimeError::CheckpointFile { path, .. } if path.ends_with("cut.safetensors")),
        "{e}"
    );
    // Not a safetensors file at all, and a file that does not exist.
    let junk = d.join("junk.safetensors");
    std::fs::write(&junk, b"\x10\0\0\0\0\0\0\0not json at all!").unwrap();
    let e = SafetensorsFiles::open(&[&junk]).unwrap_err();
    assert!(
        matches!(&e, RuntimeError::CheckpointFile { path, .. } if path.ends_with("junk.safetensors")),
        "{e}"
    );
    let e = SafetensorsFiles::open(&[d.join("absent.safetensors")]).unwrap_err();
    assert!(matches!(&e, RuntimeError::CheckpointFile { .. }), "{e}");
    // A directory without safetensors files.
    let empty = dir("bad_files_empty");
    assert!(matches!(SafetensorsFiles::open_dir(&empty), Err(RuntimeError::CheckpointFile { .. })));
}
