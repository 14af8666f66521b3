//! Pure ALU semantics on raw register bits: integer and f32 arithmetic, comparisons and
//! conversions (PTX ISA §9.7), keyed by the decoded operation.

use crate::approx;
use crate::decode::op::{Alu, Cmp, CmpTy, Cvt, FOp, IntOp, PredOp, PrmtMode};
use crate::minifloat::{self, Ue8m0Rounding};

fn f32_of(bits: u64) -> f32 {
    f32::from_bits(bits as u32)
}

fn bits_f32(v: f32) -> u64 {
    u64::from(v.to_bits())
}

/// The six ordered comparisons; for floats they are false when an operand is NaN (`ne`
/// too: it is the ordered form).
fn ordered<T: PartialOrd>(cmp: Cmp, a: T, b: T) -> bool {
    use std::cmp::Ordering::{Greater, Less};
    match cmp {
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
        Cmp::Eq => a == b,
        _ => matches!(a.partial_cmp(&b), Some(Less | Greater)),
    }
}

pub(super) fn compare(cmp: Cmp, ty: CmpTy, a: u64, b: u64) -> bool {
    match ty {
        CmpTy::U32 => ordered(cmp, a as u32, b as u32),
        CmpTy::S32 => ordered(cmp, a as u32 as i32, b as u32 as i32),
        CmpTy::U64 => ordered(cmp, a, b),
        CmpTy::S64 => ordered(cmp, a as i64, b as i64),
        CmpTy::F32 => {
            let (a, b) = (f32_of(a), f32_of(b));
            let nan = a.is_nan() || b.is_nan();
            match cmp {
                Cmp::Nan => nan,
                Cmp::Num => !nan,
                Cmp::Equ => nan || a == b,
                Cmp::Neu => nan || a != b,
                Cmp::Ltu => nan || a < b,
                Cmp::Leu => nan || a <= b,
                Cmp::Gtu => nan || a > b,
                Cmp::Geu => nan || a >= b,
                _ => ordered(cmp, a, b),
            }
        }
    }
}

/// Evaluates `alu` on its sources (raw bits, the first source in `v[0]`).
pub(super) fn eval(alu: Alu, v: [u64; 4]) -> Result<u64, &'static str> {
    match alu {
        Alu::F32(op) => Ok(f32_op(op, v)),
        Alu::F32x2(op) => {
            // Lane i is bits 32i..32i+32 of each operand (PTX ISA add/mul/fma .f32x2).
            let lane = |i: u32| f32_op(op, v.map(|x| (x >> (32 * i)) & 0xFFFF_FFFF));
            Ok(lane(0) | (lane(1) << 32))
        }
        Alu::Bf16x2Mul => {
            let lane = |i: u32| {
                let (a, b) = ((v[0] >> (16 * i)) as u16, (v[1] >> (16 * i)) as u16);
                u64::from(mul_bf16(a, b)) << (16 * i)
            };
            Ok(lane(0) | lane(1))
        }
        Alu::I16x2(op, signed) => {
            let lane = |i: u32| {
                let (a, b) = ((v[0] >> (16 * i)) as u16, (v[1] >> (16 * i)) as u16);
                let r = match (op, signed) {
                    (IntOp::Min, true) => (a as i16).min(b as i16) as u16,
                    (IntOp::Max, true) => (a as i16).max(b as i16) as u16,
                    (IntOp::Min, false) => a.min(b),
                    _ => a.max(b),
                };
                u64::from(r) << (16 * i)
            };
            Ok(lane(0) | lane(1))
        }
        Alu::Pred(op) => {
            let (a, b) = (v[0] != 0, v[1] != 0);
            Ok(u64::from(match op {
                PredOp::And => a && b,
                PredOp::Or => a || b,
                PredOp::Xor => a ^ b,
                PredOp::Not => !a,
            }))
        }
        Alu::I32(op, signed) => i32_op(op, signed, v),
        Alu::I64(op, signed) => i64_op(op, signed, v),
    }
}

