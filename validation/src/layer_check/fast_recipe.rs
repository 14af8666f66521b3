//! Hopper's Fast recipe on a device that is not the simulator's model (docs/reference.md,
//! "Hopper's Fast recipe on hardware"). The only approximate operations of the layer are
//! GEMM1's MUFU `ex2`/`rcp`, so the check splits at GEMM1's output:
//!
//! 1. every element of the device's h (bf16, read back from the workspace) is the model's
//!    `bf16(h)`, or, where the model's f32 h lies within `ε_h·|h| + a` of a bf16 rounding
//!    boundary, the bf16 value on the other side of it (`a` covers results near the
//!    flush-to-zero threshold);
//! 2. the output is the reference's GEMM2 and finalize applied to the device's own h, bit for
//!    bit (or within the bulk reduce's order slack), as for the Exact recipe.
//!
//! ε_h = (2·d_e + 2·d_r + 8)·2^-24 with the H200's measured d_e = 2 (ex2) and d_r = 1 (rcp)
//! ulps from the model (the MUFU sweep, docs/validation.md).
//!
//! A tactic that splits K is another arithmetic (the ranks' partial sums round on their own):
//! its h is the model's h under its GEMM1 split, and its GEMM2 runs with its GEMM2 split.

use super::*;
use moegen_dsl::EpilogueRecipe;
use moegen_dsl::abi::Buffer;
use moegen_runtime::reference::{
    Gemm1Options, Sm90Gemm1Output, Sm90Tiling, SplitK, sm90_a8_gemm1_h, sm90_gemm1_h,
};
use moegen_runtime::routing::SortOutputs;

/// ex2's measured distance from the model, in ulps (H200, all 2^32 inputs).
pub const FAST_D_EX2: u32 = 2;
/// rcp's measured distance from the model, in ulps.
pub const FAST_D_RCP: u32 = 1;

/// ε_h: how far (relative) the device's f32 h may lie from the model's.
pub fn fast_epsilon_h() -> f64 {
    f64::from(2 * FAST_D_EX2 + 2 * FAST_D_RCP + 8) * 2f64.powi(-24)
}

/// The absolute part of the bound: results within the flush-to-zero range (|h| ≲ 2^-125·|up·
/// gate|; taken as 2^-100, far above it for |up·gate| < 2^25).
pub const FAST_ABS: f64 = 1.0 / (1u128 << 100) as f64;

/// How the device's h compares with the model's under the Fast recipe's tolerance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FastHCheck {
    /// h elements of valid rows compared.
    pub elements: usize,
    /// Equal to the model's bf16 bit for bit.
    pub identical: usize,
    /// Elements whose model value lies within the tolerance of a bf16 rounding boundary.
    pub at_risk: usize,
    /// At-risk elements the device wrote another value within the tolerance for (allowed).
    pub moved: usize,
    /// Elements outside the tolerance (a failure), including routes the device placed
    /// where the model has none.
    pub outside: usize,
}

/// The ends of the bf16 values the device may write for a model value `h`: every bf16
/// between them (inclusive) is within the tolerance; equal ends when `h` is not at risk.
pub fn fast_h_candidates(h: f32) -> (bf16, bf16) {
    if !h.is_finite() {
        let v = bf16::from_f32(h);
        return (v, v);
    }
    let d = f64::from(h).abs() * fast_epsilon_h() + FAST_ABS;
    // Through f32, each end pushed one f32 ulp outwards (the conversion may round it
    // inwards); `bf16::from_f64` does not round f64 values correctly to bf16.
    let lo = ((f64::from(h) - d) as f32).next_down();
    let hi = ((f64::from(h) + d) as f32).next_up();
    (bf16::from_f32(lo), bf16::from_f32(hi))
}

