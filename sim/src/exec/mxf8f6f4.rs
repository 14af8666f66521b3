//! `tcgen05.mma.kind::mxf8f6f4.block_scale.block32` with E4M3 A and E2M1 B (the MXFP8 ×
//! MXFP4 MMA; docs/sm100-mxf8f6f4.md has the facts and their sources).
//!
//! The model (docs/simulator.md): one MMA covers K = 32, a single scale block, so the 32
//! products of row r and column j share the same two UE8M0 scales. Their sum is then an
//! integer count of 2^-10 (E4M3 values are multiples of 2^-9, E2M1 of 2^-1) times
//! 2^(sa−127)·2^(sb−127), exact; the MMA adds it to the accumulator exactly and rounds once
//! to f32, nearest-even. The PTX ISA leaves the tensor cores' internal order unspecified;
//! this is the semantics moegen states for all its block-scaled kinds.

use super::descriptors::SmemDesc;
use super::exact;
use super::spaces::tmem_fault;
use super::state::Cluster;
use super::tmem;
use crate::decode::Inst;
use crate::error::SimError;
use crate::minifloat::{e2m1_twice, e4m3_times_512};

/// log2 of the unit in which `e4m3_times_512 · e2m1_twice` counts a product.
const PRODUCT_UNIT_EXPONENT: i32 = -10;

/// UE8M0: the value of code c is 2^(c − 127); 0xFF is NaN.
const UE8M0_BIAS: i32 = 127;
const UE8M0_NAN: u8 = 0xFF;

/// Where one `kind::mxf8f6f4` MMA finds its operands.
pub(super) struct Operands<'a> {
    pub adesc: &'a SmemDesc,
    pub bdesc: &'a SmemDesc,
    /// TMEM columns of the accumulator and of the A and B scale words.
    pub d_col: u32,
    pub sfa: u32,
    pub sfb: u32,
    /// The byte of each scale word this MMA uses (instruction descriptor SFA_ID, SFB_ID).
    pub sfa_id: u32,
    pub sfb_id: u32,
}

/// An A row: 32 E4M3 values · 512, or None when one is NaN (then so is every output of the
/// row, whatever B holds).
fn e4m3_row(bytes: [u8; 32]) -> Option<[i32; 32]> {
    let mut v = [0; 32];
    for (x, &b) in v.iter_mut().zip(&bytes) {
        *x = e4m3_times_512(b)?;
    }
    Some(v)
}

/// A B row in the padded form `kind::mxf8f6f4` reads: two 16-byte chunks, each holding 16
/// E2M1 values in its first 8 bytes (low nibble first) and 8 bytes of padding the MMA
/// ignores. Values · 2.
fn e2m1_padded_row(bytes: [u8; 32]) -> [i32; 32] {
    let mut v = [0; 32];
    for (chunk, out) in bytes.chunks_exact(16).zip(v.chunks_exact_mut(16)) {
        for (b, two) in chunk[..8].iter().zip(out.chunks_exact_mut(2)) {
            two[0] = e2m1_twice(b & 0xF);
            two[1] = e2m1_twice(b >> 4);
        }
    }
    v
}

/// Byte `id` of a TMEM scale word as a power of two's exponent; None for NaN.
fn ue8m0_exponent(word: u32, id: u32) -> Option<i32> {
    let code = (word >> (8 * id)) as u8;
    (code != UE8M0_NAN).then(|| i32::from(code) - UE8M0_BIAS)
}

/// Σ a·b: |a| ≤ 448·512, |b| ≤ 12, 32 terms: below 2^27, exact in i32.
fn dot(a: &[i32; 32], b: &[i32; 32]) -> i32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// One accumulator element's update: `acc + dot · 2^exponent` rounded once; `acc` None when
/// the MMA does not accumulate. A NaN or infinite accumulator gives NaN.
fn accumulate(acc: Option<f32>, dot: i32, exponent: i32) -> f32 {
    let sum = (i64::from(dot), exponent);
    match acc.map(exact::f32_parts) {
        None => exact::round_two_to_f32(sum, (0, 0)),
        Some(Some(old)) => exact::round_two_to_f32(sum, old),
        Some(None) => f32::NAN,
    }
}

