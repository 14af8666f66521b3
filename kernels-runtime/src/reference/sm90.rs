//! The Hopper pipeline's arithmetic on the CPU (docs/reference.md, "Hopper"): weights are
//! e2m1 · block scale in bf16 (exact), activations bf16 (A16) or NVFP4 dequantized to
//! e2m1 · scale (A4, exact), each GEMM accumulates per 16-element K step as one `wgmma` does
//! (exact sum, one f32 rounding), GEMM1's epilogue applies α1 and SwiGLU and writes bf16
//! (A16) or NVFP4-requantized values dequantized to bf16 (A4), GEMM2 applies α2 · router
//! weight and finalizes as on SM100. A tactic that splits a GEMM's K over several CTAs
//! ([`SplitK`]) has each output's dot accumulated per CTA range and the partial sums added in
//! rank order (`wgmma_model::wgmma_dot_split`); [`Sm90Tiling`] carries what a layer's tactic
//! fixes of the arithmetic.

use half::bf16;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::sm90_weights::{
    mxfp4_kernel_weight, place_code, scale_bytes, scale_position, value_bytes, value_position,
};
use moegen_dsl::epilogue_math::fast::activation_fast;
use moegen_dsl::epilogue_math::{activation_exact, gemm2_value, pre_activation, round_to_bf16};

use super::epilogue::ExpertEpilogue;
use super::sm90_kernel_form::KernelScales;
use moegen_dsl::formats::{
    e2m1_to_f32, e4m3_to_f32, nibble_at, quantize_nvfp4, quantize_nvfp4_block, ue8m0_to_f32,
};
use moegen_dsl::plan::{MoeShape, SWIGLU_INTERLEAVE};
use moegen_dsl::{
    Activation, ActivationFormat, EpilogueRecipe, FinalizeMode, MoeTactic, SwigluInput, TileSize,
};

use super::checkpoint::{ExpertTensors, Mxfp4Tensor, mxfp4_linear};
use super::gemm1::{Gemm1Options, check_sort};
use super::gemm2::{Routing, finalize};
use super::par::par_map;
use super::weights::{PreparedWeights, validate_weights, w1_scale_layout_for, w2_scale_layout};
use super::wgmma_model::{SplitK, wgmma_dot_split};
use crate::error::{Result, RuntimeError, check_len};
use crate::routing::{SortOutputs, moe_sort_router};

/// Expert weights for the Hopper GEMMs: kernel row order (W1's up/gate rows interleaved in
/// blocks of 64), packed E2M1, one scale code per 16 values (UE4M3 for NVFP4; UE8M0 for
/// MXFP4, each 32-block's code repeated for both halves), linear; and the factors of one
/// activation format.
#[derive(Clone, Debug, PartialEq)]
pub struct Sm90Weights {
    /// Scale encoding.
    pub format: WeightFormat,
    /// What the activations are (α1 and α2 depend on it).
    pub activations: ActivationFormat,
    /// `[L, 2I, H/2]`.
    pub w1: Vec<u8>,
    /// `[L, 2I, H/16]`.
    pub w1_scales: Vec<u8>,
    /// `[L, H, I/2]`.
    pub w2: Vec<u8>,
    /// `[L, H, I/16]`.
    pub w2_scales: Vec<u8>,
    /// GEMM1's factor per expert.
    pub alpha1: Vec<f32>,
    /// GEMM2's factor per expert.
    pub alpha2: Vec<f32>,
    /// The global scale GEMM1 requantizes with (A4).
    pub fc2_input_scale: f32,
    /// The activation's per-expert parameters and the biases (plain SwiGLU, none, by
    /// default; [`Self::with_epilogue`]).
    pub epilogue: ExpertEpilogue,
}

/// What an upload of Hopper weights takes: the fragment layout (W1, W1 scales, W2, W2
/// scales) and α1, α2 as the kernels read them.
pub type KernelLayout = ([Vec<u8>; 4], Vec<f32>, Vec<f32>);