/// Compares the device's h rows (`gpu_h` `[device rows, I]`, `gpu_e2p` the device's
/// expanded → permuted map) with the model's f32 h (`model_h` `[reference rows, I]` in the
/// order of `ref_e2p`). Returns the classification and the device's h laid out in the
/// reference's row order (what GEMM2's reference then runs on).
pub fn compare_fast_h(
    model_h: &[f32],
    ref_e2p: &[i32],
    gpu_h: &[bf16],
    gpu_e2p: &[i32],
    inter: usize,
) -> (FastHCheck, Vec<bf16>) {
    let mut c = FastHCheck::default();
    let mut laid = vec![bf16::ZERO; model_h.len()];
    for (x, &want_row) in ref_e2p.iter().enumerate() {
        let got_row = gpu_e2p.get(x).copied().unwrap_or(-1);
        let (Ok(r), Ok(g)) = (usize::try_from(want_row), usize::try_from(got_row)) else {
            // A route only one side holds: every one of its elements is wrong.
            if (want_row >= 0) != (got_row >= 0) {
                c.elements += inter;
                c.outside += inter;
            }
            continue;
        };
        for j in 0..inter {
            c.elements += 1;
            let (Some(&h), Some(&got)) = (model_h.get(r * inter + j), gpu_h.get(g * inter + j))
            else {
                c.outside += 1;
                continue;
            };
            let want = bf16::from_f32(h);
            let (lo, hi) = fast_h_candidates(h);
            let risky = lo.to_bits() != hi.to_bits();
            c.at_risk += usize::from(risky);
            let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
            if same {
                c.identical += 1;
            } else if risky && lo.to_f32() <= got.to_f32() && got.to_f32() <= hi.to_f32() {
                // Within the interval: the bf16 across the boundary, or (for |h| so small that
                // the absolute term spans several bf16 values, e.g. a flushed result) any.
                c.moved += 1;
            } else {
                c.outside += 1;
            }
            if let Some(slot) = laid.get_mut(r * inter + j) {
                *slot = got;
            }
        }
    }
    (c, laid)
}

/// Reads `buffer` of the workspace back: its planned bytes.
fn download_buffer(
    b: &mut dyn Backend,
    ws: &Workspace,
    buffer: Buffer,
) -> Result<Vec<u8>, BackendError> {
    let plan = ws.plan().shared.iter().find(|p| p.buffer == buffer);
    match (ws.ptr(buffer), plan) {
        (Some(ptr), Some(p)) => b.download(ptr, p.bytes as usize),
        _ => Ok(Vec::new()),
    }
}

/// The case's weights as its Hopper GEMMs read them.
enum FastWeights {
    A16(Sm90Weights),
    A8(Sm90A8Weights),
}

/// What a case's Fast check needs from the CPU once per GEMM1 split: the weights and the
/// model's f32 h under that split, in the row order of `sort` (a tactic's tile only moves
/// rows; its GEMM1 split changes h's roundings).
pub(super) struct FastModel {
    sort: SortOutputs,
    h: Vec<f32>,
    weights: FastWeights,
}

/// The model's h of case `p` under the Fast recipe, with GEMM1's K split over `split1` CTAs
/// (the tactic's: the tolerance is derived from the h that tactic computes).
pub(super) fn fast_model(p: &Problem, split1: SplitK) -> Result<FastModel, LayerCheckError> {
    let c = &p.case;
    let (s, r) = (&c.shape, &p.routing);
    let e = |source| LayerCheckError::Reference { case: c.label(), source: Box::new(source) };
    let sort = moe_sort(&r.experts, r.tokens, &s.window, TileSize::T16).map_err(e)?;
    let (h, weights) = if c.activations == ActivationFormat::Fp8 {
        let w = p.sm90_a8_weights()?;
        let h = sm90_a8_gemm1_h(s, &p.x, &w, &sort, EpilogueRecipe::Fast, split1).map_err(e)?;
        (h, FastWeights::A8(w))
    } else {
        let w = p.sm90_weights()?;
        let acts =
            sm90_activations(&p.x, c.tokens, s.hidden, c.activations, p.input_scale).map_err(e)?;
        let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe: EpilogueRecipe::Fast };
        (sm90_gemm1_h(s, &acts, &w, &sort, opts, split1).map_err(e)?, FastWeights::A16(w))
    };
    Ok(FastModel { sort, h, weights })
}

