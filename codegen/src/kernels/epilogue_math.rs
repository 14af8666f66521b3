//! PTX for the epilogue arithmetic of `moegen_dsl::epilogue_math` (both recipes) and the
//! NVFP4 block quantization of `moegen_dsl::formats`: the same operations in the same order,
//! with explicit `.rn` so ptxas cannot contract a multiply and an add into an fma.

use moegen_dsl::epilogue_math::fast::NEG_LOG2E;
use moegen_dsl::epilogue_math::{
    EXP_HI, EXP_LO, EXP_POLY, GELU_C1, GELU_C2, LN2_HI, LN2_LO, LOG2E,
};
use moegen_dsl::formats::RCP_E2M1_MAX;
use moegen_dsl::{Activation, SwigluInput};

use crate::ptx::ops::Cvt;
use crate::ptx::{Cmp, KernelBuilder, Operand, Reg, RegClass, Rnd, Ty};

/// e^x as `exp_f32`.
pub fn exp_f32(b: &mut KernelBuilder, x: Reg) -> Reg {
    let t = b.mul_f32(x, LOG2E);
    let n = b.cvt(RegClass::F32, Cvt::round(Rnd::Rni, Ty::F32, Ty::F32), vec![t.into()]);
    let nn = b.neg_f32(n);
    let r = b.fma_f32(nn, LN2_HI, x);
    let r = b.fma_f32(nn, LN2_LO, r);
    let (first, rest) = EXP_POLY.split_first().map_or((0.0, &[][..]), |(f, r)| (*f, r));
    let mut p = b.mov_f32(first);
    for &c in rest {
        p = b.fma_f32(p, r, c);
    }
    let ni = b.cvt(RegClass::B32, Cvt::round(Rnd::Rzi, Ty::S32, Ty::F32), vec![n.into()]);
    let e = b.add_u32(ni, 127u32);
    let bits = b.shl_b32(e, 23u32);
    let scale = b.mov_b32(RegClass::F32, bits);
    let y = b.mul_f32(p, scale);
    let hi = b.setp_f32(Cmp::Gt, x, EXP_HI);
    let lo = b.setp_f32(Cmp::Lt, x, EXP_LO);
    let y = b.selp_f32(f32::INFINITY, y, hi);
    b.selp_f32(0f32, y, lo)
}

/// up · silu(gate) = up · (gate / (1 + e^−gate)).
pub fn swiglu(b: &mut KernelBuilder, up: Reg, gate: Reg) -> Reg {
    let s = sigmoid_times(b, gate, gate);
    b.mul_f32(up, s)
}

/// The registers of one unit's activation parameters (α, β, limit), for activations that
/// read them.
#[derive(Clone, Copy, Debug)]
pub struct ActivationRegs {
    /// α.
    pub alpha: Reg,
    /// β.
    pub beta: Reg,
    /// limit.
    pub limit: Reg,
}

/// `pre_activation`: `α1 ·rn acc`, or `fma.rn(α1, acc, bias)`.
pub fn pre_activation(b: &mut KernelBuilder, alpha1: Reg, acc: Reg, bias: Option<Reg>) -> Reg {
    match bias {
        None => b.mul_f32(alpha1, acc),
        Some(bias) => b.fma_f32(alpha1, acc, bias),
    }
}

/// `activation_exact` of `kind` (`params` is needed by SwigluClamped only; its absence there
/// is a build error).
pub fn activation(
    b: &mut KernelBuilder,
    kind: Activation,
    params: Option<&ActivationRegs>,
    up: Reg,
    gate: Reg,
) -> Reg {
    activation_with(b, kind, params, up, gate, sigmoid_times)
}

/// `fast::activation_fast` of `kind`: the same operations with the Fast recipe's sigmoid.
pub fn activation_fast(
    b: &mut KernelBuilder,
    kind: Activation,
    params: Option<&ActivationRegs>,
    up: Reg,
    gate: Reg,
) -> Reg {
    activation_with(b, kind, params, up, gate, sigmoid_times_fast)
}

