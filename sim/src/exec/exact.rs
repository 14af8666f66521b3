//! Exact sums of scaled integers, rounded once to f32 (nearest, ties to even): the
//! accumulation model of `tcgen05.mma.kind::f16` (f16/bf16 products are exact in this form;
//! bf16's exponent range needs more than 128 bits, hence a limb accumulator).

/// Σ m·2^e over `terms`, rounded to f32. NaN is not representable here; callers handle it.
pub(super) fn round_sum_to_f32(terms: &[(i64, i32)]) -> f32 {
    let nz: Vec<(i64, i32)> = terms.iter().copied().filter(|&(m, _)| m != 0).collect();
    let Some(base) = nz.iter().map(|&(_, e)| e).min() else { return 0.0 };
    let top = nz.iter().map(|&(_, e)| e - base).max().unwrap_or(0) as usize + 64;
    let n = top / 32 + 3;
    let mut d = vec![0i64; n];
    for &(m, e) in &nz {
        let shift = (e - base) as usize;
        let (limb, off) = (shift / 32, shift % 32);
        let mag = u128::from(m.unsigned_abs()) << off;
        let sign = if m < 0 { -1 } else { 1 };
        for j in 0..4 {
            d[limb + j] += sign * ((mag >> (32 * j)) & 0xFFFF_FFFF) as i64;
        }
    }
    let normalize = |d: &mut Vec<i64>| {
        for i in 0..d.len() - 1 {
            let carry = d[i].div_euclid(1 << 32);
            d[i] -= carry << 32;
            d[i + 1] += carry;
        }
    };
    normalize(&mut d);
    let negative = d[n - 1] < 0;
    if negative {
        for x in d.iter_mut() {
            *x = -*x;
        }
        normalize(&mut d);
    }
    let Some(hi) = d.iter().rposition(|&x| x != 0) else { return 0.0 };
    let p = 32 * hi + (63 - d[hi].leading_zeros() as usize); // index of the leading bit
    let bit = |i: usize| (d[i / 32] >> (i % 32)) & 1 == 1;
    let lead_exp = base + p as i32;
    if lead_exp > 127 {
        return if negative { f32::NEG_INFINITY } else { f32::INFINITY };
    }
    // Significand bits kept: 24 for normals, fewer for subnormals (down to 2^-149).
    let keep = if lead_exp >= -126 { 24 } else { 24 - (-126 - lead_exp) };
    let r = if keep <= 0 {
        // Below half the smallest subnormal (or exactly half, ties to even 0) → 0; else 2^-149.
        let above_half = keep == 0 && (0..p).any(bit);
        if above_half { f32::from_bits(1) } else { 0.0 }
    } else {
        let keep = keep as usize;
        let drop = (p + 1).saturating_sub(keep);
        let mut q: u64 = 0;
        for i in (drop..=p).rev() {
            q = (q << 1) | u64::from(bit(i));
        }
        if drop > 0 {
            let half = bit(drop - 1);
            let sticky = (0..drop - 1).any(bit);
            if half && (sticky || q & 1 == 1) {
                q += 1;
            }
        }
        let v = (q as f64) * 2f64.powi(base + drop as i32);
        if v > f64::from(f32::MAX) { f32::INFINITY } else { v as f32 }
    };
    if negative { -r } else { r }
}

/// `a + b` (each m·2^e) rounded once to f32: the block-scaled MMAs' accumulator update,
/// without the allocations of [`round_sum_to_f32`] when the two terms are within 62
/// binades of each other (the common case: then they add exactly in an i128).
pub(super) fn round_two_to_f32(a: (i64, i32), b: (i64, i32)) -> f32 {
    let ((ma, ea), (mb, eb)) = (a, b);
    if ma == 0 {
        return round_scaled_to_f32(i128::from(mb), eb);
    }
    if mb == 0 {
        return round_scaled_to_f32(i128::from(ma), ea);
    }
    let base = ea.min(eb);
    let (sa, sb) = (ea.abs_diff(base), eb.abs_diff(base));
    if sa.max(sb) > 62 {
        return round_sum_to_f32(&[a, b]);
    }
    // |m| ≤ 2^63, shifted by at most 62: each below 2^126 in magnitude, the sum too.
    round_scaled_to_f32((i128::from(ma) << sa) + (i128::from(mb) << sb), base)
}

/// `total · 2^exponent` rounded to f32, nearest-even, subnormals kept, ±inf past the
/// largest finite value; an exact zero is +0.
pub(super) fn round_scaled_to_f32(total: i128, exponent: i32) -> f32 {
    if total == 0 {
        return 0.0;
    }
    let mag = total.unsigned_abs();
    let p = 127 - mag.leading_zeros() as i32; // index of the leading bit
    let lead_exp = exponent + p;
    let r = if lead_exp > 127 {
        f32::INFINITY
    } else {
        // Significand bits kept: 24 for normals, fewer for subnormals (down to 2^-149).
        let keep = if lead_exp >= -126 { 24 } else { 24 - (-126 - lead_exp) };
        if keep <= 0 {
            // At most half the smallest subnormal: exactly half ties to even 0.
            let above_half = keep == 0 && !mag.is_power_of_two();
            if above_half { f32::from_bits(1) } else { 0.0 }
        } else {
            let drop = (p + 1 - keep).max(0) as u32;
            let mut q = mag >> drop;
            if drop > 0 {
                let half = (mag >> (drop - 1)) & 1 == 1;
                let sticky = mag & ((1u128 << (drop - 1)) - 1) != 0;
                if half && (sticky || q & 1 == 1) {
                    q += 1;
                }
            }
            // q ≤ 2^24 and the unit 2^(exponent + drop) ≥ 2^-149: exact in f64; the
            // conversion to f32 is exact too, or overflows to inf after a carry at 2^128.
            let v = (q as f64) * 2f64.powi(exponent + drop as i32);
            if v > f64::from(f32::MAX) { f32::INFINITY } else { v as f32 }
        }
    };
    if total < 0 { -r } else { r }
}

