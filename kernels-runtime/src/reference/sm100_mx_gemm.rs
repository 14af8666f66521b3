//! The SM100 MXFP8 × MXFP4 layer on the CPU (docs/reference.md, "SM100 MXFP8 × MXFP4"):
//! GEMM1 with the per-MMA (K = 32) accumulation of [`super::mx_dot`], the unfolded epilogue
//! (α1 cannot fold into a power-of-two scale), h requantized to MXFP8 per 32 columns;
//! GEMM2 the same dot on h, then the NVFP4 path's per-route value and finalize.

use half::bf16;
use moegen_dsl::TileSize;
use moegen_dsl::epilogue_math::{gemm2_value, round_to_bf16};
use moegen_dsl::formats::{MXFP8_BLOCK, Scale128x4, quantize_mxfp8_block};
use moegen_dsl::plan::{MoeShape, SWIGLU_INTERLEAVE};

use super::ReferenceOptions;
use super::gemm1::{Gemm1Options, check_sort};
use super::gemm2::{Routing, finalize};
use super::mx_dot::{E2m1Row, E4m3Row, mx_dot};
use super::par::par_map;
use super::sm90::{h_of, rows_by_expert};
use super::sm100_mx::{
    Sm100MxWeights, mx_padded_k, sm100_mx_w1_scale_layout, sm100_mx_w2_scale_layout,
};
use super::sm100_mx_activations::Mxfp8Activations;
use crate::error::{Result, RuntimeError, check_len};
use crate::routing::{SortOutputs, moe_sort_router};

/// GEMM1's output: MXFP8 h over the permuted rows, GEMM2's input.
#[derive(Clone, Debug, PartialEq)]
pub struct Sm100MxGemm1Output {
    /// Permuted rows (max_tiles · T).
    pub rows: usize,
    /// I.
    pub cols: usize,
    /// `[rows, I]` E4M3 codes; padding rows zero.
    pub codes: Vec<u8>,
    /// 128x4 UE8M0 codes of `[rows, Kp(I)/32]` ([`sm100_mx_h_scale_layout`]); padding rows,
    /// blocks past I and the layout's padding zero.
    pub scales: Vec<u8>,
    /// The layout of `scales`.
    pub scale_layout: Scale128x4,
}

/// The 128x4 layout of h's scales over `rows` permuted rows: `[rows, Kp(I)/32]`.
pub fn sm100_mx_h_scale_layout(shape: &MoeShape, rows: usize) -> Result<Scale128x4> {
    Ok(Scale128x4::new(rows, mx_padded_k(shape.intermediate)? / MXFP8_BLOCK)?)
}

/// One expert's `rows` weight rows of `k` columns decoded from the kernel layout (packed
/// rows of Kp/2 bytes, one 128x4 block per expert).
fn decode_rows(
    packed: &[u8],
    scales: &[u8],
    layout: &Scale128x4,
    expert: usize,
    rows: usize,
    k: usize,
) -> Result<Vec<E2m1Row>> {
    let row_bytes = mx_padded_k(k)? / 2;
    let (base, sbase) = (expert * rows * row_bytes, expert * layout.bytes());
    let rows: Vec<usize> = (0..rows).collect();
    Ok(par_map(&rows, |&r| {
        let codes = &packed[base + r * row_bytes..base + (r + 1) * row_bytes];
        let s = (0..k / MXFP8_BLOCK).map(|c| layout.offset(r, c).map_or(0, |o| scales[sbase + o]));
        E2m1Row::decode(codes, s, k)
    }))
}

fn check_activations(shape: &MoeShape, x: &Mxfp8Activations) -> Result<()> {
    if x.hidden != shape.hidden {
        return Err(RuntimeError::BufferLength {
            what: "MXFP8 activation width",
            expected: shape.hidden,
            actual: x.hidden,
        });
    }
    x.validate()
}

