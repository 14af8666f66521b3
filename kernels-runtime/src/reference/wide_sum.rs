//! Exact sums of binary floating-point terms, rounded once to f32: the accumulation model of
//! one `wgmma` instruction (16 products of bf16 values plus the f32 accumulator, summed
//! exactly, rounded to nearest even). Products of two bf16 values span 2^-266 … 2^256, so
//! the sum is kept in fixed point with 2^-300 as the unit, in enough 64-bit limbs for any
//! sum of fewer than 2^16 such terms.

/// Limbs of the accumulator (640 bits).
const LIMBS: usize = 10;
/// Exponent of the least significant bit.
const UNIT_EXP: i32 = -300;

/// A signed fixed-point accumulator.
#[derive(Clone, Debug)]
pub(crate) struct WideSum {
    pos: [u64; LIMBS],
    neg: [u64; LIMBS],
    nan: bool,
    inf: i8,
}

/// Adds `mantissa · 2^shift` (in units) to `acc`; the mantissa is below 2^64.
fn add_at(acc: &mut [u64; LIMBS], mantissa: u64, shift: u32) {
    let (mut limb, bit) = ((shift / 64) as usize, shift % 64);
    let wide = u128::from(mantissa) << bit;
    let mut carry: u128 = 0;
    for part in [wide as u64, (wide >> 64) as u64] {
        if limb >= LIMBS {
            return;
        }
        let sum = u128::from(acc[limb]) + u128::from(part) + carry;
        acc[limb] = sum as u64;
        carry = sum >> 64;
        limb += 1;
    }
    while carry != 0 && limb < LIMBS {
        let sum = u128::from(acc[limb]) + carry;
        acc[limb] = sum as u64;
        carry = sum >> 64;
        limb += 1;
    }
}

impl WideSum {
    /// Zero.
    pub(crate) fn new() -> Self {
        Self { pos: [0; LIMBS], neg: [0; LIMBS], nan: false, inf: 0 }
    }

    /// Adds `m · 2^e` exactly (`m` may be negative).
    pub(crate) fn add_scaled(&mut self, m: i64, e: i32) {
        if m == 0 {
            return;
        }
        // Every term this module builds is at or above 2^-300.
        let shift = (e - UNIT_EXP).max(0) as u32;
        let target = if m < 0 { &mut self.neg } else { &mut self.pos };
        add_at(target, m.unsigned_abs(), shift);
    }

    /// Adds an f32 exactly.
    pub(crate) fn add_f32(&mut self, v: f32) {
        self.add_parts(
            v.to_bits() >> 31,
            (v.to_bits() >> 23) & 0xFF,
            v.to_bits() & 0x7F_FFFF,
            23,
            127,
        );
    }

    /// Adds the exact product of two bf16 values.
    pub(crate) fn add_bf16_product(&mut self, a: u16, b: u16) {
        let parts = |h: u16| (u32::from(h >> 15), u32::from((h >> 7) & 0xFF), u32::from(h & 0x7F));
        let ((sa, ea, ma), (sb, eb, mb)) = (parts(a), parts(b));
        if (ea == 0xFF && ma != 0) || (eb == 0xFF && mb != 0) {
            self.nan = true;
            return;
        }
        if ea == 0xFF || eb == 0xFF {
            let zero = (ea == 0 && ma == 0) || (eb == 0 && mb == 0);
            if zero {
                self.nan = true;
            } else {
                self.push_inf(sa ^ sb);
            }
            return;
        }
        let (fa, xa) = if ea == 0 { (ma, -133) } else { (ma | 0x80, ea as i32 - 134) };
        let (fb, xb) = if eb == 0 { (mb, -133) } else { (mb | 0x80, eb as i32 - 134) };
        let m = i64::from(fa * fb);
        self.add_scaled(if sa ^ sb == 1 { -m } else { m }, xa + xb);
    }

    fn push_inf(&mut self, sign: u32) {
        let s = if sign == 1 { -1 } else { 1 };
        if self.inf != 0 && self.inf != s {
            self.nan = true;
        }
        self.inf = s;
    }

