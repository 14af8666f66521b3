//! Block-scaled FP4 MMA numerics (`tcgen05.mma.kind::mxf4nvf4.block_scale.block16`):
//! products of E2M1 values and their UE4M3 block scales are exact; the instruction's K = 64
//! products and the accumulator are summed exactly and rounded to f32 once, nearest-even.
//! The PTX ISA leaves the internal accumulation order unspecified; this is moegen's stated
//! model (docs/simulator.md), shared with the CPU reference's definition.

/// Fixed-point unit: every product e2m1 · e2m1 · sfa · sfb is a multiple of 2^-20.
const UNIT: f64 = 1.0 / 1_048_576.0;

/// 2 · e2m1 value of a 4-bit code (an integer).
pub(super) fn twice_e2m1(code: u8) -> i64 {
    const T: [i64; 8] = [0, 1, 2, 3, 4, 6, 8, 12];
    let v = T[usize::from(code & 7)];
    if code & 8 != 0 { -v } else { v }
}

/// 512 · UE4M3 value of a scale byte (an integer), or None for NaN.
pub(super) fn scaled_e4m3(code: u8) -> Option<i64> {
    if code & 0x7F == 0x7F {
        return None;
    }
    let e = i64::from((code >> 3) & 0xF);
    let m = i64::from(code & 7);
    let mag = if e == 0 { m } else { (8 + m) << (e - 1) };
    Some(if code & 0x80 != 0 { -mag } else { mag })
}

/// 2^k for the exponents `fixed_to_f32` uses (-20 ..= 84), built exactly.
fn pow2(k: i32) -> f64 {
    f64::from_bits(((1023 + i64::from(k)) as u64) << 52)
}

/// Rounds `v · 2^-20` to f32, nearest-even.
pub(super) fn fixed_to_f32(v: i128) -> f32 {
    if v == 0 {
        return 0.0;
    }
    let mag = v.unsigned_abs();
    let bits = 128 - mag.leading_zeros();
    let (q, shift) = if bits <= 24 {
        (mag, 0)
    } else {
        let shift = bits - 24;
        let q = mag >> shift;
        let rem = mag & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        (q + u128::from(rem > half || (rem == half && q & 1 == 1)), shift)
    };
    // q < 2^25 and the power of two are exact in f64: one rounding, in the cast.
    let r = ((q as u64 as f64) * pow2(shift as i32 - 20)) as f32;
    if v < 0 { -r } else { r }
}

/// The accumulator as fixed point (exact: it only ever holds multiples of 2^-20), or None
/// when it is not finite.
pub(super) fn f32_to_fixed(x: f32) -> Option<i128> {
    // Through i64 when it fits: the same truncation, without the slow 128-bit conversion.
    let v = f64::from(x) / UNIT;
    x.is_finite().then(|| if v.abs() < 9.0e18 { v as i64 as i128 } else { v as i128 })
}