fn weight_value(format: WeightFormat, code: u8, scale: u8) -> Option<f32> {
    let s = match format {
        WeightFormat::Nvfp4 => e4m3_to_f32(scale),
        WeightFormat::Mxfp4 => ue8m0_to_f32(scale),
    };
    let v = e2m1_to_f32(code) * s;
    // e2m1 · scale must be a bf16 exactly, or the kernel's dequantization would round.
    (v.is_finite() && f32::from(bf16::from_f32(v)) == v).then_some(v)
}

impl Sm90Weights {
    /// From NVFP4 weights prepared for SM100 (`prepare_weights`, `import_nvfp4`): the same
    /// codes with linear scales, and α for `activations` (A4 keeps α; A16 drops the
    /// activations' global scale from α1 and `fc2_input_scale` from α2).
    pub fn from_prepared(
        shape: &MoeShape,
        w: &PreparedWeights,
        activations: ActivationFormat,
    ) -> Result<Self> {
        validate_weights(shape, w)?;
        let activation = w.epilogue.spec().activation;
        let (l1, l2) = (w1_scale_layout_for(shape, activation)?, w2_scale_layout(shape)?);
        let unswizzle = |s: &[u8], layout: &moegen_dsl::formats::Scale128x4| -> Result<Vec<u8>> {
            let mut out = Vec::new();
            for chunk in s.chunks_exact(layout.bytes()) {
                out.extend(layout.unswizzle(chunk)?);
            }
            Ok(out)
        };
        let (alpha1, alpha2) = match activations {
            ActivationFormat::Fp8 => {
                return Err(RuntimeError::UnsupportedActivations {
                    what: "NVFP4 weights",
                    reason: "FP8 activations (A8) take MXFP4 weights",
                });
            }
            ActivationFormat::Mxfp8 => return Err(no_hopper_mxfp8("NVFP4 weights")),
            ActivationFormat::Nvfp4 => (w.alpha1.clone(), w.alpha2.clone()),
            ActivationFormat::Bf16 => (
                w.w1_global_scale.iter().map(|g| 1.0 / g).collect(),
                w.w2_global_scale.iter().map(|g| 1.0 / g).collect(),
            ),
        };
        Ok(Self {
            format: WeightFormat::Nvfp4,
            activations,
            w1: w.w1.clone(),
            w1_scales: unswizzle(&w.w1_scales, &l1)?,
            w2: w.w2.clone(),
            w2_scales: unswizzle(&w.w2_scales, &l2)?,
            alpha1,
            alpha2,
            fc2_input_scale: w.fc2_input_scale,
            epilogue: w.epilogue.clone(),
        })
    }

    /// From MXFP4 checkpoint tensors, kept MXFP4 (the kernels dequantize UE8M0 scales):
    /// α1 = 1/`input_scale` (A4) or 1 (A16), α2 = 1/`fc2_input_scale` (A4) or 1 (A16).
    pub fn from_mxfp4(
        shape: &MoeShape,
        experts: &[ExpertTensors<Mxfp4Tensor<'_>>],
        activations: ActivationFormat,
        input_scale: f32,
        fc2_input_scale: f32,
    ) -> Result<Self> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let per16 = |s: &[u8]| s.iter().flat_map(|&c| [c, c]).collect::<Vec<u8>>();
        // W1: up and gate rows interleaved in blocks of 64, as the kernels pair them.
        let w1_of = |e: usize| -> Result<(Vec<u8>, Vec<u8>)> {
            let x = &experts[e];
            let (up, up_s) = mxfp4_linear("checkpoint up", &x.up, i, h)?;
            let (gate, gate_s) = mxfp4_linear("checkpoint gate", &x.gate, i, h)?;
            let (up_s, gate_s) = (per16(&up_s), per16(&gate_s));
            let (mut w1, mut s1) = (Vec::with_capacity(i * h), Vec::with_capacity(i * h / 8));
            for b in 0..i / SWIGLU_INTERLEAVE {
                for (v, s) in [(&up, &up_s), (&gate, &gate_s)] {
                    let rows = b * SWIGLU_INTERLEAVE..(b + 1) * SWIGLU_INTERLEAVE;
                    w1.extend_from_slice(&v[rows.start * h / 2..rows.end * h / 2]);
                    s1.extend_from_slice(&s[rows.start * h / 16..rows.end * h / 16]);
                }
            }
            Ok((w1, s1))
        };
        let downs: Vec<Mxfp4Tensor<'_>> = experts.iter().map(|x| x.down).collect();
        let ep = ExpertEpilogue::default();
        Self::mxfp4_with(shape, ep, &w1_of, &downs, activations, input_scale, fc2_input_scale)
    }