/// The activations around one sigmoid form `sig(b, x, z) = x · σ(z)`.
fn activation_with(
    b: &mut KernelBuilder,
    kind: Activation,
    params: Option<&ActivationRegs>,
    up: Reg,
    gate: Reg,
    sig: fn(&mut KernelBuilder, Reg, Reg) -> Reg,
) -> Reg {
    match (kind, params) {
        (Activation::Swiglu, _) => {
            let s = sig(b, gate, gate);
            b.mul_f32(up, s)
        }
        (Activation::SwigluClamped, Some(p)) => {
            let g = b.min_f32(gate, p.limit);
            let nl = b.neg_f32(p.limit);
            let u = b.max_f32(up, nl);
            let u = b.min_f32(u, p.limit);
            let z = b.mul_f32(p.alpha, g);
            let s = sig(b, g, z);
            let ub = b.add_f32(u, p.beta);
            b.mul_f32(ub, s)
        }
        (Activation::SwigluClamped, None) => {
            let kernel = b.name.clone();
            b.error(crate::ptx::BuildError::Inconsistent { kernel, what: "activation parameters" });
            up
        }
        (Activation::GegluTanh, _) => {
            let g2 = b.mul_f32(gate, gate);
            let p = b.fma_f32(GELU_C2, g2, GELU_C1);
            let t = b.mul_f32(gate, p);
            let s = sig(b, gate, t);
            b.mul_f32(up, s)
        }
        (Activation::Relu2, _) => {
            // Ungated: the one pre-activation comes as `up`; max.f32 gives 0 for a NaN.
            let r = b.max_f32(up, 0f32);
            b.mul_f32(r, r)
        }
    }
}

/// Loads expert `expert`'s (α, β, limit) from the f32 [L, 4] parameter buffer at `base`.
pub fn load_activation_params(b: &mut KernelBuilder, base: Reg, expert: Reg) -> ActivationRegs {
    let row = b.shl_b32(expert, 2u32);
    let at = b.index_addr(base, row, 4);
    let [alpha, beta, limit] = [0i64, 4, 8].map(|off| {
        let a = b.add_u64(at, off);
        b.ld_global(Ty::F32, RegClass::F32, a)
    });
    ActivationRegs { alpha, beta, limit }
}

/// `x / (1 +rn exp_f32(−z))` (div.rn): x · σ(z).
fn sigmoid_times(b: &mut KernelBuilder, x: Reg, z: Reg) -> Reg {
    let nz = b.neg_f32(z);
    let e = exp_f32(b, nz);
    let den = b.add_f32(1f32, e);
    b.div_f32(x, den)
}

/// `gemm2_value`: `acc ·rn scale` with `scale = α2 ·rn w` computed by the caller, or
/// `fma.rn(acc, α2, bias) ·rn w`.
pub fn gemm2_value(
    b: &mut KernelBuilder,
    acc: Reg,
    alpha2: Reg,
    weight: Reg,
    scale: Reg,
    bias: Option<Reg>,
) -> Reg {
    match bias {
        None => b.mul_f32(acc, scale),
        Some(bias) => {
            let y = b.fma_f32(acc, alpha2, bias);
            b.mul_f32(y, weight)
        }
    }
}

/// Rounds an f32 to bf16 and back (`cvt.rn.bf16.f32`, then widening).
pub fn round_bf16(b: &mut KernelBuilder, x: Reg) -> Reg {
    let h = b.cvt(RegClass::B16, Cvt::round(Rnd::Rn, Ty::Bf16, Ty::F32), vec![x.into()]);
    b.cvt(RegClass::F32, Cvt::plain(Ty::F32, Ty::Bf16), vec![h.into()])
}

/// NVFP4-quantizes 16 values with global scale `g`: returns the two packed b32 words
/// (elements 0..8 and 8..16, element 2i in the low nibble) and the E4M3 scale code (b32).
pub fn quantize16(b: &mut KernelBuilder, v: &[Reg; 16], g: Reg) -> ([Reg; 2], Reg) {
    quantize16_with(b, v, g, true)
}

/// One E2M1 code (b32, low nibble) by comparisons, for targets without the `cvt`:
/// |x| is counted past the midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 (strictly where the
/// lower neighbour has the even code, inclusively where the upper one has), NaN → 7, and
/// the sign bit of x (zero included) → bit 3 — `f32_to_e2m1` exactly.
pub fn e2m1_code_sw(b: &mut KernelBuilder, x: Reg) -> Reg {
    let m = b.abs_f32(x);
    let mut code = b.mov_u32(0u32);
    for (t, strict) in [
        (0.25f32, true),
        (0.75, false),
        (1.25, true),
        (1.75, false),
        (2.5, true),
        (3.5, false),
        (5.0, true),
    ] {
        let p = b.setp_f32(if strict { Cmp::Gt } else { Cmp::Ge }, m, t);
        let inc = b.selp_u32(1u32, 0u32, p);
        code = b.add_u32(code, inc);
    }
    let nan = b.setp_f32(Cmp::Nan, m, m);
    let bits = b.mov_b32(RegClass::B32, x);
    let sign = b.shr_u32(bits, 31u32);
    let sign = b.shl_b32(sign, 3u32);
    let signed = b.or_b32(code, sign);
    b.selp_u32(7u32, signed, nan)
}

