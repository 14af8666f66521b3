//! The arithmetic of `wgmma.mma_async` (the project's accumulation model, docs/reference.md;
//! the CPU reference computes the same independently): each output is the exact sum of its
//! 16 products and, with scale-d, the old accumulator, rounded once to f32 (nearest, ties
//! to even, gradual underflow, an exact zero is +0). Inputs are not flushed: bf16 and f16
//! subnormals count with their values. A NaN input, Inf · 0, or Infs of both signs give
//! NaN (canonical 0x7FFFFFFF, written by the caller); otherwise an Inf gives that Inf.

use super::exact;

/// Kinds of an input element.
const FINITE: u8 = 0;
const POS_INF: u8 = 1;
const NEG_INF: u8 = 2;
const NAN: u8 = 3;

/// The 16 K elements of one row of A or B: finite ones as m · 2^e (m signed).
#[derive(Clone, Copy)]
pub(super) struct Row {
    m: [i32; 16],
    e: [i32; 16],
    kind: [u8; 16],
    special: bool,
    /// The finite row on one exponent: m_k · 2^(e_k − base) and base, when the exponents
    /// span at most 40 bits (mantissas then stay below 2^51), so that a dot product is one
    /// exact i128 sum.
    scaled: Option<([i64; 16], i32)>,
}

impl Row {
    /// A row from 16 bf16 (or f16) bit patterns; `neg` negates every element (imm-scale -1).
    pub fn new(bits: &[u16; 16], bf16: bool, neg: bool) -> Row {
        let mut row =
            Row { m: [0; 16], e: [0; 16], kind: [FINITE; 16], special: false, scaled: None };
        for (k, &h) in bits.iter().enumerate() {
            let (sign, exp, frac) = if bf16 {
                (h >> 15, i32::from((h >> 7) & 0xFF), i32::from(h & 0x7F))
            } else {
                (h >> 15, i32::from((h >> 10) & 0x1F), i32::from(h & 0x3FF))
            };
            let (max_exp, frac_bits, bias) = if bf16 { (0xFF, 7, 127) } else { (0x1F, 10, 15) };
            let negative = (sign == 1) != neg;
            if exp == max_exp {
                row.special = true;
                row.kind[k] = if frac != 0 {
                    NAN
                } else if negative {
                    NEG_INF
                } else {
                    POS_INF
                };
                continue;
            }
            let (m, e) = if exp == 0 {
                (frac, 1 - bias - frac_bits)
            } else {
                (frac | (1 << frac_bits), exp - bias - frac_bits)
            };
            row.m[k] = if negative { -m } else { m };
            row.e[k] = e;
        }
        if !row.special {
            let nonzero = || (0..16).filter(|&k| row.m[k] != 0).map(|k| row.e[k]);
            let base = nonzero().min().unwrap_or(0);
            if nonzero().max().unwrap_or(0) - base <= 40 {
                let m = std::array::from_fn(|k| {
                    if row.m[k] == 0 { 0 } else { i64::from(row.m[k]) << (row.e[k] - base) }
                });
                row.scaled = Some((m, base));
            }
        }
        row
    }
}

/// One output: Σ a_k·b_k (+ acc), rounded once. `acc` is the old accumulator when scale-d
/// is true.
pub(super) fn dot(a: &Row, b: &Row, acc: Option<f32>) -> f32 {
    let acc_special = acc.is_some_and(|c| !c.is_finite());
    if a.special || b.special || acc_special {
        return dot_special(a, b, acc);
    }
    if let (Some((ma, ea)), Some((mb, eb))) = (&a.scaled, &b.scaled) {
        // Products below 2^102, their sum below 2^106: exact.
        let s: i128 = ma.iter().zip(mb).map(|(&x, &y)| i128::from(x) * i128::from(y)).sum();
        let e = ea + eb;
        let c = acc.and_then(exact::f32_parts).filter(|&(m, _)| m != 0);
        match c {
            None => return round_scaled(s, e),
            Some((mc, ec)) if s == 0 => return round_scaled(i128::from(mc), ec),
            // Aligning one to the other stays below 2^127.
            Some((mc, ec)) if (0..=20).contains(&(e - ec)) => {
                return round_scaled((s << (e - ec)) + i128::from(mc), ec);
            }
            Some((mc, ec)) if (1..=100).contains(&(ec - e)) => {
                return round_scaled(s + (i128::from(mc) << (ec - e)), e);
            }
            Some(_) => {}
        }
    }
    dot_terms(a, b, acc)
}