    /// [`Sm90Weights::from_mxfp4`] for ReLU², which is not gated: per local expert its W1
    /// `[I, H]` (one row per h column) and its down projection `[H, I]`. The weights carry
    /// a bias-free ReLU² epilogue ([`Sm90Weights::with_epilogue`] adds biases).
    pub fn from_mxfp4_relu2(
        shape: &MoeShape,
        experts: &[(Mxfp4Tensor<'_>, Mxfp4Tensor<'_>)],
        activations: ActivationFormat,
        input_scale: f32,
        fc2_input_scale: f32,
    ) -> Result<Self> {
        let (h, i) = (shape.hidden, shape.intermediate);
        let w1_of = |e: usize| -> Result<(Vec<u8>, Vec<u8>)> {
            let (w1, s) = mxfp4_linear("checkpoint W1", &experts[e].0, i, h)?;
            Ok((w1, s.iter().flat_map(|&c| [c, c]).collect()))
        };
        let downs: Vec<Mxfp4Tensor<'_>> = experts.iter().map(|x| x.1).collect();
        let ep = ExpertEpilogue::new(shape, Activation::Relu2, vec![], None, None)?;
        Self::mxfp4_with(shape, ep, &w1_of, &downs, activations, input_scale, fc2_input_scale)
    }

