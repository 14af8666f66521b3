//! The exact dot product of `tcgen05.mma.kind::mxf8f6f4.block_scale.block32` with E4M3
//! activations (A) and E2M1 weights (B), UE8M0 scales per 32 (docs/reference.md, "SM100
//! MXFP8 × MXFP4").
//!
//! One instruction covers K = 32, one scale block per operand, so the accumulator is
//! modelled per block: `D ← round_f32(D + S_c)`, nearest even, once per block, in K order,
//! from D = +0, where `S_c = Σ e4m3 · e2m1 · 2^(sa − 127) · 2^(sb − 127)` is exact. E4M3
//! values are multiples of 2^-9 and E2M1 of 2^-1, so S_c = P · 2^(sa + sb − 264) with P an
//! integer, |P| < 32 · 448·2^9 · 12 < 2^27. The scales reach 2^±127 and D any f32, so D + S_c
//! is added exactly by [`add_scaled_rn`] (no f64: the exponent gap can pass 300 binades).

use moegen_dsl::formats::{E4M3_NAN, UE8M0_NAN, e2m1_to_f32, e4m3_to_f32, nibble_at};

use crate::error::{Result, RuntimeError};

/// K elements per `kind::mxf8f6f4` MMA, one UE8M0 scale block.
pub const MX_MMA_K: usize = 32;

/// UE8M0 bias (127) twice, E4M3's unit 2^-9 and E2M1's 2^-1: S_c = P · 2^(sa + sb − 264).
const BLOCK_EXP_BIAS: i32 = 127 + 127 + 9 + 1;

/// One E4M3 row (the A operand: activations or GEMM1's h) over K, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct E4m3Row {
    /// 512 · value, an integer (|·| ≤ 229 376); 0 for a NaN code, which `nan` records.
    values: Vec<i32>,
    /// Per 32-block: a NaN code or the NaN scale code 0xFF makes the block, and the dot, NaN.
    nan: Vec<bool>,
    /// Per 32-block UE8M0 codes.
    scales: Vec<u8>,
}

/// One E2M1 row (the B operand: weights) over K, decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct E2m1Row {
    /// 2 · value, an integer in {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}.
    values: Vec<i8>,
    /// Per 32-block UE8M0 codes.
    scales: Vec<u8>,
}

/// K must be whole MMAs; a row may be longer (the kernels' padding to 128), never shorter.
fn check_k(what: &'static str, len: usize, needed: usize, k: usize) -> Result<()> {
    if !k.is_multiple_of(MX_MMA_K) {
        return Err(moegen_dsl::plan::PlanError::Alignment {
            what: "dot product K",
            value: k as u64,
            multiple: MX_MMA_K as u64,
            why: " (one kind::mxf8f6f4 MMA per 32-block)",
        }
        .into());
    }
    if len < needed {
        return Err(RuntimeError::BufferLength { what, expected: needed, actual: len });
    }
    Ok(())
}

impl E4m3Row {
    /// The first `k` codes (one byte each) and `k / 32` scale codes; anything past them (the
    /// padding to 128) is never read.
    pub fn new(codes: &[u8], scales: &[u8], k: usize) -> Result<Self> {
        check_k("E4M3 row codes", codes.len(), k, k)?;
        check_k("E4M3 row scales", scales.len(), k / MX_MMA_K, k)?;
        Ok(Self::decode(codes, scales.iter().copied(), k))
    }

    /// [`Self::new`] for callers that checked the lengths, with the scales from an iterator
    /// (a 128x4 layout's bytes).
    pub(crate) fn decode(codes: &[u8], scales: impl Iterator<Item = u8>, k: usize) -> Self {
        let scales: Vec<u8> = scales.take(k / MX_MMA_K).collect();
        let is_nan = |c: u8| c & E4M3_NAN == E4M3_NAN;
        let values = codes[..k].iter().map(|&c| if is_nan(c) { 0 } else { e4m3_512(c) }).collect();
        let nan = scales
            .iter()
            .enumerate()
            .map(|(b, &s)| {
                s == UE8M0_NAN || codes[b * MX_MMA_K..(b + 1) * MX_MMA_K].iter().any(|&c| is_nan(c))
            })
            .collect();
        Self { values, nan, scales }
    }
}