/// Rows of `h` (in the order of the expanded → permuted map `from`) moved to the order of
/// `to`, a sort of `rows` rows; rows no route maps to stay zero.
fn relayout(h: &[bf16], from: &[i32], to: &[i32], rows: usize, inter: usize) -> Vec<bf16> {
    let mut out = vec![bf16::ZERO; rows * inter];
    for (&f, &t) in from.iter().zip(to) {
        if let (Ok(f), Ok(t)) = (usize::try_from(f), usize::try_from(t))
            && let (Some(src), Some(dst)) =
                (h.get(f * inter..(f + 1) * inter), out.get_mut(t * inter..(t + 1) * inter))
        {
            dst.copy_from_slice(src);
        }
    }
    out
}

/// The Fast-recipe row of one tactic's pass: the h check, and the reference output on the
/// device's own h with its contributions (for the finalize slack).
pub(super) struct FastPass {
    pub check: FastHCheck,
    pub want: Vec<bf16>,
    pub contrib: Vec<f32>,
}

/// After a pass of a Hopper Fast tactic of tiling `tiling`: checks the device's h against
/// `model` (the model of the tactic's GEMM1 split) and computes the reference's output on the
/// device's h with the tactic's GEMM2 split.
pub(super) fn fast_pass(
    b: &mut dyn Backend,
    p: &Problem,
    model: &FastModel,
    ws: &Workspace,
    tiling: Sm90Tiling,
) -> Result<FastPass, LayerCheckError> {
    let c = &p.case;
    let (s, r) = (&c.shape, &p.routing);
    let e = |source| LayerCheckError::Reference { case: c.label(), source: Box::new(source) };
    let be = |source| LayerCheckError::Backend { case: c.label(), source: Box::new(source) };
    let sort = moe_sort(&r.experts, r.tokens, &s.window, tiling.tile).map_err(e)?;
    let expanded = c.tokens * s.top_k();
    let e2p_bytes = download_buffer(b, ws, Buffer::ExpandedIdxToPermutedIdx).map_err(be)?;
    let gpu_e2p: Vec<i32> = e2p_bytes
        .chunks_exact(4)
        .take(expanded)
        .map(|v| i32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        .collect();
    let h_bytes = download_buffer(b, ws, Buffer::Gemm1OutputBf16).map_err(be)?;
    let gpu_h: Vec<bf16> = h_bytes
        .chunks_exact(2)
        .map(|v| bf16::from_bits(u16::from_le_bytes([v[0], v[1]])))
        .collect();
    let inter = s.intermediate;
    let model_e2p = &model.sort.expanded_idx_to_permuted_idx;
    let (check, laid) = compare_fast_h(&model.h, model_e2p, &gpu_h, &gpu_e2p, inter);
    // GEMM2's reference on the device's h, in this tactic's row order.
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let laid = relayout(&laid, model_e2p, &sort.expanded_idx_to_permuted_idx, rows, inter);
    let contrib = match &model.weights {
        FastWeights::A8(w) => sm90_a8_gemm2_contributions(s, &laid, w, &sort, r, tiling.gemm2),
        FastWeights::A16(w) => {
            let h = Sm90Gemm1Output { rows, cols: inter, values: laid };
            sm90_gemm2_contributions(s, &h, w, &sort, r, tiling.gemm2)
        }
    }
    .map_err(e)?;
    let want = finalize(&contrib, c.tokens, s.top_k(), s.hidden, c.finalize).map_err(e)?;
    Ok(FastPass { check, want, contrib })
}
