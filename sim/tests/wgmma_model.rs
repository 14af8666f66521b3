//! The arithmetic of one `wgmma …k16.f32.{bf16,f16}` step (`moegen_sim::wgmma_k16_model`,
//! what the simulator executes for every accumulator element) against a straightforward
//! re-implementation of the measured H200 model written here from its description
//! (docs/simulator.md): nominal exponents, every term truncated toward zero to a multiple of
//! 2^(emax − 25), an exact i128 sum, the sum truncated toward zero to f32. Plus hand-made
//! cases where it differs from the exact sum rounded to nearest.

use moegen_sim::wgmma_k16_model;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// (fraction bits, exponent bias, all-ones exponent) of bf16 or f16.
fn format(bf16: bool) -> (u32, i32, i32) {
    if bf16 { (7, 127, 0xFF) } else { (10, 15, 0x1F) }
}

/// A finite, non-zero bf16/f16 element: its exact value and nominal exponent (a normal's
/// leading-bit exponent; a subnormal's the format's minimum normal exponent). `None` for 0.
fn element(h: u16, bf16: bool) -> Option<(f64, i32)> {
    let (frac_bits, bias, _) = format(bf16);
    let e = i32::from(h >> frac_bits) & if bf16 { 0xFF } else { 0x1F };
    let f = f64::from(h & ((1 << frac_bits) - 1));
    let sign = if h >> 15 == 1 { -1.0 } else { 1.0 };
    if e == 0 && f == 0.0 {
        return None;
    }
    let nominal = if e == 0 { 1 - bias } else { e - bias };
    let significand = if e == 0 { f } else { f + f64::from(1u32 << frac_bits) };
    Some((sign * significand * 2f64.powi(nominal - frac_bits as i32), nominal))
}

/// The measured model, term by term (finite inputs). Returns f32 bits.
fn reference(a: &[u16; 16], b: &[u16; 16], bf16: bool, acc: Option<f32>) -> u32 {
    let mut terms = Vec::new();
    for k in 0..16 {
        if let (Some((x, ex)), Some((y, ey))) = (element(a[k], bf16), element(b[k], bf16)) {
            terms.push((x * y, ex + ey)); // at most 22 significant bits: exact
        }
    }
    if let Some(c) = acc.filter(|&c| c != 0.0) {
        let e = ((c.to_bits() >> 23) & 0xFF) as i32;
        terms.push((f64::from(c), e.max(1) - 127));
    }
    let Some(emax) = terms.iter().map(|t| t.1).max() else { return 0 };
    let q = emax - 25;
    // v · 2^-q is exact in f64 (a power-of-two scaling far from the f64 limits).
    let sum: i128 = terms.iter().map(|&(v, _)| (v * 2f64.powi(-q)).trunc() as i128).sum();
    if sum == 0 {
        return 0;
    }
    let mag = sum.unsigned_abs();
    let bits = 128 - mag.leading_zeros() as i32;
    let kept = if bits > 24 { (mag >> (bits - 24)) << (bits - 24) } else { mag };
    let mut v = kept as f64 * 2f64.powi(q);
    if v >= 2f64.powi(128) {
        v = f64::INFINITY;
    } else if v < 2f64.powi(-126) {
        v = (v * 2f64.powi(149)).trunc() * 2f64.powi(-149);
    }
    let r = v as f32; // exact: on the f32 grid
    (if sum < 0 { -r } else { r }).to_bits()
}

/// A random element: exponent (of the leading bit) uniform in `lo..=hi`, random sign and
/// fraction, zero with probability 1/`zeros`; exponents below the normal range give
/// subnormals (the fraction shifted down), above it the largest finite exponent.
fn random_element(r: &mut Rng, bf16: bool, lo: i32, hi: i32, zeros: u64) -> u16 {
    let (frac_bits, bias, all_ones) = format(bf16);
    let x = r.next();
    let sign = ((x & 1) as u16) << 15;
    if x % zeros == 1 {
        return sign;
    }
    let e = lo + ((x >> 1) % (hi - lo + 1) as u64) as i32;
    let frac = ((x >> 20) & ((1 << frac_bits) - 1)) as u16;
    let field = e + bias;
    if field >= 1 {
        sign | ((field.min(all_ones - 1) as u16) << frac_bits) | frac
    } else {
        // Subnormal: the leading bit 1 − field places below the minimum normal exponent.
        let shift = (1 - field) as u32;
        let m = (u32::from(frac) | 1 << frac_bits) >> shift.min(31);
        sign | m as u16
    }
}