/// f16 bits → (integer mantissa, exponent), or None for inf/NaN.
pub(super) fn f16_parts(h: u16) -> Option<(i64, i32)> {
    let (s, e, f) = ((h >> 15) & 1, i32::from((h >> 10) & 0x1F), i64::from(h & 0x3FF));
    let (m, x) = match e {
        0 => (f, -24),
        31 => return None,
        _ => (f | 0x400, e - 25),
    };
    Some((if s == 1 { -m } else { m }, x))
}

/// bf16 bits → (integer mantissa, exponent), or None for inf/NaN.
pub(super) fn bf16_parts(h: u16) -> Option<(i64, i32)> {
    let (s, e, f) = ((h >> 15) & 1, i32::from((h >> 7) & 0xFF), i64::from(h & 0x7F));
    let (m, x) = match e {
        0 => (f, -133),
        255 => return None,
        _ => (f | 0x80, e - 134),
    };
    Some((if s == 1 { -m } else { m }, x))
}

/// f32 → (integer mantissa, exponent), or None for inf/NaN.
pub(super) fn f32_parts(v: f32) -> Option<(i64, i32)> {
    let b = v.to_bits();
    let (s, e, f) = (b >> 31, ((b >> 23) & 0xFF) as i32, i64::from(b & 0x7F_FFFF));
    let (m, x) = match e {
        0 => (f, -149),
        255 => return None,
        _ => (f | 0x80_0000, e - 150),
    };
    Some((if s == 1 { -m } else { m }, x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sums_round_once() {
        // 1 + 2^-24 + 2^-24 = 1 + 2^-23 exactly (two separate roundings would give 1).
        assert_eq!(round_sum_to_f32(&[(1, 0), (1, -24), (1, -24)]), 1.0 + 2f32.powi(-23));
        // A tie rounds to even.
        assert_eq!(round_sum_to_f32(&[(1, 0), (1, -24)]), 1.0);
        assert_eq!(round_sum_to_f32(&[(1, 0), (3, -24)]), 1.0 + 2f32.powi(-22));
        // Cancellation across a huge exponent gap.
        assert_eq!(round_sum_to_f32(&[(1, 200), (-1, 200), (3, -140)]), 3.0 * 2f32.powi(-140));
        assert_eq!(round_sum_to_f32(&[(-5, 0), (2, 0)]), -3.0);
        assert_eq!(round_sum_to_f32(&[(1, 130)]), f32::INFINITY);
        assert_eq!(round_sum_to_f32(&[(1, -150)]), 0.0, "half the smallest subnormal ties to 0");
        assert_eq!(round_sum_to_f32(&[(3, -151)]), f32::from_bits(1));
        for &(m, e) in &[(12345i64, -20), (-7, 3), (1 << 23, -149)] {
            assert_eq!(round_sum_to_f32(&[(m, e)]), (m as f64 * 2f64.powi(e)) as f32);
        }
        assert_eq!(round_two_to_f32((1, 0), (1, -24)), 1.0, "a tie goes to even");
        assert_eq!(round_two_to_f32((1, 0), (3, -25)), 1.0 + 2f32.powi(-23));
        assert_eq!(round_two_to_f32((1, 0), (-1, -25)), 1.0, "below half an ulp");
        assert_eq!(round_two_to_f32((1, 0), (-3, -25)), 1.0 - 2f32.powi(-23), "a tie below 1");
        assert_eq!(round_two_to_f32((0, 0), (-5, -151)), -f32::from_bits(1));
        assert_eq!(round_two_to_f32((1 << 23, 104), (1 << 23, 104)), f32::INFINITY);
        assert_eq!(round_two_to_f32((-(1 << 23), 104), (-(1 << 23), 104)), f32::NEG_INFINITY);
        assert_eq!(round_two_to_f32((7, 3), (-7, 3)).to_bits(), 0, "an exact zero is +0");
        assert_eq!(round_scaled_to_f32((1 << 24) - 1, 104), f32::MAX);
        assert_eq!(round_scaled_to_f32((1 << 25) - 1, 103), f32::INFINITY, "carry to 2^128");
        assert_eq!(f16_parts(0x3C00), Some((0x400, -10)));
        assert_eq!(bf16_parts(0x3F80), Some((0x80, -7)));
        assert_eq!(f32_parts(1.0), Some((0x80_0000, -23)));
    }

    #[test]
    fn two_term_rounding_agrees_with_the_limb_sum() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..200_000 {
            let (r1, r2) = (next(), next());
            // Mantissas of every width (including i64::MIN), exponents near and far apart,
            // from deep in the subnormals to past the overflow.
            let m = |r: u64| (r as i64) >> (r % 64);
            let e = |r: u64| (r >> 40) as i32 % 200 - 170;
            let a = (m(r1), e(r1));
            let b = if i % 3 == 0 {
                (m(r2), a.1 + (r2 >> 50) as i32 % 70 - 35)
            } else {
                (m(r2), e(r2))
            };
            let a = if i % 1000 == 0 { (i64::MIN, a.1) } else { a };
            let want = round_sum_to_f32(&[a, b]);
            let got = round_two_to_f32(a, b);
            assert_eq!(got.to_bits(), want.to_bits(), "{a:?} + {b:?}");
        }
    }
}
