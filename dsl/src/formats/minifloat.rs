//! Round-to-nearest-even with saturation onto a small table of representable magnitudes.
//!
//! The 4- and 8-bit formats have at most 127 finite magnitudes, so rounding against the
//! sorted table is both simple and exact: the midpoint of two neighbours is exact in f64,
//! and every f32 input is exact in f64, so the comparison never rounds.

/// A sign-magnitude minifloat described by its finite non-negative magnitudes.
///
/// `magnitudes[i]` is the value of code `i`; the table is sorted ascending and starts at 0.
pub(crate) struct MinifloatTable<'a> {
    pub(crate) magnitudes: &'a [f64],
    /// Bit that carries the sign in the encoded code.
    pub(crate) sign_bit: u8,
    /// Code produced for a NaN input, whatever its sign.
    pub(crate) nan_code: u8,
}

impl MinifloatTable<'_> {
    /// `cvt.rn.satfinite` semantics: nearest, ties to the even code, |x| beyond the largest
    /// finite magnitude (infinity included) saturates to it, the sign of zero is kept.
    pub(crate) fn encode_rn_satfinite(&self, x: f32) -> u8 {
        if x.is_nan() {
            return self.nan_code;
        }
        let sign = if x.is_sign_negative() { self.sign_bit } else { 0 };
        let a = f64::from(x.abs());
        let last = self.magnitudes.len() - 1;
        if a >= self.magnitudes[last] {
            return last as u8 | sign;
        }
        // First index whose magnitude exceeds `a`; it exists because a < max.
        let hi = self.magnitudes.partition_point(|&m| m <= a);
        let lo = hi - 1;
        let mid = (self.magnitudes[lo] + self.magnitudes[hi]) / 2.0;
        let code = if a < mid {
            lo
        } else if a > mid {
            hi
        } else if lo % 2 == 0 {
            lo
        } else {
            hi
        };
        code as u8 | sign
    }
}
