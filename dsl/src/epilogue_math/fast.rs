//! The Fast epilogue recipe of GEMM1 ([`crate::EpilogueRecipe::Fast`]): SwiGLU with one
//! `ex2.approx.ftz` and one `rcp.approx.ftz` per element and NVFP4 requantization with one
//! `rcp.approx.ftz` per block, each step a single rounded f32 operation in a fixed order.
//! The kernels emit exactly this sequence, the CPU reference calls these functions, and the
//! simulator models the two approximations as [`super::mufu`] does, so all three agree bit
//! for bit.
//!
//! With f32 SwiGLU inputs, α1 is folded out of the element loop: with u, g the raw
//! accumulators, h = α·u · silu(α·g) = α² · u·g·σ(α·g), so the loop computes
//! h'' = u · (g · σ(α·g)) and the block quantization uses factors that carry α² (exact
//! algebra, different roundings from the Exact recipe's; both are within a few ulp of h).
//! With bf16 SwiGLU inputs (the reference's option) α·u and α·g are formed and rounded to
//! bf16 first, and the factors carry no α.

use super::mufu::{ex2_approx_ftz, rcp_approx_ftz};
use super::{LOG2E, round_to_bf16};
use crate::formats::{RCP_E2M1_MAX, e2m1_to_f32, e4m3_to_f32, f32_to_e2m1, f32_to_e4m3};
use crate::options::SwigluInput;

/// −log2(e) rounded to f32 (exactly −[`LOG2E`]).
pub const NEG_LOG2E: f32 = -LOG2E;

/// The per-tile factors of one expert: what the kernel computes once per tile from α1 and
/// the output global scale g, in this order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FastFactors {
    /// Multiplies the gate operand of the exponent: α·(−log2 e) (f32 inputs) or −log2 e.
    pub exp_scale: f32,
    /// The quantization numerator: α²·g (f32 inputs) or g.
    pub q: f32,
    /// The block-scale factor: q · (1/6).
    pub k: f32,
    /// α (bf16 inputs multiply the accumulators by it; f32 inputs do not).
    pub alpha: f32,
    /// SwiGLU input precision.
    pub input: SwigluInput,
}

impl FastFactors {
    /// `exp_scale = α·NEG_LOG2E`, `q = (α·α)·g`, `k = q·RCP_E2M1_MAX` for f32 inputs;
    /// `exp_scale = NEG_LOG2E`, `q = g`, `k = g·RCP_E2M1_MAX` for bf16 inputs.
    pub fn new(alpha: f32, global_scale: f32, input: SwigluInput) -> Self {
        let (exp_scale, q) = match input {
            SwigluInput::F32 => (alpha * NEG_LOG2E, (alpha * alpha) * global_scale),
            SwigluInput::Bf16 => (NEG_LOG2E, global_scale),
        };
        FastFactors { exp_scale, q, k: q * RCP_E2M1_MAX, alpha, input }
    }
}

impl FastFactors {
    /// The factors of an unfolded epilogue (any activation other than plain SwiGLU, or any
    /// GEMM1 bias: a clamp or a bias needs the true pre-activations, so α1 is applied in the
    /// element loop): `exp_scale = −log2 e`, `q = g`, `k = g · (1/6)`.
    pub fn unfolded(global_scale: f32) -> Self {
        FastFactors {
            exp_scale: NEG_LOG2E,
            q: global_scale,
            k: global_scale * RCP_E2M1_MAX,
            alpha: 1.0,
            input: SwigluInput::F32,
        }
    }
}

/// `x · σ(z)` with the two approximations: `t = z ·rn −log2e; e = ex2(t); d = 1 +rn e;
/// r = rcp(d); x ·rn r`.
pub fn sigmoid_times_fast(x: f32, z: f32) -> f32 {
    let e = ex2_approx_ftz(z * NEG_LOG2E);
    let r = rcp_approx_ftz(1.0 + e);
    x * r
}

/// h of one (up, gate) pair of true pre-activations (α1 and the bias applied, optionally
/// rounded to bf16) in the Fast recipe, the Exact recipe's operations with its sigmoid
/// replaced by [`sigmoid_times_fast`]:
/// - SwiGLU: `up ·rn sigmoid_times_fast(gate, gate)`;
/// - SwigluClamped: `g = min(gate, limit)`, `u = min(max(up, −limit), limit)`,
///   `(u +rn β) ·rn sigmoid_times_fast(g, α ·rn g)`;
/// - GegluTanh: `up ·rn sigmoid_times_fast(gate, gate ·rn fma(C2, gate ·rn gate, C1))`;
/// - Relu2: no sigmoid, so the Exact recipe's `max(up, 0)` squared.
pub fn activation_fast(
    kind: crate::options::Activation,
    p: &super::ActivationParams,
    up: f32,
    gate: f32,
) -> f32 {
    super::activation_with(kind, p, up, gate, sigmoid_times_fast)
}

/// One element of the SwiGLU stage from the raw up and gate accumulators: the value the
/// block quantization receives (h/α² for f32 inputs, h for bf16 inputs).
///
/// f32 inputs: `t = g·exp_scale; e = ex2(t); d = 1 + e; r = rcp(d); s = g·r; u·s`.
/// bf16 inputs: `u' = bf16(α·u); g' = bf16(α·g)`, then the same with u', g'.
pub fn swiglu_fast(f: &FastFactors, up: f32, gate: f32) -> f32 {
    let (u, g) = match f.input {
        SwigluInput::F32 => (up, gate),
        SwigluInput::Bf16 => (round_to_bf16(f.alpha * up), round_to_bf16(f.alpha * gate)),
    };
    let e = ex2_approx_ftz(g * f.exp_scale);
    let r = rcp_approx_ftz(1.0 + e);
    u * (g * r)
}

/// Largest |x| of a block, NaN-propagating (`max.NaN.f32` of `abs.f32`, from 0).
fn amax(v: &[f32]) -> f32 {
    v.iter().fold(0.0f32, |m, &x| if m.is_nan() || x.is_nan() { f32::NAN } else { m.max(x.abs()) })
}

/// Quantizes one block of [`swiglu_fast`] outputs: `sf = e4m3(amax·k)`;
/// `qq = sf == 0 ? 0 : min(q·rcp(sf), f32::MAX)` (`min.f32`: NaN yields the other
/// operand); codes `e2m1(x·qq)`. Returns the E2M1 codes and the E4M3 scale code.
pub fn quantize_block_fast(f: &FastFactors, v: &[f32]) -> (Vec<u8>, u8) {
    let code = f32_to_e4m3(amax(v) * f.k);
    let sf = e4m3_to_f32(code);
    let qq = if sf == 0.0 { 0.0 } else { (f.q * rcp_approx_ftz(sf)).min(f32::MAX) };
    (v.iter().map(|&x| f32_to_e2m1(x * qq)).collect(), code)
}

/// The value a Fast-recipe code stands for, for tolerance checks: e2m1 · sf / g (what GEMM2
/// reads), the same for both recipes.
pub fn dequantized(code: u8, scale_code: u8, global_scale: f32) -> f32 {
    e2m1_to_f32(code) * e4m3_to_f32(scale_code) / global_scale
}
