//! Models of the approximate f32 instructions `ex2.approx{.ftz}.f32` and
//! `rcp.approx{.ftz}.f32`. The PTX ISA bounds their error (2 ulp for ex2, 1 ulp for rcp)
//! but does not say which value comes out, so the simulator needs a stated model that
//! hardware can be checked against, input by input:
//!
//! - the correctly rounded result (round to nearest, ties to even) of 2^x resp. 1/x, with
//!   IEEE gradual underflow;
//! - `.ftz`: a subnormal input is replaced by a zero of its sign first, and a subnormal
//!   result (after rounding) by a zero of its sign;
//! - special values as the PTX ISA lists them (ex2: -Inf → +0, ±0 → 1, +Inf → +Inf; rcp:
//!   ±0 → ±Inf, ±Inf → ±0), and every NaN result is the canonical NaN 0x7FFFFFFF, as the
//!   other f32 arithmetic of the simulator (observed on an H200).
//!
//! These functions are exactly what the simulator executes; they are public so that the
//! exhaustive hardware comparison (all 2^32 inputs) can call them. They are fast: rcp is one
//! IEEE division; ex2 evaluates 2^x in f64 and only when that value lies within 2^-40
//! (relative) of an f32 rounding boundary falls back to a double-double evaluation (error
//! below 2^-100), which happens for about one input in 2^16.

/// The canonical NaN of f32 arithmetic results.
pub const CANONICAL_NAN: f32 = f32::from_bits(0x7FFF_FFFF);

/// A subnormal replaced by a zero of its sign (what `.ftz` does to inputs and results).
fn flush(x: f32) -> f32 {
    if x.is_subnormal() { 0f32.copysign(x) } else { x }
}

/// `rcp.approx.f32`: 1/x correctly rounded (an IEEE division), gradual underflow.
pub fn rcp_approx_model(x: f32) -> f32 {
    if x.is_nan() {
        return CANONICAL_NAN;
    }
    1.0 / x
}

/// `rcp.approx.ftz.f32`: [`rcp_approx_model`] with subnormal inputs and results flushed to
/// zeros of their sign (a subnormal input gives ±Inf; |x| > 2^126 gives ±0).
pub fn rcp_approx_ftz_model(x: f32) -> f32 {
    flush(rcp_approx_model(flush(x)))
}

/// `ex2.approx.f32`: 2^x correctly rounded, gradual underflow.
pub fn ex2_approx_model(x: f32) -> f32 {
    if x.is_nan() {
        return CANONICAL_NAN;
    }
    if x >= 128.0 {
        return f32::INFINITY;
    }
    // 2^-150 is half the smallest subnormal: it and everything below round to +0.
    if x <= -150.0 {
        return 0.0;
    }
    if x == x.trunc() {
        return pow2(x as i32);
    }
    let y = f64::from(x).exp2();
    // f64 → f32 rounding is monotonic: when both ends of a generous error interval round
    // to the same f32, so does the exact value.
    let (lo, hi) = (y * (1.0 - 2f64.powi(-40)), y * (1.0 + 2f64.powi(-40)));
    if lo as f32 == hi as f32 {
        return y as f32;
    }
    ex2_slow(x).0
}

/// `ex2.approx.ftz.f32`: [`ex2_approx_model`] with a subnormal input flushed (2^±0 = 1)
/// and a subnormal result flushed to +0.
pub fn ex2_approx_ftz_model(x: f32) -> f32 {
    flush(ex2_approx_model(flush(x)))
}

