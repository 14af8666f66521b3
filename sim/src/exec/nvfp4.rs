//! Block-scaled FP4 MMA numerics (`tcgen05.mma.kind::mxf4nvf4.block_scale.block16`).
//!
//! The model (docs/simulator.md): each product of two E2M1 values and their two UE4M3 block
//! scales is exact, and so is their sum over the instruction's K = 64. In units of 2^-20
//! (E2M1 values are multiples of 2^-1, UE4M3 ones of 2^-9) that sum is an integer, at most
//! 64 · 12 · 12 · (448 · 512)^2 < 2^49 in magnitude; the MMA adds it to the accumulator and
//! rounds to f32 once, nearest-even. The PTX ISA leaves the tensor cores' internal order
//! unspecified; this is the semantics moegen states for its kernels, and the CPU reference
//! computes it with its own code.

/// log2 of the unit the exact sum is counted in.
const UNIT_EXPONENT: i32 = -20;

/// An accumulator this large is unchanged by any sum: its ulp (≥ 2^80) dwarfs the sum's
/// 2^29 bound. Below it the accumulator fits an i128 in units of 2^-20.
const LARGEST_SHIFT: i32 = 100;

/// One instruction's update of one accumulator element: `acc + sum · 2^-20` rounded to
/// f32, nearest-even; `acc` None when the instruction does not accumulate
/// (enable-input-d false). A NaN or infinite accumulator gives NaN.
///
/// The accumulator joins the sum on the 2^-20 grid, truncated toward zero: exact for every
/// value the MMA itself writes (they are all multiples of 2^-20); an accumulator loaded
/// with finer bits by `tcgen05.st` loses them.
pub(super) fn accumulate(acc: Option<f32>, sum: i64) -> f32 {
    let acc_units: i128 = match acc {
        None => 0,
        Some(a) if !a.is_finite() => return f32::NAN,
        Some(a) => {
            let bits = a.to_bits();
            let field = ((bits >> 23) & 0xFF) as i32;
            let fraction = i128::from(bits & 0x7F_FFFF);
            let (significand, exponent) =
                if field == 0 { (fraction, -149) } else { (fraction | 1 << 23, field - 150) };
            let shift = exponent - UNIT_EXPONENT;
            if shift > LARGEST_SHIFT {
                return a;
            }
            let magnitude = if shift >= 0 {
                significand << shift
            } else {
                significand.checked_shr((-shift) as u32).unwrap_or(0)
            };
            if bits >> 31 != 0 { -magnitude } else { magnitude }
        }
    };
    // Integer → f32 rounds to nearest, ties to even (Rust reference, numeric casts); the
    // scaling by 2^-20 is then exact: a non-zero result is at least 2^-20, far from the
    // subnormals, and below 2^125.
    let total = acc_units + i128::from(sum);
    total as f32 * f32::from_bits(((127 + UNIT_EXPONENT) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::accumulate;

    fn p(k: i32) -> f64 {
        2f64.powi(k)
    }

    #[test]
    fn one_rounding_per_instruction() {
        // At 16 the f32 ulp is 2^-19, two units of 2^-20.
        let ulp = 2f32.powi(-19);
        assert_eq!(accumulate(Some(16.0), 1), 16.0, "a tie goes to the even neighbour");
        assert_eq!(accumulate(Some(16.0), 2), 16.0 + ulp, "one sum, one rounding");
        assert_eq!(accumulate(Some(16.0), 3), 16.0 + 2.0 * ulp, "a tie goes to even");
        assert_eq!(accumulate(Some(16.0 + ulp), 1), 16.0 + 2.0 * ulp);
        assert_eq!(accumulate(Some(16.0 + ulp), -1), 16.0);
        // Without the accumulator, the sum alone; negative sums round symmetrically.
        assert_eq!(accumulate(None, -3 << 20), -3.0);
        assert_eq!(accumulate(None, -(1 << 44) - 1), -(2f32.powi(24)));
        assert_eq!(accumulate(None, 0).to_bits(), 0, "+0");
        assert_eq!(accumulate(Some(-0.0), 0).to_bits(), 0, "an exact zero sum is +0");
        assert!(accumulate(Some(f32::INFINITY), 1).is_nan());
        assert!(accumulate(Some(f32::NAN), 0).is_nan());
    }

    #[test]
    fn large_and_fine_accumulators() {
        let big = 2f32.powi(110);
        assert_eq!(accumulate(Some(big), i64::MAX >> 15), big, "2^48·2^-20 below half an ulp");
        assert_eq!(accumulate(Some(2f32.powi(60)), 1 << 20), 2f32.powi(60));
        // Bits below 2^-20 are truncated toward zero before the sum.
        let fine = (1.0 + p(-22)) as f32;
        assert_eq!(accumulate(Some(fine), 0), 1.0);
        assert_eq!(accumulate(Some(-fine), 0), -1.0);
        assert_eq!(accumulate(Some(f32::from_bits(1)), 5), (5.0 * p(-20)) as f32);
        // Against f64 where f64 is exact (|sum| < 2^53 units, accumulators on the grid).
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let sum = (x as i64) >> 15;
            let acc = ((x >> 40) as i64 - (1 << 23)) as f32 * 2f32.powi(-5);
            let want = (f64::from(acc) + sum as f64 * p(-20)) as f32;
            assert_eq!(accumulate(Some(acc), sum), want, "acc {acc} sum {sum}");
        }
    }
}