/// A random f32 accumulator with its exponent uniform in `lo..=hi` (subnormal below -126),
/// zero one time in 16, absent (scale-d false) one time in 16.
fn random_acc(r: &mut Rng, lo: i32, hi: i32) -> Option<f32> {
    let x = r.next();
    match x % 16 {
        0 => return None,
        1 => return Some(if x & 32 == 0 { 0.0 } else { -0.0 }),
        _ => {}
    }
    let e = lo + ((x >> 8) % (hi - lo + 1) as u64) as i32;
    let frac = (x >> 30) as u32 & 0x7F_FFFF;
    let bits = if e >= -126 {
        ((e + 127) as u32) << 23 | frac
    } else {
        (frac | 1 << 23) >> ((-126 - e) as u32).min(31)
    };
    Some(f32::from_bits(((x as u32 & 0x10) << 27) | bits))
}

fn check(a: &[u16; 16], b: &[u16; 16], bf16: bool, acc: Option<f32>) {
    let got = wgmma_k16_model(a, b, bf16, acc).to_bits();
    let want = reference(a, b, bf16, acc);
    assert_eq!(got, want, "bf16 {bf16} a {a:04x?} b {b:04x?} acc {acc:?}: {got:#x} vs {want:#x}");
}

#[test]
fn bf16_steps_match_the_reference() {
    // 120 000 steps: bf16 operands with exponents over ±24, random signs, one in 8 zero;
    // accumulators over ±50 (some zero, some absent).
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..120_000 {
        let a: [u16; 16] = std::array::from_fn(|_| random_element(&mut r, true, -24, 24, 8));
        let b: [u16; 16] = std::array::from_fn(|_| random_element(&mut r, true, -24, 24, 8));
        let acc = random_acc(&mut r, -50, 50);
        check(&a, &b, true, acc);
    }
}

#[test]
fn f16_and_narrow_steps_match_the_reference() {
    // Narrow exponent ranges (many terms near emax, so carries and cancellation matter).
    let mut r = Rng(0x0123_4567_89AB_CDEF);
    for i in 0..40_000 {
        let bf16 = i % 2 == 0;
        let w = [2, 4, 8][i % 3];
        let a: [u16; 16] = std::array::from_fn(|_| random_element(&mut r, bf16, -w, w, 5));
        let b: [u16; 16] = std::array::from_fn(|_| random_element(&mut r, bf16, -w, w, 5));
        let acc = random_acc(&mut r, -2 * w - 2, 2 * w + 2);
        check(&a, &b, bf16, acc);
    }
}

#[test]
fn subnormal_and_extreme_steps_follow_the_stated_assumptions() {
    // Subnormal operands and accumulators, results in the f32 subnormal range (bf16 shares
    // f32's exponent range) and below it, overflow to Inf: the documented assumptions, not
    // measured. 48 000 steps; the outcomes each kind of range is there for are counted.
    let mut r = Rng(0xDEAD_BEEF_CAFE_F00D);
    let (mut subnormal, mut neg_zero, mut inf, mut big) = (0, 0, 0, 0);
    for i in 0..48_000 {
        let bf16 = i % 6 != 5;
        // (A exponents, B exponents, accumulator exponents)
        let ((al, ah), (bl, bh), (cl, ch)) = match i % 6 {
            // subnormal A: products and results in the f32 subnormal range
            0 => ((-140, -127), (-20, -1), (-149, -128)),
            // normal operands, products in the f32 subnormal range
            1 => ((-80, -64), (-80, -64), (-149, -128)),
            // products below 2^-149: zeros of the sum's sign, the smallest subnormals
            2 => ((-88, -75), (-88, -75), (-149, -140)),
            // around the overflow threshold 2^128
            3 => ((60, 64), (60, 64), (120, 127)),
            // far beyond it
            4 => ((60, 127), (60, 127), (100, 127)),
            // f16: subnormals and the whole normal range
            _ => ((-24, 15), (-24, 15), (-40, 30)),
        };
        let a: [u16; 16] = std::array::from_fn(|_| random_element(&mut r, bf16, al, ah, 6));
        let b: [u16; 16] = std::array::from_fn(|_| random_element(&mut r, bf16, bl, bh, 6));
        let acc = random_acc(&mut r, cl, ch);
        check(&a, &b, bf16, acc);
        let v = wgmma_k16_model(&a, &b, bf16, acc);
        subnormal += usize::from(v.is_subnormal());
        neg_zero += usize::from(v.to_bits() == 0x8000_0000);
        inf += usize::from(v.is_infinite());
        big += usize::from(v.is_finite() && v.abs() >= 2f32.powi(127));
    }
    assert!(subnormal > 5_000 && neg_zero > 300 && inf > 5_000 && big > 500, "coverage");
}