/// GEMM1's h in f32 before its MXFP8 requantization, `[permuted rows, I]` (padding rows +0):
/// per valid row p (token t, expert e) and column j, the dots of x's row t with W1's up and
/// gate rows (ReLU²: row j alone), then `pre_activation(α1[e], acc, bias)`, optionally
/// rounded to bf16 (`SwigluInput::Bf16`), then the activation of the recipe (the NVFP4
/// reference's unfolded form, `h_of`).
pub fn sm100_mx_gemm1_h(
    shape: &MoeShape,
    x: &Mxfp8Activations,
    w: &Sm100MxWeights,
    sort: &SortOutputs,
    options: impl Into<Gemm1Options>,
) -> Result<Vec<f32>> {
    let opts = options.into();
    let (h, i, k) = (shape.hidden, shape.intermediate, shape.top_k());
    w.validate(shape)?;
    check_activations(shape, x)?;
    check_sort(shape, sort, x.tokens)?;
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let activation = w.epilogue.spec().activation;
    let (w1_rows, gated) = (activation.w1_rows(i), activation.gated());
    let l1 = sm100_mx_w1_scale_layout(shape, activation)?;
    let cols = x.scale_cols()?;
    let mut values = vec![0f32; rows * i];
    for (e, members) in rows_by_expert(sort, rows, k) {
        let w1 = decode_rows(&w.w1, &w.w1_scales, &l1, e, w1_rows, h)?;
        let out = par_map(&members, |&[_, t, _]| {
            let xs = x.scales[t * cols..(t + 1) * cols].iter().copied();
            let xrow = E4m3Row::decode(&x.codes[t * h..(t + 1) * h], xs, h);
            (0..i)
                .map(|j| {
                    // ReLU²: row j is the only pre-activation; the gate is never read.
                    let (up, gate) = if gated {
                        let up_row =
                            (j / SWIGLU_INTERLEAVE) * 2 * SWIGLU_INTERLEAVE + j % SWIGLU_INTERLEAVE;
                        (mx_dot(&xrow, &w1[up_row]), mx_dot(&xrow, &w1[up_row + SWIGLU_INTERLEAVE]))
                    } else {
                        (mx_dot(&xrow, &w1[j]), 0.0)
                    };
                    h_of(shape, &w.epilogue, e, j, w.alpha1[e], up, gate, opts)
                })
                .collect::<Vec<f32>>()
        });
        for (&[row, _, _], vals) in members.iter().zip(out) {
            values[row * i..(row + 1) * i].copy_from_slice(&vals);
        }
    }
    Ok(values)
}

/// GEMM1 for every valid permuted row: [`sm100_mx_gemm1_h`], then each 32 columns of a valid
/// row quantized with `quantize_mxfp8_block` (padding rows keep zero codes and scales).
pub fn sm100_mx_gemm1_reference(
    shape: &MoeShape,
    x: &Mxfp8Activations,
    w: &Sm100MxWeights,
    sort: &SortOutputs,
    options: impl Into<Gemm1Options>,
) -> Result<Sm100MxGemm1Output> {
    let hf = sm100_mx_gemm1_h(shape, x, w, sort, options)?;
    let (i, k) = (shape.intermediate, shape.top_k());
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let layout = sm100_mx_h_scale_layout(shape, rows)?;
    let mut out = Sm100MxGemm1Output {
        rows,
        cols: i,
        codes: vec![0; rows * i],
        scales: vec![0; layout.bytes()],
        scale_layout: layout,
    };
    for row in (0..rows).filter(|&r| sort.route_of_row(r, k).is_some()) {
        for (c, block) in hf[row * i..(row + 1) * i].chunks_exact(MXFP8_BLOCK).enumerate() {
            let (codes, scale) = quantize_mxfp8_block(block);
            let at = row * i + c * MXFP8_BLOCK;
            out.codes[at..at + MXFP8_BLOCK].copy_from_slice(&codes);
            if let Some(o) = layout.offset(row, c) {
                out.scales[o] = scale;
            }
        }
    }
    Ok(out)
}

