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

use crate::options::Activation;

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

/// 2·√(2/π) rounded to f32: GeGLU's tanh approximation as a sigmoid,
/// ½·(1 + tanh(y)) = σ(2y).
pub const GELU_C1: f32 = f32::from_bits(0x3FCC_422A);
/// [`GELU_C1`] · 0.044715 rounded to f32.
pub const GELU_C2: f32 = f32::from_bits(0x3D92_2279);

/// The per-expert parameters of [`Activation::SwigluClamped`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ActivationParams {
    /// The sigmoid's slope (gpt-oss: 1.702).
    pub alpha: f32,
    /// Added to the clamped up value (gpt-oss: 1).
    pub beta: f32,
    /// gate ≤ limit, −limit ≤ up ≤ limit (gpt-oss: 7).
    pub limit: f32,
}

impl ActivationParams {
    /// gpt-oss's values.
    pub const GPT_OSS: ActivationParams = ActivationParams { alpha: 1.702, beta: 1.0, limit: 7.0 };
}

/// GEMM1's pre-activation of one accumulator: `α1 ·rn acc` without a bias,
/// `fma.rn(α1, acc, bias)` with one (one rounding).
pub fn pre_activation(alpha1: f32, acc: f32, bias: Option<f32>) -> f32 {
    match bias {
        None => alpha1 * acc,
        Some(b) => alpha1.mul_add(acc, b),
    }
}

/// h of one (up, gate) pre-activation pair, IEEE operations only, in this order:
/// - SwiGLU: [`swiglu_f32`].
/// - SwigluClamped: `g = min(gate, limit)`, `u = min(max(up, −limit), limit)` (`min`/`max`
///   return the other operand for a NaN one, as PTX's do), `z = α ·rn g`,
///   `s = g / (1 +rn exp_f32(−z))` (div.rn), `h = (u +rn β) ·rn s`.
/// - GegluTanh: `t = g ·rn fma(GELU_C2, g ·rn g, GELU_C1)`, `s = g / (1 +rn exp_f32(−t))`,
///   `h = up ·rn s`.
/// - Relu2 (not gated: its one pre-activation comes as `up`, `gate` is not read):
///   `r = max(up, 0)` (`max.f32`: NaN gives 0, −0 gives +0), `h = r ·rn r`.
///
/// `params` is read by SwigluClamped only.
pub fn activation_exact(kind: Activation, params: &ActivationParams, up: f32, gate: f32) -> f32 {
    activation_with(kind, params, up, gate, |x, z| x / (1.0 + exp_f32(-z)))
}

/// The activations around one sigmoid form `sig(x, z) = x · σ(z)` (the Exact recipe's or the
/// Fast one's), the rest of the operations the same.
pub(crate) fn activation_with(
    kind: Activation,
    params: &ActivationParams,
    up: f32,
    gate: f32,
    sig: impl Fn(f32, f32) -> f32,
) -> f32 {
    match kind {
        Activation::Swiglu => up * sig(gate, gate),
        Activation::SwigluClamped => {
            let g = ptx_min(gate, params.limit);
            let u = ptx_min(ptx_max(up, -params.limit), params.limit);
            (u + params.beta) * sig(g, params.alpha * g)
        }
        Activation::GegluTanh => {
            let t = gate * GELU_C2.mul_add(gate * gate, GELU_C1);
            up * sig(gate, t)
        }
        Activation::Relu2 => {
            let r = ptx_max(up, 0.0);
            r * r
        }
    }
}

/// `min.f32`: a NaN operand gives the other one; −0 < +0.
pub fn ptx_min(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() || a < b || (a == b && a.is_sign_negative()) {
        return a;
    }
    b
}

/// `max.f32`: a NaN operand gives the other one; −0 < +0.
pub fn ptx_max(a: f32, b: f32) -> f32 {
    if a.is_nan() {
        return b;
    }
    if b.is_nan() || a > b || (a == b && b.is_sign_negative()) {
        return a;
    }
    b
}

/// GEMM2's value of one accumulator before its bf16 rounding: `acc ·rn (α2 ·rn w)` without
/// a bias; `fma.rn(acc, α2, bias) ·rn w` with one (the bias is the expert's output's, so it
/// is added before the router weight scales the row).
pub fn gemm2_value(acc: f32, alpha2: f32, router_weight: f32, bias: Option<f32>) -> f32 {
    match bias {
        None => acc * (alpha2 * router_weight),
        Some(b) => acc.mul_add(alpha2, b) * router_weight,
    }
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
