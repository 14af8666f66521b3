//! The benchmark's synthetic data: MXFP4 weights with a trained layer's magnitudes, inputs per
//! token count, and the folder of `.npy`/`.npz` files the peer runner reads.

use super::*;
use crate::rng::Rng;
use moegen_dsl::epilogue_math::ActivationParams;

/// One matrix in MXFP4: packed E2M1 `[rows, cols/2]` and linear UE8M0 scales `[rows, cols/32]`.
#[derive(Clone, Debug)]
pub struct MxMatrix {
    /// Packed values.
    pub packed: Vec<u8>,
    /// Scale codes.
    pub scales: Vec<u8>,
}

/// One expert's MXFP4 weights.
#[derive(Clone, Debug)]
pub struct MxExpert {
    /// `[I, H]`.
    pub up: MxMatrix,
    /// `[I, H]`.
    pub gate: MxMatrix,
    /// `[H, I]`.
    pub down: MxMatrix,
}

/// Random codes whose values have the magnitude of a trained layer's: e2m1 codes uniform,
/// scale codes within 2 of 2^(−log2 √K − 1), so each output of a K-long dot is O(1).
fn mx_matrix(r: &mut Rng, rows: usize, cols: usize) -> MxMatrix {
    let centre = 127 - ((cols as f64).sqrt().log2().round() as i64 + 1);
    let packed = (0..rows * cols / 2).map(|_| r.next() as u8).collect();
    let scales =
        (0..rows * cols / 32).map(|_| (centre - 2 + (r.next() % 5) as i64) as u8).collect();
    MxMatrix { packed, scales }
}

/// Synthetic MXFP4 weights for the shape's local experts.
pub fn synth_weights(shape: &BenchShape, seed: u64) -> Vec<MxExpert> {
    let (h, i) = (shape.hidden, shape.intermediate);
    (0..shape.local_experts)
        .map(|e| {
            let mut r = Rng((seed ^ 0x9E37_79B9_7F4A_7C15).wrapping_add(e as u64 * 7919).max(1));
            MxExpert {
                up: mx_matrix(&mut r, i, h),
                gate: mx_matrix(&mut r, i, h),
                down: mx_matrix(&mut r, h, i),
            }
        })
        .collect()
}

/// One token count's inputs.
#[derive(Clone, Debug)]
pub struct Inputs {
    /// Tokens.
    pub tokens: usize,
    /// `[N, H]` bf16.
    pub x: Vec<bf16>,
    /// `[N, K]` distinct global expert ids per token.
    pub ids: Vec<i32>,
    /// `[N, K]` router weights (positive, summing to 1 per token).
    pub weights: Vec<f32>,
}

/// Inputs for `tokens` tokens.
pub fn synth_inputs(shape: &BenchShape, tokens: usize, seed: u64) -> Inputs {
    let (h, k, e) = (shape.hidden, shape.top_k, shape.experts);
    let mut r = Rng((seed ^ tokens as u64).wrapping_mul(0x2545_F491_4F6C_DD1D).max(1));
    let x = (0..tokens * h).map(|_| bf16::from_f32(r.normal())).collect();
    let mut ids = Vec::with_capacity(tokens * k);
    let mut weights = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let mut chosen: Vec<i32> = Vec::with_capacity(k);
        while chosen.len() < k {
            let c = (r.next() % e as u64) as i32;
            if !chosen.contains(&c) {
                chosen.push(c);
            }
        }
        let raw: Vec<f32> =
            (0..k).map(|_| 0.05 + (r.next() >> 40) as f32 / (1u64 << 24) as f32).collect();
        let sum: f32 = raw.iter().sum();
        ids.extend(chosen);
        weights.extend(raw.iter().map(|w| w / sum));
    }
    Inputs { tokens, x, ids, weights }
}

/// A shape with its synthetic weights and inputs: what one folder holds.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The shape and its token counts.
    pub shape: BenchShape,
    /// MXFP4 weights of the local experts.
    pub weights: Vec<MxExpert>,
    /// One input per token count.
    pub inputs: Vec<Inputs>,
    /// The seed everything came from.
    pub seed: u64,
}

impl Workload {
    /// Synthesizes weights and inputs for `shape`.
    pub fn synth(shape: BenchShape, seed: u64) -> Self {
        let weights = synth_weights(&shape, seed);
        let inputs = shape.tokens.iter().map(|&n| synth_inputs(&shape, n, seed)).collect();
        Self { shape, weights, inputs, seed }
    }
    /// Writes the folder contract into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), BenchError> {
        write_inputs(dir, &self.shape, &self.weights, &self.inputs, self.seed)
    }
}