/// `mul.rn.bf16`: the product of two bf16 values (exact in f64: 8-bit significands)
/// rounded once to bf16, nearest even, with bf16 subnormals (down to 2^-133); a NaN result
/// is the canonical bf16 NaN 0x7FFF, as `cvt` gives on an H200.
fn mul_bf16(a: u16, b: u16) -> u16 {
    let f = |h: u16| f64::from(f32::from_bits(u32::from(h) << 16));
    let x = f(a) * f(b);
    if x.is_nan() {
        return 0x7FFF;
    }
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let mag = x.abs();
    if mag == 0.0 || mag.is_infinite() {
        return sign | if mag == 0.0 { 0 } else { 0x7F80 };
    }
    // Products of bf16 values are normal f64 numbers: m · 2^(e-52) with m of 53 bits.
    let bits = mag.to_bits();
    let e = ((bits >> 52) & 0x7FF) as i32 - 1023;
    let m = u128::from((bits & ((1 << 52) - 1)) | (1 << 52));
    // The last bit bf16 keeps: 8 significant bits, or the subnormal grid 2^-133.
    let lsb = (e - 7).max(-133);
    let shift = (lsb - (e - 52)) as u32;
    let q = if shift >= 128 {
        0
    } else {
        let (q, rem, half) = (m >> shift, m & ((1 << shift) - 1), 1u128 << (shift - 1));
        if rem > half || (rem == half && q & 1 == 1) { q + 1 } else { q }
    };
    // q ≤ 2^8: exact in f32 unless 2^128 or more, which becomes Inf.
    let v = (q as f64 * 2f64.powi(lsb)) as f32;
    sign | (v.to_bits() >> 16) as u16
}

/// PTX ISA min/max of two values: a NaN input is ignored unless `.NaN` (or both are NaN),
/// and -0.0 < +0.0.
fn min_max(max: bool, nan: bool, x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        if nan || (x.is_nan() && y.is_nan()) {
            return f32::NAN;
        }
        return if x.is_nan() { y } else { x };
    }
    let x_less = x < y || (x == y && x.is_sign_negative() && !y.is_sign_negative());
    if x_less == max { y } else { x }
}

fn f32_op(op: FOp, v: [u64; 4]) -> u64 {
    let (a, b, c) = (f32_of(v[0]), f32_of(v[1]), f32_of(v[2]));
    // `.rn` is IEEE round-to-nearest-even.
    let r = match op {
        FOp::Add => a + b,
        FOp::Sub => a - b,
        FOp::Mul => a * b,
        FOp::Div => a / b,
        FOp::Rcp => 1.0 / a,
        FOp::Fma => a.mul_add(b, c),
        FOp::Abs => a.abs(),
        FOp::Neg => -a,
        FOp::RcpApprox { ftz: true } => approx::rcp_approx_ftz_model(a),
        FOp::RcpApprox { ftz: false } => approx::rcp_approx_model(a),
        FOp::Ex2Approx { ftz: true } => approx::ex2_approx_ftz_model(a),
        FOp::Ex2Approx { ftz: false } => approx::ex2_approx_model(a),
        FOp::Min { nan, abs, three } | FOp::Max { nan, abs, three } => {
            let max = matches!(op, FOp::Max { .. });
            let f = |x: f32| if abs { x.abs() } else { x };
            let d = min_max(max, nan, f(a), f(b));
            if three { min_max(max, nan, d, f(c)) } else { d }
        }
    };
    // Arithmetic NaN results are the canonical NaN 0x7FFFFFFF (PTX ISA; observed on an
    // H200), except abs/neg, which only touch the sign bit.
    if r.is_nan() && !matches!(op, FOp::Abs | FOp::Neg) {
        return 0x7FFF_FFFF;
    }
    bits_f32(r)
}

