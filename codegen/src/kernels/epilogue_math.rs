//! PTX for the epilogue arithmetic of `moegen_dsl::epilogue_math` and the NVFP4 block
//! quantization of `moegen_dsl::formats`: the same IEEE operations in the same order, with
//! explicit `.rn` so ptxas cannot contract a multiply and an add into an fma.

use moegen_dsl::epilogue_math::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO, LOG2E};
use moegen_dsl::formats::RCP_E2M1_MAX;

use crate::ptx::{KernelBuilder, Operand, Reg, RegClass};

fn f(b: &mut KernelBuilder, op: &str, args: Vec<Operand>) -> Reg {
    b.op(RegClass::F32, op, args)
}

/// e^x as `exp_f32`.
pub fn exp_f32(b: &mut KernelBuilder, x: Reg) -> Reg {
    let t = f(b, "mul.rn.f32", vec![x.into(), LOG2E.into()]);
    let n = f(b, "cvt.rni.f32.f32", vec![t.into()]);
    let nn = f(b, "neg.f32", vec![n.into()]);
    let r = f(b, "fma.rn.f32", vec![nn.into(), LN2_HI.into(), x.into()]);
    let r = f(b, "fma.rn.f32", vec![nn.into(), LN2_LO.into(), r.into()]);
    let mut p = f(b, "mov.f32", vec![EXP_POLY[0].into()]);
    for &c in &EXP_POLY[1..] {
        p = f(b, "fma.rn.f32", vec![p.into(), r.into(), c.into()]);
    }
    let ni = b.op(RegClass::B32, "cvt.rzi.s32.f32", vec![n.into()]);
    let e = b.add_u32(ni, 127u32);
    let bits = b.shl_b32(e, 23u32);
    let scale = f(b, "mov.b32", vec![bits.into()]);
    let y = f(b, "mul.rn.f32", vec![p.into(), scale.into()]);
    let hi = b.setp("gt.f32", x, EXP_HI);
    let lo = b.setp("lt.f32", x, EXP_LO);
    let y = f(b, "selp.f32", vec![f32::INFINITY.into(), y.into(), hi.into()]);
    f(b, "selp.f32", vec![0f32.into(), y.into(), lo.into()])
}

/// up · silu(gate) = up · (gate / (1 + e^−gate)).
pub fn swiglu(b: &mut KernelBuilder, up: Reg, gate: Reg) -> Reg {
    let ng = f(b, "neg.f32", vec![gate.into()]);
    let e = exp_f32(b, ng);
    let den = f(b, "add.rn.f32", vec![1f32.into(), e.into()]);
    let s = f(b, "div.rn.f32", vec![gate.into(), den.into()]);
    f(b, "mul.rn.f32", vec![up.into(), s.into()])
}

/// Rounds an f32 to bf16 and back (`cvt.rn.bf16.f32`, then widening).
pub fn round_bf16(b: &mut KernelBuilder, x: Reg) -> Reg {
    let h = b.op(RegClass::B16, "cvt.rn.bf16.f32", vec![x.into()]);
    f(b, "cvt.f32.bf16", vec![h.into()])
}

/// NVFP4-quantizes 16 values with global scale `g`: returns the two packed b32 words
/// (elements 0..8 and 8..16, element 2i in the low nibble) and the E4M3 scale code (b32).
pub fn quantize16(b: &mut KernelBuilder, v: &[Reg], g: Reg) -> (Reg, Reg, Reg) {
    quantize16_with(b, v, g, true)
}

/// One E2M1 code (b32, low nibble) by comparisons, for targets without the `cvt`:
/// |x| is counted past the midpoints 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 (strictly where the
/// lower neighbour has the even code, inclusively where the upper one has), NaN → 7, and
/// the sign bit of x (zero included) → bit 3 — `f32_to_e2m1` exactly.
pub fn e2m1_code_sw(b: &mut KernelBuilder, x: Reg) -> Reg {
    let m = f(b, "abs.f32", vec![x.into()]);
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
        let p = b.setp(if strict { "gt.f32" } else { "ge.f32" }, m, t);
        let inc = b.selp_u32(1u32, 0u32, p);
        code = b.add_u32(code, inc);
    }
    let nan = b.setp("nan.f32", m, m);
    let bits = b.op(RegClass::B32, "mov.b32", vec![x.into()]);
    let sign = b.shr_u32(bits, 31u32);
    let sign = b.shl_b32(sign, 3u32);
    let signed = b.or_b32(code, sign);
    b.op(RegClass::B32, "selp.b32", vec![7u32.into(), signed.into(), nan.into()])
}

/// [`quantize16`], with the E2M1 conversion by `cvt` (`hw`) or by [`e2m1_code_sw`].
pub fn quantize16_with(b: &mut KernelBuilder, v: &[Reg], g: Reg, hw: bool) -> (Reg, Reg, Reg) {
    let mut amax = f(b, "mov.f32", vec![0f32.into()]);
    for &x in v {
        let a = f(b, "abs.f32", vec![x.into()]);
        amax = f(b, "max.NaN.f32", vec![amax.into(), a.into()]);
    }
    let s = f(b, "mul.rn.f32", vec![amax.into(), RCP_E2M1_MAX.into()]);
    let s = f(b, "mul.rn.f32", vec![s.into(), g.into()]);
    let zero = f(b, "mov.f32", vec![0f32.into()]);
    let pair = b.op(RegClass::B16, "cvt.rn.satfinite.e4m3x2.f32", vec![zero.into(), s.into()]);
    let halves = b.op(RegClass::B32, "cvt.rn.f16x2.e4m3x2", vec![pair.into()]);
    let lo16 = b.op(RegClass::B16, "cvt.u16.u32", vec![halves.into()]);
    let sfd = f(b, "cvt.f32.f16", vec![lo16.into()]);
    let q = f(b, "div.rn.f32", vec![g.into(), sfd.into()]);
    let q = f(b, "min.f32", vec![q.into(), f32::MAX.into()]);
    let is0 = b.setp("eq.f32", sfd, 0f32);
    let q = f(b, "selp.f32", vec![0f32.into(), q.into(), is0.into()]);
    let scaled: Vec<Reg> =
        v.iter().map(|&x| f(b, "mul.rn.f32", vec![x.into(), q.into()])).collect();
    let mut words = Vec::with_capacity(2);
    for half in scaled.chunks(8) {
        if hw {
            let bytes: Vec<Operand> = half
                .chunks(2)
                .map(|p| {
                    b.op(
                        RegClass::B8,
                        "cvt.rn.satfinite.e2m1x2.f32",
                        vec![p[1].into(), p[0].into()],
                    )
                    .into()
                })
                .collect();
            words.push(b.op(RegClass::B32, "mov.b32", vec![Operand::Vector(bytes)]));
        } else {
            let mut word = b.mov_u32(0u32);
            for (i, &x) in half.iter().enumerate() {
                let c = e2m1_code_sw(b, x);
                word = b.op(
                    RegClass::B32,
                    "bfi.b32",
                    vec![c.into(), word.into(), (4 * i as u32).into(), 4u32.into()],
                );
            }
            words.push(word);
        }
    }
    let code = b.op(RegClass::B32, "cvt.u32.u16", vec![pair.into()]);
    let code = b.and_b32(code, 0xFFu32);
    (words[0], words[1], code)
}