    /// MXFP4 weights from each expert's W1 rows (`w1_of(e)`: codes and per-16 scales, as
    /// many rows as `epilogue`'s activation reads) and down projection.
    fn mxfp4_with(
        shape: &MoeShape,
        epilogue: ExpertEpilogue,
        w1_of: &dyn Fn(usize) -> Result<(Vec<u8>, Vec<u8>)>,
        downs: &[Mxfp4Tensor<'_>],
        activations: ActivationFormat,
        input_scale: f32,
        fc2_input_scale: f32,
    ) -> Result<Self> {
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        check_len("experts", downs.len(), l)?;
        let rows = epilogue.w1_rows(i);
        let mut out = Self {
            format: WeightFormat::Mxfp4,
            activations,
            w1: Vec::with_capacity(l * rows * h / 2),
            w1_scales: Vec::with_capacity(l * rows * h / 16),
            w2: Vec::with_capacity(l * h * i / 2),
            w2_scales: Vec::with_capacity(l * h * i / 16),
            alpha1: Vec::with_capacity(l),
            alpha2: Vec::with_capacity(l),
            fc2_input_scale,
            epilogue,
        };
        for (e, down) in downs.iter().enumerate() {
            let (w1, s1) = w1_of(e)?;
            out.w1.extend(w1);
            out.w1_scales.extend(s1);
            let (down, down_s) = mxfp4_linear("checkpoint down", down, h, i)?;
            out.w2.extend_from_slice(&down);
            out.w2_scales.extend(down_s.iter().flat_map(|&c| [c, c]));
            let (a1, a2) = match activations {
                ActivationFormat::Nvfp4 => (1.0 / input_scale, 1.0 / fc2_input_scale),
                ActivationFormat::Bf16 | ActivationFormat::Fp8 => (1.0, 1.0),
                ActivationFormat::Mxfp8 => return Err(no_hopper_mxfp8("MXFP4 weights")),
            };
            out.alpha1.push(a1);
            out.alpha2.push(a2);
        }
        out.validate(shape)?;
        Ok(out)
    }

    /// The same weights with the epilogue data `epilogue` (checked against `shape`).
    /// W1's rows must be the activation's (2I gated, I for ReLU²).
    pub fn with_epilogue(mut self, shape: &MoeShape, epilogue: ExpertEpilogue) -> Result<Self> {
        epilogue.validate(shape)?;
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        check_len("W1", self.w1.len(), l * epilogue.w1_rows(i) * h / 2)?;
        self.epilogue = epilogue;
        Ok(self)
    }

    /// Checks sizes, and that every weight dequantizes to a bf16 exactly.
    pub fn validate(&self, shape: &MoeShape) -> Result<()> {
        self.epilogue.validate(shape)?;
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        let rows = self.epilogue.w1_rows(i);
        check_len("W1", self.w1.len(), l * rows * h / 2)?;
        check_len("W1 scales", self.w1_scales.len(), l * rows * h / 16)?;
        check_len("W2", self.w2.len(), l * h * i / 2)?;
        check_len("W2 scales", self.w2_scales.len(), l * h * i / 16)?;
        check_len("alpha1", self.alpha1.len(), l)?;
        check_len("alpha2", self.alpha2.len(), l)?;
        if self.alpha1.iter().chain(&self.alpha2).any(|a| !a.is_finite()) {
            return Err(RuntimeError::NonFinite { what: "alpha" });
        }
        for (what, s) in [("W1 scales", &self.w1_scales), ("W2 scales", &self.w2_scales)] {
            if self.format == WeightFormat::Nvfp4 {
                super::weights::check_ue4m3_codes(what, s)?;
            }
            // The largest code of each scale kind must still give a bf16 for ±6.
            if let Some(offset) =
                s.iter().position(|&c| weight_value(self.format, 0x7, c).is_none())
            {
                let code = s[offset];
                let nan = match self.format {
                    WeightFormat::Nvfp4 => e4m3_to_f32(code).is_nan(),
                    WeightFormat::Mxfp4 => ue8m0_to_f32(code).is_nan(),
                };
                return Err(if nan {
                    RuntimeError::NanScaleCode { what, offset }
                } else {
                    RuntimeError::ScaleOverflow { what, offset, code }
                });
            }
        }
        Ok(())
    }

    /// The weights in the Hopper kernels' fragment layout (`moegen_dsl::abi::sm90_weights`):
    /// (W1, W1 scales, W2, W2 scales), expert after expert. MXFP4 scale bytes are the
    /// kernels' factor fields, with α from [`Self::kernel_alphas`].
    pub fn fragment_layout(&self, shape: &MoeShape) -> Result<[Vec<u8>; 4]> {
        self.validate(shape)?;
        let scales = self.kernel_scales(shape)?;
        Ok(self.laid_out(shape, &scales))
    }

    /// [`Self::fragment_layout`] and [`Self::kernel_alphas`] together (what an upload
    /// needs), validating and deriving the kernels' scales once.
    pub fn kernel_layout(&self, shape: &MoeShape) -> Result<KernelLayout> {
        self.validate(shape)?;
        let (scales, alpha1, alpha2) = self.kernel_form(shape)?;
        Ok((self.laid_out(shape, &scales), alpha1, alpha2))
    }

    /// The fragment layout of validated weights with the kernels' scale bytes `ks1`, `ks2`.
    fn laid_out(&self, shape: &MoeShape, [ks1, ks2]: &[KernelScales; 2]) -> [Vec<u8>; 4] {
        let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts());
        let format = self.format;
        let block = format.block() as usize;
        let shuffle = |values: &[u8], scales: &[u8], rows: usize, k: usize| -> (Vec<u8>, Vec<u8>) {
            // The kernel scales hold a byte per 16 values in either format (MXFP4's twice);
            // the layout holds one per scale block.
            let (vb, sb_in, sb) =
                (value_bytes(rows, k), rows * k / 16, scale_bytes(format, rows, k));
            // The fragment layout scatters each code's bits over a 32-bit word.
            let mut words = vec![0u32; l * vb / 4];
            let mut s = vec![0u8; l * sb];
            for e in 0..l {
                for r in 0..rows {
                    for c in 0..k {
                        let code = nibble_at(&values[e * vb..(e + 1) * vb], r * k + c).unwrap_or(0);
                        if let Some((byte, bits)) = value_position(rows, k, r, c) {
                            let w = &mut words[(e * vb + byte) / 4];
                            *w = place_code(*w, bits, code);
                        }
                        if c % block == 0
                            && let Some(o) = scale_position(format, rows, k, r, c)
                        {
                            s[e * sb + o] = scales[e * sb_in + r * k / 16 + c / 16];
                        }
                    }
                }
            }
            (words.iter().flat_map(|w| w.to_le_bytes()).collect(), s)
        };
        let (w1, s1) = shuffle(&self.w1, &ks1.bytes, self.epilogue.w1_rows(i), h);
        let (w2, s2) = shuffle(&self.w2, &ks2.bytes, h, i);
        [w1, s1, w2, s2]
    }

