//! The Hopper A8 pipeline's arithmetic on the CPU (docs/reference.md, "Hopper A8"): MXFP4
//! weights prepared as E4M3 tables (`abi::sm90_weights::a8`), activations and GEMM1's output
//! quantized per row to E4M3 with one power-of-two scale, each GEMM accumulated per K32 step
//! as one FP8 `wgmma` does (`wgmma_fp8_model`), the factors 2^ρ · 2^e applied before α. A
//! split K adds the CTAs' partial sums in rank order before those factors, as the kernels'
//! rank 0 does before its epilogue (`wgmma_fp8_model::wgmma_dot_e4m3_split`).

use half::bf16;
use moegen_dsl::SwigluInput;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::sm90_weights::a8;
use moegen_dsl::epilogue_math::{gemm2_value, round_to_bf16};

use super::epilogue::ExpertEpilogue;
use super::sm90::h_of;
use moegen_dsl::formats::{
    e2m1_to_f32, e4m3_scale_exponent, f32_to_e2m1, f32_to_e4m3, nibble_at, pow2,
};
use moegen_dsl::plan::{MoeShape, SWIGLU_INTERLEAVE};
use moegen_dsl::{ActivationFormat, EpilogueRecipe, FinalizeMode};

use super::gemm1::{Gemm1Options, check_sort};
use super::gemm2::{Routing, finalize};
use super::par::par_map;
use super::sm90::{Sm90Tiling, Sm90Weights, rows_by_expert};
use super::wgmma_fp8_model::dot_padded_split;
use super::wgmma_model::SplitK;
use crate::error::{Result, RuntimeError, check_len};
use crate::routing::{SortOutputs, moe_sort_router};

/// The least UE8M0 code a row factor 2^(s_max − 133) stays a normal f32 with.
const MIN_ROW_CODE: u8 = 7;
/// UE8M0 bias plus the table's top exponent: 2^ρ = 2^(s_max − ROW_BIAS).
const ROW_BIAS: i32 = 133;

/// One row of bf16 values quantized as the A8 kernels do (`quant_fp8_tokens`,
/// `quant_fp8_rows`): the least power of two 2^e (e ≥ −126) with max|x| ≤ 448 · 2^e, each
/// value x · 2^−e rounded once to E4M3 (nearest even, saturating), zeros up to
/// `padded_len`. Returns the bytes and 2^e. A NaN anywhere makes the row's maximum NaN (its
/// bits give e = 121) and that value's byte the E4M3 NaN.
pub fn quantize_fp8_row(x: &[bf16], padded_len: usize) -> (Vec<u8>, f32) {
    let amax = x.iter().fold(0f32, |m, v| {
        let a = v.to_f32().abs();
        if m.is_nan() || a.is_nan() { f32::from_bits(0x7FFF_FFFF) } else { m.max(a) }
    });
    let e = e4m3_scale_exponent(amax);
    let (scale, inv) = (pow2(e), pow2(-e));
    let mut q: Vec<u8> = x.iter().map(|v| f32_to_e4m3(v.to_f32() * inv)).collect();
    q.resize(padded_len.max(x.len()), 0);
    (q, scale)
}

/// MXFP4 weights prepared for the A8 kernels: per weight row a factor 2^ρ (ρ = s_max − 133,
/// s_max the row's largest UE8M0 code, at least 7) and per 32-block a table code
/// `c = s − s_max + 12` in 1‥12; blocks with c < 1 take c = 1 and their E2M1 codes
/// requantized (nearest even) onto that table's grid. Weight (r, k) is
/// `E4M3(|e2m1| · 2^(c − 6))` with the code's sign, times 2^ρ\[r\].
#[derive(Clone, Debug, PartialEq)]
pub struct Sm90A8Weights {
    /// `[L, 2I, H/2]` E2M1 codes, kernel row order (up/gate interleaved in blocks of 64).
    pub w1: Vec<u8>,
    /// `[L, 2I, H/32]` table codes.
    pub w1_codes: Vec<u8>,
    /// `[L, 2I]` 2^ρ.
    pub w1_rows: Vec<f32>,
    /// `[L, H, I/2]` E2M1 codes.
    pub w2: Vec<u8>,
    /// `[L, H, I/32]` table codes.
    pub w2_codes: Vec<u8>,
    /// `[L, H]` 2^ρ.
    pub w2_rows: Vec<f32>,
    /// GEMM1's factor per expert.
    pub alpha1: Vec<f32>,
    /// GEMM2's factor per expert.
    pub alpha2: Vec<f32>,
    /// The activation's per-expert parameters and the biases (from the `Sm90Weights`).
    pub epilogue: ExpertEpilogue,
}