/// bfe (PTX ISA): bits [pos, pos+len) of `a` (width `w`), zero- or sign-extended; past the
/// msb the sign bit is the msb of `a`.
fn bfe(a: u64, pos: u64, len: u64, w: u32, signed: bool) -> u64 {
    let (pos, len) = ((pos & 0xFF) as u32, (len & 0xFF) as u32);
    let msb = w - 1;
    let bit = |i: u32| (a >> i) & 1;
    let sbit = if !signed || len == 0 { 0 } else { bit((pos + len - 1).min(msb)) };
    let mut d = 0u64;
    for i in 0..w {
        let v = if i < len && pos + i <= msb { bit(pos + i) } else { sbit };
        d |= v << i;
    }
    d
}

/// prmt (PTX ISA): four bytes picked from the eight of `{b, a}`.
fn prmt(mode: PrmtMode, a: u32, b: u32, c: u32) -> u32 {
    let src = (u64::from(b) << 32) | u64::from(a);
    let byte = |i: u32| ((src >> (8 * (i & 7))) & 0xFF) as u32;
    let sel = c & 3;
    // Fixed patterns: the source byte for d.b0 .. d.b3.
    let fixed: [u32; 4] = match mode {
        PrmtMode::Generic => {
            let mut d = 0;
            for k in 0..4 {
                let ctl = (c >> (4 * k)) & 0xF;
                let v = byte(ctl & 7);
                // msb of the selector: replicate the byte's sign bit.
                let v = if ctl & 8 != 0 { if v & 0x80 != 0 { 0xFF } else { 0 } } else { v };
                d |= v << (8 * k);
            }
            return d;
        }
        PrmtMode::F4e => [sel, sel + 1, sel + 2, sel + 3],
        PrmtMode::B4e => [sel, (sel + 7) & 7, (sel + 6) & 7, (sel + 5) & 7],
        PrmtMode::Rc8 => [sel; 4],
        PrmtMode::Ecl => [sel, sel.max(1), sel.max(2), 3],
        PrmtMode::Ecr => [0, sel.min(1), sel.min(2), sel],
        PrmtMode::Rc16 => {
            let lo = 2 * (sel & 1);
            [lo, lo + 1, lo, lo + 1]
        }
    };
    fixed.iter().enumerate().fold(0, |d, (k, &i)| d | (byte(i) << (8 * k)))
}

/// lop3: bit i of the result is bit (a_i·4 + b_i·2 + c_i) of the look-up table.
fn lop3(a: u32, b: u32, c: u32, lut: u32) -> u32 {
    (0..8).filter(|i| lut >> i & 1 != 0).fold(0, |d, i| {
        let pick = |x: u32, bit: u32| if i & bit != 0 { x } else { !x };
        d | (pick(a, 4) & pick(b, 2) & pick(c, 1))
    })
}

/// shf: the 64-bit `{b, a}` shifted by the clamped (0..=32) or wrapped (0..31) amount;
/// `.l` keeps the upper 32 bits, `.r` the lower.
fn shf(left: bool, clamp: bool, a: u32, b: u32, c: u32) -> u32 {
    let n = if clamp { c.min(32) } else { c & 31 };
    let v = (u64::from(b) << 32) | u64::from(a);
    if left { ((v << n) >> 32) as u32 } else { (v >> n) as u32 }
}

/// bfi: `b` with bits [pos, pos+len) replaced by the low bits of `a` (width `w` bits).
fn bfi(a: u64, b: u64, pos: u64, len: u64, w: u32) -> u64 {
    let (pos, len) = ((pos & 0xFF) as u32, (len & 0xFF) as u32);
    if len == 0 || pos >= w {
        return b;
    }
    let len = len.min(w - pos);
    let ones = if len == 64 { u64::MAX } else { (1u64 << len) - 1 };
    let m = ones << pos;
    (b & !m) | ((a << pos) & m)
}