pub(super) fn bytes<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

/// The folder contract's `inputs.json`, per-token-count `.npy` files and the MXFP4 weight
/// `.npz` files (W1's rows in moegen's order: up and gate in blocks of 64).
pub fn write_inputs(
    dir: &Path,
    shape: &BenchShape,
    weights: &[MxExpert],
    inputs: &[Inputs],
    seed: u64,
) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| BenchError::Io { path: dir.to_path_buf(), source })?;
    let (h, i, l, k) = (shape.hidden, shape.intermediate, shape.local_experts, shape.top_k);
    let mut cases = Vec::new();
    for inp in inputs {
        let n = inp.tokens;
        let arr = |dtype, shape: Vec<usize>, bytes| Array { dtype, shape, bytes };
        write_npy(
            &dir.join(format!("x_{n}.npy")),
            &arr(Dtype::U16, vec![n, h], bytes(&inp.x, |v| v.to_bits().to_le_bytes())),
        )?;
        write_npy(
            &dir.join(format!("ids_{n}.npy")),
            &arr(Dtype::I32, vec![n, k], bytes(&inp.ids, i32::to_le_bytes)),
        )?;
        write_npy(
            &dir.join(format!("w_{n}.npy")),
            &arr(Dtype::F32, vec![n, k], bytes(&inp.weights, f32::to_le_bytes)),
        )?;
        cases.push(serde_json::json!({
            "tokens": n, "ids": format!("ids_{n}.npy"), "weights": format!("w_{n}.npy"), "x": format!("x_{n}.npy")
        }));
    }
    // W1 rows: for each block b of 64, up rows 64b.. then gate rows 64b...
    let (mut w1v, mut w1s, mut w2v, mut w2s) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let blk = SWIGLU_INTERLEAVE;
    for ex in weights {
        for b in 0..i / blk {
            for m in [&ex.up, &ex.gate] {
                w1v.extend_from_slice(&m.packed[b * blk * h / 2..(b + 1) * blk * h / 2]);
                w1s.extend_from_slice(&m.scales[b * blk * h / 32..(b + 1) * blk * h / 32]);
            }
        }
        w2v.extend_from_slice(&ex.down.packed);
        w2s.extend_from_slice(&ex.down.scales);
    }
    let u8s = |shape: Vec<usize>, bytes| Array { dtype: Dtype::U8, shape, bytes };
    write_npz(
        &dir.join("w1_mxfp4.npz"),
        &[
            ("values", u8s(vec![l, 2 * i, h / 2], w1v)),
            ("scales", u8s(vec![l, 2 * i, h / 32], w1s)),
        ],
    )?;
    write_npz(
        &dir.join("w2_mxfp4.npz"),
        &[("values", u8s(vec![l, h, i / 2], w2v)), ("scales", u8s(vec![l, h, i / 32], w2s))],
    )?;
    let json = serde_json::json!({
        "shape": {
            "hidden": h, "intermediate": i, "experts": shape.experts,
            "local_experts": l, "expert_offset": shape.expert_offset, "top_k": k
        },
        "cases": cases,
        "seed": seed,
    });
    let path = dir.join("inputs.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)
        .map_err(|source| BenchError::Io { path, source })
}

/// The epilogue data of `spec` for a benchmark layer: gpt-oss's (α, β, limit) for every
/// expert and biases drawn N(0, 0.1²) (GEMM1's) and N(0, 0.01²) (GEMM2's) from a fixed seed,
/// so every run and every variant sees the same values.
pub fn synth_epilogue(
    shape: &MoeShape,
    spec: EpilogueSpec,
) -> Result<ExpertEpilogue, moegen_runtime::RuntimeError> {
    let (l, h, i) = (shape.local_experts(), shape.hidden, shape.intermediate);
    let mut r = Rng(0x6770_745f_6f73_7321);
    let params =
        if spec.activation.has_params() { vec![ActivationParams::GPT_OSS; l] } else { Vec::new() };
    let b1 = spec.gemm1_bias.then(|| (0..l * 2 * i).map(|_| 0.1 * r.normal()).collect());
    let b2 = spec.gemm2_bias.then(|| (0..l * h).map(|_| 0.01 * r.normal()).collect());
    ExpertEpilogue::new(shape, spec.activation, params, b1, b2)
}
