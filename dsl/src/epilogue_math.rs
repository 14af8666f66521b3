//! The epilogue arithmetic, fixed operation by operation so that the CPU reference, the
//! simulator and the GPU agree bit for bit. Codegen emits exactly these operations with
//! exactly these constants; the reference calls these functions.
//!
//! - The Exact recipe (this module): correctly rounded IEEE f32 operations only (`fma.rn`,
//!   `mul.rn`, `add.rn`, `div.rn`, `cvt.rni`), never MUFU approximations.
//! - The Fast recipe ([`fast`]): `ex2.approx.ftz` and `rcp.approx.ftz`, modelled as
//!   correctly rounded with flush-to-zero ([`mufu`]).

pub mod fast;
pub mod mufu;

/// log2(e) rounded to f32.
pub const LOG2E: f32 = f32::from_bits(0x3FB8_AA3B);
/// High part of ln 2 (few enough bits that n · LN2_HI is exact for |n| < 256).
pub const LN2_HI: f32 = f32::from_bits(0x3F31_7200);
/// ln 2 − LN2_HI rounded to f32.
pub const LN2_LO: f32 = f32::from_bits(0x35BF_BE8E);
/// Inputs above this give +inf.
pub const EXP_HI: f32 = 88.0;
/// Inputs below this give +0.
pub const EXP_LO: f32 = -87.0;
/// Taylor coefficients 1/7! … 1/2!, 1, 1 of e^r on |r| ≤ ln2/2, each rounded to f32.
pub const EXP_POLY: [f32; 8] =
    [1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0];

/// e^x in f32 within 2 ulp on [−87, 88]; +inf above 88, +0 below −87, NaN for NaN.
///
/// Steps: n = rni(x · log2e); r = fma(−n, LN2_LO, fma(−n, LN2_HI, x)); p = Horner(EXP_POLY, r)
/// with fma; result = p · 2^n with 2^n built from its exponent bits (n ∈ [−126, 127]).
pub fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x > EXP_HI {
        return f32::INFINITY;
    }
    if x < EXP_LO {
        return 0.0;
    }
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let mut p = EXP_POLY[0];
    for &c in &EXP_POLY[1..] {
        p = p.mul_add(r, c);
    }
    // n is an integer in [-126, 127] here, so n + 127 is a valid normal exponent field.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// silu(g) = g / (1 + e^−g), with a correctly rounded division.
pub fn silu_f32(g: f32) -> f32 {
    g / (1.0 + exp_f32(-g))
}

/// SwiGLU of one (up, gate) pair already multiplied by α: up · silu(gate).
pub fn swiglu_f32(up: f32, gate: f32) -> f32 {
    up * silu_f32(gate)
}

/// Rounds to the nearest bf16 (ties to even) and back, as `cvt.rn.bf16.f32` then widening.
pub fn round_to_bf16(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let bits = x.to_bits();
    let lsb = (bits >> 16) & 1;
    let rounded = bits.wrapping_add(0x7FFF + lsb) & 0xFFFF_0000;
    f32::from_bits(rounded)
}
