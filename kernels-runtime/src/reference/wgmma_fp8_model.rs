//! The Hopper tensor cores' FP8 accumulation, as measured on an H200 (docs/hopper.md, "The
//! FP8 tensor cores' accumulation"): one `wgmma …k32.f32.e4m3.e4m3` step adds 32 products
//! of E4M3 values to the f32 accumulator by
//!
//! 1. giving each term a nominal exponent: a product's is the sum of its operands'
//!    exponents (a subnormal operand's is E4M3's least, −6), the accumulator's its own;
//! 2. truncating every term toward zero to a multiple of 2^(emax − KEEP), emax the largest
//!    nominal exponent among the non-zero terms;
//! 3. summing the truncated terms exactly;
//! 4. truncating the sum toward zero to 14 significant bits (the low 10 fraction bits of
//!    every result are zero), never below 2^-149; ±∞ from 2^128 on.
//!
//! 1 572 864 random single and chained steps on an H200 (any finite E4M3 bytes, narrow and
//! wide exponent ranges, weight-like operands, random accumulators, scale-d true and false)
//! matched this model bit for bit; the exact sum rounded to nearest matched 7.9 %. Assumed,
//! not measured: results in the subnormal range, sums past f32's range, and NaN — a NaN
//! operand (an activation row with a NaN quantizes it to 0x7F) is taken to give the
//! canonical NaN 0x7FFFFFFF, as the bf16 steps do (E4M3 has no ∞: an ∞ only comes from the
//! accumulator, and is kept).
//!
//! A split K ([`SplitK`]) accumulates each CTA's range of 128-element stages so from zero and
//! adds the CTAs' f32 results in rank order ([`wgmma_dot_e4m3_split`]).

use moegen_dsl::ActivationFormat;

use super::wgmma_model::{SplitK, Term, add_partials, aligned_sum};
use crate::error::check_len;

/// Bits kept below the largest nominal exponent (measured on the H200).
pub const KEEP: i32 = 13;
/// Significant bits of a step's result (measured on the H200).
pub const RESULT_BITS: i32 = 14;

/// An E4M3 byte's (sign, significand, lsb exponent, nominal exponent); `Ok(None)` for zero,
/// `Err(())` for NaN.
fn e4m3_parts(b: u8) -> Result<Option<(bool, u64, i32, i32)>, ()> {
    let (sign, exp, frac) = (b >> 7 == 1, i32::from((b >> 3) & 0xF), u64::from(b & 7));
    match (exp, frac) {
        (15, 7) => Err(()),
        (0, 0) => Ok(None),
        (0, f) => Ok(Some((sign, f, -6 - 3, -6))),
        (e, f) => Ok(Some((sign, f | 8, e - 7 - 3, e - 7))),
    }
}

/// One K32 step: `acc` plus the 32 products `x[i]·w[i]` (E4M3 bytes).
pub fn wgmma_step_e4m3(acc: f32, x: &[u8; 32], w: &[u8; 32]) -> f32 {
    let mut terms: Vec<Term> = Vec::with_capacity(33);
    for (&a, &b) in x.iter().zip(w) {
        match (e4m3_parts(a), e4m3_parts(b)) {
            (Err(()), _) | (_, Err(())) => return f32::from_bits(0x7FFF_FFFF),
            (Ok(Some((sa, ma, la, na))), Ok(Some((sb, mb, lb, nb)))) => {
                terms.push(Term { m: ma * mb, lsb: la + lb, nominal: na + nb, negative: sa != sb })
            }
            _ => {}
        }
    }
    if acc.is_nan() {
        return f32::from_bits(0x7FFF_FFFF);
    }
    if acc.is_infinite() {
        return acc;
    }
    let bits = acc.to_bits();
    let (sign, exp, frac) =
        (bits >> 31 == 1, ((bits >> 23) & 0xFF) as i32, u64::from(bits & 0x7F_FFFF));
    match (exp, frac) {
        (0, 0) => {}
        (0, f) => terms.push(Term { m: f, lsb: -149, nominal: -126, negative: sign }),
        (e, f) => terms.push(Term {
            m: f | 0x80_0000,
            lsb: e - 127 - 23,
            nominal: e - 127,
            negative: sign,
        }),
    }
    aligned_sum(&terms, KEEP, RESULT_BITS)
}

/// A wgmma dot product over E4M3 bytes: [`wgmma_step_e4m3`] per 32-element K step, in K
/// order, from 0 (the first step of a tile ignores the accumulator); a last partial step is
/// zero-padded, as the kernels pad K. `x` and `w` must have the same length.
pub fn wgmma_dot_e4m3(x: &[u8], w: &[u8]) -> crate::error::Result<f32> {
    check_len("wgmma_dot_e4m3 weights", w.len(), x.len())?;
    Ok(dot_padded(x, w))
}

/// [`wgmma_dot_e4m3`] with K split over `split` CTAs as the split A8 GEMMs compute it: each
/// rank's range of whole 128-element stages ([`SplitK::k_ranges`]; the A8 kernels' stage is
/// one 128-byte row of E4M3 activations) accumulated per K32 step from 0, then the ranks'
/// partial sums added in rank order in f32. Every range starts on a K32 step of the unsplit
/// dot, and only the last may end in a zero-padded step, as the kernels pad K. With
/// [`SplitK::NONE`] it is [`wgmma_dot_e4m3`] bit for bit.
pub fn wgmma_dot_e4m3_split(x: &[u8], w: &[u8], split: SplitK) -> crate::error::Result<f32> {
    check_len("wgmma_dot_e4m3_split weights", w.len(), x.len())?;
    Ok(dot_padded_split(x, w, split))
}

/// [`wgmma_dot_e4m3_split`] for slices of the same length (the A8 GEMMs' rows, already
/// padded to whole stages).
pub(super) fn dot_padded_split(x: &[u8], w: &[u8], split: SplitK) -> f32 {
    let k = x.len().min(w.len());
    add_partials(split.k_ranges(k, ActivationFormat::Fp8).map(|r| dot_padded(&x[r.clone()], &w[r])))
}

/// [`wgmma_dot_e4m3`] for slices of the same length.
pub(super) fn dot_padded(x: &[u8], w: &[u8]) -> f32 {
    x.chunks(32).zip(w.chunks(32)).fold(0f32, |acc, (xs, ws)| {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        a[..xs.len()].copy_from_slice(xs);
        b[..ws.len()].copy_from_slice(ws);
        wgmma_step_e4m3(acc, &a, &b)
    })
}