/// [`quantize16`], with the E2M1 conversion by `cvt` (`hw`) or by [`e2m1_code_sw`].
pub fn quantize16_with(b: &mut KernelBuilder, v: &[Reg; 16], g: Reg, hw: bool) -> ([Reg; 2], Reg) {
    let amax = abs_max(b, v);
    let BlockScale { pair, q, .. } = nvfp4_block_scale(b, amax, g);
    let scaled: [Reg; 16] = std::array::from_fn(|i| b.mul_f32(v[i], q));
    let (lo, hi) = scaled.split_at(8);
    let words = [pack8(b, lo, hw), pack8(b, hi, hw)];
    let code = b.cvt_u32_u16(pair);
    let code = b.and_b32(code, 0xFFu32);
    (words, code)
}

/// max(0, |v₀|, |v₁|, …) with NaN propagating (`max.NaN`), in order.
pub fn abs_max(b: &mut KernelBuilder, v: &[Reg]) -> Reg {
    let mut amax = b.mov_f32(0f32);
    for &x in v {
        let a = b.abs_f32(x);
        amax = b.max_nan_f32(amax, a);
    }
    amax
}

/// The NVFP4 scale of one 16-value block.
#[derive(Clone, Copy, Debug)]
pub struct BlockScale {
    /// The E4M3 code in the low byte of a b16 (`cvt…e4m3x2` packs it with a zero).
    pub pair: Reg,
    /// The scale as an f32 (exact).
    pub sfd: Reg,
    /// g / scale (0 for a zero scale): what the block's values are multiplied by before
    /// E2M1 rounding.
    pub q: Reg,
}

/// The NVFP4 scale of a block whose largest magnitude is `amax`, with global scale `g`, as
/// `quantize_nvfp4_block`: `e4m3(amax / 6 · g)` and the factor `g / scale`.
pub fn nvfp4_block_scale(b: &mut KernelBuilder, amax: Reg, g: Reg) -> BlockScale {
    let s = b.mul_f32(amax, RCP_E2M1_MAX);
    let s = b.mul_f32(s, g);
    let zero = b.mov_f32(0f32);
    let e4m3 = Cvt::satfinite(Rnd::Rn, Ty::E4m3x2, Ty::F32);
    let pair = b.cvt(RegClass::B16, e4m3, vec![zero.into(), s.into()]);
    let halves =
        b.cvt(RegClass::B32, Cvt::round(Rnd::Rn, Ty::F16x2, Ty::E4m3x2), vec![pair.into()]);
    let lo16 = b.cvt_u16_u32(halves);
    let sfd = b.cvt(RegClass::F32, Cvt::plain(Ty::F32, Ty::F16), vec![lo16.into()]);
    let q = b.div_f32(g, sfd);
    let q = b.min_f32(q, f32::MAX);
    let is0 = b.setp_f32(Cmp::Eq, sfd, 0f32);
    let q = b.selp_f32(0f32, q, is0);
    BlockScale { pair, sfd, q }
}

/// The value of an E2M1 code (b32, low nibble) times `scale` (f32), exact for an E4M3
/// scale: the three magnitude bits go to f32 bits 22–24 (exponent e, mantissa m: 2^(e−127)
/// · (1 + m/2), or m · 2^−127 when e = 0), the sign to bit 31, and × 2^126 gives the E2M1
/// value exactly.
pub fn e2m1_times(b: &mut KernelBuilder, code: Reg, scale: Reg) -> Reg {
    let mag = b.and_b32(code, 7u32);
    let mag = b.shl_b32(mag, 22u32);
    let sign = b.and_b32(code, 8u32);
    let sign = b.shl_b32(sign, 28u32);
    let bits = b.or_b32(mag, sign);
    let v = b.mov_b32(RegClass::F32, bits);
    let v = b.mul_f32(v, f32::from_bits(0x7E80_0000));
    b.mul_f32(v, scale)
}