/// The general finite case: the 17 terms on their own exponents.
fn dot_terms(a: &Row, b: &Row, acc: Option<f32>) -> f32 {
    let mut terms = [(0i64, 0i32); 17];
    let mut k = 0;
    for i in 0..16 {
        let m = i64::from(a.m[i]) * i64::from(b.m[i]);
        if m != 0 {
            terms[k] = (m, a.e[i] + b.e[i]);
            k += 1;
        }
    }
    if let Some((m, e)) = acc.and_then(exact::f32_parts).filter(|&(m, _)| m != 0) {
        terms[k] = (m, e);
        k += 1;
    }
    round_terms(&terms[..k])
}

fn dot_special(a: &Row, b: &Row, acc: Option<f32>) -> f32 {
    let mut nan = false;
    let mut inf = 0i8;
    let mut push_inf = |negative: bool, nan: &mut bool| {
        let s = if negative { -1 } else { 1 };
        if inf != 0 && inf != s {
            *nan = true;
        }
        inf = s;
    };
    for i in 0..16 {
        let (ka, kb) = (a.kind[i], b.kind[i]);
        if ka == NAN || kb == NAN {
            nan = true;
        } else if ka != FINITE || kb != FINITE {
            let zero = (ka == FINITE && a.m[i] == 0) || (kb == FINITE && b.m[i] == 0);
            if zero {
                nan = true;
            } else {
                let neg = |k: u8, m: i32| if k == FINITE { m < 0 } else { k == NEG_INF };
                push_inf(neg(ka, a.m[i]) != neg(kb, b.m[i]), &mut nan);
            }
        }
    }
    if let Some(c) = acc {
        if c.is_nan() {
            nan = true;
        } else if c.is_infinite() {
            push_inf(c < 0.0, &mut nan);
        }
    }
    if nan {
        return f32::NAN;
    }
    if inf != 0 {
        return if inf > 0 { f32::INFINITY } else { f32::NEG_INFINITY };
    }
    // Unreachable in practice (a special input is NaN or Inf), kept total.
    dot_terms(a, b, acc)
}

/// Σ m·2^e rounded to f32. Sums whose exponents span at most 80 bits fit an i128 exactly
/// (17 terms below 2^24 · 2^80); wider ones take the general limb sum.
fn round_terms(terms: &[(i64, i32)]) -> f32 {
    let Some(emin) = terms.iter().map(|&(_, e)| e).min() else { return 0.0 };
    let emax = terms.iter().map(|&(_, e)| e).max().unwrap_or(emin);
    if emax - emin > 80 {
        return exact::round_sum_to_f32(terms);
    }
    let sum: i128 = terms.iter().map(|&(m, e)| i128::from(m) << (e - emin)).sum();
    round_scaled(sum, emin)
}