/// One matrix's codes, table codes and row factors.
struct Prepared {
    codes: Vec<u8>,
    tables: Vec<u8>,
    rows: Vec<f32>,
}

/// Prepares `[L·rows, k]` MXFP4 (codes packed, one UE8M0 code per 16 values, each 32-block's
/// code repeated) for A8.
fn prepare(values: &[u8], scales16: &[u8], rows: usize, k: usize) -> Prepared {
    let blocks = k / 32;
    let mut out = Prepared {
        codes: vec![0u8; rows * k / 2],
        tables: vec![0u8; rows * blocks],
        rows: vec![0f32; rows],
    };
    for r in 0..rows {
        let s = |b: usize| scales16[(r * k) / 16 + 2 * b];
        let s_max = (0..blocks).map(s).max().unwrap_or(0).max(MIN_ROW_CODE);
        out.rows[r] = f32::from_bits(((i32::from(s_max) - ROW_BIAS + 127) as u32) << 23);
        for b in 0..blocks {
            let c = i32::from(s(b)) - i32::from(s_max) + 12;
            out.tables[r * blocks + b] = c.max(i32::from(a8::MIN_CODE)) as u8;
            for j in 32 * b..32 * (b + 1) {
                let at = r * k + j;
                let code = nibble_at(values, at).unwrap_or(0);
                let code = if c >= 1 {
                    code
                } else {
                    // e2m1 · 2^(c − 1): the value on the c = 1 table's grid.
                    f32_to_e2m1(e2m1_to_f32(code) * 2f32.powi(c - 1))
                };
                out.codes[at / 2] |= (code & 0xF) << (4 * (at % 2));
            }
        }
    }
    out
}

/// The A8 layout's shape rules: weight rows (2I and H) in whole 64-row tiles, K (H and I) in
/// whole 32-blocks.
fn check_a8_shape(shape: &MoeShape) -> Result<()> {
    for (what, value, multiple, why) in [
        ("hidden size", shape.hidden, 64, " (A8: W2's rows in 64-row tiles)"),
        (
            "intermediate size",
            shape.intermediate,
            32,
            " (A8: MXFP4 blocks; W1's 2I rows in 64-row tiles)",
        ),
    ] {
        if !value.is_multiple_of(multiple) {
            return Err(moegen_dsl::plan::PlanError::Alignment {
                what,
                value: value as u64,
                multiple: multiple as u64,
                why,
            }
            .into());
        }
    }
    Ok(())
}

impl Sm90A8Weights {
    /// From MXFP4 Hopper weights made for A8 (`Sm90Weights::from_mxfp4` with
    /// `ActivationFormat::Fp8`): the same codes with per-row factors and table codes.
    pub fn from_sm90(shape: &MoeShape, w: &Sm90Weights) -> Result<Self> {
        if w.format != WeightFormat::Mxfp4 {
            return Err(RuntimeError::UnsupportedActivations {
                what: "NVFP4 weights",
                reason: "FP8 activations (A8) take MXFP4 weights",
            });
        }
        if w.activations != ActivationFormat::Fp8 {
            return Err(RuntimeError::UnsupportedActivations {
                what: "Sm90A8Weights::from_sm90",
                reason: "the weights were made for another activation format",
            });
        }
        check_a8_shape(shape)?;
        w.validate(shape)?;
        for (what, s) in [("W1 scales", &w.w1_scales), ("W2 scales", &w.w2_scales)] {
            if let Some(pair) = s.chunks_exact(2).position(|p| p[0] != p[1]) {
                return Err(RuntimeError::SplitMxfp4Scale { what, offset: 2 * pair });
            }
        }
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        let p1 = prepare(&w.w1, &w.w1_scales, l * w.epilogue.w1_rows(i), h);
        let p2 = prepare(&w.w2, &w.w2_scales, l * h, i);
        Ok(Self {
            w1: p1.codes,
            w1_codes: p1.tables,
            w1_rows: p1.rows,
            w2: p2.codes,
            w2_codes: p2.tables,
            w2_rows: p2.rows,
            alpha1: w.alpha1.clone(),
            alpha2: w.alpha2.clone(),
            epilogue: w.epilogue.clone(),
        })
    }

