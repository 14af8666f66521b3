//! The arithmetic of `wgmma.mma_async …m64nNk32.f32.e4m3.e4m3` (Hopper FP8 tensor cores).
//!
//! E4M3 (the "fn" variant, PTX ISA `.e4m3`): sign bit 7, exponent bits 6..3 (bias 7),
//! mantissa bits 2..0; exponent 0 is subnormal, 0.mmm · 2^-6; 0x7F and 0xFF are NaN; there
//! are no infinities. imm-scale-a/b = -1 flips the sign bit of every element.
//!
//! One k32 step, for one accumulator element: the terms are the 32 products a_k·b_k whose
//! operands are both non-zero and, with scale-d, the old accumulator d when it is non-zero.
//! Each term has a *nominal exponent*: a product the sum of its operands' exponents (a
//! subnormal operand counts with E4M3's minimum normal exponent −6, its leading bit below
//! it), the accumulator its own (a subnormal f32: −126). With emax the largest nominal
//! exponent and q = emax − [`FP8_KEEP_BITS`]:
//!
//! 1. every term (its exact value, the accumulator included) is truncated toward zero to a
//!    multiple of 2^q;
//! 2. the truncated terms are summed exactly;
//! 3. the sum is truncated toward zero to [`FP8_RESULT_BITS`] = 14 significant bits (not
//!    f32's 24: the low 10 fraction bits of every result are zero), never below 2^-149, and
//!    ±Inf from 2^128 on; a sum of 0 or no term at all is +0.
//!
//! A NaN operand (whatever the other operand of its product) or, with scale-d, a NaN
//! accumulator gives NaN (canonical 0x7FFFFFFF, written by the caller); otherwise an
//! infinite accumulator (the only possible infinity) gives that infinity.
//!
//! Measured on an H200 (docs/hopper.md, "The FP8 tensor cores' accumulation"): 1 572 864
//! random single and chained k32 steps (any finite e4m3 bytes, narrow and wide exponent
//! ranges, weight-like operands, random accumulators, scale-d true and false) matched this
//! model bit for bit; the exact sum rounded to nearest matched 7.9 %. It is the structure
//! of the bf16/f16 model (`wgmma_math.rs`) with 13 kept bits instead of 25 and a 14-bit
//! result. Assumed, not measured (no kernel input reaches them): results in the subnormal
//! range, a sum of 2^128 or more.
//!
//! Exactness: an e4m3 element is m · 2^(e − 3) with m < 16 and e its nominal exponent, so a
//! product is m_a·m_b (< 2^8) · 2^(e_a + e_b − 6), in units of 2^q that significand times
//! 2^(e_a + e_b − emax + KEEP − 6) ≤ 2^(KEEP − 6); the accumulator's 24-bit significand sits
//! at 2^(e − 23), at most 2^(KEEP − 23) units. With KEEP ≤ 52 every truncated term is below
//! 2^54 units and 33 of them sum in an i64.

use super::wgmma_math::truncate_scaled;

/// How many bits below the largest nominal exponent the terms keep: q = emax −
/// FP8_KEEP_BITS (measured on an H200).
pub const FP8_KEEP_BITS: i32 = 13;

/// Significant bits of a step's result (measured on an H200: every result's low 10 f32
/// fraction bits are zero).
pub const FP8_RESULT_BITS: u32 = 14;

const _: () = assert!(
    FP8_KEEP_BITS >= 0 && FP8_KEEP_BITS <= 52,
    "the i64 sum of wgmma_fp8.rs holds FP8_KEEP_BITS in 0..=52"
);

/// The nominal exponent given to a zero element: a product with it lies far below any real
/// term (real products ≥ −12, accumulators ≥ −126), so it never sets emax, and its zero
/// significand contributes nothing.
const ZERO_EXP: i32 = -4096;

/// Below this emax there is no term at all (every product and the accumulator are zero).
const NO_TERM: i32 = -1024;

/// The 32 K elements of one row of A or column of B, decoded: value = m · 2^(exp − 3), m a
/// signed significand (|m| < 16, 0 for a zero element, whose exp is [`ZERO_EXP`]).
#[derive(Clone, Copy)]
pub(super) struct Fp8Row {
    m: [i32; 32],
    exp: [i32; 32],
    /// Some element is NaN.
    nan: bool,
}

