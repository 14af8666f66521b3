//! A8: E2M1 codes into E4M3 wgmma A registers (`abi::sm90_weights::a8`). Per K32 step and
//! m64 block a consumer thread holds two words — rows r and r+8, eight codes each — and the
//! rows' table codes c (one byte per K32 block of the stage's scale words).
//!
//! 1. The table: the E4M3 bytes of |e2m1| · 2^(c − 6) for the eight magnitudes are
//!    `c · 0x08080800 + 0x0C080000` (magnitudes 0‥3) and `c · 0x08080808 + 0x1C181410`
//!    (4‥7): each nonzero magnitude's exponent field moves with c (1 ≤ c ≤ 12 keeps every
//!    entry a normal E4M3 of at most 384), zero stays 0. Byte c is taken from the scale word
//!    with `prmt`; two `mad.lo` build the table: 3 instructions per row and step.
//! 2. Per word: `sel = w & 0x77777777` drops the sign bits; `prmt(tlo, thi, sel)` looks up
//!    the four magnitudes of a0/a1 (selector nibbles 0‥3) and `prmt(tlo, thi, sel >> 16)`
//!    those of a2/a3; the signs sit at bits 8i + 7 (a0) and 8i + 3 (a2) of the word, so
//!    `w & 0x80808080` and `(w << 4) & 0x80808080` OR them in (ptxas fuses each mask and OR
//!    into one LOP3): 7 instructions for 8 values.
//!
//! Per K32 step and m64 block: 2 × 3 + 2 × 7 = 20 ALU instructions for 16 values (the A16
//! dequantization spends 24 on 8), the scale applied by the table, exactly: the value is
//! e2m1 · 2^(s − s_max + 6) and the row's 2^(s_max − 6) is applied in the epilogue.

use moegen_dsl::abi::sm90_weights::a8::{TABLE_HI_ADD, TABLE_HI_MUL, TABLE_LO_ADD, TABLE_LO_MUL};

use crate::ptx::ops::{Alu, IntOp};
use crate::ptx::{KernelBuilder, Operand, Reg, RegClass, Ty};

/// `prmt.b32 d, a, b, sel`.
fn prmt(b: &mut KernelBuilder, a: Reg, hi: impl Into<Operand>, sel: impl Into<Operand>) -> Reg {
    b.op(RegClass::B32, Alu::Int(IntOp::Prmt, Ty::B32), vec![a.into(), hi.into(), sel.into()])
}

/// The E4M3 look-up table (magnitudes 0‥3, 4‥7) of step `j`'s block from a row's scale
/// word (byte j: the table code).
pub fn table(b: &mut KernelBuilder, scale_word: Reg, j: u32) -> (Reg, Reg) {
    // Byte j, the other three bytes from the zero operand.
    let zero = b.mov_u32(0u32);
    let c = prmt(b, scale_word, zero, Operand::Hex(0x4440 | j));
    let lo = b.mad_u32(c, Operand::Hex(TABLE_LO_MUL), Operand::Hex(TABLE_LO_ADD));
    let hi = b.mad_u32(c, Operand::Hex(TABLE_HI_MUL), Operand::Hex(TABLE_HI_ADD));
    (lo, hi)
}

/// The two A registers one word gives: (a0, a2) for row r, (a1, a3) for row r+8.
pub fn expand_word(b: &mut KernelBuilder, w: Reg, (lo, hi): (Reg, Reg)) -> (Reg, Reg) {
    let sel = b.and_b32(w, Operand::Hex(0x7777_7777));
    let first = prmt(b, lo, hi, sel);
    let sel_hi = b.shr_u32(sel, 16u32);
    let second = prmt(b, lo, hi, sel_hi);
    let s_first = b.and_b32(w, Operand::Hex(0x8080_8080));
    let first = b.or_b32(first, s_first);
    let w4 = b.shl_b32(w, 4u32);
    let s_second = b.and_b32(w4, Operand::Hex(0x8080_8080));
    let second = b.or_b32(second, s_second);
    (first, second)
}

/// The four A registers of one K32 step: words and scale words of rows r and r+8.
pub fn dequant_step_fp8(
    b: &mut KernelBuilder,
    words: [Reg; 2],
    scale_words: [Reg; 2],
    j: u32,
) -> [Reg; 4] {
    let t_r = table(b, scale_words[0], j);
    let t_r8 = table(b, scale_words[1], j);
    let (a0, a2) = expand_word(b, words[0], t_r);
    let (a1, a3) = expand_word(b, words[1], t_r8);
    [a0, a1, a2, a3]
}
