//! Block-scaled FP4 dot products with the accumulation the kernels are specified to have.
//!
//! Every product e2m1 · e2m1 · sfa · sfb is an integer multiple of 2^-20 (e2m1 values are
//! multiples of ½, E4M3 values multiples of 2^-9), so a 16-element block, and any sum of
//! blocks, is exact in 128-bit fixed point. The accumulator is modelled per `tcgen05.mma`
//! instruction (K = 64, four scale blocks): `D ← round_f32(D + exact Σ of the 64 products)`,
//! rounding to nearest even once per instruction, in K order. The simulator implements the
//! same rule, so simulated kernels match this reference bit for bit; real tensor cores may
//! round differently, which the end-to-end tolerances cover (docs/reference.md).

use moegen_dsl::formats::{e2m1_to_f32, e4m3_to_f32, nibble_at};

/// K elements per MMA instruction.
pub const MMA_K: usize = 64;
/// Scale blocks per MMA instruction.
const BLOCKS_PER_MMA: usize = MMA_K / 16;
/// Fixed-point unit: 2^-20.
const UNIT: f64 = 1.0 / 1_048_576.0;

/// One NVFP4 row decoded for exact arithmetic.
#[derive(Clone, Debug)]
pub struct DecodedRow {
    /// 2 · e2m1 value, an integer in {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}.
    pub twice_values: Vec<i8>,
    /// 512 · scale, an integer, per 16-block; `None` for a NaN scale.
    pub scales: Vec<Option<i64>>,
}

impl DecodedRow {
    /// Decodes `k` packed elements and their `k/16` scale codes.
    pub fn decode(packed: &[u8], scale_codes: impl Iterator<Item = u8>, k: usize) -> Self {
        let twice_values =
            (0..k).map(|i| (e2m1_to_f32(nibble_at(packed, i).unwrap_or(0)) * 2.0) as i8).collect();
        let scales = scale_codes
            .map(|c| {
                let v = e4m3_to_f32(c);
                (!v.is_nan()).then_some((v * 512.0) as i64)
            })
            .collect();
        Self { twice_values, scales }
    }
}

/// Rounds `v · 2^-20` to the nearest f32, ties to even.
pub fn fixed_to_f32(v: i128) -> f32 {
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
        let up = rem > half || (rem == half && q & 1 == 1);
        (q + u128::from(up), shift)
    };
    // q ≤ 2^24 and the exponent is well inside f64, so both steps are exact.
    let r = (q as f64) * UNIT * 2f64.powi(shift as i32);
    let r = r as f32;
    if v < 0 { -r } else { r }
}

/// An accumulator value as fixed point. Exact: every value the accumulator can hold is a
/// multiple of 2^-20 (it starts at 0 and only ever rounds to coarser grids).
fn f32_to_fixed(x: f32) -> i128 {
    (f64::from(x) / UNIT) as i128
}

/// `Σ_k a_k · b_k` accumulated MMA by MMA as described in the module docs.
pub fn block_scaled_dot(a: &DecodedRow, b: &DecodedRow) -> f32 {
    // Rows built by hand may be inconsistent: only whole blocks present in both count.
    let blocks = a
        .scales
        .len()
        .min(b.scales.len())
        .min(a.twice_values.len() / 16)
        .min(b.twice_values.len() / 16);
    let mut acc = 0.0f32;
    for first in (0..blocks).step_by(BLOCKS_PER_MMA) {
        let mut sum: i128 = 0;
        for blk in first..(first + BLOCKS_PER_MMA).min(blocks) {
            let (Some(sa), Some(sb)) = (a.scales[blk], b.scales[blk]) else {
                return f32::NAN;
            };
            let range = blk * 16..blk * 16 + 16;
            let p: i64 = a.twice_values[range.clone()]
                .iter()
                .zip(&b.twice_values[range])
                .map(|(&x, &y)| i64::from(x) * i64::from(y))
                .sum();
            sum += i128::from(p) * i128::from(sa) * i128::from(sb);
        }
        acc = fixed_to_f32(f32_to_fixed(acc) + sum);
    }
    acc
}
