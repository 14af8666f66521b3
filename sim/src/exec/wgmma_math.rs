//! The arithmetic of `wgmma.mma_async …k16.f32.{bf16,f16}`: the model measured on an H200
//! (docs/simulator.md, docs/hopper.md). For one accumulator element the terms are the 16
//! products a_k·b_k whose operands are both non-zero and, with scale-d, the old accumulator
//! d when it is non-zero. Each term has a *nominal exponent*: a product the sum of its
//! operands' exponents (the exponent of each operand's leading bit; a subnormal operand
//! counts with the format's minimum normal exponent, leading bit below it — an assumption,
//! not measured), the accumulator its own (a subnormal one: −126, likewise assumed). With
//! emax the largest nominal exponent and q = emax − 25:
//!
//! 1. every term (its exact value) is truncated toward zero to a multiple of 2^q;
//! 2. the truncated terms are summed exactly;
//! 3. the sum is truncated toward zero to f32 (24 significant bits, the sign applied
//!    after); a sum of 0 or no term at all is +0. Assumed, not measured: a result of 2^128
//!    or more is ±Inf, one below the normal range is truncated to the subnormal grid (a
//!    non-zero sum below 2^-149 gives a zero of its sign).
//!
//! 153 600 random single steps on an H200 matched this bit for bit (normal and zero bf16
//! inputs); the exact sum rounded once to nearest, the former model here, matched 60 %.
//! f16 is assumed to behave as bf16. Inputs are not flushed. A NaN input, Inf · 0, or Infs of both signs give NaN (canonical
//! 0x7FFFFFFF, written by the caller); otherwise an Inf gives that Inf.
//!
//! Why it is fast: a product's significand has at most 2·11 bits and its last bit lies at
//! most 25 − 2·(fraction bits) above 2^q, so every truncated term is an integer below 2^27
//! (in units of 2^q). A product is formed in f32 (exact: 22 bits), scaled by a power of two
//! (exact) and converted to an integer (which truncates toward zero); the 16 of them sum in
//! an i32 (below 16·2^27 < 2^31). No branch, one exponent max and one sum per output.

/// Kinds of an input element.
const FINITE: u8 = 0;
const POS_INF: u8 = 1;
const NEG_INF: u8 = 2;
const NAN: u8 = 3;

/// The nominal exponent given to a zero element: a product with it lies far below any real
/// term (real products ≥ −2·126 and accumulators ≥ −126), so it never sets emax and its
/// (zero) significand contributes nothing.
const ZERO_EXP: i32 = -4096;

/// The 16 K elements of one row of A or B: finite ones as signed integer significand (held
/// exactly in an f32) and nominal exponent: value = m · 2^(exp − fraction bits).
#[derive(Clone, Copy)]
pub(super) struct Row {
    m: [f32; 16],
    exp: [i32; 16],
    /// 25 − 2·(fraction bits): where a product's last bit sits, in units of 2^q, when its
    /// nominal exponent is emax (11 for bf16, 5 for f16).
    lift: u32,
    kind: [u8; 16],
    special: bool,
}

impl Row {
    /// A row from 16 bf16 (or f16) bit patterns; `neg` negates every element (imm-scale -1).
    pub fn new(bits: &[u16; 16], bf16: bool, neg: bool) -> Row {
        let (max_exp, frac_bits, bias) = if bf16 { (0xFF, 7, 127) } else { (0x1F, 10, 15) };
        let mut row = Row {
            m: [0.0; 16],
            exp: [ZERO_EXP; 16],
            lift: 25 - 2 * frac_bits,
            kind: [FINITE; 16],
            special: false,
        };
        for (k, &h) in bits.iter().enumerate() {
            let (exp, frac) = if bf16 {
                (i32::from((h >> 7) & 0xFF), u32::from(h & 0x7F))
            } else {
                (i32::from((h >> 10) & 0x1F), u32::from(h & 0x3FF))
            };
            let negative = (h >> 15 == 1) != neg;
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
            if exp == 0 && frac == 0 {
                continue;
            }
            // A subnormal: the minimum normal exponent, the leading bit below it.
            let m = if exp == 0 { frac } else { frac | (1 << frac_bits) } as f32;
            row.m[k] = if negative { -m } else { m };
            row.exp[k] = exp.max(1) - bias;
        }
        row
    }
}