/// 512 · e4m3, exact: E4M3's finite values are multiples of 2^-9 below 2^9.
fn e4m3_512(code: u8) -> i32 {
    (e4m3_to_f32(code) * 512.0) as i32
}

impl E2m1Row {
    /// The first `k` packed codes (`k / 2` bytes, the lower K index in the low nibble) and
    /// `k / 32` scale codes; anything past them is never read.
    pub fn new(packed: &[u8], scales: &[u8], k: usize) -> Result<Self> {
        check_k("E2M1 row codes", packed.len(), k / 2, k)?;
        check_k("E2M1 row scales", scales.len(), k / MX_MMA_K, k)?;
        Ok(Self::decode(packed, scales.iter().copied(), k))
    }

    /// [`Self::new`] for callers that checked the lengths.
    pub(crate) fn decode(packed: &[u8], scales: impl Iterator<Item = u8>, k: usize) -> Self {
        let values =
            (0..k).map(|i| (e2m1_to_f32(nibble_at(packed, i).unwrap_or(0)) * 2.0) as i8).collect();
        Self { values, scales: scales.take(k / MX_MMA_K).collect() }
    }
}

/// `Σ_k a_k · b_k` accumulated block by block (module docs): `D ← round_f32(D + S_c)` for
/// each 32-block c of K in order. NaN (payload unspecified) as soon as a block holds an
/// E4M3 NaN code or a 0xFF scale on either side. Rows built for different K give the dot
/// over the blocks both hold.
pub fn mx_dot(a: &E4m3Row, b: &E2m1Row) -> f32 {
    let blocks = a.scales.len().min(b.scales.len());
    let mut d = 0.0f32;
    for c in 0..blocks {
        let (sa, sb) = (a.scales[c], b.scales[c]);
        // The block-scaled MMA's model (docs/simulator.md, shared with `kind::mxf4nvf4`): an
        // instruction whose accumulator input is infinite (an earlier block overflowed)
        // gives NaN, as do NaN codes and scales.
        if a.nan[c] || sb == UE8M0_NAN || d.is_infinite() {
            return f32::NAN;
        }
        let range = c * MX_MMA_K..(c + 1) * MX_MMA_K;
        let p: i64 = a.values[range.clone()]
            .iter()
            .zip(&b.values[range])
            .map(|(&x, &y)| i64::from(x) * i64::from(y))
            .sum();
        d = add_scaled_rn(d, p, i32::from(sa) + i32::from(sb) - BLOCK_EXP_BIAS);
    }
    d
}

/// [`mx_dot`] of raw rows: `k` E4M3 codes and their `k/32` scales against `k` packed E2M1
/// codes and theirs (K a multiple of 32; bytes past K are not read).
pub fn mx_dot_bytes(
    a_codes: &[u8],
    a_scales: &[u8],
    b_packed: &[u8],
    b_scales: &[u8],
    k: usize,
) -> Result<f32> {
    let a = E4m3Row::new(a_codes, a_scales, k)?;
    let b = E2m1Row::new(b_packed, b_scales, k)?;
    Ok(mx_dot(&a, &b))
}

