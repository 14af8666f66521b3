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