    /// Row `r` of one expert's matrix as the bf16 bits the kernels multiply (exact), from
    /// the scale bytes as the kernels read them ([`Self::kernel_scales`]).
    fn row_bf16(&self, values: &[u8], scales: &[u8], r: usize, k: usize) -> Vec<u16> {
        (0..k)
            .map(|c| {
                let code = nibble_at(values, r * k + c).unwrap_or(0);
                let s = scales[r * k / 16 + c / 16];
                let v = match self.format {
                    WeightFormat::Nvfp4 => weight_value(self.format, code, s).unwrap_or(f32::NAN),
                    WeightFormat::Mxfp4 => {
                        mxfp4_kernel_weight(f64::from(e2m1_to_f32(code)), s) as f32
                    }
                };
                bf16::from_f32(v).to_bits()
            })
            .collect()
    }

    /// One expert's `[rows, k]` matrix as bf16 rows, decoded on every core.
    fn matrix_bf16(&self, values: &[u8], scales: &[u8], rows: usize, k: usize) -> Vec<Vec<u16>> {
        let index: Vec<usize> = (0..rows).collect();
        par_map(&index, |&r| self.row_bf16(values, scales, r, k))
    }
}

/// The valid permuted rows grouped by local expert (ascending): `(row, token, slot)` each.
pub(super) fn rows_by_expert(
    sort: &SortOutputs,
    rows: usize,
    k: usize,
) -> Vec<(usize, Vec<[usize; 3]>)> {
    let mut groups: std::collections::BTreeMap<usize, Vec<[usize; 3]>> = Default::default();
    for row in 0..rows {
        if let Some((e, token, slot)) = sort.route_of_row(row, k) {
            groups.entry(e).or_default().push([row, token, slot]);
        }
    }
    groups.into_iter().collect()
}

/// The activations GEMM1 reads: bf16 as given (A16), or NVFP4-quantized with `global_scale`
/// and dequantized to e2m1 · scale (A4), exact.
pub fn sm90_activations(
    x: &[bf16],
    tokens: usize,
    hidden: usize,
    activations: ActivationFormat,
    global_scale: f32,
) -> Result<Vec<bf16>> {
    check_len("activations", x.len(), tokens * hidden)?;
    match activations {
        ActivationFormat::Fp8 => Err(RuntimeError::UnsupportedActivations {
            what: "sm90_activations",
            reason: "FP8 activations are quantized per row (reference::sm90_a8)",
        }),
        ActivationFormat::Mxfp8 => Err(no_hopper_mxfp8("sm90_activations")),
        ActivationFormat::Bf16 => Ok(x.to_vec()),
        ActivationFormat::Nvfp4 => {
            let f: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let q = quantize_nvfp4(&f, tokens, hidden, global_scale)?;
            Ok((0..tokens * hidden)
                .map(|j| {
                    let code = nibble_at(&q.packed, j).unwrap_or(0);
                    let sf = e4m3_to_f32(q.scales[j / 16]);
                    bf16::from_f32(e2m1_to_f32(code) * sf)
                })
                .collect())
        }
    }
}

/// GEMM1's bf16 output over permuted rows (padding rows zero).
#[derive(Clone, Debug, PartialEq)]
pub struct Sm90Gemm1Output {
    /// Permuted rows.
    pub rows: usize,
    /// I.
    pub cols: usize,
    /// `[rows, I]`.
    pub values: Vec<bf16>,
}

/// What GEMM1 writes for one row of SwiGLU outputs: bf16 (A16), or NVFP4-requantized with
/// `fc2_input_scale` and dequantized to bf16 (A4).
fn gemm1_row_output(hrow: &[f32], w: &Sm90Weights) -> Vec<bf16> {
    match w.activations {
        // A8's h is bf16 here too; its per-row quantization follows (reference::sm90_a8).
        // (`Sm90Weights` never hold MXFP8: they are refused when prepared.)
        ActivationFormat::Bf16 | ActivationFormat::Fp8 | ActivationFormat::Mxfp8 => {
            hrow.iter().map(|&v| bf16::from_f32(v)).collect()
        }
        ActivationFormat::Nvfp4 => hrow
            .chunks_exact(16)
            .flat_map(|block| {
                let (q, sf) = quantize_nvfp4_block(block, w.fc2_input_scale);
                let s = e4m3_to_f32(sf);
                q.into_iter().map(move |code| bf16::from_f32(e2m1_to_f32(code) * s))
            })
            .collect(),
    }
}