    /// Checks sizes, table codes and factors.
    pub fn validate(&self, shape: &MoeShape) -> Result<()> {
        check_a8_shape(shape)?;
        self.epilogue.validate(shape)?;
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        // W1's rows: 2I gated, I for ReLU².
        let rows = self.epilogue.w1_rows(i);
        check_len("A8 W1", self.w1.len(), l * rows * h / 2)?;
        check_len("A8 W1 table codes", self.w1_codes.len(), l * rows * h / 32)?;
        check_len("A8 W1 row factors", self.w1_rows.len(), l * rows)?;
        check_len("A8 W2", self.w2.len(), l * h * i / 2)?;
        check_len("A8 W2 table codes", self.w2_codes.len(), l * h * i / 32)?;
        check_len("A8 W2 row factors", self.w2_rows.len(), l * h)?;
        check_len("alpha1", self.alpha1.len(), l)?;
        check_len("alpha2", self.alpha2.len(), l)?;
        for (what, codes) in
            [("A8 W1 table codes", &self.w1_codes), ("A8 W2 table codes", &self.w2_codes)]
        {
            if let Some(offset) =
                codes.iter().position(|c| !(a8::MIN_CODE..=a8::MAX_CODE).contains(c))
            {
                return Err(RuntimeError::BadTableCode { what, offset, code: codes[offset] });
            }
        }
        // Powers of two in f32's normal range, as `from_sm90` makes them.
        let power_of_two = |a: &f32| a.is_normal() && *a > 0.0 && a.to_bits() & 0x7F_FFFF == 0;
        for (what, rows) in
            [("A8 W1 row factors", &self.w1_rows), ("A8 W2 row factors", &self.w2_rows)]
        {
            if !rows.iter().all(power_of_two) {
                return Err(RuntimeError::NonFinite { what });
            }
        }
        if self.alpha1.iter().chain(&self.alpha2).any(|a| !a.is_finite()) {
            return Err(RuntimeError::NonFinite { what: "alpha" });
        }
        Ok(())
    }

    /// The weights in the A8 kernels' layout (`abi::sm90_weights::a8`, K padded to whole
    /// 128-wide tiles with zero codes and table code 1): (W1, W1 table codes, W2, W2 table
    /// codes), expert after expert.
    pub fn fragment_layout(&self, shape: &MoeShape) -> Result<[Vec<u8>; 4]> {
        self.validate(shape)?;
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        let shuffle = |codes: &[u8], tables: &[u8], rows: usize, k: usize| {
            let (vb, sb) = (a8::value_bytes(rows, k), a8::scale_bytes(rows, k));
            let mut v = vec![0u8; l * vb];
            let mut s = vec![a8::MIN_CODE; l * sb];
            let src = |e: usize, r: usize| (e * rows + r) * k;
            for e in 0..l {
                for r in 0..rows {
                    for c in 0..k {
                        let code = nibble_at(codes, src(e, r) + c).unwrap_or(0);
                        if let Some((byte, mag, sign)) = a8::value_position(rows, k, r, c) {
                            let word = u32::from(code & 7) << mag | u32::from(code >> 3) << sign;
                            for (j, b) in word.to_le_bytes().iter().enumerate() {
                                v[e * vb + byte + j] |= b;
                            }
                        }
                        if c % 32 == 0
                            && let Some(o) = a8::scale_position(rows, k, r, c)
                        {
                            s[e * sb + o] = tables[src(e, r) / 32 + c / 32];
                        }
                    }
                }
            }
            (v, s)
        };
        let (w1, s1) = shuffle(&self.w1, &self.w1_codes, self.epilogue.w1_rows(i), h);
        let (w2, s2) = shuffle(&self.w2, &self.w2_codes, h, i);
        Ok([w1, s1, w2, s2])
    }

    /// Row `r` (global over experts) of a `[·, k]` matrix as the E4M3 bytes the kernel's
    /// tables give, zero-padded to `padded`.
    fn row_e4m3(codes: &[u8], tables: &[u8], r: usize, k: usize, padded: usize) -> Vec<u8> {
        let mut row: Vec<u8> = (0..k)
            .map(|c| {
                let code = nibble_at(codes, r * k + c).unwrap_or(0);
                ((code >> 3) << 7) | a8::table_byte(tables[(r * k + c) / 32], code & 7)
            })
            .collect();
        row.resize(padded, 0);
        row
    }