fn i32_op(op: IntOp, signed: bool, v: [u64; 4]) -> Result<u64, &'static str> {
    let (a, b, c) = (v[0] as u32, v[1] as u32, v[2]);
    let (sa, sb) = (a as i32, b as i32);
    let wide = |a: u32, b: u32| {
        if signed {
            (i64::from(a as i32) * i64::from(b as i32)) as u64
        } else {
            u64::from(a) * u64::from(b)
        }
    };
    Ok(match op {
        IntOp::Add => u64::from(a.wrapping_add(b)),
        IntOp::Sub => u64::from(a.wrapping_sub(b)),
        IntOp::MulLo => u64::from(a.wrapping_mul(b)),
        IntOp::MulHi => (wide(a, b) >> 32) & 0xFFFF_FFFF,
        IntOp::MulWide => wide(a, b),
        IntOp::MadLo => u64::from(a.wrapping_mul(b).wrapping_add(c as u32)),
        IntOp::MadWide => wide(a, b).wrapping_add(c),
        // PTX leaves division by zero undefined; a kernel doing it is reported.
        IntOp::Div | IntOp::Rem if b == 0 => return Err("division by zero"),
        IntOp::Div if signed => u64::from(sa.wrapping_div(sb) as u32),
        IntOp::Rem if signed => u64::from(sa.wrapping_rem(sb) as u32),
        IntOp::Div => u64::from(a / b),
        IntOp::Rem => u64::from(a % b),
        IntOp::Min if signed => u64::from(sa.min(sb) as u32),
        IntOp::Max if signed => u64::from(sa.max(sb) as u32),
        IntOp::Min => u64::from(a.min(b)),
        IntOp::Max => u64::from(a.max(b)),
        IntOp::Shl => u64::from(if b >= 32 { 0 } else { a << b }),
        IntOp::Shr if signed => u64::from((sa >> b.min(31)) as u32),
        IntOp::Shr => u64::from(if b >= 32 { 0 } else { a >> b }),
        IntOp::And => u64::from(a & b),
        IntOp::Or => u64::from(a | b),
        IntOp::Xor => u64::from(a ^ b),
        IntOp::Not => u64::from(!a),
        IntOp::Neg => u64::from(a.wrapping_neg()),
        IntOp::Abs => u64::from(sa.wrapping_abs() as u32),
        IntOp::Bfi => bfi(v[0] & 0xFFFF_FFFF, v[1] & 0xFFFF_FFFF, v[2], v[3], 32),
        IntOp::Bfe => bfe(v[0] & 0xFFFF_FFFF, v[1], v[2], 32, signed),
        IntOp::Shf { left, clamp } => u64::from(shf(left, clamp, a, b, c as u32)),
        IntOp::Prmt(mode) => u64::from(prmt(mode, a, b, c as u32)),
        IntOp::Lop3 => u64::from(lop3(a, b, c as u32, v[3] as u32)),
    })
}

fn i64_op(op: IntOp, signed: bool, v: [u64; 4]) -> Result<u64, &'static str> {
    let (a, b, c) = (v[0], v[1], v[2]);
    let (sa, sb) = (a as i64, b as i64);
    Ok(match op {
        IntOp::Add => a.wrapping_add(b),
        IntOp::Sub => a.wrapping_sub(b),
        IntOp::MulLo => a.wrapping_mul(b),
        IntOp::MulHi if signed => ((i128::from(sa) * i128::from(sb)) >> 64) as u64,
        IntOp::MulHi => ((u128::from(a) * u128::from(b)) >> 64) as u64,
        IntOp::MadLo => a.wrapping_mul(b).wrapping_add(c),
        IntOp::MulWide | IntOp::MadWide => return Err("no 128-bit wide form"),
        IntOp::Div | IntOp::Rem if b == 0 => return Err("division by zero"),
        IntOp::Div if signed => sa.wrapping_div(sb) as u64,
        IntOp::Rem if signed => sa.wrapping_rem(sb) as u64,
        IntOp::Div => a / b,
        IntOp::Rem => a % b,
        IntOp::Min if signed => sa.min(sb) as u64,
        IntOp::Max if signed => sa.max(sb) as u64,
        IntOp::Min => a.min(b),
        IntOp::Max => a.max(b),
        // The shift amount is a .u32 operand.
        IntOp::Shl => a.checked_shl(b as u32).unwrap_or(0),
        IntOp::Shr if signed => (sa >> (b as u32).min(63)) as u64,
        IntOp::Shr => a.checked_shr(b as u32).unwrap_or(0),
        IntOp::And => a & b,
        IntOp::Or => a | b,
        IntOp::Xor => a ^ b,
        IntOp::Not => !a,
        IntOp::Neg => a.wrapping_neg(),
        IntOp::Abs => sa.wrapping_abs() as u64,
        IntOp::Bfi => bfi(a, b, v[2], v[3], 64),
        IntOp::Bfe => bfe(a, v[1], v[2], 64, signed),
        IntOp::Shf { .. } | IntOp::Prmt(_) | IntOp::Lop3 => return Err("no 64-bit form"),
    })
}

