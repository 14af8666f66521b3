//! GEMM1 reference: gather by permuted row, FC1, α1, SwiGLU, NVFP4 requantization.

use moegen_dsl::epilogue_math::fast::{
    FastFactors, activation_fast, quantize_block_fast, swiglu_fast,
};
use moegen_dsl::epilogue_math::{activation_exact, pre_activation, round_to_bf16};
use moegen_dsl::formats::{Scale128x4, pack_nibbles, quantize_nvfp4_block};
use moegen_dsl::{Activation, EpilogueRecipe, SwigluInput};

use super::exact_dot::{DecodedRow, block_scaled_dot};
use super::weights::{Nvfp4Activations, PreparedWeights, validate_weights, w1_scale_layout_for};
use crate::error::{Result, RuntimeError, check_len};
use crate::routing::SortOutputs;
use moegen_dsl::plan::{MoeShape, SWIGLU_INTERLEAVE};

/// GEMM1's output: NVFP4 `h` over permuted rows, the input of GEMM2.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm1Output {
    /// Permuted rows (max_tiles · T).
    pub rows: usize,
    /// I.
    pub cols: usize,
    /// `[rows, I/2]` packed E2M1; padding rows are zero.
    pub packed: Vec<u8>,
    /// 128x4 scales of `[rows, I/16]`; padding rows are zero.
    pub scales: Vec<u8>,
    /// The layout of `scales`.
    pub scale_layout: Scale128x4,
}

/// One expert's weight rows decoded, with the layout they came from.
pub(crate) fn decode_expert(
    packed: &[u8],
    scales: &[u8],
    layout: &Scale128x4,
    expert: usize,
    rows: usize,
    k: usize,
) -> Vec<DecodedRow> {
    let row_bytes = k / 2;
    let base = expert * rows * row_bytes;
    let sbase = expert * layout.bytes();
    (0..rows)
        .map(|r| {
            let p = &packed[base + r * row_bytes..base + (r + 1) * row_bytes];
            let codes = (0..k / 16).map(|c| layout.offset(r, c).map_or(0, |o| scales[sbase + o]));
            DecodedRow::decode(p, codes, k)
        })
        .collect()
}

/// Checks the sort outputs against the shape (sizes, expert ids, expanded ids).
pub(crate) fn check_sort(shape: &MoeShape, sort: &SortOutputs, tokens: usize) -> Result<()> {
    let t = sort.tile.rows() as usize;
    check_len(
        "permuted_idx_to_expanded_idx",
        sort.permuted_idx_to_expanded_idx.len(),
        sort.max_tiles() * t,
    )?;
    check_len("tile_idx_to_mn_limit", sort.tile_idx_to_mn_limit.len(), sort.max_tiles())?;
    if sort.num_non_exiting_tiles < 0 || sort.num_non_exiting_tiles as usize > sort.max_tiles() {
        return Err(RuntimeError::SortMismatch {
            reason: "num_non_exiting_tiles outside [0, max_tiles]",
        });
    }
    let expanded = tokens * shape.top_k();
    for row in 0..sort.permuted_idx_to_expanded_idx.len() {
        let tile = row / t;
        if tile >= sort.num_non_exiting_tiles as usize
            || row as i64 >= i64::from(sort.tile_idx_to_mn_limit[tile])
        {
            continue;
        }
        let e = sort.tile_idx_to_expert_idx[tile];
        if e < 0 || e as usize >= shape.local_experts() {
            return Err(RuntimeError::SortMismatch {
                reason: "tile expert outside the local experts",
            });
        }
        let x = sort.permuted_idx_to_expanded_idx[row];
        if x < 0 || x as usize >= expanded {
            return Err(RuntimeError::SortMismatch {
                reason: "expanded index outside [0, tokens·top_k)",
            });
        }
    }
    Ok(())
}

/// GEMM1's epilogue choices: SwiGLU input precision and recipe (a bare [`SwigluInput`]
/// converts with the default, Fast, recipe).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gemm1Options {
    /// SwiGLU input precision.
    pub swiglu_input: SwigluInput,
    /// The epilogue's arithmetic (docs/reference.md).
    pub recipe: EpilogueRecipe,
}

impl From<SwigluInput> for Gemm1Options {
    fn from(swiglu_input: SwigluInput) -> Self {
        Gemm1Options { swiglu_input, ..Default::default() }
    }
}