/// 2^n for an integer n in -149..=127, exactly.
fn pow2(n: i32) -> f32 {
    if n >= -126 {
        f32::from_bits(((n + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (n + 149))
    }
}

/// A double-double: hi + lo with |lo| ≤ ulp(hi)/2.
#[derive(Clone, Copy)]
struct Dd(f64, f64);

fn two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    let bb = s - a;
    Dd(s, (a - (s - bb)) + (b - bb))
}

fn two_prod(a: f64, b: f64) -> Dd {
    let p = a * b;
    Dd(p, a.mul_add(b, -p))
}

fn dd_add(x: Dd, y: Dd) -> Dd {
    let s = two_sum(x.0, y.0);
    let t = two_sum(x.1, y.1);
    let v = two_sum(s.0, s.1 + t.0);
    two_sum(v.0, v.1 + t.1)
}

fn dd_mul(x: Dd, y: Dd) -> Dd {
    let p = two_prod(x.0, y.0);
    two_sum(p.0, p.1 + (x.0 * y.1 + x.1 * y.0))
}

fn dd_div_int(x: Dd, k: f64) -> Dd {
    let q = x.0 / k;
    // The remainder of the leading quotient: q·k exactly, then an exact subtraction.
    let p = two_prod(q, k);
    let r = ((x.0 - p.0) - p.1) + x.1;
    two_sum(q, r / k)
}

/// ln 2 as a double-double.
const LN2: Dd = Dd(f64::from_bits(0x3FE6_2E42_FEFA_39EF), f64::from_bits(0x3C7A_BC9E_3B39_803F));

/// 2^x (x non-integer, -150 < x < 128) correctly rounded from a double-double evaluation,
/// and the distance of the value from the nearest f32 rounding boundary relative to the
/// value (the evaluation's own error is below 2^-100 relative).
fn ex2_slow(x: f32) -> (f32, f64) {
    let x = f64::from(x);
    let n = x.round();
    // Exact: x has 24 significant bits and |x| < 2^8.
    let r = x - n;
    let t = dd_mul(Dd(r, 0.0), LN2);
    // e^t by Horner: |t| ≤ ln2/2, and t^28/28! < 2^-120.
    let mut p = Dd(1.0, 0.0);
    for k in (1..=28).rev() {
        p = dd_add(Dd(1.0, 0.0), dd_div_int(dd_mul(t, p), f64::from(k)));
    }
    // Scaling by 2^n is exact for the range here (both parts stay normal or are tiny).
    let scale = 2f64.powi(n as i32);
    let (hi, lo) = (p.0 * scale, p.1 * scale);
    let f = hi as f32;
    let bits = f.to_bits();
    let prev = if bits == 0 { 0.0 } else { f64::from(f32::from_bits(bits - 1)) };
    let next = if f == f32::MAX { 2f64.powi(128) } else { f64::from(f32::from_bits(bits + 1)) };
    let fv = f64::from(f);
    // Midpoints of adjacent f32 values have 25 significant bits: exact in f64, and so are
    // the differences to `hi` (Sterbenz); adding `lo` then gets the sign right.
    let (m1, m2) = ((prev + fv) / 2.0, (fv + next) / 2.0);
    let (d1, d2) = ((hi - m1) + lo, (hi - m2) + lo);
    let result = if d1 < 0.0 {
        f32::from_bits(bits - 1)
    } else if d2 > 0.0 {
        if f == f32::MAX { f32::INFINITY } else { f32::from_bits(bits + 1) }
    } else if d2 == 0.0 && bits & 1 == 1 {
        f32::from_bits(bits + 1)
    } else if d1 == 0.0 && bits & 1 == 1 {
        f32::from_bits(bits - 1)
    } else {
        f
    };
    (result, d1.abs().min(d2.abs()) / hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_values() {
        assert_eq!(ex2_approx_model(f32::NEG_INFINITY), 0.0);
        assert_eq!(ex2_approx_model(-0.0), 1.0);
        assert_eq!(ex2_approx_model(f32::INFINITY), f32::INFINITY);
        assert_eq!(ex2_approx_model(f32::NAN).to_bits(), 0x7FFF_FFFF);
        assert_eq!(ex2_approx_model(3.0), 8.0);
        assert_eq!(ex2_approx_model(-149.0).to_bits(), 1);
        assert_eq!(ex2_approx_model(-150.0), 0.0);
        assert_eq!(ex2_approx_model(127.0), 2f32.powi(127));
        assert_eq!(ex2_approx_model(0.5), std::f32::consts::SQRT_2);
        // Subnormal results: kept without .ftz, flushed with it; subnormal inputs: 2^0.
        assert!(ex2_approx_model(-140.5).is_subnormal());
        assert_eq!(ex2_approx_ftz_model(-140.5), 0.0);
        assert_eq!(ex2_approx_ftz_model(-126.0), f32::MIN_POSITIVE);
        assert_eq!(ex2_approx_ftz_model(f32::from_bits(5)), 1.0);
        assert_eq!(rcp_approx_model(-0.0), f32::NEG_INFINITY);
        assert_eq!(rcp_approx_model(f32::INFINITY), 0.0);
        assert_eq!(rcp_approx_model(f32::NAN).to_bits(), 0x7FFF_FFFF);
        assert_eq!(rcp_approx_model(3.0), 1.0 / 3.0);
        assert_eq!(rcp_approx_ftz_model(f32::from_bits(0x8000_0001)), f32::NEG_INFINITY);
        assert_eq!(rcp_approx_ftz_model(2f32.powi(127)), 0.0);
        assert!(rcp_approx_model(2f32.powi(127)).is_subnormal());
    }

    /// The double-double path agrees with the f64 path wherever the latter is unambiguous,
    /// and its margin is far above its own error (a sample of the f32 inputs).
    #[test]
    fn slow_and_fast_paths_agree() {
        let mut bits: u32 = 0;
        while let Some(b) = bits.checked_add(65_537) {
            bits = b;
            let x = f32::from_bits(b);
            if !(x > -150.0 && x < 128.0) || x == x.trunc() {
                continue;
            }
            let (slow, margin) = ex2_slow(x);
            assert_eq!(slow, ex2_approx_model(x), "{x}");
            assert!(margin > 2f64.powi(-90), "{x}: margin {margin}");
        }
    }

    /// Every input whose f64 value lies near a rounding boundary, with the smallest margin
    /// the double-double evaluation leaves (all 2^32 inputs on two threads: about 20 s).
    #[test]
    fn exhaustive_ex2_margins() {
        let scan = |lo: u32, hi: u32| {
            let (mut slow, mut worst) = (0u64, f64::MAX);
            for b in lo..hi {
                let x = f32::from_bits(b);
                if !(x > -150.0 && x < 128.0) || x == x.trunc() {
                    continue;
                }
                let y = f64::from(x).exp2();
                let (l, h) = (y * (1.0 - 2f64.powi(-40)), y * (1.0 + 2f64.powi(-40)));
                if l as f32 != h as f32 {
                    slow += 1;
                    worst = worst.min(ex2_slow(x).1);
                }
            }
            (slow, worst)
        };
        let halves = std::thread::scope(|s| {
            let a = s.spawn(|| scan(0, 1 << 31));
            let b = scan(1 << 31, u32::MAX);
            (a.join().unwrap_or((0, 0.0)), b)
        });
        let (slow, worst) = (halves.0.0 + halves.1.0, halves.0.1.min(halves.1.1));
        eprintln!("{slow} inputs took the double-double path; smallest margin {worst:e}");
        assert!(worst > 2f64.powi(-90));
    }
}