/// One output: the measured k16 step on Σ a_k·b_k and `acc` (the old accumulator when
/// scale-d is true).
pub(super) fn dot(a: &Row, b: &Row, acc: Option<f32>) -> f32 {
    let acc_special = acc.is_some_and(|c| !c.is_finite());
    if a.special || b.special || acc_special {
        return dot_special(a, b, acc);
    }
    dot_finite(a, b, acc.unwrap_or(0.0))
}

/// The finite case (`acc` finite; ±0 when scale-d is false).
fn dot_finite(a: &Row, b: &Row, acc: f32) -> f32 {
    // The accumulator as significand (leading bit 2^23 when normal) and nominal exponent.
    let bits = acc.to_bits();
    let (e, frac) = (((bits >> 23) & 0xFF) as i32, bits & 0x7F_FFFF);
    let (c_mag, c_exp) = if e == 0 && frac == 0 {
        (0, ZERO_EXP)
    } else if e == 0 {
        (frac, -126)
    } else {
        (frac | 1 << 23, e - 127)
    };
    let mut emax = c_exp;
    for k in 0..16 {
        emax = emax.max(a.exp[k] + b.exp[k]);
    }
    // Each product in units of 2^q (q = emax − 25), truncated toward zero: its significand
    // times 2^(lift − t), t = emax − its nominal exponent ≥ 0. The scale is built as f32
    // bits, clamped to stay normal (from t = lift + 126 on every product truncates to 0
    // anyway: it is below 2^22 · 2^-126); the conversion to i32 truncates.
    let base = 127 + a.lift as i32 - emax;
    let mut products = 0i32;
    for k in 0..16 {
        let scale = f32::from_bits(((base + a.exp[k] + b.exp[k]).max(1) as u32) << 23);
        products += (a.m[k] * b.m[k] * scale) as i32;
    }
    // The accumulator's last bit lies 23 below its exponent: 2^(2 − t) units.
    let c = i64::from((c_mag << 2) >> (emax - c_exp).min(31) as u32);
    let sum = i64::from(products) + if bits >> 31 == 1 { -c } else { c };
    truncate_scaled(sum, emax - 25)
}