/// h of expert `e`'s column `j` from its raw (up, gate) accumulators: the pre-activations
/// (α1, the GEMM1 bias), optionally rounded to bf16, then the activation
/// (`moegen_dsl::epilogue_math`), as every Hopper GEMM1 epilogue computes it.
#[allow(clippy::too_many_arguments)]
pub(super) fn h_of(
    shape: &MoeShape,
    ep: &ExpertEpilogue,
    e: usize,
    j: usize,
    alpha1: f32,
    up: f32,
    gate: f32,
    opts: Gemm1Options,
) -> f32 {
    let bias = ep.gemm1_bias(shape, e, j);
    let mut u = pre_activation(alpha1, up, bias.map(|b| b.0));
    let mut g = pre_activation(alpha1, gate, bias.map(|b| b.1));
    if opts.swiglu_input == SwigluInput::Bf16 {
        u = round_to_bf16(u);
        g = round_to_bf16(g);
    }
    let (kind, params) = (ep.spec().activation, ep.params(e));
    match opts.recipe {
        EpilogueRecipe::Exact => activation_exact(kind, &params, u, g),
        EpilogueRecipe::Fast => activation_fast(kind, &params, u, g),
    }
}

/// Hopper's GEMM1 has a Fast form for bf16 and FP8 activations only (the kernels' builder
/// refuses NVFP4 activations with it).
pub(super) fn check_sm90_recipe(
    activations: ActivationFormat,
    recipe: EpilogueRecipe,
) -> Result<()> {
    if recipe == EpilogueRecipe::Fast && activations == ActivationFormat::Nvfp4 {
        return Err(RuntimeError::UnsupportedActivations {
            what: "Hopper GEMM1 with the Fast epilogue recipe",
            reason: "NVFP4 activations (A4) have the Exact recipe only",
        });
    }
    Ok(())
}

/// Hopper GEMM1 for every valid permuted row, with the Exact recipe (the Hopper default) and
/// K split over `split` CTAs (the tactic's `gemm1().split_k()`).
pub fn sm90_gemm1_reference(
    shape: &MoeShape,
    x: &[bf16],
    w: &Sm90Weights,
    sort: &SortOutputs,
    swiglu_input: SwigluInput,
    split: SplitK,
) -> Result<Sm90Gemm1Output> {
    let opts = Gemm1Options { swiglu_input, recipe: EpilogueRecipe::Exact };
    sm90_gemm1_reference_with(shape, x, w, sort, opts, split)
}

/// Hopper GEMM1 for every valid permuted row with the given SwiGLU input and recipe, K split
/// over `split` CTAs.
pub fn sm90_gemm1_reference_with(
    shape: &MoeShape,
    x: &[bf16],
    w: &Sm90Weights,
    sort: &SortOutputs,
    opts: Gemm1Options,
    split: SplitK,
) -> Result<Sm90Gemm1Output> {
    let hf = sm90_gemm1_h(shape, x, w, sort, opts, split)?;
    let i = shape.intermediate;
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let mut values = vec![bf16::ZERO; rows * i];
    if i > 0 {
        // Padding rows stay zero, as the kernels never write them; the rows' outputs (A4's
        // requantization) on every core.
        let live: Vec<usize> =
            (0..rows).filter(|&r| sort.route_of_row(r, shape.top_k()).is_some()).collect();
        let out = par_map(&live, |&r| gemm1_row_output(&hf[r * i..(r + 1) * i], w));
        for (&r, vals) in live.iter().zip(out) {
            values[r * i..(r + 1) * i].copy_from_slice(&vals);
        }
    }
    Ok(Sm90Gemm1Output { rows, cols: i, values })
}