impl Cluster<'_> {
    /// Each CTA of `pair` contributes its 128 rows of A and N / |pair| rows of B; every CTA
    /// reads its own scale words (SFB for all N rows) and updates its own 128 × N accumulator.
    pub(super) fn mma_mxf8f6f4(
        &mut self,
        pair: std::ops::Range<usize>,
        t: usize,
        n: u32,
        o: &Operands<'_>,
        enable: bool,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let nb = n / pair.len() as u32;
        let mut b_rows = Vec::with_capacity(n as usize);
        for p in pair.clone() {
            for r in 0..nb {
                b_rows.push(e2m1_padded_row(self.row32(p, o.bdesc, r, inst, t)?));
            }
        }
        for p in pair {
            let tm = &self.ctas[p].tmem;
            let sfb: Vec<Option<i32>> = (0..n)
                .map(|j| tm.read(j % 32, o.sfb + j / 32).map(|w| ue8m0_exponent(w, o.sfb_id)))
                .collect::<Result<_, _>>()
                .map_err(tmem_fault(inst))?;
            // The accumulator's columns, checked once for the direct indexing below.
            self.ctas[p].tmem.check_columns(o.d_col, n).map_err(tmem_fault(inst))?;
            for r in 0..128u32 {
                let a = e4m3_row(self.row32(p, o.adesc, r, inst, t)?);
                let sfa_word =
                    self.ctas[p].tmem.read(r, o.sfa + r / 32).map_err(tmem_fault(inst))?;
                let sa = ue8m0_exponent(sfa_word, o.sfa_id);
                for (j, (brow, sb)) in b_rows.iter().zip(&sfb).enumerate() {
                    let idx = (r * tmem::COLUMNS + o.d_col + j as u32) as usize;
                    let old = f32::from_bits(self.ctas[p].tmem.data[idx]);
                    let result = match (&a, sa, sb) {
                        (Some(a), Some(sa), Some(sb)) => accumulate(
                            enable.then_some(old),
                            dot(a, brow),
                            PRODUCT_UNIT_EXPONENT + sa + sb,
                        ),
                        _ => f32::NAN,
                    };
                    self.ctas[p].tmem.data[idx] = result.to_bits();
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_rows_skip_the_padding() {
        let mut bytes = [0xEEu8; 32];
        bytes[0] = 0x21; // values 0, 1: 0.5, 1.0
        bytes[7] = 0xF7; // values 14, 15: 6, −6
        bytes[16] = 0x9C; // values 16, 17: −2, −0.5
        let v = e2m1_padded_row(bytes);
        assert_eq!(v[..2], [1, 2]);
        assert_eq!(v[14..18], [12, -12, -4, -1]);
        // The other data bytes hold 0xEE (−4, −4), as does the padding.
        assert!(v[2..14].iter().chain(&v[18..]).all(|&x| x == -8));
        let mut other = bytes;
        other[8..16].fill(0x00);
        other[24..32].fill(0x77);
        assert_eq!(e2m1_padded_row(other), v, "padding is ignored");
    }

    #[test]
    fn scales_and_nan() {
        assert_eq!(ue8m0_exponent(0x7F80_0000, 3), Some(0));
        assert_eq!(ue8m0_exponent(0x7F80_0000, 2), Some(1));
        assert_eq!(ue8m0_exponent(0x0000_FF00, 1), None);
        assert_eq!(ue8m0_exponent(0x0000_FF00, 0), Some(-127));
        let mut row = [0x38u8; 32];
        assert_eq!(e4m3_row(row), Some([512; 32]));
        row[31] = 0xFF;
        assert_eq!(e4m3_row(row), None);
        row[31] = 0x7F;
        assert_eq!(e4m3_row(row), None);
    }

    #[test]
    fn one_rounding_with_the_accumulator() {
        // 2^14 has ulp 2^-9: two products of 2^-10 move it by one ulp together, by none
        // if each were rounded in (a tie to even each time).
        assert_eq!(accumulate(Some(16384.0), 2, -10), 16384.0 + 2f32.powi(-9));
        assert_eq!(accumulate(Some(16384.0), 1, -10), 16384.0, "a tie goes to even");
        assert_eq!(accumulate(Some(16384.0), 3, -10), 16384.0 + 2.0 * 2f32.powi(-9));
        assert_eq!(accumulate(None, -3, -1), -1.5);
        assert_eq!(accumulate(None, 0, 100).to_bits(), 0);
        assert_eq!(accumulate(None, 1 << 26, 110), f32::INFINITY);
        assert_eq!(accumulate(None, 3, -151), f32::from_bits(1), "subnormal rounding");
        assert!(accumulate(Some(f32::NEG_INFINITY), 1, 0).is_nan());
        assert!(accumulate(Some(f32::NAN), 0, 0).is_nan());
    }
}
