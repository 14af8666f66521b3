//! GEMM2 reference: FC2 on GEMM1's NVFP4 output, α2 · router weight, finalize into bf16.

use half::bf16;
use moegen_dsl::FinalizeMode;
use moegen_dsl::epilogue_math::{gemm2_value, round_to_bf16};

use super::exact_dot::{DecodedRow, block_scaled_dot};
use super::gemm1::{Gemm1Output, check_sort, decode_expert};
use super::weights::{PreparedWeights, validate_weights, w2_scale_layout};
use crate::error::{Result, check_len};
use crate::routing::SortOutputs;
use moegen_dsl::plan::MoeShape;

/// Router output for a batch: `[tokens, top_k]` global expert ids and weights.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// Tokens.
    pub tokens: usize,
    /// Global expert id per (token, slot).
    pub experts: Vec<i32>,
    /// Router weight per (token, slot).
    pub weights: Vec<f32>,
}

/// One route's contribution `bf16(acc · (α2[e] · w))` (with a GEMM2 bias
/// `bf16(fma(acc, α2[e], b2) · w)`), `[N·k, H]` (zero for non-local routes).
pub fn gemm2_contributions(
    shape: &MoeShape,
    h_in: &Gemm1Output,
    w: &PreparedWeights,
    sort: &SortOutputs,
    routing: &Routing,
) -> Result<Vec<f32>> {
    let (hid, i, k) = (shape.hidden, shape.intermediate, shape.top_k());
    validate_weights(shape, w)?;
    check_len("router weights", routing.weights.len(), routing.tokens * k)?;
    crate::routing::check_router_weights(&routing.weights, k)?;
    check_sort(shape, sort, routing.tokens)?;
    check_len("GEMM1 output rows", h_in.rows, sort.permuted_idx_to_expanded_idx.len())?;
    check_len("GEMM1 output", h_in.packed.len(), h_in.rows * i / 2)?;
    check_len("GEMM1 output scales", h_in.scales.len(), h_in.scale_layout.bytes())?;
    let l2 = w2_scale_layout(shape)?;
    let mut contrib = vec![0f32; routing.tokens * k * hid];
    let mut decoded: Option<(usize, Vec<DecodedRow>)> = None;
    for row in 0..h_in.rows {
        let Some((expert, token, slot)) = sort.route_of_row(row, k) else { continue };
        if decoded.as_ref().is_none_or(|(e, _)| *e != expert) {
            decoded = Some((expert, decode_expert(&w.w2, &w.w2_scales, &l2, expert, hid, i)));
        }
        let Some((_, w2)) = decoded.as_ref() else { continue };
        let codes =
            (0..i / 16).map(|c| h_in.scale_layout.offset(row, c).map_or(0, |o| h_in.scales[o]));
        let arow = DecodedRow::decode(&h_in.packed[row * i / 2..(row + 1) * i / 2], codes, i);
        let rw = routing.weights[token * k + slot];
        let dst = &mut contrib[(token * k + slot) * hid..(token * k + slot + 1) * hid];
        for (n, d) in dst.iter_mut().enumerate() {
            let bias = w.epilogue.gemm2_bias(shape, expert, n);
            *d = round_to_bf16(gemm2_value(
                block_scaled_dot(&arow, &w2[n]),
                w.alpha2[expert],
                rw,
                bias,
            ));
        }
    }
    Ok(contrib)
}

/// Sums per-route contributions into `[tokens, H]` bf16.
///
/// - `BulkReduceAdd`: starting from a zeroed output, each route is added with a bf16
///   rounding (what `cp.reduce.async.bulk….add.bf16` does), here in slot order; on the GPU
///   the order is unspecified, so its result may differ in the last bits (docs/reference.md
///   bounds the difference).
/// - `Deterministic`: routes summed in f32 in slot order, rounded to bf16 once.
pub fn finalize(
    contrib: &[f32],
    tokens: usize,
    top_k: usize,
    hidden: usize,
    mode: FinalizeMode,
) -> Result<Vec<bf16>> {
    check_len("contributions", contrib.len(), tokens * top_k * hidden)?;
    let mut out = Vec::with_capacity(tokens * hidden);
    for t in 0..tokens {
        for n in 0..hidden {
            let routes = (0..top_k).map(|s| contrib[(t * top_k + s) * hidden + n]);
            let v = match mode {
                FinalizeMode::BulkReduceAdd => routes.fold(0.0f32, |acc, c| round_to_bf16(acc + c)),
                FinalizeMode::Deterministic => round_to_bf16(routes.fold(0.0f32, |acc, c| acc + c)),
            };
            out.push(bf16::from_f32(v));
        }
    }
    Ok(out)
}