fn f16_bits_to_f32(h: u16) -> f32 {
    // IEEE binary16 → binary32, exact.
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x3FF);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: value = man · 2^-24.
            let v = man as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
        31 => sign | 0x7F80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

pub(super) fn round_bf16(x: f32) -> u16 {
    // NaN becomes the canonical bf16 NaN 0x7FFF (observed on an H200).
    if x.is_nan() {
        return 0x7FFF;
    }
    let b = x.to_bits();
    (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// `cvt` (PTX ISA §9.7.9.21). `b` is the second source of the two-input packing forms.
pub(super) fn convert(cvt: Cvt, a: u64, b: u64) -> u64 {
    match cvt {
        Cvt::U64FromU32 => a & 0xFFFF_FFFF,
        Cvt::U16FromU32 | Cvt::U32FromU16 => a & 0xFFFF,
        Cvt::F32FromF16 => bits_f32(f16_bits_to_f32(a as u16)),
        Cvt::F32FromBf16 => bits_f32(f32::from_bits(((a as u32) & 0xFFFF) << 16)),
        Cvt::Bf16FromF32 => u64::from(round_bf16(f32_of(a))),
        // d = {a → upper half, b → lower half}.
        Cvt::Bf16x2FromF32 => {
            (u64::from(round_bf16(f32_of(a))) << 16) | u64::from(round_bf16(f32_of(b)))
        }
        // d = {a → high byte (nibble), b → low}.
        Cvt::E4m3x2FromF32 => {
            let lane = |x: u64| u64::from(minifloat::f32_to_e4m3_rn_satfinite(f32_of(x)));
            (lane(a) << 8) | lane(b)
        }
        Cvt::E2m1x2FromF32 => {
            let lane = |x: u64| u64::from(minifloat::f32_to_e2m1_rn_satfinite(f32_of(x)));
            (lane(a) << 4) | lane(b)
        }
        Cvt::Ue8m0x2FromF32 { round_up, satfinite } => {
            let r = if round_up { Ue8m0Rounding::Rp } else { Ue8m0Rounding::Rz };
            let lane = |x: u64| u64::from(minifloat::f32_to_ue8m0(f32_of(x), r, satfinite));
            (lane(a) << 8) | lane(b)
        }
        // Byte i of the source becomes half i of the result.
        Cvt::F16x2FromE4m3x2 => {
            let lane = |i: u32| u64::from(minifloat::e4m3_to_f16_bits((a >> (8 * i)) as u8));
            (lane(1) << 16) | lane(0)
        }
        Cvt::RniF32 if f32_of(a).is_nan() => 0x7FFF_FFFF,
        Cvt::RniF32 => bits_f32(f32_of(a).round_ties_even()),
        // Float → int saturates; NaN gives 0 (PTX ISA cvt).
        Cvt::RziS32FromF32 => u64::from(f32_of(a).trunc() as i32 as u32),
    }
}
