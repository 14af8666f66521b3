//! The Hopper tensor cores' accumulation, as measured on an H200 (docs/hopper.md,
//! docs/reference.md): one `wgmma …k16.f32.bf16.bf16` step adds 16 products of bf16 values
//! to the f32 accumulator by
//!
//! 1. giving each term a nominal exponent: a product's is the sum of its operands'
//!    exponents (not its own leading bit), the accumulator's its own;
//! 2. truncating every term toward zero to a multiple of 2^(emax − 25), emax the largest
//!    nominal exponent;
//! 3. summing the truncated terms exactly;
//! 4. truncating the sum toward zero to f32.
//!
//! 153 600 random steps on an H200 matched this on every bit; the exact sum rounded to
//! nearest matched 60 %. Assumptions not measured (no kernel input reaches them: weights
//! dequantize to normal bf16 values, activations are normal or zero in practice): a subnormal
//! operand's nominal exponent is the format's minimum, −126; a sum past f32's range is ±∞; a
//! sum below the normal range truncates toward zero onto the subnormal grid. NaN operands,
//! ∞·0 and ∞ of both signs give the canonical NaN 0x7FFFFFFF; ∞ of one sign gives ∞.
//!
//! A GEMM whose K is split over several CTAs ([`SplitK`]) runs this accumulation on each
//! CTA's range of K from zero and adds the CTAs' f32 results in a fixed order
//! ([`wgmma_dot_split`]; docs/reference.md, "Split K").

use std::ops::Range;

use moegen_dsl::sm90_tactics::{SM90_SPLIT_K, sm90_split_k_range};
use moegen_dsl::{ActivationFormat, GemmTactic};

use crate::error::RuntimeError;

/// A finite nonzero term: `m · 2^lsb`, its nominal exponent, its sign.
#[derive(Clone, Copy, Debug)]
pub(super) struct Term {
    pub(super) m: u64,
    pub(super) lsb: i32,
    pub(super) nominal: i32,
    pub(super) negative: bool,
}

/// Special values met in a step.
#[derive(Default)]
struct Specials {
    nan: bool,
    pos_inf: bool,
    neg_inf: bool,
}

/// A bf16 value's (sign, significand, lsb exponent, nominal exponent), or `None` for zero;
/// `Err(true)` for NaN, `Err(false)` for ∞ (sign in the first field of the caller's check).
fn bf16_parts(h: u16) -> Result<Option<(bool, u64, i32, i32)>, bool> {
    let (sign, exp, frac) = (h >> 15 == 1, i32::from((h >> 7) & 0xFF), u64::from(h & 0x7F));
    match (exp, frac) {
        (0xFF, 0) => Err(false),
        (0xFF, _) => Err(true),
        (0, 0) => Ok(None),
        (0, f) => Ok(Some((sign, f, -126 - 7, -126))),
        (e, f) => Ok(Some((sign, f | 0x80, e - 127 - 7, e - 127))),
    }
}