/// GEMM1's h in f32 before its output rounding, `[permuted rows, I]` (padding rows zero), with
/// H split over `split` CTAs: what a hardware tolerance for the Fast recipe is computed from
/// (docs/reference.md), so a split tactic's from its own split.
pub fn sm90_gemm1_h(
    shape: &MoeShape,
    x: &[bf16],
    w: &Sm90Weights,
    sort: &SortOutputs,
    opts: Gemm1Options,
    split: SplitK,
) -> Result<Vec<f32>> {
    let (h, i, k) = (shape.hidden, shape.intermediate, shape.top_k());
    check_sm90_recipe(w.activations, opts.recipe)?;
    w.validate(shape)?;
    let tokens = x.len() / h.max(1);
    check_len("activations", x.len(), tokens * h)?;
    check_sort(shape, sort, tokens)?;
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let mut values = vec![0f32; rows * i];
    let w1_rows = w.epilogue.w1_rows(i);
    let gated = w.epilogue.spec().activation.gated();
    // The kernel scales: a byte per 16 values in either format.
    let (vb, sb) = (value_bytes(w1_rows, h), w1_rows * h / 16);
    let ([ks1, _], alpha1, _) = w.kernel_form(shape)?;
    // An expert's rows share its W1: decode it once, then compute its rows on every core.
    for (e, members) in rows_by_expert(sort, rows, k) {
        let (wv, ws) = (&w.w1[e * vb..(e + 1) * vb], &ks1.bytes[e * sb..(e + 1) * sb]);
        let w1 = w.matrix_bf16(wv, ws, w1_rows, h);
        let alpha = alpha1[e];
        let ep = &w.epilogue;
        let out = par_map(&members, |&[_, token, _]| {
            let xr: Vec<u16> = x[token * h..(token + 1) * h].iter().map(|v| v.to_bits()).collect();
            let hrow: Vec<f32> = (0..i)
                .map(|j| {
                    if !gated {
                        // ReLU²: row j is h column j's only pre-activation.
                        let x = wgmma_dot_split(&xr, &w1[j], split);
                        return h_of(shape, ep, e, j, alpha, x, x, opts);
                    }
                    let up_row =
                        (j / SWIGLU_INTERLEAVE) * 2 * SWIGLU_INTERLEAVE + j % SWIGLU_INTERLEAVE;
                    let up = wgmma_dot_split(&xr, &w1[up_row], split);
                    let gate = wgmma_dot_split(&xr, &w1[up_row + SWIGLU_INTERLEAVE], split);
                    h_of(shape, ep, e, j, alpha, up, gate, opts)
                })
                .collect();
            hrow
        });
        for (&[row, _, _], vals) in members.iter().zip(out) {
            values[row * i..(row + 1) * i].copy_from_slice(&vals);
        }
    }
    Ok(values)
}

