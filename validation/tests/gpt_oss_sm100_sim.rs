//! A gpt-oss-20b-shaped layer on the simulated SM100 (NVFP4 weights × NVFP4 activations,
//! and from the checkpoint also MXFP4 weights × MXFP8 activations, `kind::mxf8f6f4`):
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
    LayerCase, Problem, RoutePattern, builtin_with_epilogue, check_tactics_in, problem,
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
    let case = LayerCase::new(
        shape,
        6,
        ActivationFormat::Nvfp4,
        WeightFormat::Nvfp4,
        FinalizeMode::Deterministic,
        2880,
        RoutePattern::Spread,
    )
    .with_epilogue(spec);
    let p = problem(case).unwrap();
    runs_bit_for_bit(&p, &tactics, 0.3);
}

/// Runs `tactics` (with gpt-oss's SM100 GEMMs, generated here) on `p` through `MoeLayer` in
/// the simulator: each runs, and every row equals the SM100 reference bit for bit, within
/// `oracle_bound` (relative L2) of the f64 oracle.
fn runs_bit_for_bit(p: &Problem, tactics: &[MoeTactic], oracle_bound: f64) {
    let gemms: Vec<_> = tactics.iter().flat_map(|t| [*t.gemm1(), *t.gemm2()]).collect();
    let (format, activations) = (p.case.format, p.case.activations);
    let set = builtin_with_epilogue(&gemms, EpilogueSpec::GPT_OSS, "sm_100f", |b| {
        b.format(format).activations(activations)
    })
    .unwrap();
    let mut sim = SimBackend::new().with_sm_count(8);
    let rows = check_tactics_in(&mut sim, p, None, &set).unwrap();
    for t in tactics {
        assert!(rows.iter().any(|r| r.tactic == t.to_string()), "{t} did not run");
    }
    for r in &rows {
        assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
        assert_eq!(r.elements, p.case.tokens * p.case.shape.hidden, "{}", r.tactic);
        assert!(r.reference_vs_oracle < oracle_bound, "{}: {}", r.tactic, r.reference_vs_oracle);
    }
}

/// A file removed when dropped.
struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        // Nothing to report if it is already gone.
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A small deterministic generator (splitmix64) for the checkpoint's bytes.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A value in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

const E: usize = 32;
const LOCAL: std::ops::Range<usize> = 4..8;
const HI: usize = 2880;

/// One expert's stacked gpt-oss tensors' bytes: `[rows, cols/32, 16]` codes and `[rows,
/// cols/32]` UE8M0 scales (2^-10 … 2^-8: unit-scale pre-activations at K = 2880).
fn mxfp4_rows(r: &mut Bytes, rows: usize, cols: usize) -> (Vec<u8>, Vec<u8>) {
    let codes = (0..rows * cols / 2).map(|_| r.next() as u8).collect();
    let scales = (0..rows * cols / 32).map(|_| 117 + (r.next() % 3) as u8).collect();
    (codes, scales)
}

/// gpt-oss's element `(row, col)` of an expert's stacked `[rows, cols]` tensor, decoded by
/// this test: E2M1 code (element 2j in the low nibble) × 2^(scale − 127).
fn decode(codes: &[u8], scales: &[u8], cols: usize, row: usize, col: usize) -> f32 {
    let byte = codes[(row * cols + col) / 2];
    let code = (byte >> (4 * (col % 2))) & 0xF;
    moegen_dsl::formats::e2m1_to_f32(code)
        * moegen_dsl::formats::ue8m0_to_f32(scales[(row * cols + col) / 32])
}