/// v · 2^q truncated toward zero to f32: 24 significant bits, then the subnormal grid
/// (assumed); ±Inf from 2^128 on (assumed); +0 for 0, a zero of v's sign when v is below
/// the smallest subnormal. |v| < 2^63, q ≥ −300.
pub(super) fn truncate_scaled(v: i64, q: i32) -> f32 {
    if v == 0 {
        return 0.0;
    }
    let mag = v.unsigned_abs();
    let top = q + 63 - mag.leading_zeros() as i32;
    let r = if top > 127 {
        f32::INFINITY
    } else {
        let lsb = (top - 23).max(-149);
        let (m, e) = if lsb > q { (mag >> (lsb - q).min(63), lsb) } else { (mag, q) };
        // m < 2^24 on the f32 grid and 2^e a normal f64: exact in f64 and in f32.
        (m as f64 * f64::from_bits(((e + 1023) as u64) << 52)) as f32
    };
    if v < 0 { -r } else { r }
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
            let zero = (ka == FINITE && a.m[i] == 0.0) || (kb == FINITE && b.m[i] == 0.0);
            if zero {
                nan = true;
            } else {
                let neg = |k: u8, m: f32| if k == FINITE { m < 0.0 } else { k == NEG_INF };
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
    dot_finite(a, b, acc.unwrap_or(0.0))
}

/// One `wgmma.mma_async …k16.f32.bf16.bf16` (`bf16`) or `.f32.f16.f16` step for one
/// accumulator element, exactly as the simulator executes it: `acc` is the old accumulator
/// when scale-d is true (`None`: scale-d false), `a` and `b` the 16 K elements of the row of
/// A and the column of B as bit patterns. A NaN result is the canonical 0x7FFFFFFF. Public
/// so that tests and hardware comparisons can call the model step by step.
pub fn wgmma_k16_model(a: &[u16; 16], b: &[u16; 16], bf16: bool, acc: Option<f32>) -> f32 {
    let v = dot(&Row::new(a, bf16, false), &Row::new(b, bf16, false), acc);
    if v.is_nan() { f32::from_bits(0x7FFF_FFFF) } else { v }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: u16 = 0x3F80; // bf16 1.0

    fn row(pairs: &[(usize, u16)]) -> Row {
        let mut bits = [0u16; 16];
        for &(k, h) in pairs {
            bits[k] = h;
        }
        Row::new(&bits, true, false)
    }

    #[test]
    fn truncation_and_specials() {
        let ones = row(&[(0, ONE), (1, ONE)]);
        // 1 + 2^-24 + 2^-30 truncates to 1 (round to nearest: 1 + 2^-23): the accumulator
        // lies below 2^q = 2^-25 and vanishes, the sum 1 + 2^-24 loses its last bit.
        let r = row(&[(0, ONE), (1, 0x3380)]);
        assert_eq!(dot(&r, &ones, Some(2f32.powi(-30))), 1.0);
        assert_eq!(dot(&r, &ones, Some(2f32.powi(-24))), 1.0 + 2f32.powi(-23));
        // Negative sums truncate toward zero: -(1 + 2^-24) is -1.
        let neg = row(&[(0, 0xBF80), (1, 0xB380)]);
        assert_eq!(dot(&neg, &ones, None), -1.0);
        // Cancellation to 0 is +0; no term at all is +0; a -0 accumulator alone is +0.
        let cancel = row(&[(0, ONE), (1, 0xBF80)]);
        assert_eq!(dot(&cancel, &ones, None).to_bits(), 0);
        assert_eq!(dot(&row(&[]), &ones, Some(-0.0)).to_bits(), 0);
        // Subnormal operands count with the minimum normal exponent: 2^-133 · 2^-10.
        let sub = row(&[(0, 0x0001)]);
        assert_eq!(dot(&sub, &row(&[(0, 0x3A80)]), None), 2f32.powi(-143));
        // The subnormal grid truncates: 2^-133 · 2^-24 = 2^-157 → +0; its negative → -0.
        assert_eq!(dot(&sub, &row(&[(0, 0x3380)]), None).to_bits(), 0);
        assert_eq!(dot(&sub, &row(&[(0, 0xB380)]), None).to_bits(), 0x8000_0000);
        // Overflow: 2^127 · 2 + 2^127 · 2.
        let big = row(&[(0, 0x7F00), (1, 0x7F00)]);
        assert_eq!(dot(&big, &row(&[(0, 0x4000), (1, 0x4000)]), None), f32::INFINITY);
        assert_eq!(truncate_scaled((1 << 24) - 1, 104), f32::MAX);
        assert_eq!(truncate_scaled(-((1 << 25) - 1), 103), -f32::MAX);
        assert_eq!(truncate_scaled(1 << 24, 104), f32::INFINITY);
        assert_eq!(truncate_scaled(3, -150), f32::from_bits(1));
        // Specials.
        let inf = row(&[(3, 0x7F80)]);
        let m1 = row(&[(3, 0xBF80)]);
        assert_eq!(dot(&inf, &m1, Some(5.0)), f32::NEG_INFINITY);
        assert!(dot(&inf, &row(&[]), None).is_nan(), "Inf · 0");
        assert!(dot(&inf, &m1, Some(f32::INFINITY)).is_nan(), "-Inf + Inf");
        assert_eq!(wgmma_k16_model(&[0x7FC0; 16], &[ONE; 16], true, None).to_bits(), 0x7FFF_FFFF);
        assert_eq!(dot(&ones, &ones, Some(f32::NAN)).to_bits(), f32::NAN.to_bits());
    }
}
