//! Weights into wgmma A registers: per K16 step each consumer thread holds one 32-bit word
//! of eight E2M1 codes — exactly its A fragment (`abi::sm90_weights`): register k takes
//! values 2k (low bf16 half) and 2k + 1 (high half), their bits scattered over the word —
//! and the scale words of its two rows (r, r+8). Every value becomes the exact bf16 the
//! runtime's reference computes:
//!
//! 1. Per register k the two codes' bits go to bf16 bits 6–8 (mantissa, exponent) and 15
//!    (sign) of each half (`abi::sm90_weights::VALUE_BITS` scatters them for this):
//!    registers 0 and 1 are `shf.r.wrap` of the word by 2 and 5 and `& 0x81C081C0`;
//!    registers 2 and 3 are `w & 0x40454045` times 0x42 and `w & 0x80A880A8` times 9 (two
//!    copies each, `c << 1 + c << 6` and `c + c << 3`, which share no bit, so the sum
//!    carries nothing; each bit lands once where it belongs, the other copy outside the kept
//!    bits), then `& 0x81C081C0`: 10 instructions per word (13 with nibbles, which allow no
//!    such split: docs/hopper.md). Each half is then the bf16 2^(e−127)·(1 + m/2), or
//!    m·2^−127 when e = 0 (a bf16 subnormal): e2m1 · 2^−126 exactly.
//! 2. NVFP4: `mul.rn.bf16x2` by 2^126 makes it the E2M1 value, and a second one by the
//!    splatted UE4M3 scale gives e2m1 · scale, exact because it is a bf16 (validated by the
//!    runtime): 2 multiplies per register. MXFP4: one multiply by the splatted factor
//!    2^126 · scale · 2^−ρ, which the host stores as a bf16 exponent field
//!    (`abi::sm90_weights::mxfp4_scale_field`; ρ > 0 only for matrices with scales above 2,
//!    and the epilogue's α carries 2^ρ): 1 multiply per register. (NVFP4's 2^126 · scale is
//!    no bf16 for UE4M3 scales from 4 up, and no per-matrix power of two keeps every
//!    product exact, so NVFP4 keeps two.)
//! 3. Scales, once per stage: NVFP4, one word per row (byte j is step j's scale):
//!    `(s << 4) & 0x07F007F0` and `(s >> 4) & 0x07F007F0` put bytes 0, 2 and 1, 3 at bf16
//!    bits 4–10 (2^(e−127)·(1 + m/8), or the E4M3 subnormal m/8·2^−126; the mask drops the
//!    clear sign bit), and `mul.rn.bf16x2` by 2^120 makes them the E4M3 values: 6
//!    instructions for four scales. MXFP4, one word for both rows (a byte per 32-block and
//!    row): `(s << 7) & 0x7F807F80` and `(s >> 1) & 0x7F807F80` put row r's and row r + 8's
//!    two fields in the bf16 exponents: 4 instructions and 1 load for both rows' four steps.
//! 4. The scale multiply reads its step's half as `{h, h}` (`mov.b32` from a `.b16`
//!    pair), which ptxas folds into `HMUL2`'s `.H0_H0`/`.H1_H1` operand selector: the
//!    splat costs no instruction.
//!
//! Per K16 step and m64 block: 1 shared load, 10 placing instructions, then NVFP4 8
//! multiplies + its scales' share 2 × 6 / 4 = 3 (21 ALU instructions for 8 values), MXFP4 4
//! multiplies + 4 / 4 = 1 (15); docs/hopper.md has the SASS counts.

use moegen_dsl::abi::WeightFormat;

use crate::ptx::ops::{Alu, FloatOp};
use crate::ptx::{KernelBuilder, Operand, Reg, RegClass, Rnd, Ty};

/// Each bf16 half's placed bits: exponent bits 7–8, the mantissa's top bit 6, the sign.
const PLACED_BITS: u32 = 0x81C0_81C0;
/// bf16x2 2^126, 2^126.
const BF16X2_2P126: u32 = 0x7E80_7E80;
/// bf16x2 2^120, 2^120.
const BF16X2_2P120: u32 = 0x7B80_7B80;

/// `mul.rn.bf16x2 d, a, k` with a constant pair.
fn mul_bf16x2(b: &mut KernelBuilder, a: Reg, k: impl Into<Operand>) -> Reg {
    b.op(RegClass::B32, Alu::Float(FloatOp::Mul(Rnd::Rn), Ty::Bf16x2), vec![a.into(), k.into()])
}