/// gpt-oss-20b's layer shape (H = I = 2880, 32 experts, top 4) from a safetensors file in
/// gpt-oss's published layout (`gate_up_proj_blocks` with gate and up interleaved by row,
/// UE8M0 scales, bf16 biases), loaded by `GptOssExperts`, converted exactly to NVFP4
/// (`import_mxfp4`) and run through `MoeLayer` on the simulated SM100 with gpt-oss's
/// epilogue (α 1.702, β 1, limit 7, both biases): bit for bit the SM100 CPU reference, and
/// near the f64 oracle built from this test's own decoding of the file; then the same file
/// kept MXFP4 with MXFP8 activations (`Sm100MxWeights`), bit for bit its own reference.
#[test]
fn a_gpt_oss_checkpoint_runs_on_sm100_bit_for_bit() {
    use half::bf16;
    use moegen_dsl::epilogue_math::ActivationParams;
    use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
    use moegen_runtime::checkpoint_files::{GptOssExperts, SafetensorsFiles};
    use moegen_runtime::reference::{ExpertEpilogue, Routing, import_mxfp4, oracle_moe_epilogue};
    use moegen_validation::layer_check::FC2_INPUT_SCALE;
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;

    let (h, i) = (HI, HI);
    let shape =
        MoeShape::new(h, i, ExpertWindow::new(E, LOCAL.start, LOCAL.len(), 4).unwrap()).unwrap();
    let mut r = Bytes(0x6770_742d_6f73);
    // The window's experts random; the others zero (never read).
    let (mut gu_b, mut gu_s, mut d_b, mut d_s) = (vec![], vec![], vec![], vec![]);
    for e in 0..E {
        if LOCAL.contains(&e) {
            let (b, s) = mxfp4_rows(&mut r, 2 * i, h);
            gu_b.extend(b);
            gu_s.extend(s);
            let (b, s) = mxfp4_rows(&mut r, h, i);
            d_b.extend(b);
            d_s.extend(s);
        } else {
            gu_b.extend(vec![0u8; 2 * i * h / 2]);
            gu_s.extend(vec![127u8; 2 * i * h / 32]);
            d_b.extend(vec![0u8; h * i / 2]);
            d_s.extend(vec![127u8; h * i / 32]);
        }
    }
    let gu_bias: Vec<bf16> = (0..E * 2 * i).map(|_| bf16::from_f32(0.2 * r.unit())).collect();
    let d_bias: Vec<bf16> = (0..E * h).map(|_| bf16::from_f32(0.02 * r.unit())).collect();
    let le = |v: &[bf16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let (gu_bias_b, d_bias_b) = (le(&gu_bias), le(&d_bias));
    let p = "model.layers.7.mlp.experts.";
    let tensors: Vec<(String, TensorView<'_>)> = [
        ("gate_up_proj_blocks", Dtype::U8, vec![E, 2 * i, h / 32, 16], &gu_b),
        ("gate_up_proj_scales", Dtype::U8, vec![E, 2 * i, h / 32], &gu_s),
        ("gate_up_proj_bias", Dtype::BF16, vec![E, 2 * i], &gu_bias_b),
        ("down_proj_blocks", Dtype::U8, vec![E, h, i / 32, 16], &d_b),
        ("down_proj_scales", Dtype::U8, vec![E, h, i / 32], &d_s),
        ("down_proj_bias", Dtype::BF16, vec![E, h], &d_bias_b),
    ]
    .into_iter()
    .map(|(n, dt, shape, data)| (format!("{p}{n}"), TensorView::new(dt, shape, data).unwrap()))
    .collect();
    // The file (about 420 MB) is removed however the test ends.
    let path = TempFile(
        std::env::temp_dir()
            .join(format!("moegen-gpt-oss-sm100-{}.safetensors", std::process::id())),
    );
    std::fs::write(&path.0, safetensors::serialize(tensors, None).unwrap()).unwrap();
    let files = SafetensorsFiles::open(&[&path.0]).unwrap();
    let loaded = GptOssExperts::load(&files, 7, &shape).unwrap();
    drop(files);
    drop(path);

    // Tokens, routes (distinct experts, some outside the window) and the oracle's weights
    // from this test's own decoding: gate = even rows of gate_up, up = odd rows.
    let tokens = 6;
    let x: Vec<bf16> = (0..tokens * h).map(|_| bf16::from_f32(2.0 * r.unit())).collect();
    let mut experts = Vec::with_capacity(tokens * 4);
    for t in 0..tokens {
        // Two window experts and two others per token, distinct.
        let a = LOCAL.start + t % 4;
        let b = LOCAL.start + (t + 1 + t / 4) % 4;
        experts.extend([a as i32, b as i32, (12 + t) as i32, (20 + 2 * t) as i32]);
    }
    let weights = (0..tokens * 4).map(|j| 0.1 + 0.2 * (j % 4) as f32).collect();
    let routing = Routing { tokens, experts, weights };
    let (mut up, mut gate, mut down) = (vec![], vec![], vec![]);
    let (mut b1, mut b2) = (vec![], vec![]);
    for (li, e) in LOCAL.enumerate() {
        let (gb, gs) = (&gu_b[e * 2 * i * h / 2..], &gu_s[e * 2 * i * h / 32..]);
        let (db, ds) = (&d_b[e * h * i / 2..], &d_s[e * h * i / 32..]);
        for row in 0..i {
            gate.extend((0..h).map(|c| decode(gb, gs, h, 2 * row, c)));
            up.extend((0..h).map(|c| decode(gb, gs, h, 2 * row + 1, c)));
        }
        down.extend((0..h * i).map(|k| decode(db, ds, i, k / i, k % i)));
        let bias = |k: usize| gu_bias[e * 2 * i + k].to_f32();
        // moegen's GEMM1 bias: the expert's I up values, then its I gate values.
        b1.extend((0..i).map(|j| bias(2 * j + 1)));
        b1.extend((0..i).map(|j| bias(2 * j)));
        b2.extend((0..h).map(|j| d_bias[e * h + j].to_f32()));
        assert_eq!(li, e - LOCAL.start);
    }
    let params = ActivationParams::GPT_OSS;
    let own = ExpertEpilogue::new(
        &shape,
        moegen_dsl::Activation::SwigluClamped,
        vec![params; LOCAL.len()],
        Some(b1),
        Some(b2),
    )
    .unwrap();
    let epilogue = loaded.epilogue(&shape, params).unwrap();
    assert_eq!(epilogue, own, "the loader's biases are the file's, de-interleaved");
    let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
    let oracle = oracle_moe_epilogue(&shape, &xf, &up, &gate, &down, &routing, &own).unwrap();
    let input_scale = nvfp4_global_scale(block_amax(&xf)).unwrap();
    let prepared = import_mxfp4(&shape, &loaded.tensors(), input_scale, FC2_INPUT_SCALE)
        .unwrap()
        .with_epilogue(&shape, epilogue.clone())
        .unwrap();
    let case = LayerCase::new(
        shape,
        tokens,
        ActivationFormat::Nvfp4,
        WeightFormat::Nvfp4,
        FinalizeMode::Deterministic,
        0,
        RoutePattern::Spread,
    )
    .with_epilogue(EpilogueSpec::GPT_OSS);
    // The MXFP8 × MXFP4 leg takes the file's codes and scales as they are (no conversion).
    let mxfp4 = loaded
        .experts
        .iter()
        .map(|x| [&x.up, &x.gate, &x.down].map(|m| (m.packed.clone(), m.scales.clone())))
        .collect();
    let p = Problem { case, x, routing, input_scale, prepared, mxfp4, epilogue, oracle };
    // 1-CTA GEMM2 N 256 (12 blocks, the last 64 columns wide); 2-CTA GEMM1 N 128 (45
    // blocks) and GEMM2 N 128 in 2-wide clusters.
    let tactics = [tactic(128, 256, [256, 1]), tactic(256, 128, [128, 2])];
    runs_bit_for_bit(&p, &tactics, 0.25);
    // MXFP8 activations × the checkpoint's MXFP4 weights (`kind::mxf8f6f4`): E4M3 values
    // with a power-of-two scale per 32 are far finer than NVFP4's, so the oracle is nearer.
    let mx =
        LayerCase { activations: ActivationFormat::Mxfp8, format: WeightFormat::Mxfp4, ..p.case };
    let p = Problem { case: mx, ..p };
    runs_bit_for_bit(&p, &tactics, 0.06);
}
