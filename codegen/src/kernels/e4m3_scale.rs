//! Power-of-two E4M3 quantization in registers: the steps of `formats::e4m3_scale_exponent`
//! and `formats::quantize_mxfp8_block`, shared by Hopper's per-row A8 quantizer and the SM100
//! MXFP8 epilogue (one scale per 32). The exponent comes from amax's bits, so multiplying by
//! 2^−e is exact (short of underflow) and the one rounding is `cvt.rn.satfinite.e4m3x2.f32`.

use moegen_dsl::formats::MANT_1_75;

use crate::ptx::ops::{Alu, Cvt, IntOp};
use crate::ptx::{Cmp, KernelBuilder, Operand, Reg, RegClass, Rnd, Ty};

/// The least scale exponent: 2^−e stays a normal f32.
const MIN_EXP: i32 = -126;

/// e = max(E − 8 + [mantissa > 1.75's], −126) from the bits of `amax` (≥ 0 or the
/// canonical NaN `max.NaN` returns; E = field − 127), as an s32.
pub fn e4m3_scale_exponent(b: &mut KernelBuilder, amax: Reg) -> Reg {
    let bits = b.mov_b32(RegClass::B32, amax);
    let field = b.shr_u32(bits, 23u32);
    let field = b.and_b32(field, 0xFFu32);
    let mant = b.and_b32(bits, 0x007F_FFFFu32);
    let up = b.setp_u32(Cmp::Gt, mant, MANT_1_75);
    let carry = b.selp_u32(1u32, 0u32, up);
    let e = b.add_u32(field, carry);
    let e = b.sub_u32(e, 127 + 8);
    b.op(
        RegClass::B32,
        Alu::Int(IntOp::Max, Ty::S32),
        vec![e.into(), Operand::Imm(i64::from(MIN_EXP))],
    )
}

/// 2^−e as an f32 (normal for e in [−126, 126]).
pub fn pow2_neg(b: &mut KernelBuilder, e: Reg) -> Reg {
    let ibits = b.sub_u32(127u32, e);
    let ibits = b.shl_b32(ibits, 23u32);
    b.mov_b32(RegClass::F32, ibits)
}

/// E4M3 codes of `scaled` (already multiplied by 2^−e), four per b32 word, value i in byte
/// i % 4 of word i / 4 (`scaled.len()` a multiple of 4).
pub fn e4m3_words(b: &mut KernelBuilder, scaled: &[Reg]) -> Vec<Reg> {
    let e4m3 = Cvt::satfinite(Rnd::Rn, Ty::E4m3x2, Ty::F32);
    let pairs: Vec<Reg> = scaled
        .chunks_exact(2)
        .filter_map(|p| match *p {
            // cvt puts its first source in the upper byte.
            [lo, hi] => Some(b.cvt(RegClass::B16, e4m3, vec![hi.into(), lo.into()])),
            _ => None,
        })
        .collect();
    pairs
        .chunks_exact(2)
        .filter_map(|p| match *p {
            [lo, hi] => Some(b.mov_b32(RegClass::B32, Operand::regs(&[lo, hi]))),
            _ => None,
        })
        .collect()
}

/// MXFP8-quantizes one block of 32 values: eight b32 words of E4M3 codes and the UE8M0
/// code `e + 127` (a u32). amax is `max.NaN` over |v|; the values are scaled in pairs
/// (`mul.f32x2`, rounding each lane as `mul.rn.f32`).
pub fn mxfp8_block(b: &mut KernelBuilder, v: &[Reg; 32]) -> ([Reg; 8], Reg) {
    let mut amax = b.abs_f32(v[0]);
    for &x in &v[1..] {
        let a = b.abs_f32(x);
        amax = b.max_nan_f32(amax, a);
    }
    let e = e4m3_scale_exponent(b, amax);
    let code = b.add_u32(e, 127u32);
    let inv = pow2_neg(b, e);
    let inv2 = b.pack_b64(inv, inv);
    // Four values at a time, each pair converted as soon as it is scaled: only the codes
    // stay live (the epilogue holds 64 values of h besides).
    let words: Vec<Reg> = (0..32)
        .step_by(4)
        .map(|i| {
            let quad: Vec<Reg> = (i..i + 4)
                .step_by(2)
                .flat_map(|j| {
                    let p = b.pack_b64(v[j], v[j + 1]);
                    let prod = b.mul_f32x2(p, inv2);
                    let (lo, hi) = b.unpack_f32x2(prod);
                    [lo, hi]
                })
                .collect();
            e4m3_words(b, &quad)[0]
        })
        .collect();
    (std::array::from_fn(|i| words[i]), code)
}