impl Fp8Row {
    /// A row from 32 e4m3 bytes; `neg` flips every sign bit (imm-scale -1).
    pub fn new(bytes: &[u8; 32], neg: bool) -> Fp8Row {
        let mut row = Fp8Row { m: [0; 32], exp: [ZERO_EXP; 32], nan: false };
        for (k, &x) in bytes.iter().enumerate() {
            if x & 0x7F == 0x7F {
                row.nan = true;
                continue;
            }
            let (e, f) = (i32::from((x >> 3) & 0xF), i32::from(x & 7));
            if e == 0 && f == 0 {
                continue;
            }
            // A subnormal: the minimum normal exponent, the leading bit below it.
            let m = if e == 0 { f } else { f | 8 };
            let negative = (x >> 7 == 1) != neg;
            row.m[k] = if negative { -m } else { m };
            row.exp[k] = e.max(1) - 7;
        }
        row
    }
}

/// `mag · 2^shift` truncated to an integer (mag < 2^24, shift ≤ 52 − 6 by the assertion).
fn scaled(mag: u64, shift: i32) -> u64 {
    if shift >= 0 { mag << shift } else { mag >> (-shift).min(63) }
}

/// One output of the k32 e4m3 step on Σ a_k·b_k and `acc` (the old accumulator when scale-d
/// is true). NaN results are some NaN (the caller writes the canonical one).
pub(super) fn dot_e4m3(a: &Fp8Row, b: &Fp8Row, acc: Option<f32>) -> f32 {
    if a.nan || b.nan || acc.is_some_and(f32::is_nan) {
        return f32::NAN;
    }
    if let Some(c) = acc.filter(|c| c.is_infinite()) {
        return c;
    }
    // The accumulator as magnitude (leading bit 2^23 when normal) and nominal exponent.
    let bits = acc.unwrap_or(0.0).to_bits();
    let (e, frac) = (((bits >> 23) & 0xFF) as i32, bits & 0x7F_FFFF);
    let (c_mag, c_exp) = match (e, frac) {
        (0, 0) => (0, ZERO_EXP),
        (0, _) => (frac, -126),
        _ => (frac | 1 << 23, e - 127),
    };
    let mut emax = c_exp;
    for k in 0..32 {
        emax = emax.max(a.exp[k] + b.exp[k]);
    }
    if emax < NO_TERM {
        return 0.0;
    }
    let mut sum = 0i64;
    for k in 0..32 {
        let p = a.m[k] * b.m[k];
        let mag =
            scaled(u64::from(p.unsigned_abs()), a.exp[k] + b.exp[k] - emax + FP8_KEEP_BITS - 6);
        sum += if p < 0 { -(mag as i64) } else { mag as i64 };
    }
    let c = scaled(u64::from(c_mag), c_exp - emax + FP8_KEEP_BITS - 23) as i64;
    sum += if bits >> 31 == 1 { -c } else { c };
    narrow(truncate_scaled(sum, emax - FP8_KEEP_BITS))
}

/// `v` (an f32 already truncated toward zero) truncated toward zero to [`FP8_RESULT_BITS`]
/// significant bits; truncations toward zero compose, so this is the sum's truncation.
fn narrow(v: f32) -> f32 {
    let bits = v.to_bits();
    let (exp, frac) = ((bits >> 23) & 0xFF, bits & 0x7F_FFFF);
    if exp == 0xFF {
        return v;
    }
    let width = if exp == 0 { 32 - frac.leading_zeros() } else { 24 };
    let drop = width.saturating_sub(FP8_RESULT_BITS);
    f32::from_bits(bits & !((1u32 << drop) - 1))
}