/// `d + m · 2^e` computed exactly and rounded once to f32, nearest even, with IEEE
/// addition's special cases: NaN stays NaN, ±inf stays (the addend is finite), a sum past
/// f32's range is ±inf, an exact zero sum of two non-zero terms is +0, `m = 0` adds +0
/// (so −0 + 0 = +0 and +0 + 0 = +0), and a non-zero sum that rounds to zero keeps its sign.
pub fn add_scaled_rn(d: f32, m: i64, e: i32) -> f32 {
    if d.is_nan() || d.is_infinite() {
        return d;
    }
    if m == 0 {
        // d + (+0): d itself unless d is a zero, and −0 + +0 = +0 under nearest rounding.
        return if d == 0.0 { 0.0 } else { d };
    }
    let e = i64::from(e);
    let Some((dm, de)) = f32_parts(d) else {
        // d = ±0: the sum is the addend, rounded.
        return round_rn(i128::from(m), e);
    };
    let top = |mag: u64, ex: i64| ex + 63 - i64::from(mag.leading_zeros());
    let t = top(dm.unsigned_abs(), de).max(top(m.unsigned_abs(), e));
    // The grid the sum is formed on (see `on_grid`): fine enough that every rounding
    // boundary of the result is a multiple of 2^(e_low + 1), coarse enough that the sum fits
    // in 104 bits.
    let e_low = de.min(e).max((t - 100).max(-152));
    let sum = on_grid(dm, de, e_low) + on_grid(m, e, e_low);
    if sum == 0 {
        // Exact cancellation (a jammed term is odd on the grid, the other even: never 0).
        return 0.0;
    }
    round_rn(sum, e_low - 1)
}

/// A finite non-zero f32 as `m · 2^e` (|m| < 2^24); `None` for ±0.
fn f32_parts(x: f32) -> Option<(i64, i64)> {
    let bits = x.to_bits();
    let field = i64::from((bits >> 23) & 0xFF);
    let frac = i64::from(bits & 0x7F_FFFF);
    let (m, e) = if field == 0 { (frac, -149) } else { (frac | 1 << 23, field - 150) };
    if m == 0 {
        return None;
    }
    Some((if x.is_sign_negative() { -m } else { m }, e))
}

/// `m · 2^e` on the grid 2^(e_low − 1). Exact when e ≥ e_low; otherwise truncated to
/// 2^e_low and jammed: twice the truncated value plus 1 if any bit was dropped. The jammed
/// value then lies strictly between the same two even grid points as the true one, and the
/// other term (never truncated, the caller's e_low guarantees it) is even, so the sum keeps
/// the true sum's side of every boundary that is a multiple of 2^(e_low + 1): the rounding
/// of the sum is the rounding of the exact sum. Why the boundaries are such multiples: a
/// term is truncated only when e_low = t − 100 or e_low = −152 (t the larger term's top
/// bit). In the first case its top bit is below t − 1 (a 63-bit m reaches no further), so the
/// sum's top bit is at least t − 1 and its half-ulp at least 2^(t − 25); in the second, every
/// f32 boundary is a multiple of 2^-150.
fn on_grid(m: i64, e: i64, e_low: i64) -> i128 {
    let mag = m.unsigned_abs();
    let v = if e >= e_low {
        // e − e_low + 1 ≤ 101 − (bits of m) + 1 here, so the shift stays inside i128.
        i128::from(mag) << (e - e_low + 1)
    } else {
        let r = e_low - e;
        let (q, dropped) =
            if r >= 64 { (0, mag != 0) } else { (mag >> r, mag & ((1 << r) - 1) != 0) };
        2 * i128::from(q) + i128::from(dropped)
    };
    if m < 0 { -v } else { v }
}