/// v · 2^e rounded to the nearest f32 (ties to even, gradual underflow, +0 for 0).
fn round_scaled(v: i128, e: i32) -> f32 {
    if v == 0 {
        return 0.0;
    }
    let mag = v.unsigned_abs();
    let msb = 127 - mag.leading_zeros() as i32;
    // The exponent of the result's last bit: 24 significant bits, or the subnormal grid.
    let lsb = (e + msb - 23).max(-149);
    let shift = lsb - e;
    let q = if shift <= 0 {
        mag << (-shift) as u32
    } else if shift >= 128 {
        0
    } else {
        let q = mag >> shift as u32;
        let rem = mag & ((1u128 << shift as u32) - 1);
        let half = 1u128 << (shift - 1) as u32;
        if rem > half || (rem == half && q & 1 == 1) { q + 1 } else { q }
    };
    // q < 2^25 and lsb ≥ -149: exact in f64; 2^128 or more becomes Inf in the f32 cast.
    let r = (q as f64 * 2f64.powi(lsb)) as f32;
    if v < 0 { -r } else { r }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_specials() {
        let one = 0x3F80u16; // bf16 1.0
        let tiny = 0x0001u16; // bf16 2^-133
        let mut a = [0u16; 16];
        let mut b = [0u16; 16];
        a[0] = one;
        b[0] = one;
        a[1] = tiny;
        b[1] = 0x3380; // 2^-24: the product 2^-157 is far below the f32 grid at 1
        let (ra, rb) = (Row::new(&a, true, false), Row::new(&b, true, false));
        assert_eq!(dot(&ra, &rb, None), 1.0);
        // The accumulator joins the exact sum: 1 + 2^-24 + 2^-24 rounds once to 1 + 2^-23.
        a[1] = 0x3380;
        b[1] = one;
        let (ra, rb) = (Row::new(&a, true, false), Row::new(&b, true, false));
        assert_eq!(dot(&ra, &rb, Some(2f32.powi(-24))), 1.0 + 2f32.powi(-23));
        assert_eq!(dot(&ra, &rb, Some(-1.0)), 2f32.powi(-24));
        assert_eq!(dot(&ra, &Row::new(&b, true, true), Some(0.0)), -1.0 - 2f32.powi(-24));
        // Subnormal inputs are not flushed: 2^-133 · 2^-10 = 2^-143.
        let mut s = [0u16; 16];
        s[0] = tiny;
        let mut t = [0u16; 16];
        t[0] = 0x3A80; // 2^-10
        assert_eq!(
            dot(&Row::new(&s, true, false), &Row::new(&t, true, false), None),
            2f32.powi(-143)
        );
        // Specials.
        let mut inf = [0u16; 16];
        inf[3] = 0x7F80;
        let ri = Row::new(&inf, true, false);
        let mut x = [0u16; 16];
        x[3] = 0xBF80; // -1
        assert_eq!(dot(&ri, &Row::new(&x, true, false), Some(5.0)), f32::NEG_INFINITY);
        assert!(dot(&ri, &Row::new(&[0; 16], true, false), None).is_nan(), "Inf · 0");
        assert!(dot(&ri, &Row::new(&x, true, false), Some(f32::INFINITY)).is_nan(), "-Inf + Inf");
        assert_eq!(round_scaled(-(1 << 40), -40), -1.0);
        // The one-exponent fast path agrees with the term-by-term sum, across exponent
        // spans (wide ones fall back), subnormals, both input types and accumulators.
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000 {
            let bf16 = i % 2 == 0;
            let spread = [2u64, 8, 40, 256][i % 4];
            let mut elem = || {
                let r = next();
                let e = (r >> 8) % spread;
                let v = if bf16 { 120 + e.min(134) } else { 12 + e.min(17) };
                let v = if r % 7 == 0 { 0 } else { v };
                let (shift, mask) = if bf16 { (7, 0x7F) } else { (10, 0x3FF) };
                ((r & 1) << 15 | v << shift | (r >> 20) & mask) as u16
            };
            let ra: [u16; 16] = std::array::from_fn(|_| elem());
            let rb: [u16; 16] = std::array::from_fn(|_| elem());
            let (a, b) = (Row::new(&ra, bf16, false), Row::new(&rb, bf16, i % 3 == 0));
            let acc = match i % 3 {
                0 => None,
                1 => Some(f32::from_bits(next() as u32 & 0xBFFF_FFFF)),
                _ => Some(f32::from_bits((next() as u32 & 0x807F_FFFF) | 0x3000_0000)),
            };
            assert_eq!(
                dot(&a, &b, acc).to_bits(),
                dot_terms(&a, &b, acc).to_bits(),
                "{ra:x?} {rb:x?} {acc:?}"
            );
        }
        assert_eq!(round_scaled(3, -151), f32::from_bits(1));
        assert_eq!(round_scaled(1, -150), 0.0);
        assert_eq!(round_scaled((1 << 24) - 1, 104), f32::MAX);
        assert_eq!(round_scaled((1 << 25) - 1, 103), f32::INFINITY);
    }
}