/// One `wgmma.mma_async …m64nNk32.f32.e4m3.e4m3` step for one accumulator element, exactly
/// as the simulator executes it: `a` and `b` the 32 K elements of the row of A and the
/// column of B as e4m3 bytes, `acc` the old accumulator when scale-d is true (`None`:
/// scale-d false). A NaN result is the canonical 0x7FFFFFFF. Public so that tests and
/// hardware comparisons can call the model step by step.
pub fn wgmma_k32_e4m3_model(a: &[u8; 32], b: &[u8; 32], acc: Option<f32>) -> f32 {
    let v = dot_e4m3(&Fp8Row::new(a, false), &Fp8Row::new(b, false), acc);
    if v.is_nan() { f32::from_bits(0x7FFF_FFFF) } else { v }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: i32 = FP8_KEEP_BITS;

    /// The exact value of an e4m3 byte (NaN for 0x7F/0xFF), decoded independently.
    fn value(x: u8) -> f64 {
        if x & 0x7F == 0x7F {
            return f64::NAN;
        }
        let (e, f) = (i32::from((x >> 3) & 0xF), f64::from(x & 7));
        let v = if e == 0 { f / 8.0 * 2f64.powi(-6) } else { (1.0 + f / 8.0) * 2f64.powi(e - 7) };
        if x >> 7 == 1 { -v } else { v }
    }

    /// Some pair of e4m3 bytes whose product is exactly `v`.
    fn pair(v: f64) -> (u8, u8) {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                if value(a) * value(b) == v {
                    return (a, b);
                }
            }
        }
        panic!("no e4m3 product is {v}");
    }

    /// The model on `products` (exact values, each made of some pair of e4m3 bytes) placed
    /// at K = 0, 1, … and `acc`.
    fn run(products: &[f64], acc: Option<f32>) -> f32 {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        for (k, &p) in products.iter().enumerate() {
            (a[k], b[k]) = pair(p);
        }
        wgmma_k32_e4m3_model(&a, &b, acc)
    }

    fn p2(e: i32) -> f64 {
        2f64.powi(e)
    }

    fn f2(e: i32) -> f32 {
        2f32.powi(e)
    }

    #[test]
    fn decoding() {
        let row = Fp8Row::new(&std::array::from_fn(|k| [0x38, 0x7E, 0x01, 0x80][k % 4]), false);
        assert_eq!((row.m[0], row.exp[0]), (8, 0), "1.0");
        assert_eq!((row.m[1], row.exp[1]), (14, 8), "448");
        assert_eq!((row.m[2], row.exp[2]), (1, -6), "2^-9: subnormal, nominal -6");
        assert_eq!((row.m[3], row.exp[3]), (0, ZERO_EXP), "-0");
        assert!(!row.nan);
        let neg = Fp8Row::new(&[0x38; 32], true);
        assert_eq!(neg.m[0], -8);
        assert!(Fp8Row::new(&std::array::from_fn(|k| if k == 31 { 0xFF } else { 0 }), true).nan);
        for x in 0..=255u8 {
            let r = Fp8Row::new(&[x; 32], false);
            if x & 0x7F == 0x7F {
                assert!(r.nan);
            } else {
                let v = f64::from(r.m[0]) * 2f64.powi(r.exp[0] - 3);
                assert_eq!(v, if r.m[0] == 0 { 0.0 } else { value(x) }, "{x:#04x}");
            }
        }
    }

    #[test]
    fn terms_truncate_to_multiples_of_2_pow_q() {
        const { assert!(K <= 32, "these cases place products down to 0.75 · 2^(16 - K)") };
        // ±2^16 (256 · 256) set emax = 16 and cancel: q = 16 - K.
        let q = 16 - K;
        let big = [p2(16), -p2(16)];
        let with = |extra: &[f64]| run(&[&big[..], extra].concat(), None);
        assert_eq!(with(&[p2(q)]), f2(q), "a product of 2^q is kept");
        assert_eq!(with(&[p2(q - 1)]).to_bits(), 0, "a product of 2^(q-1) is lost: +0");
        assert_eq!(with(&[1.5 * p2(q)]), f2(q), "1.5 · 2^q truncates to 2^q");
        // Each term is truncated on its own: 30 terms of 1.5 · 2^q sum to 30 · 2^q, not 45.
        assert_eq!(with(&[1.5 * p2(q); 30]), 30.0 * f2(q));
        assert_eq!(with(&[0.75 * p2(q); 30]).to_bits(), 0);
        // Toward zero for negative terms: -1.5 · 2^q is -2^q (rounding down: -2^(q+1)).
        assert_eq!(with(&[-1.5 * p2(q)]), -f2(q));
        assert_eq!(with(&[-0.75 * p2(q)]).to_bits(), 0, "cancellation is +0");
        // The accumulator is a term like the others (it is below emax here).
        assert_eq!(run(&big, Some(1.75 * f2(q))), f2(q));
        assert_eq!(run(&big, Some(-1.75 * f2(q))), -f2(q));
        assert_eq!(run(&big, Some(0.99 * f2(q))).to_bits(), 0);
        // Nominal, not actual, exponents set emax: 1.5 · 1.5 = 2.25 (0x3C · 0x3C) has nominal
        // exponent 0, so q = -K and an accumulator of 2^-K is kept beside ±2.25 (with the
        // actual exponent, 1, it would be lost).
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        (a[0], b[0], a[1], b[1]) = (0x3C, 0x3C, 0xBC, 0x3C);
        assert_eq!(wgmma_k32_e4m3_model(&a, &b, Some(f2(-K))), f2(-K));
        assert_eq!(wgmma_k32_e4m3_model(&a, &b, Some(f2(-K - 1))).to_bits(), 0);
    }

    #[test]
    fn the_accumulator_alone_is_truncated_too() {
        // No product: the accumulator is emax, and loses its bits below 2^(e - K).
        for (acc, e) in [(1.0 + f2(-20), 0), (-(3.0 + f2(-22)), 1), (1000.123f32, 9)] {
            let want = (f64::from(acc) / p2(e - K)).trunc() * p2(e - K);
            assert_eq!(run(&[], Some(acc)), want as f32, "{acc}");
        }
        // A subnormal f32 accumulator has nominal exponent -126.
        let tiny = f32::from_bits(0x0040_0213); // 0x400213 · 2^-149, leading bit 2^-127
        let q = -126 - K;
        let want = (f64::from(0x40_0213) * p2(-149 - q)).trunc() * p2(q);
        assert_eq!(run(&[], Some(tiny)), want as f32);
    }

    #[test]
    fn subnormal_operands() {
        // Exact small products: 2^-9 · 2^-9 and 7·2^-9 · 7·2^-9 (nominal -12, q = -12 - K).
        assert_eq!(wgmma_k32_e4m3_model(&[0x01; 32], &[0x01; 32], None), 32.0 * f2(-18));
        let mut a = [0u8; 32];
        a[5] = 0x07;
        let want = if K >= 6 { 49.0 * f2(-18) } else { (49 >> (6 - K)) as f32 * f2(-12 - K) };
        assert_eq!(wgmma_k32_e4m3_model(&a, &a, None), want);
        // 2^-7 (0x04, a subnormal: nominal exponent -6, actual -7) times 2^8 (0x78) = 2 has
        // nominal exponent 2, so q = 2 - K: an accumulator of 2^(1 - K) is lost (with the
        // actual exponent, 1, it would be kept). -2 (0xC0 · 0x38) cancels the 2.
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        (a[0], b[0], a[1], b[1]) = (0x04, 0x78, 0xC0, 0x38);
        assert_eq!(wgmma_k32_e4m3_model(&a, &b, Some(f2(1 - K))).to_bits(), 0);
        assert_eq!(wgmma_k32_e4m3_model(&a, &b, Some(f2(2 - K))), f2(2 - K));
        // With normal operands, 2^-6 (0x08) times 2^7 (0x70) is 2 with nominal exponent 1:
        // q = 1 - K, and 2^(1 - K) is kept.
        (a[0], b[0]) = (0x08, 0x70);
        assert_eq!(wgmma_k32_e4m3_model(&a, &b, Some(f2(1 - K))), f2(1 - K));
    }

    #[test]
    fn zeros_scale_d_and_specials() {
        let one = [0x38u8; 32];
        let zero = [0u8; 32];
        let neg_zero = [0x80u8; 32];
        // No term: +0, whatever the zeros' signs or a -0 accumulator.
        assert_eq!(wgmma_k32_e4m3_model(&neg_zero, &one, None).to_bits(), 0);
        assert_eq!(wgmma_k32_e4m3_model(&zero, &neg_zero, Some(-0.0)).to_bits(), 0);
        // Cancellation to +0.
        let alt: [u8; 32] = std::array::from_fn(|k| if k % 2 == 0 { 0x38 } else { 0xB8 });
        assert_eq!(wgmma_k32_e4m3_model(&alt, &one, None).to_bits(), 0);
        assert_eq!(wgmma_k32_e4m3_model(&one, &one, None), 32.0);
        // scale-d false ignores the accumulator, even NaN or Inf.
        assert_eq!(wgmma_k32_e4m3_model(&one, &one, Some(5.0)), 37.0);
        assert_eq!(wgmma_k32_e4m3_model(&one, &one, None), 32.0);
        let canonical = 0x7FFF_FFFF;
        let nan_acc = wgmma_k32_e4m3_model(&one, &one, Some(f32::NAN));
        assert_eq!(nan_acc.to_bits(), canonical);
        // NaN operands, even times zero; 0x7F and 0xFF.
        for nan in [0x7F, 0xFF] {
            let mut a = zero;
            a[17] = nan;
            assert_eq!(wgmma_k32_e4m3_model(&a, &zero, None).to_bits(), canonical);
            assert_eq!(wgmma_k32_e4m3_model(&one, &a, Some(f32::INFINITY)).to_bits(), canonical);
        }
        // An infinite accumulator stays that infinity.
        assert_eq!(wgmma_k32_e4m3_model(&one, &one, Some(f32::NEG_INFINITY)), f32::NEG_INFINITY);
        assert_eq!(wgmma_k32_e4m3_model(&zero, &one, Some(f32::INFINITY)), f32::INFINITY);
        // The largest products: 32 · 448² = 6 422 528, exact (its bits lie above 2^q).
        assert_eq!(wgmma_k32_e4m3_model(&[0x7E; 32], &[0xFE; 32], None), -6_422_528.0);
        // A large accumulator truncated toward zero, not overflowing.
        let q = 127 - K;
        let want = (f64::from(f32::MAX) / p2(q)).trunc() * p2(q);
        assert_eq!(wgmma_k32_e4m3_model(&one, &one, Some(f32::MAX)), want as f32);
    }

    /// The model written term by term in f64/i128 (every value and scaled value exact).
    fn reference(a: &[u8; 32], b: &[u8; 32], acc: Option<f32>) -> u32 {
        if a.iter().chain(b).any(|&x| x & 0x7F == 0x7F) || acc.is_some_and(f32::is_nan) {
            return 0x7FFF_FFFF;
        }
        if let Some(c) = acc.filter(|c| c.is_infinite()) {
            return c.to_bits();
        }
        let nominal = |x: u8| i32::from((x >> 3) & 0xF).max(1) - 7;
        let mut terms = Vec::new();
        for k in 0..32 {
            if value(a[k]) != 0.0 && value(b[k]) != 0.0 {
                terms.push((value(a[k]) * value(b[k]), nominal(a[k]) + nominal(b[k])));
            }
        }
        if let Some(c) = acc.filter(|&c| c != 0.0) {
            terms.push((f64::from(c), (((c.to_bits() >> 23) & 0xFF) as i32).max(1) - 127));
        }
        let Some(emax) = terms.iter().map(|t| t.1).max() else { return 0 };
        let q = emax - K;
        let sum: i128 = terms.iter().map(|&(v, _)| (v * 2f64.powi(-q)).trunc() as i128).sum();
        if sum == 0 {
            return 0;
        }
        // Keep FP8_RESULT_BITS significant bits (never below 2^-149), toward zero.
        let top = 127 - sum.unsigned_abs().leading_zeros() as i32 + q;
        let lsb = (top + 1 - FP8_RESULT_BITS as i32).max(-149);
        let kept =
            if lsb > q { sum.unsigned_abs() >> (lsb - q) << (lsb - q) } else { sum.unsigned_abs() };
        let mag = kept as f64 * 2f64.powi(q);
        let r = if mag >= p2(128) { f32::INFINITY } else { mag as f32 };
        (if sum < 0 { -r } else { r }).to_bits()
    }

    #[test]
    fn random_steps_match_the_term_by_term_reference() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for i in 0..20_000 {
            let byte = |x: u64| match x % 16 {
                0 => 0,
                1 => (x >> 8) as u8 & 0x87, // subnormal or ±0
                _ => {
                    let b = (x >> 8) as u8;
                    if b & 0x7F == 0x7F { b ^ 1 } else { b }
                }
            };
            let a: [u8; 32] = std::array::from_fn(|_| byte(next()));
            let b: [u8; 32] = std::array::from_fn(|_| byte(next()));
            let x = next();
            let acc = match i % 4 {
                0 => None,
                1 => Some(0.0),
                _ => {
                    let e = (x >> 40) % 40 + 107; // 2^-20 .. 2^19
                    Some(f32::from_bits(
                        ((x & 1) << 31) as u32 | (e as u32) << 23 | (x >> 8) as u32 & 0x7F_FFFF,
                    ))
                }
            };
            let got = wgmma_k32_e4m3_model(&a, &b, acc).to_bits();
            assert_eq!(got, reference(&a, &b, acc), "step {i}: a {a:02x?} b {b:02x?} acc {acc:?}");
        }
    }
}