/// One K16 step: `acc` plus the products `x[i]·w[i]` (bf16 bits; fewer than 16 pairs are
/// the zero-padded rest).
pub fn wgmma_step(acc: f32, x: &[u16], w: &[u16]) -> f32 {
    let mut terms: Vec<Term> = Vec::with_capacity(17);
    let mut sp = Specials::default();
    for (&a, &b) in x.iter().zip(w) {
        match (bf16_parts(a), bf16_parts(b)) {
            (Err(true), _) | (_, Err(true)) => sp.nan = true,
            (Err(false), Ok(None)) | (Ok(None), Err(false)) => sp.nan = true,
            (Err(false), _) | (_, Err(false)) => {
                if (a ^ b) >> 15 == 1 {
                    sp.neg_inf = true;
                } else {
                    sp.pos_inf = true;
                }
            }
            (Ok(Some((sa, ma, la, na))), Ok(Some((sb, mb, lb, nb)))) => {
                terms.push(Term { m: ma * mb, lsb: la + lb, nominal: na + nb, negative: sa != sb })
            }
            _ => {}
        }
    }
    let bits = acc.to_bits();
    let (sign, exp, frac) =
        (bits >> 31 == 1, ((bits >> 23) & 0xFF) as i32, u64::from(bits & 0x7F_FFFF));
    match (exp, frac) {
        (0xFF, 0) if sign => sp.neg_inf = true,
        (0xFF, 0) => sp.pos_inf = true,
        (0xFF, _) => sp.nan = true,
        (0, 0) => {}
        (0, f) => terms.push(Term { m: f, lsb: -149, nominal: -126, negative: sign }),
        (e, f) => terms.push(Term {
            m: f | 0x80_0000,
            lsb: e - 127 - 23,
            nominal: e - 127,
            negative: sign,
        }),
    }
    if sp.nan || (sp.pos_inf && sp.neg_inf) {
        return f32::from_bits(0x7FFF_FFFF);
    }
    if sp.pos_inf || sp.neg_inf {
        return if sp.pos_inf { f32::INFINITY } else { f32::NEG_INFINITY };
    }
    aligned_sum(&terms, 25, 24)
}

/// The tensor cores' sum of `terms` (both Hopper step models): each truncated toward zero
/// to a multiple of 2^(emax − `keep`), emax the largest nominal exponent, summed exactly,
/// the sum truncated toward zero to `result_bits` significant bits (never below 2^-149;
/// ±∞ from 2^128); +0 for no term. Every term is below 2^(emax + 2), so in units of 2^q each
/// truncated term is below 2^(keep + 2): for keep ≤ 25 and at most 33 terms the i64 sum
/// cannot overflow.
pub(super) fn aligned_sum(terms: &[Term], keep: i32, result_bits: i32) -> f32 {
    let Some(emax) = terms.iter().map(|t| t.nominal).max() else { return 0.0 };
    let q = emax - keep;
    let sum: i64 = terms
        .iter()
        .map(|t| {
            let units = if t.lsb >= q {
                t.m << (t.lsb - q)
            } else {
                t.m.checked_shr((q - t.lsb) as u32).unwrap_or(0)
            };
            if t.negative { -(units as i64) } else { units as i64 }
        })
        .sum();
    if sum == 0 {
        return 0.0;
    }
    let mut mag = sum.unsigned_abs();
    let mut lsb = q;
    let width = 64 - mag.leading_zeros() as i32;
    let keep_from = (lsb + width - result_bits).max(-149);
    if keep_from > lsb {
        mag = mag.checked_shr((keep_from - lsb) as u32).unwrap_or(0);
        lsb = keep_from;
    }
    let v = mag as f64 * 2f64.powi(lsb);
    let f = if v >= 2f64.powi(128) { f32::INFINITY } else { v as f32 };
    if sum < 0 { -f } else { f }
}

/// A wgmma dot product: [`wgmma_step`] per 16-element K step, in K order, from 0.
pub fn wgmma_dot(x: &[u16], w: &[u16]) -> f32 {
    x.chunks(16).zip(w.chunks(16)).fold(0f32, |acc, (xs, ws)| wgmma_step(acc, xs, ws))
}

/// The CTAs of a cluster that split each unit's K in one Hopper GEMM
/// (`GemmTactic::split_k`): 1 (no split) or one of [`SM90_SPLIT_K`]. Only [`SplitK::new`]
/// and [`SplitK::of`] make one, so every value is a split some kernel runs, and the
/// functions that take one cannot be handed another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SplitK(u32);

impl Default for SplitK {
    fn default() -> Self {
        Self::NONE
    }
}

impl SplitK {
    /// No split: one CTA accumulates the whole K (every tactic but the split ones).
    pub const NONE: Self = Self(1);