#[test]
fn rows_with_one_non_zero_product_are_exact_when_representable() {
    // A single term (no accumulator) with its 16 significant bits keeps them all.
    let mut r = Rng(77);
    for _ in 0..10_000 {
        let x = random_element(&mut r, true, -60, 60, u64::MAX);
        let y = random_element(&mut r, true, -60, 60, u64::MAX);
        let k = r.below(16) as usize;
        let (mut a, mut b) = ([0u16; 16], [0u16; 16]);
        a[k] = x;
        b[k] = y;
        let exact = f32::from_bits(u32::from(x) << 16) * f32::from_bits(u32::from(y) << 16);
        assert_eq!(wgmma_k16_model(&a, &b, true, None), exact, "{x:04x} · {y:04x}");
    }
}

/// bf16 bits of a power of two.
fn pow2(e: i32) -> u16 {
    ((e + 127) as u16) << 7
}

/// bf16 1.0, -1.0.
const ONE: u16 = 0x3F80;
const MINUS_ONE: u16 = 0xBF80;

/// A step with the given (a, b) products in K positions 0.. (the rest zero).
fn step(products: &[(u16, u16)], acc: Option<f32>) -> f32 {
    let (mut a, mut b) = ([0u16; 16], [0u16; 16]);
    for (k, &(x, y)) in products.iter().enumerate() {
        a[k] = x;
        b[k] = y;
    }
    let v = wgmma_k16_model(&a, &b, true, acc);
    assert_eq!(v.to_bits(), reference(&a, &b, true, acc), "{products:x?} {acc:?}");
    v
}

/// The exact sum rounded once to nearest (the former model), for sums exact in f64.
fn round_to_nearest(products: &[(u16, u16)], acc: Option<f32>) -> f32 {
    let v = |h: u16| f64::from(f32::from_bits(u32::from(h) << 16));
    let s: f64 =
        products.iter().map(|&(x, y)| v(x) * v(y)).sum::<f64>() + f64::from(acc.unwrap_or(0.0));
    s as f32
}