/// `v · 2^g` (v ≠ 0) rounded once to f32, nearest even; ±inf past f32::MAX's rounding
/// range, a signed zero below half the least subnormal.
fn round_rn(v: i128, g: i64) -> f32 {
    let neg = v < 0;
    let mag = v.unsigned_abs();
    let bits = i64::from(128 - mag.leading_zeros());
    let top = g + bits - 1;
    let mut ulp = (top - 23).max(-149);
    let q: u128 = if ulp <= g {
        // Representable as is: fewer than 25 significant bits from 2^ulp up.
        mag << (g - ulp)
    } else {
        let r = ulp - g;
        if r > bits {
            // Below half an ulp (the value is under 2^(g + bits) ≤ 2^(ulp − 1)).
            0
        } else {
            let q = mag >> r;
            let rem = mag & ((1u128 << r) - 1);
            let half = 1u128 << (r - 1);
            q + u128::from(rem > half || (rem == half && q & 1 == 1))
        }
    };
    let q = if q == 1 << 24 {
        ulp += 1;
        1 << 23
    } else {
        q
    };
    let out = if q == 0 {
        0.0
    } else if ulp + i64::from(128 - q.leading_zeros()) > 128 {
        f32::INFINITY
    } else {
        // q < 2^24 and ulp in [−149, 104]: exact in f64 and then in f32.
        (q as f64 * f64::from_bits(((ulp + 1023) as u64) << 52)) as f32
    };
    if neg { -out } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// d + m·2^e in f64 when that is exact (then one f64 → f32 rounding is the true one).
    fn f64_sum(d: f32, m: i64, e: i32) -> Option<f32> {
        let y = m as f64 * 2f64.powi(e);
        if (y / 2f64.powi(e)) as i64 != m || m.unsigned_abs() >= 1 << 53 || !y.is_normal() {
            return None;
        }
        let s = f64::from(d) + y;
        // Two-sum: the error term of the f64 addition is zero iff it was exact.
        let bp = s - f64::from(d);
        let err = (f64::from(d) - (s - bp)) + (y - bp);
        (err == 0.0 && s.is_finite()).then_some(s as f32)
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn matches_f64_wherever_f64_is_exact() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut checked = 0;
        for i in 0..400_000 {
            // d over every exponent field (subnormals and values near overflow included).
            let d = f32::from_bits(next() as u32);
            if !d.is_finite() {
                continue;
            }
            let bits = 1 + (next() % 40) as u32;
            let m = (next() >> (64 - bits)) as i64 * if next() & 1 == 0 { 1 } else { -1 };
            // Exponents near d's, so that many sums are exact in f64.
            let de = f32_parts(d).map_or(0, |(_, e)| e as i32);
            let e = de + (next() % 80) as i32 - 40 - if i % 3 == 0 { bits as i32 } else { 0 };
            let Some(want) = f64_sum(d, m, e) else { continue };
            let got = add_scaled_rn(d, m, e);
            assert!(same(got, want), "{d:e} + {m}·2^{e}: {got:e} vs {want:e}");
            checked += 1;
        }
        assert!(checked > 100_000, "too few exact cases: {checked}");
    }

    #[test]
    fn ties_go_to_even_and_huge_gaps_keep_their_sticky_bit() {
        let p24 = 2f32.powi(24);
        assert_eq!(add_scaled_rn(p24, 1, 0), p24, "tie, even below");
        assert_eq!(add_scaled_rn(p24 + 2.0, 1, 0), p24 + 4.0, "tie, even above");
        assert_eq!(add_scaled_rn(p24, 3, 0), p24 + 4.0);
        // 1 + 2^-24 is the tie between 1 and 1 + 2^-23; 62 binades further down decide.
        let half = 1i64 << 62;
        assert_eq!(add_scaled_rn(1.0, half, -86), 1.0);
        assert_eq!(add_scaled_rn(1.0, half + 1, -86), 1.0 + f32::EPSILON);
        assert_eq!(add_scaled_rn(1.0, half - 1, -86), 1.0);
        // 1 − 2^-25: the tie below 1, where the spacing is 2^-24.
        assert_eq!(add_scaled_rn(1.0, -half, -87), 1.0);
        assert_eq!(add_scaled_rn(1.0, -(half + 1), -87), 1.0 - f32::EPSILON / 2.0);
        // Gaps of hundreds of binades, both ways.
        assert_eq!(add_scaled_rn(1.0, 1, -400), 1.0);
        assert_eq!(add_scaled_rn(1.0, -1, -400), 1.0);
        assert_eq!(add_scaled_rn(f32::from_bits(1), 3, 200), f32::INFINITY);
        assert_eq!(add_scaled_rn(f32::from_bits(1), 1, 100), 2f32.powi(100));
        assert_eq!(add_scaled_rn(-f32::MAX, 1, -149), -f32::MAX);
        // Terms truncated to the grid (more than 100 binades below, or below 2^-152): the
        // jammed bit still decides a tie. 2·2^-149 + 2^-150 is the tie 2.5 · 2^-149.
        let two = f32::from_bits(2);
        assert_eq!(add_scaled_rn(two, half, -212), two, "the tie itself, to even");
        assert_eq!(add_scaled_rn(two, half + 1, -212), f32::from_bits(3));
        assert_eq!(add_scaled_rn(two, -(half + 1), -212), f32::from_bits(1));
        assert_eq!(add_scaled_rn(1.0, half + 1, -170), 1.0);
        assert_eq!(add_scaled_rn(1.0, -(half + 1), -170), 1.0);
        assert_eq!(add_scaled_rn(f32::from_bits(1), 1, 0), 1.0);
        assert_eq!(add_scaled_rn(-f32::from_bits(1), 1, 0), 1.0);
    }

    #[test]
    fn subnormals_overflow_and_signed_zeros_follow_ieee() {
        let tiny = f32::from_bits(1); // 2^-149
        assert_eq!(add_scaled_rn(0.0, 1, -149), tiny);
        assert_eq!(add_scaled_rn(0.0, 3, -151), tiny, "0.75 of the least subnormal");
        assert!(same(add_scaled_rn(tiny, -1, -150), 0.0), "2^-150: tie to +0");
        assert!(same(add_scaled_rn(-tiny, 1, -150), -0.0), "−2^-150: tie to −0");
        assert!(same(add_scaled_rn(0.0, -1, -300), -0.0), "a tiny negative sum rounds to −0");
        assert_eq!(add_scaled_rn(tiny, 1, -149), f32::from_bits(2));
        let min_normal = f32::MIN_POSITIVE;
        assert_eq!(add_scaled_rn(min_normal, -1, -149), f32::from_bits(0x007F_FFFF));
        // Overflow: past f32::MAX + half an ulp (2^103) is inf, the tie itself too (even).
        assert_eq!(add_scaled_rn(f32::MAX, 1, 102), f32::MAX);
        assert_eq!(add_scaled_rn(f32::MAX, 1, 103), f32::INFINITY);
        assert_eq!(add_scaled_rn(-f32::MAX, -1, 103), f32::NEG_INFINITY);
        assert_eq!(add_scaled_rn(0.0, 1, 128), f32::INFINITY);
        // Zeros: an exact cancellation is +0; adding a zero block keeps d, but −0 + 0 = +0.
        assert!(same(add_scaled_rn(1.5, -3, -1), 0.0));
        assert!(same(add_scaled_rn(-1.5, 3, -1), 0.0));
        assert!(same(add_scaled_rn(-0.0, 0, 7), 0.0));
        assert!(same(add_scaled_rn(0.0, 0, 7), 0.0));
        assert!(same(add_scaled_rn(-2.0, 0, 7), -2.0));
        assert!(same(add_scaled_rn(-0.0, -1, 0), -1.0));
        assert!(add_scaled_rn(f32::NAN, 1, 0).is_nan());
        assert_eq!(add_scaled_rn(f32::NEG_INFINITY, i64::MAX, 1000), f32::NEG_INFINITY);
        // The extremes of the API's range stay exact.
        assert_eq!(add_scaled_rn(0.0, i64::MIN, 0), -(2f32.powi(63)));
        assert_eq!(add_scaled_rn(1.0, i64::MIN, -63), 0.0);
        assert_eq!(add_scaled_rn(0.0, 1, i32::MIN), 0.0);
        assert_eq!(add_scaled_rn(0.0, 1, i32::MAX), f32::INFINITY);
        assert_eq!(add_scaled_rn(1.0, -1, i32::MAX), f32::NEG_INFINITY);
    }
}