/// GEMM2 per route: the dot of h's row p with W2 row n over K = I, then
/// `bf16(gemm2_value(acc, α2[e], router weight, bias))`, `[N·k, H]` (zero for routes to
/// experts outside the window).
pub fn sm100_mx_gemm2_contributions(
    shape: &MoeShape,
    h_in: &Sm100MxGemm1Output,
    w: &Sm100MxWeights,
    sort: &SortOutputs,
    routing: &Routing,
) -> Result<Vec<f32>> {
    let (hid, i, k) = (shape.hidden, shape.intermediate, shape.top_k());
    w.validate(shape)?;
    let routes = routing.tokens.checked_mul(k).ok_or(RuntimeError::from(
        moegen_dsl::plan::PlanError::Overflow { what: "tokens × top_k" },
    ))?;
    check_len("router weights", routing.weights.len(), routes)?;
    crate::routing::check_router_weights(&routing.weights, k)?;
    check_sort(shape, sort, routing.tokens)?;
    let rows = sort.permuted_idx_to_expanded_idx.len();
    check_len("GEMM1 output rows", h_in.rows, rows)?;
    check_len("GEMM1 output columns", h_in.cols, i)?;
    check_len("GEMM1 output codes", h_in.codes.len(), rows * i)?;
    let layout = sm100_mx_h_scale_layout(shape, rows)?;
    if h_in.scale_layout != layout {
        return Err(RuntimeError::UnsupportedActivations {
            what: "GEMM1 output scale layout",
            reason: "GEMM2 reads h's scales as the 128x4 layout of [rows, Kp(I)/32]",
        });
    }
    check_len("GEMM1 output scales", h_in.scales.len(), layout.bytes())?;
    let l2 = sm100_mx_w2_scale_layout(shape)?;
    let mut contrib = vec![0f32; routes * hid];
    for (e, members) in rows_by_expert(sort, rows, k) {
        let w2 = decode_rows(&w.w2, &w.w2_scales, &l2, e, hid, i)?;
        let out = par_map(&members, |&[row, token, slot]| {
            let s =
                (0..i / MXFP8_BLOCK).map(|c| layout.offset(row, c).map_or(0, |o| h_in.scales[o]));
            let arow = E4m3Row::decode(&h_in.codes[row * i..(row + 1) * i], s, i);
            let rw = routing.weights[token * k + slot];
            (0..hid)
                .map(|n| {
                    let bias = w.epilogue.gemm2_bias(shape, e, n);
                    round_to_bf16(gemm2_value(mx_dot(&arow, &w2[n]), w.alpha2[e], rw, bias))
                })
                .collect::<Vec<f32>>()
        });
        for (&[_, token, slot], vals) in members.iter().zip(out) {
            let at = (token * k + slot) * hid;
            contrib[at..at + hid].copy_from_slice(&vals);
        }
    }
    Ok(contrib)
}

/// Every intermediate of one SM100 MX reference run.
#[derive(Clone, Debug, PartialEq)]
pub struct Sm100MxReferenceRun {
    /// Routing sort outputs.
    pub sort: SortOutputs,
    /// GEMM1's MXFP8 output.
    pub gemm1: Sm100MxGemm1Output,
    /// Each route's contribution `[N·k, H]` (before the finalize sums them).
    pub contributions: Vec<f32>,
    /// `[tokens, H]` output.
    pub output: Vec<bf16>,
}

/// The whole SM100 MXFP8 × MXFP4 layer on the CPU: the routing sort (`moe_sort_router`),
/// GEMM1, GEMM2 and the finalize of `opts.finalize`.
pub fn moe_reference_sm100_mx(
    shape: &MoeShape,
    x: &Mxfp8Activations,
    w: &Sm100MxWeights,
    routing: &Routing,
    tile: TileSize,
    opts: ReferenceOptions,
) -> Result<Sm100MxReferenceRun> {
    check_len("routing tokens", routing.tokens, x.tokens)?;
    let sort = moe_sort_router(&routing.experts, routing.tokens, &shape.window, tile)?;
    let g1 = Gemm1Options { swiglu_input: opts.swiglu_input, recipe: opts.recipe };
    let gemm1 = sm100_mx_gemm1_reference(shape, x, w, &sort, g1)?;
    let contributions = sm100_mx_gemm2_contributions(shape, &gemm1, w, &sort, routing)?;
    let output =
        finalize(&contributions, routing.tokens, shape.top_k(), shape.hidden, opts.finalize)?;
    Ok(Sm100MxReferenceRun { sort, gemm1, contributions, output })
}