    /// The real value of weight (r, c) of W1 (`w1`) or W2 of `shape` — row r over all
    /// experts, column c < K — what the A8 GEMMs multiply; `None` outside the matrix.
    pub fn weight(&self, shape: &MoeShape, w1: bool, r: usize, c: usize) -> Option<f32> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let (codes, tables, rows, k) = if w1 {
            (&self.w1, &self.w1_codes, &self.w1_rows, h)
        } else {
            (&self.w2, &self.w2_codes, &self.w2_rows, i)
        };
        if c >= k {
            return None;
        }
        let at = r.checked_mul(k)?.checked_add(c)?;
        let code = nibble_at(codes, at)?;
        let t = i32::from(*tables.get(at / 32)?);
        Some(e2m1_to_f32(code) * 2f32.powi(t - 6) * rows.get(r)?)
    }
}

/// Hopper A8 GEMM1 for every valid permuted row: bf16 h `[rows, I]` (padding rows zero),
/// with the Exact recipe (the Hopper default) and H split over `split` CTAs (the tactic's
/// `gemm1().split_k()`).
pub fn sm90_a8_gemm1_reference(
    shape: &MoeShape,
    x: &[bf16],
    w: &Sm90A8Weights,
    sort: &SortOutputs,
    split: SplitK,
) -> Result<Vec<bf16>> {
    sm90_a8_gemm1_reference_with(shape, x, w, sort, EpilogueRecipe::Exact, split)
}

/// Hopper A8 GEMM1 with the given epilogue recipe, H split over `split` CTAs.
pub fn sm90_a8_gemm1_reference_with(
    shape: &MoeShape,
    x: &[bf16],
    w: &Sm90A8Weights,
    sort: &SortOutputs,
    recipe: EpilogueRecipe,
    split: SplitK,
) -> Result<Vec<bf16>> {
    // Padding rows hold +0 in the f32 h, so they stay zero, as the kernels leave them.
    let hf = sm90_a8_gemm1_h(shape, x, w, sort, recipe, split)?;
    Ok(hf.into_iter().map(bf16::from_f32).collect())
}

/// A8 GEMM1's h in f32 before its bf16 rounding, `[permuted rows, I]` (padding rows zero),
/// with H (padded to whole 128-element stages) split over `split` CTAs.
pub fn sm90_a8_gemm1_h(
    shape: &MoeShape,
    x: &[bf16],
    w: &Sm90A8Weights,
    sort: &SortOutputs,
    recipe: EpilogueRecipe,
    split: SplitK,
) -> Result<Vec<f32>> {
    let (h, i, k) = (shape.hidden, shape.intermediate, shape.top_k());
    let opts = Gemm1Options { swiglu_input: SwigluInput::F32, recipe };
    w.validate(shape)?;
    let tokens = x.len() / h.max(1);
    check_len("activations", x.len(), tokens * h)?;
    check_sort(shape, sort, tokens)?;
    let (hp, rows) = (a8::padded_k(h), sort.permuted_idx_to_expanded_idx.len());
    let quantized: Vec<(Vec<u8>, f32)> = par_map(&(0..tokens).collect::<Vec<_>>(), |&t| {
        quantize_fp8_row(&x[t * h..(t + 1) * h], hp)
    });
    let mut values = vec![0f32; rows * i];
    let (w1_rows, gated) = (w.epilogue.w1_rows(i), w.epilogue.spec().activation.gated());
    for (e, members) in rows_by_expert(sort, rows, k) {
        let base = e * w1_rows;
        let w1: Vec<Vec<u8>> = par_map(&(0..w1_rows).collect::<Vec<_>>(), |&r| {
            Sm90A8Weights::row_e4m3(&w.w1, &w.w1_codes, base + r, h, hp)
        });
        let alpha = w.alpha1[e];
        let out = par_map(&members, |&[_, token, _]| {
            let (xq, tau) = &quantized[token];
            (0..i)
                .map(|j| {
                    // The factors scale the ranks' summed accumulator (rank 0's epilogue).
                    let v = |r: usize| {
                        dot_padded_split(xq, &w1[r], split) * (w.w1_rows[base + r] * tau)
                    };
                    // ReLU²: row j is h column j's only pre-activation.
                    let (up, gate) = if gated {
                        let up_row =
                            (j / SWIGLU_INTERLEAVE) * 2 * SWIGLU_INTERLEAVE + j % SWIGLU_INTERLEAVE;
                        (v(up_row), v(up_row + SWIGLU_INTERLEAVE))
                    } else {
                        let x = v(j);
                        (x, x)
                    };
                    h_of(shape, &w.epilogue, e, j, alpha, up, gate, opts)
                })
                .collect::<Vec<f32>>()
        });
        for (&[row, _, _], vals) in members.iter().zip(out) {
            values[row * i..(row + 1) * i].copy_from_slice(&vals);
        }
    }
    Ok(values)
}