/// Runs GEMM1 for every valid permuted row.
pub fn gemm1_reference(
    shape: &MoeShape,
    x: &Nvfp4Activations,
    w: &PreparedWeights,
    sort: &SortOutputs,
    options: impl Into<Gemm1Options>,
) -> Result<Gemm1Output> {
    let Gemm1Options { swiglu_input, recipe } = options.into();
    let (h, i) = (shape.hidden, shape.intermediate);
    validate_weights(shape, w)?;
    if x.hidden != h {
        return Err(RuntimeError::BufferLength {
            what: "activation width",
            expected: h,
            actual: x.hidden,
        });
    }
    check_len("activations", x.packed.len(), x.tokens * h / 2)?;
    check_len("activation scales", x.scales.len(), x.tokens * h / 16)?;
    check_sort(shape, sort, x.tokens)?;

    let rows = sort.permuted_idx_to_expanded_idx.len();
    let out_layout = Scale128x4::new(rows, i / 16)?;
    let mut codes = vec![0u8; rows * i];
    let mut scales = vec![0u8; out_layout.bytes()];
    let activation = w.epilogue.spec().activation;
    let l1 = w1_scale_layout_for(shape, activation)?;
    let w1_rows = activation.w1_rows(i);
    let mut decoded: Option<(usize, Vec<DecodedRow>)> = None;
    let mut hrow = vec![0f32; i];
    for row in 0..rows {
        let Some((expert, token, _slot)) = sort.route_of_row(row, shape.top_k()) else { continue };
        // Rows arrive grouped by expert, so each expert is decoded once.
        if decoded.as_ref().is_none_or(|(e, _)| *e != expert) {
            decoded = Some((expert, decode_expert(&w.w1, &w.w1_scales, &l1, expert, w1_rows, h)));
        }
        let Some((_, w1)) = decoded.as_ref() else { continue };
        let xs = &x.scales[token * h / 16..(token + 1) * h / 16];
        let xrow = DecodedRow::decode(
            &x.packed[token * h / 2..(token + 1) * h / 2],
            xs.iter().copied(),
            h,
        );
        let alpha = w.alpha1[expert];
        // (up, gate) of h column j; ungated (ReLU²), row j's value as up and no gate (the
        // activation reads up only).
        let dot = |j: usize| {
            if !activation.gated() {
                return (block_scaled_dot(&xrow, &w1[j]), 0.0);
            }
            let up_row = (j / SWIGLU_INTERLEAVE) * 2 * SWIGLU_INTERLEAVE + j % SWIGLU_INTERLEAVE;
            (
                block_scaled_dot(&xrow, &w1[up_row]),
                block_scaled_dot(&xrow, &w1[up_row + SWIGLU_INTERLEAVE]),
            )
        };
        let ep = &w.epilogue;
        // A clamp or a GEMM1 bias needs the true pre-activations: α1 stays in the element
        // loop (the GEMM1 kernel's condition; GEMM2's bias does not change GEMM1).
        let spec = ep.spec();
        let folded = spec.activation == Activation::Swiglu && !spec.gemm1_bias;
        let fast = if folded {
            FastFactors::new(alpha, w.fc2_input_scale, swiglu_input)
        } else {
            FastFactors::unfolded(w.fc2_input_scale)
        };
        for (j, out) in hrow.iter_mut().enumerate() {
            let (up, gate) = dot(j);
            *out = match (recipe, folded) {
                // h / α² for f32 inputs: the factors carry α².
                (EpilogueRecipe::Fast, true) => swiglu_fast(&fast, up, gate),
                _ => {
                    let bias = ep.gemm1_bias(shape, expert, j);
                    let mut u = pre_activation(alpha, up, bias.map(|b| b.0));
                    let mut g = pre_activation(alpha, gate, bias.map(|b| b.1));
                    if swiglu_input == SwigluInput::Bf16 {
                        u = round_to_bf16(u);
                        g = round_to_bf16(g);
                    }
                    let (kind, p) = (ep.spec().activation, ep.params(expert));
                    match recipe {
                        EpilogueRecipe::Exact => activation_exact(kind, &p, u, g),
                        EpilogueRecipe::Fast => activation_fast(kind, &p, u, g),
                    }
                }
            };
        }
        for (b, block) in hrow.chunks_exact(16).enumerate() {
            let (q, sf) = match recipe {
                EpilogueRecipe::Exact => quantize_nvfp4_block(block, w.fc2_input_scale),
                EpilogueRecipe::Fast => quantize_block_fast(&fast, block),
            };
            codes[row * i + b * 16..row * i + b * 16 + 16].copy_from_slice(&q);
            if let Some(o) = out_layout.offset(row, b) {
                scales[o] = sf;
            }
        }
    }
    Ok(Gemm1Output {
        rows,
        cols: i,
        packed: pack_nibbles(&codes)?,
        scales,
        scale_layout: out_layout,
    })
}