    fn add_parts(&mut self, sign: u32, exp: u32, frac: u32, frac_bits: u32, bias: i32) {
        if exp == 0xFF {
            if frac != 0 {
                self.nan = true;
            } else {
                self.push_inf(sign);
            }
            return;
        }
        let (m, e) = if exp == 0 {
            (frac, 1 - bias - frac_bits as i32)
        } else {
            (frac | (1 << frac_bits), exp as i32 - bias - frac_bits as i32)
        };
        let m = i64::from(m);
        self.add_scaled(if sign == 1 { -m } else { m }, e);
    }

    /// The sum rounded to the nearest f32, ties to even (canonical NaN 0x7FFFFFFF).
    pub(crate) fn round_f32(&self) -> f32 {
        if self.nan {
            return f32::from_bits(0x7FFF_FFFF);
        }
        if self.inf != 0 {
            return if self.inf > 0 { f32::INFINITY } else { f32::NEG_INFINITY };
        }
        // Magnitude and sign of pos − neg.
        let (mag, negative) = match cmp(&self.pos, &self.neg) {
            std::cmp::Ordering::Equal => return 0.0,
            std::cmp::Ordering::Greater => (sub(&self.pos, &self.neg), false),
            std::cmp::Ordering::Less => (sub(&self.neg, &self.pos), true),
        };
        let top = (0..LIMBS).rev().find(|&i| mag[i] != 0).unwrap_or(0);
        let msb = top as i32 * 64 + 63 - mag[top].leading_zeros() as i32;
        let exp = msb + UNIT_EXP; // value in [2^exp, 2^(exp+1))
        let bit = |i: i32| -> u64 {
            if i < 0 {
                return 0;
            }
            (mag[(i / 64) as usize] >> (i % 64)) & 1
        };
        let sticky_below = |i: i32| -> bool {
            if i <= 0 {
                return false;
            }
            let (limb, b) = ((i / 64) as usize, i % 64);
            mag[..limb].iter().any(|&w| w != 0) || (b > 0 && mag[limb] & ((1u64 << b) - 1) != 0)
        };
        // f32 keeps 24 bits, fewer for subnormals (lowest bit at 2^-149).
        let lsb_exp = (exp - 23).max(-149);
        let lsb = lsb_exp - UNIT_EXP;
        let mut q: u64 = 0;
        for i in (lsb..=msb).rev() {
            q = (q << 1) | bit(i);
        }
        let round = bit(lsb - 1) == 1;
        let sticky = sticky_below(lsb - 1);
        if round && (sticky || q & 1 == 1) {
            q += 1;
        }
        let v = (q as f64) * 2f64.powi(lsb_exp);
        let v = if v >= 2f64.powi(128) { f64::INFINITY } else { v };
        let f = v as f32;
        if negative { -f } else { f }
    }
}

fn cmp(a: &[u64; LIMBS], b: &[u64; LIMBS]) -> std::cmp::Ordering {
    for i in (0..LIMBS).rev() {
        match a[i].cmp(&b[i]) {
            std::cmp::Ordering::Equal => continue,
            o => return o,
        }
    }
    std::cmp::Ordering::Equal
}

fn sub(a: &[u64; LIMBS], b: &[u64; LIMBS]) -> [u64; LIMBS] {
    let mut out = [0u64; LIMBS];
    let mut borrow = 0u64;
    for i in 0..LIMBS {
        let (d1, o1) = a[i].overflowing_sub(b[i]);
        let (d2, o2) = d1.overflowing_sub(borrow);
        out[i] = d2;
        borrow = u64::from(o1 || o2);
    }
    out
}

/// One wgmma-style dot product: `acc ← round_f32(acc + Σ exact products)` per 16-element K
/// step, in K order, from 0.
pub fn wgmma_dot(x: &[u16], w: &[u16]) -> f32 {
    let mut acc = 0f32;
    for (xs, ws) in x.chunks(16).zip(w.chunks(16)) {
        let mut s = WideSum::new();
        s.add_f32(acc);
        for (&a, &b) in xs.iter().zip(ws) {
            s.add_bf16_product(a, b);
        }
        acc = s.round_f32();
    }
    acc
}
