//! The model of the two MUFU approximations the Fast epilogue recipe uses, as the simulator
//! and the CPU reference both implement it: `ex2.approx.ftz.f32` and `rcp.approx.ftz.f32`
//! give the correctly rounded (nearest-even) result of 2^x and 1/x, with subnormal inputs
//! read as zero of the same sign and subnormal results flushed to zero of the same sign.
//! Whether real MUFU units return these bits is measured on an H200 over every input and
//! assumed for sm_100 (docs/reference.md, which also derives the tolerance for hardware
//! that deviates by d ulp).
//!
//! 1/x is IEEE division, exact to implement. 2^x is first evaluated with f64's `exp2`
//! (within an f64 ulp, 2^-52, on every libm in use); when that lands within 2^-40 (relative)
//! of an f32 rounding boundary, far outside any libm's error, it is re-evaluated in
//! double-double arithmetic (≈ 100 bits, far more than the ~2^-60 that the hardest f32
//! inputs need) with only additions, multiplications and fused multiply-adds. Either way the
//! rounding does not depend on the platform's libm.

/// Flushes a subnormal to zero of the same sign.
fn ftz(x: f32) -> f32 {
    if x != 0.0 && x.abs() < f32::MIN_POSITIVE { 0.0f32.copysign(x) } else { x }
}

/// `rcp.approx.ftz.f32` as modelled: `ftz(rn(1 / ftz(x)))`.
pub fn rcp_approx_ftz(x: f32) -> f32 {
    ftz(1.0 / ftz(x))
}

/// A double-double number hi + lo, |lo| ≤ ulp(hi)/2.
#[derive(Clone, Copy)]
struct Dd {
    hi: f64,
    lo: f64,
}

fn two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    let bb = s - a;
    Dd { hi: s, lo: (a - (s - bb)) + (b - bb) }
}

fn quick_two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    Dd { hi: s, lo: b - (s - a) }
}

impl Dd {
    fn mul(self, o: Dd) -> Dd {
        let p = self.hi * o.hi;
        let e = self.hi.mul_add(o.hi, -p);
        quick_two_sum(p, e + (self.hi * o.lo + self.lo * o.hi))
    }
    fn add(self, o: Dd) -> Dd {
        let s = two_sum(self.hi, o.hi);
        let t = two_sum(self.lo, o.lo);
        let s = quick_two_sum(s.hi, s.lo + t.hi);
        quick_two_sum(s.hi, s.lo + t.lo)
    }
    /// Division by a small positive integer k (exact in f64).
    fn div_small(self, k: f64) -> Dd {
        let q1 = self.hi / k;
        let r = (-q1).mul_add(k, self.hi) + self.lo;
        quick_two_sum(q1, r / k)
    }
}

/// ln 2 as a double-double.
const LN2: Dd = Dd { hi: std::f64::consts::LN_2, lo: 2.319_046_813_846_299_6e-17 };

/// 2^f for |f| ≤ 1/2 in double-double: e^(f·ln 2) by its Taylor series (|f·ln 2| ≤ 0.35;
/// 24 terms leave a remainder below 1e-34).
fn exp2_dd(f: f64) -> Dd {
    let t = Dd { hi: f, lo: 0.0 }.mul(LN2);
    let mut p = Dd { hi: 1.0, lo: 0.0 };
    for k in (1..=24).rev() {
        p = Dd { hi: 1.0, lo: 0.0 }.add(p.mul(t).div_small(f64::from(k)));
    }
    p
}

/// Rounds a double-double in [0.5, 2) to the nearest f32 (ties to even).
fn round_to_f32(v: Dd) -> f32 {
    let r = v.hi as f32;
    // The exact offset of v from r: hi − r is exact (they are within one f32 ulp).
    let off = (v.hi - f64::from(r)) + v.lo;
    let ulp = f64::from(f32::from_bits(r.to_bits() + 1)) - f64::from(r);
    let ulp_below = f64::from(r) - f64::from(f32::from_bits(r.to_bits() - 1));
    if off > ulp / 2.0 || (off == ulp / 2.0 && r.to_bits() & 1 == 1) {
        f32::from_bits(r.to_bits() + 1)
    } else if -off > ulp_below / 2.0 || (-off == ulp_below / 2.0 && r.to_bits() & 1 == 1) {
        f32::from_bits(r.to_bits() - 1)
    } else {
        r
    }
}

/// `ex2.approx.ftz.f32` as modelled: `ftz(rn(2^ftz(x)))`; NaN gives NaN, +inf +inf,
/// −inf +0.
pub fn ex2_approx_ftz(x: f32) -> f32 {
    ex2_with(x, false)
}

/// [`ex2_approx_ftz`] evaluated in double-double for every input (the slow path, exposed so
/// that tests can check the two paths agree).
pub fn ex2_approx_ftz_double_double(x: f32) -> f32 {
    ex2_with(x, true)
}

fn ex2_with(x: f32, always_dd: bool) -> f32 {
    let x = ftz(x);
    if x.is_nan() {
        return f32::NAN;
    }
    if x >= 128.0 {
        return f32::INFINITY;
    }
    // Below −126 the result is subnormal (the f32 grid there is 2^-17 wide, so no input
    // below −126 rounds up to 2^-126) and flushes to +0.
    if x < -126.0 {
        return 0.0;
    }
    let n = f64::from(x).round();
    let f = f64::from(x) - n;
    let y = f.exp2();
    let r = y as f32;
    // Distance from y to the nearer rounding boundary (the midpoints around r).
    let up = (f64::from(f32::from_bits(r.to_bits() + 1)) - f64::from(r)) / 2.0;
    let down = (f64::from(r) - f64::from(f32::from_bits(r.to_bits() - 1))) / 2.0;
    let off = y - f64::from(r);
    let margin = (up - off).min(down + off);
    let r = if !always_dd && margin > y * 2f64.powi(-40) { r } else { round_to_f32(exp2_dd(f)) };
    // Scaling by 2^n is exact for a normal result, and rounding commutes with it; an
    // f32 of 2^128 becomes +inf, as a correctly rounded overflow does.
    (f64::from(r) * 2f64.powi(n as i32)) as f32
}