/// Eight values into one b32 of E2M1 codes, element i in bits 4i..4i+4.
fn pack8(b: &mut KernelBuilder, half: &[Reg], hw: bool) -> Reg {
    if hw {
        let e2m1 = Cvt::satfinite(Rnd::Rn, Ty::E2m1x2, Ty::F32);
        let mut bytes = Vec::with_capacity(4);
        for pair in half.chunks_exact(2) {
            if let &[even, odd] = pair {
                // The cvt puts its first source in the high nibble.
                bytes.push(b.cvt(RegClass::B8, e2m1, vec![odd.into(), even.into()]).into());
            }
        }
        b.mov_b32(RegClass::B32, Operand::Vector(bytes))
    } else {
        let mut word = b.mov_u32(0u32);
        for (i, &x) in half.iter().enumerate() {
            let c = e2m1_code_sw(b, x);
            word = b.bfi_b32(c, word, 4 * i as u32, 4);
        }
        word
    }
}

/// The Fast recipe's per-tile factors (`moegen_dsl::epilogue_math::fast::FastFactors`),
/// computed in the same order.
#[derive(Clone, Copy, Debug)]
pub struct FastRegs {
    /// α·(−log2 e), or −log2 e for bf16 inputs.
    pub exp_scale: Reg,
    /// α²·g, or g.
    pub q: Reg,
    /// q · (1/6).
    pub k: Reg,
    /// α.
    pub alpha: Reg,
    /// SwiGLU input precision.
    pub input: SwigluInput,
}

/// `FastFactors::new(alpha, g, input)` in PTX.
pub fn fast_factors(b: &mut KernelBuilder, alpha: Reg, g: Reg, input: SwigluInput) -> FastRegs {
    let (exp_scale, q) = match input {
        SwigluInput::F32 => {
            let e = b.mul_f32(alpha, NEG_LOG2E);
            let a2 = b.mul_f32(alpha, alpha);
            (e, b.mul_f32(a2, g))
        }
        SwigluInput::Bf16 => (b.mov_f32(NEG_LOG2E), b.mov_f32(g)),
    };
    let k = b.mul_f32(q, RCP_E2M1_MAX);
    FastRegs { exp_scale, q, k, alpha, input }
}

/// `swiglu_fast`: `e = ex2(g·exp_scale); r = rcp(1 + e); u·(g·r)` from the raw up and
/// gate accumulators (bf16 inputs: u, g = bf16(α·up), bf16(α·gate) first).
pub fn swiglu_fast(b: &mut KernelBuilder, f: &FastRegs, up: Reg, gate: Reg) -> Reg {
    let (u, g) = match f.input {
        SwigluInput::F32 => (up, gate),
        SwigluInput::Bf16 => {
            let u = b.mul_f32(f.alpha, up);
            let g = b.mul_f32(f.alpha, gate);
            (round_bf16(b, u), round_bf16(b, g))
        }
    };
    let t = b.mul_f32(g, f.exp_scale);
    let e = b.ex2_approx_ftz_f32(t);
    let d = b.add_f32(1f32, e);
    let r = b.rcp_approx_ftz_f32(d);
    let s = b.mul_f32(g, r);
    b.mul_f32(u, s)
}

/// [`swiglu_fast`] of two elements with the f32 SwiGLU inputs, its multiplies and the add
/// as `.f32x2` pairs (one FMUL2/FADD2 per pair, sm_100 only): each lane is the scalar
/// sequence's operation with the same rounding, so the values are [`swiglu_fast`]'s.
/// `exp_scale2` and `one2` are the pairs (exp_scale, exp_scale) and (1, 1).
pub fn swiglu_fast_x2(
    b: &mut KernelBuilder,
    exp_scale2: Reg,
    one2: Reg,
    up: [Reg; 2],
    gate: [Reg; 2],
) -> [Reg; 2] {
    let g2 = b.pack_b64(gate[0], gate[1]);
    let u2 = b.pack_b64(up[0], up[1]);
    let t2 = b.mul_f32x2(g2, exp_scale2);
    let (t0, t1) = b.unpack_f32x2(t2);
    let (e0, e1) = (b.ex2_approx_ftz_f32(t0), b.ex2_approx_ftz_f32(t1));
    let e2 = b.pack_b64(e0, e1);
    let d2 = b.add_f32x2(one2, e2);
    let (d0, d1) = b.unpack_f32x2(d2);
    let (r0, r1) = (b.rcp_approx_ftz_f32(d0), b.rcp_approx_ftz_f32(d1));
    let r2 = b.pack_b64(r0, r1);
    let s2 = b.mul_f32x2(g2, r2);
    let h2 = b.mul_f32x2(u2, s2);
    let (h0, h1) = b.unpack_f32x2(h2);
    [h0, h1]
}