/// Hopper A8 GEMM2: h's rows quantized as `quant_fp8_rows` does, then each route's
/// `bf16(acc · (2^ρ · 2^e) · (α2[e] · w))`, `[N·k, H]`, acc's I (padded to whole 128-element
/// stages) split over `split` CTAs (the tactic's `gemm2().split_k()`).
pub fn sm90_a8_gemm2_contributions(
    shape: &MoeShape,
    h_in: &[bf16],
    w: &Sm90A8Weights,
    sort: &SortOutputs,
    routing: &Routing,
    split: SplitK,
) -> Result<Vec<f32>> {
    let (hid, i, k) = (shape.hidden, shape.intermediate, shape.top_k());
    w.validate(shape)?;
    check_sort(shape, sort, routing.tokens)?;
    let routes = routing.tokens.checked_mul(k).ok_or(RuntimeError::from(
        moegen_dsl::plan::PlanError::Overflow { what: "tokens × top_k" },
    ))?;
    check_len("router weights", routing.weights.len(), routes)?;
    crate::routing::check_router_weights(&routing.weights, k)?;
    let rows = sort.permuted_idx_to_expanded_idx.len();
    check_len("GEMM1 output", h_in.len(), rows * i)?;
    let ip = a8::padded_k(i);
    let mut contrib = vec![0f32; routes * hid];
    for (e, members) in rows_by_expert(sort, rows, k) {
        let base = e * hid;
        let w2: Vec<Vec<u8>> = par_map(&(0..hid).collect::<Vec<_>>(), |&r| {
            Sm90A8Weights::row_e4m3(&w.w2, &w.w2_codes, base + r, i, ip)
        });
        let out = par_map(&members, |&[row, token, slot]| {
            let (hq, tau) = quantize_fp8_row(&h_in[row * i..(row + 1) * i], ip);
            let rw = routing.weights[token * k + slot];
            (0..hid)
                .map(|r| {
                    let acc = dot_padded_split(&hq, &w2[r], split) * (w.w2_rows[base + r] * tau);
                    let bias = w.epilogue.gemm2_bias(shape, e, r);
                    round_to_bf16(gemm2_value(acc, w.alpha2[e], rw, bias))
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

/// Every intermediate of one Hopper A8 reference run.
#[derive(Clone, Debug, PartialEq)]
pub struct Sm90A8ReferenceRun {
    /// Routing sort outputs.
    pub sort: SortOutputs,
    /// GEMM1's bf16 output `[rows, I]`.
    pub gemm1: Vec<bf16>,
    /// Each route's contribution `[N·k, H]` (before the finalize sums them).
    pub contributions: Vec<f32>,
    /// `[tokens, H]` output.
    pub output: Vec<bf16>,
}

/// The whole Hopper A8 layer on the CPU from the bf16 input, for a tactic of tiling `tiling`
/// (`Sm90Tiling::of`, or a tile's `Sm90Tiling::unsplit`). SwiGLU's inputs are f32 (the only
/// recipe the A8 kernels have).
pub fn moe_reference_sm90_a8(
    shape: &MoeShape,
    x: &[bf16],
    w: &Sm90A8Weights,
    routing: &Routing,
    tiling: Sm90Tiling,
    finalize_mode: FinalizeMode,
) -> Result<Sm90A8ReferenceRun> {
    let elements = routing.tokens.checked_mul(shape.hidden).ok_or(RuntimeError::from(
        moegen_dsl::plan::PlanError::Overflow { what: "tokens × hidden size" },
    ))?;
    check_len("activations", x.len(), elements)?;
    let sort = moe_sort_router(&routing.experts, routing.tokens, &shape.window, tiling.tile)?;
    let gemm1 = sm90_a8_gemm1_reference(shape, x, w, &sort, tiling.gemm1)?;
    let contributions =
        sm90_a8_gemm2_contributions(shape, &gemm1, w, &sort, routing, tiling.gemm2)?;
    let output =
        finalize(&contributions, routing.tokens, shape.top_k(), shape.hidden, finalize_mode)?;
    Ok(Sm90A8ReferenceRun { sort, gemm1, contributions, output })
}