    /// `split` CTAs per unit; [`RuntimeError::UnsupportedSplitK`] unless it is 1 or one of
    /// [`SM90_SPLIT_K`].
    pub fn new(split: u32) -> crate::error::Result<Self> {
        if split == 1 || SM90_SPLIT_K.contains(&split) {
            Ok(Self(split))
        } else {
            Err(RuntimeError::UnsupportedSplitK { split })
        }
    }

    /// The split of a GEMM tactic (1 for every SM100 tactic).
    pub fn of(gemm: &GemmTactic) -> crate::error::Result<Self> {
        Self::new(gemm.split_k())
    }

    /// The number of CTAs.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The element ranges of a K of `k` elements that ranks 0, 1, … accumulate, in rank
    /// order, for a GEMM whose activations are `activations` (its pipeline stage,
    /// `ActivationFormat::sm90_k_stage`: 64 elements for bf16 operands, A16 and A4; 128 for
    /// A8's E4M3). The kernels split K at whole stages (K zero-padded to the last one) by
    /// `sm90_split_k_range`, so the ranges are those stages' elements, the last cut at `k`;
    /// together they cover `0..k` once, and a rank with no stage gets an empty range. With
    /// no split: `0..k`.
    pub fn k_ranges(
        self,
        k: usize,
        activations: ActivationFormat,
    ) -> impl Iterator<Item = Range<usize>> {
        let stage = activations.sm90_k_stage() as usize;
        let k_tiles = k.div_ceil(stage);
        let split = self.0;
        // The dsl's function is the kernels' own u32 arithmetic; a K whose stages times the
        // split pass u32 (2^36 elements or more: no kernel runs it) takes the same formula in
        // u64, and the element bounds saturate, so no input panics or wraps.
        let fits = u32::try_from(k_tiles).ok().filter(|t| t.checked_mul(split).is_some());
        (0..split).map(move |rank| {
            let (begin, end) = match fits {
                Some(t) => {
                    let (b, e) = sm90_split_k_range(t, split, rank);
                    (b as usize, e as usize)
                }
                None => {
                    let (t, s, r) = (k_tiles as u64, u64::from(split), u64::from(rank));
                    ((r * t / s) as usize, ((r + 1) * t / s) as usize)
                }
            };
            begin.saturating_mul(stage).min(k)..end.saturating_mul(stage).min(k)
        })
    }
}

/// Rank 0's sum of the ranks' fp32 partial sums, in rank order, `((p0 + p1) + p2) + p3`:
/// the split kernels' fixed reduction (ordinary `add.f32`, round to nearest), so that the
/// reference is bit-exact with them however the partial sums round. A NaN sum is the
/// canonical 0x7FFFFFFF, as the GPU's adds give it (x86's ∞ − ∞ would be 0xFFC00000). One
/// partial sum comes back as it is: no split is the unsplit dot bit for bit.
pub(super) fn add_partials(mut partials: impl Iterator<Item = f32>) -> f32 {
    let first = partials.next().unwrap_or(0.0);
    partials.fold(first, |acc, p| {
        let s = acc + p;
        if s.is_nan() { f32::from_bits(0x7FFF_FFFF) } else { s }
    })
}

/// A wgmma dot product with K split over `split` CTAs as the split Hopper GEMMs compute it:
/// each rank's range of whole 64-element stages ([`SplitK::k_ranges`]) accumulated by
/// [`wgmma_dot`] from 0 (a rank starts its own accumulator), then the ranks' partial sums
/// added in rank order in f32 (`add_partials`). The stage is a multiple of 16, so every
/// range starts on one of the unsplit dot's K16 steps: the split changes only where the
/// accumulation restarts and how the pieces are added. With [`SplitK::NONE`] it is
/// [`wgmma_dot`] bit for bit. As `wgmma_dot`, K is the shorter slice's length.
pub fn wgmma_dot_split(x: &[u16], w: &[u16], split: SplitK) -> f32 {
    let k = x.len().min(w.len());
    add_partials(split.k_ranges(k, ActivationFormat::Bf16).map(|r| wgmma_dot(&x[r.clone()], &w[r])))
}