/// `sigmoid_times_fast`: `t = z ·rn −log2e; e = ex2(t); r = rcp(1 +rn e); x ·rn r`.
fn sigmoid_times_fast(b: &mut KernelBuilder, x: Reg, z: Reg) -> Reg {
    let t = b.mul_f32(z, NEG_LOG2E);
    let e = b.ex2_approx_ftz_f32(t);
    let d = b.add_f32(1f32, e);
    let r = b.rcp_approx_ftz_f32(d);
    b.mul_f32(x, r)
}

/// The Fast block quantization of an unfolded epilogue (`FastFactors::unfolded`):
/// `q = g`, `k = g ·rn (1/6)`.
pub fn unfolded_block_quant(b: &mut KernelBuilder, g: Reg) -> BlockQuant {
    let k = b.mul_f32(g, RCP_E2M1_MAX);
    BlockQuant::Fast { q: g, k }
}

/// How a block's scale and factor are formed.
#[derive(Clone, Copy, Debug)]
pub enum BlockQuant {
    /// The Exact recipe: `sf = e4m3((amax·(1/6))·g)`, factor `g / sf` (`div.rn`).
    Exact {
        /// The output global scale g.
        g: Reg,
    },
    /// The Fast recipe: `sf = e4m3(amax·k)`, factor `q · rcp.approx.ftz(sf)`.
    Fast {
        /// q of [`FastRegs`].
        q: Reg,
        /// k of [`FastRegs`].
        k: Reg,
    },
}

/// NVFP4-quantizes two 16-value blocks: returns four b32 words of E2M1 codes (element i of
/// block j in bits 4·(i%8) of word 2j + i/8) and a b16 with the two E4M3 scale codes (block
/// 0 in the low byte). Per block: amax = max.NaN over |v|; the scale code by one
/// `cvt.rn.satfinite.e4m3x2` for both blocks, decoded back through f16; factor = 0 if the
/// scale decodes to 0, else min(factor, f32::MAX); codes = e2m1(v·factor).
pub fn requant_pair(b: &mut KernelBuilder, v: &[Reg; 32], how: BlockQuant) -> ([Reg; 4], Reg) {
    let sf: [Reg; 2] = std::array::from_fn(|j| {
        let blk = &v[16 * j..16 * j + 16];
        let mut amax = b.abs_f32(blk[0]);
        for &x in &blk[1..] {
            let a = b.abs_f32(x);
            amax = b.max_nan_f32(amax, a);
        }
        match how {
            BlockQuant::Exact { g } => {
                let s = b.mul_f32(amax, RCP_E2M1_MAX);
                b.mul_f32(s, g)
            }
            BlockQuant::Fast { k, .. } => b.mul_f32(amax, k),
        }
    });
    // a → high byte, b → low byte.
    let e4m3 = Cvt::satfinite(Rnd::Rn, Ty::E4m3x2, Ty::F32);
    let codes = b.cvt(RegClass::B16, e4m3, vec![sf[1].into(), sf[0].into()]);
    let halves =
        b.cvt(RegClass::B32, Cvt::round(Rnd::Rn, Ty::F16x2, Ty::E4m3x2), vec![codes.into()]);
    let h0 = b.cvt_u16_u32(halves);
    let upper = b.shr_u32(halves, 16u32);
    let h1 = b.cvt_u16_u32(upper);
    let mut words = Vec::with_capacity(4);
    for (j, h) in [h0, h1].into_iter().enumerate() {
        let sfd = b.cvt(RegClass::F32, Cvt::plain(Ty::F32, Ty::F16), vec![h.into()]);
        let q = match how {
            BlockQuant::Exact { g } => b.div_f32(g, sfd),
            BlockQuant::Fast { q, .. } => {
                let r = b.rcp_approx_ftz_f32(sfd);
                b.mul_f32(q, r)
            }
        };
        let q = b.min_f32(q, f32::MAX);
        let is0 = b.setp_f32(Cmp::Eq, sfd, 0f32);
        let q = b.selp_f32(0f32, q, is0);
        // v · q in pairs (one FMUL2 each; lanes round as the scalar multiply does).
        let q2 = b.pack_b64(q, q);
        let mut scaled = Vec::with_capacity(16);
        for i in (0..16).step_by(2) {
            let p = b.pack_b64(v[16 * j + i], v[16 * j + i + 1]);
            let prod = b.mul_f32x2(p, q2);
            let (lo, hi) = b.unpack_f32x2(prod);
            scaled.extend([lo, hi]);
        }
        let (lo, hi) = scaled.split_at(8);
        words.push(pack8(b, lo, true));
        words.push(pack8(b, hi, true));
    }
    let words = [words[0], words[1], words[2], words[3]];
    (words, codes)
}