/// Hopper GEMM2: each route's `bf16(acc · (α2[e] · w))` (with a bias
/// `bf16(fma(acc, α2[e], b2) · w)`), `[N·k, H]`, acc's I split over `split` CTAs (the
/// tactic's `gemm2().split_k()`).
pub fn sm90_gemm2_contributions(
    shape: &MoeShape,
    h_in: &Sm90Gemm1Output,
    w: &Sm90Weights,
    sort: &SortOutputs,
    routing: &Routing,
    split: SplitK,
) -> Result<Vec<f32>> {
    let (hid, i, k) = (shape.hidden, shape.intermediate, shape.top_k());
    w.validate(shape)?;
    check_sort(shape, sort, routing.tokens)?;
    check_len("router weights", routing.weights.len(), routing.tokens * k)?;
    crate::routing::check_router_weights(&routing.weights, k)?;
    check_len("GEMM1 output", h_in.values.len(), h_in.rows * i)?;
    // The kernel scales: a byte per 16 values in either format.
    let (vb, sb) = (value_bytes(hid, i), hid * i / 16);
    let ([_, ks2], _, alpha2) = w.kernel_form(shape)?;
    let mut contrib = vec![0f32; routing.tokens * k * hid];
    // An expert's rows share its W2: decode it once, then compute its rows on every core.
    for (e, members) in rows_by_expert(sort, h_in.rows, k) {
        let (wv, ws) = (&w.w2[e * vb..(e + 1) * vb], &ks2.bytes[e * sb..(e + 1) * sb]);
        let w2 = w.matrix_bf16(wv, ws, hid, i);
        let out = par_map(&members, |&[row, token, slot]| {
            let a: Vec<u16> =
                h_in.values[row * i..(row + 1) * i].iter().map(|v| v.to_bits()).collect();
            let rw = routing.weights[token * k + slot];
            w2.iter()
                .enumerate()
                .map(|(c, wrow)| {
                    let bias = w.epilogue.gemm2_bias(shape, e, c);
                    let acc = wgmma_dot_split(&a, wrow, split);
                    round_to_bf16(gemm2_value(acc, alpha2[e], rw, bias))
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

/// Every intermediate of one Hopper reference run.
#[derive(Clone, Debug, PartialEq)]
pub struct Sm90ReferenceRun {
    /// Routing sort outputs.
    pub sort: SortOutputs,
    /// GEMM1's bf16 output.
    pub gemm1: Sm90Gemm1Output,
    /// `[tokens, H]` output.
    pub output: Vec<bf16>,
}

/// What a Hopper tactic fixes of the reference's arithmetic: the routing tile (where the sort
/// places rows; the output does not depend on it) and each GEMM's K split (the partial sums'
/// roundings; the output does). The GEMM1 width, schedule and a paired wide GEMM1 change
/// nothing (a pair's widths share their split: `MoeTactic::with_gemm1_wide`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sm90Tiling {
    /// Rows per routing tile.
    pub tile: TileSize,
    /// GEMM1's K (H) split.
    pub gemm1: SplitK,
    /// GEMM2's K (I) split.
    pub gemm2: SplitK,
}

impl Sm90Tiling {
    /// Tile `tile` with neither GEMM split (every tactic but the split ones).
    pub const fn unsplit(tile: TileSize) -> Self {
        Self { tile, gemm1: SplitK::NONE, gemm2: SplitK::NONE }
    }

    /// The tiling of `tactic`: its tile and its GEMMs' splits
    /// ([`RuntimeError::UnsupportedSplitK`] for a split the reference does not model).
    pub fn of(tactic: &MoeTactic) -> Result<Self> {
        Ok(Self {
            tile: tactic.tile(),
            gemm1: SplitK::of(tactic.gemm1())?,
            gemm2: SplitK::of(tactic.gemm2())?,
        })
    }
}

impl From<TileSize> for Sm90Tiling {
    fn from(tile: TileSize) -> Self {
        Self::unsplit(tile)
    }
}

/// The whole Hopper layer on the CPU for a tactic of tiling `tiling` (`Sm90Tiling::of`, or
/// a tile's `Sm90Tiling::unsplit`): `x` is the bf16 input (A4 quantizes it with
/// `input_scale` first, as the device's quantize-dequantize kernel does).
#[allow(clippy::too_many_arguments)]
pub fn moe_reference_sm90(
    shape: &MoeShape,
    x: &[bf16],
    input_scale: f32,
    w: &Sm90Weights,
    routing: &Routing,
    tiling: Sm90Tiling,
    swiglu_input: SwigluInput,
    finalize_mode: FinalizeMode,
) -> Result<Sm90ReferenceRun> {
    let acts = sm90_activations(x, routing.tokens, shape.hidden, w.activations, input_scale)?;
    let sort = moe_sort_router(&routing.experts, routing.tokens, &shape.window, tiling.tile)?;
    let gemm1 = sm90_gemm1_reference(shape, &acts, w, &sort, swiglu_input, tiling.gemm1)?;
    let contrib = sm90_gemm2_contributions(shape, &gemm1, w, &sort, routing, tiling.gemm2)?;
    let output = finalize(&contrib, routing.tokens, shape.top_k(), shape.hidden, finalize_mode)?;
    Ok(Sm90ReferenceRun { sort, gemm1, output })
}

/// Hopper has no MXFP8 path (its FP8 activations are A8's, a scale per row).
fn no_hopper_mxfp8(what: &'static str) -> RuntimeError {
    RuntimeError::UnsupportedActivations {
        what,
        reason: "MXFP8 activations are an SM100 format (Hopper's FP8 path is A8)",
    }
}