#[test]
fn hand_made_cases_differ_from_round_to_nearest() {
    let ulp = 2f32.powi(-23);
    // 1 + 2^-24 + 2^-30: the last bit of 1 + 2^-24 is cut (2^q = 2^-25, and 2^-30 lies
    // below it, so vanishes); round to nearest sees more than half an ulp and rounds up.
    let c = [(ONE, ONE), (pow2(-24), ONE)];
    assert_eq!(step(&c, Some(2f32.powi(-30))), 1.0);
    assert_eq!(round_to_nearest(&c, Some(2f32.powi(-30))), 1.0 + ulp);
    // The same with the small term as a product, and with 2^-25 (still truncated away by
    // the final truncation: 1 + 3·2^-25 keeps 24 bits → 1).
    let c = [(ONE, ONE), (pow2(-24), ONE), (pow2(-15), pow2(-15))];
    assert_eq!(step(&c, None), 1.0);
    assert_eq!(round_to_nearest(&c, None), 1.0 + ulp);
    let c = [(ONE, ONE), (pow2(-24), ONE), (pow2(-25), ONE)];
    assert_eq!(step(&c, None), 1.0);
    assert_eq!(round_to_nearest(&c, None), 1.0 + ulp);
    // Terms far below emax − 25 vanish entirely, however many: 1 + 15 · 2^-26 stays 1
    // (round to nearest: 1 + 2^-22).
    let mut c = vec![(ONE, ONE)];
    c.extend([(pow2(-13), pow2(-13)); 15]);
    assert_eq!(step(&c, None), 1.0);
    assert_eq!(round_to_nearest(&c, None), 1.0 + 2.0 * ulp);
    // The same for an accumulator below 2^q: 1 + 1.5 · 2^-26.
    assert_eq!(step(&[(ONE, ONE)], Some(2f32.powi(-26) * 1.5)), 1.0);
    // A negative sum truncates toward zero: -(1 + 2^-24 + 2^-25) is -1 (nearest: -(1 + ulp)).
    let c = [(MINUS_ONE, ONE), (pow2(-24), MINUS_ONE), (MINUS_ONE, pow2(-25))];
    assert_eq!(step(&c, None), -1.0);
    assert_eq!(round_to_nearest(&c, None), -1.0 - ulp);
    // Cancellation: what remains is exact only down to 2^q. 1 − (1 − 2^-8)·1 − 2^-30 gives
    // 2^-8 (the 2^-30 vanished); nearest gives 2^-8 − 2^-30.
    let c = [(ONE, ONE), (0xBF7F, ONE)];
    assert_eq!(step(&c, Some(-(2f32.powi(-30)))), 2f32.powi(-8));
    assert_eq!(round_to_nearest(&c, Some(-(2f32.powi(-30)))), 2f32.powi(-8) - 2f32.powi(-30));
    // The nominal exponent of a product is its operands' exponents summed, not its own:
    // 1.5 · 1.5 = 2.25 has nominal exponent 0, so q = -25 and 1.5 · 2^-25 keeps 2^-25
    // (with 2.25's own exponent 1, q would be -24 and it would vanish); nearest keeps all.
    let c = [(0x3FC0, 0x3FC0), (0xBF90, ONE), (0xBF90, ONE), (0x3FC0, pow2(-25))];
    assert_eq!(step(&c, None), 2f32.powi(-25));
    assert_eq!(round_to_nearest(&c, None), 1.5 * 2f32.powi(-25));
    // An exact zero and no term at all are +0.
    assert_eq!(step(&[(ONE, ONE), (MINUS_ONE, ONE)], None).to_bits(), 0);
    assert_eq!(step(&[(ONE, 0), (0, MINUS_ONE)], Some(-0.0)).to_bits(), 0);
}

#[test]
fn special_values() {
    let nan = 0x7FFF_FFFF;
    let (inf, ninf) = (0x7F80u16, 0xFF80u16);
    let mut a = [ONE; 16];
    let b = [ONE; 16];
    a[3] = inf;
    assert_eq!(wgmma_k16_model(&a, &b, true, Some(-5.0)), f32::INFINITY);
    assert_eq!(wgmma_k16_model(&b, &a, true, Some(f32::INFINITY)), f32::INFINITY);
    assert_eq!(wgmma_k16_model(&a, &b, true, Some(f32::NEG_INFINITY)).to_bits(), nan);
    let mut z = b;
    z[3] = 0;
    assert_eq!(wgmma_k16_model(&a, &z, true, None).to_bits(), nan, "Inf · 0");
    a[4] = ninf;
    assert_eq!(wgmma_k16_model(&a, &b, true, None).to_bits(), nan, "Inf − Inf");
    a[4] = 0x7FC1;
    assert_eq!(wgmma_k16_model(&a, &b, true, None).to_bits(), nan);
    assert_eq!(wgmma_k16_model(&z, &b, true, Some(f32::NAN)).to_bits(), nan);
    // scale-d false ignores a NaN accumulator.
    assert_eq!(wgmma_k16_model(&z, &b, true, None), 15.0);
    // f16: 0x7C00 is +Inf.
    let mut h = [0x3C00u16; 16];
    h[0] = 0xFC00;
    assert_eq!(wgmma_k16_model(&h, &[0x3C00; 16], false, Some(1.0)), f32::NEG_INFINITY);
}

/// Steps an H200 computed, where the exact sum rounded to nearest is another f32.
mod recorded {
    include!("data/h200_wgmma_steps.rs");
}
use recorded::RECORDED;

#[test]
fn steps_recorded_on_the_h200() {
    for (a, b, c, d) in RECORDED {
        let acc = Some(f32::from_bits(c));
        assert_eq!(wgmma_k16_model(&a, &b, true, acc).to_bits(), d);
        assert_eq!(reference(&a, &b, true, acc), d);
        let v = |h: u16| f64::from(f32::from_bits(u32::from(h) << 16));
        let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| v(x) * v(y)).sum::<f64>()
            + f64::from(f32::from_bits(c));
        assert_ne!((exact as f32).to_bits(), d);
    }
}