/// NVFP4: the bf16 scales of one row for the stage's four K16 steps, from its scale word
/// (byte j: step j), as 16-bit halves: entry j is step j's scale. Converted once per row
/// and stage; the per-step splat `{s, s}` costs nothing (see [`splat`]).
pub fn nvfp4_row_scales(b: &mut KernelBuilder, word: Reg) -> [Reg; 4] {
    // Bytes 0 and 2 (steps 0, 2) and bytes 1 and 3 (steps 1, 3) each to bits 4–10 of a bf16
    // half; the mask drops the (always clear) sign bit and the neighbour byte's bits.
    let k = b.mov_u32(Operand::Hex(BF16X2_2P120));
    let even = b.shl_b32(word, 4u32);
    let even = b.and_b32(even, Operand::Hex(0x07F0_07F0));
    let odd = b.shr_u32(word, 4u32);
    let odd = b.and_b32(odd, Operand::Hex(0x07F0_07F0));
    let even = mul_bf16x2(b, even, k);
    let odd = mul_bf16x2(b, odd, k);
    let (s0, s2) = unpack(b, even);
    let (s1, s3) = unpack(b, odd);
    [s0, s1, s2, s3]
}

/// MXFP4: the factors of the thread's rows r and r + 8 for the stage's four K16 steps
/// (`[row][step]`, 16-bit halves), from their one scale word (bytes: block 0 of r, of
/// r + 8, block 1 of r, of r + 8; `abi::sm90_weights::scale_position`). Each byte is a bf16
/// exponent field (1‥254: never a subnormal or the sign), so shifting it to bits 7–14 of a
/// half is the factor: `(s << 7) & 0x7F807F80` for r, `(s >> 1) & 0x7F807F80` for r + 8.
pub fn mxfp4_pair_scales(b: &mut KernelBuilder, word: Reg) -> [[Reg; 4]; 2] {
    let lo = b.shl_b32(word, 7u32);
    let hi = b.shr_u32(word, 1u32);
    [lo, hi].map(|bits| {
        let pair = b.and_b32(bits, Operand::Hex(0x7F80_7F80));
        let (s01, s23) = unpack(b, pair);
        [s01, s01, s23, s23]
    })
}

/// `mov.b32 {lo, hi}, v`: the two 16-bit halves.
fn unpack(b: &mut KernelBuilder, v: Reg) -> (Reg, Reg) {
    let (lo, hi) = (b.reg(RegClass::B16), b.reg(RegClass::B16));
    b.emit(Alu::Mov(Ty::B32), vec![Operand::regs(&[lo, hi]), v.into()]);
    (lo, hi)
}

/// `mov.b32 d, {h, h}`: ptxas folds it into the multiply that reads it as the `.H0_H0` /
/// `.H1_H1` operand selector of `HMUL2`, so it is no instruction of its own.
pub fn splat(b: &mut KernelBuilder, h: Reg) -> Reg {
    b.mov_b32(RegClass::B32, Operand::regs(&[h, h]))
}

/// The four A registers of one K16 step from the fragment word `w`, with the scales of the
/// thread's rows r (`s_lo`, registers 0 and 2) and r+8 (`s_hi`, registers 1 and 3), splatted
/// from [`nvfp4_row_scales`] or [`mxfp4_pair_scales`] of the same `format`.
pub fn dequant_step(
    b: &mut KernelBuilder,
    format: WeightFormat,
    w: Reg,
    s_lo: Reg,
    s_hi: Reg,
) -> [Reg; 4] {
    let k126 = match format {
        WeightFormat::Nvfp4 => Some(b.mov_u32(Operand::Hex(BF16X2_2P126))),
        WeightFormat::Mxfp4 => None,
    };
    std::array::from_fn(|k| {
        let spread = match k {
            0 => b.rotr_b32(w, 2),
            1 => b.rotr_b32(w, 5),
            _ => {
                let (mask, times) = if k == 2 { (0x4045_4045, 0x42u32) } else { (0x80A8_80A8, 9) };
                let c = b.and_b32(w, Operand::Hex(mask));
                b.mul_u32(c, times)
            }
        };
        let bits = b.and_b32(spread, Operand::Hex(PLACED_BITS));
        // NVFP4: the E2M1 value first; MXFP4's factor already holds the 2^126.
        let bits = match k126 {
            Some(k126) => mul_bf16x2(b, bits, k126),
            None => bits,
        };
        mul_bf16x2(b, bits, if k % 2 == 0 { s_lo } else { s_hi })
    })
}
