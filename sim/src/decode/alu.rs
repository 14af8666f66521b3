//! Decoding of arithmetic, logic, comparisons, selects and conversions. Integer forms are
//! the (operation, type) pairs the PTX ISA defines; f32 and f32x2 forms must say `.rn`
//! where rounding applies; `.ftz` is refused except on the approximate `ex2`/`rcp`, whose
//! model defines it, and `.sat` and `.xorsign` are refused.

use super::op::{Alu, Cmp, CmpTy, Cvt, FOp, IntOp, Op, PredOp, PrmtMode, Src, Ty};
use super::{Ctx, Mods};
use crate::error::SimError;
use crate::profile::Category;
use crate::syntax::Opnd;

pub(super) fn decode(
    ctx: &Ctx<'_>,
    head: &str,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    match head {
        "setp" => setp(ctx, m, ops),
        "selp" => selp(ctx, m, ops),
        "cvt" => cvt(ctx, m, ops),
        _ => arith(ctx, head, m, ops),
    }
}

/// Integer operation of `head` with `mode` (lo/hi/wide for mul and mad) and type, if the
/// PTX ISA defines it.
fn int_op(head: &str, mode: Option<&str>, ty: &str) -> Option<IntOp> {
    let wide32 = matches!(ty, "u32" | "s32");
    let arith = matches!(ty, "u32" | "s32" | "u64" | "s64");
    let bits = matches!(ty, "b32" | "b64");
    let signed = matches!(ty, "s32" | "s64");
    Some(match (head, mode) {
        ("add", None) if arith => IntOp::Add,
        ("sub", None) if arith => IntOp::Sub,
        ("mul", Some("lo")) if arith => IntOp::MulLo,
        ("mul", Some("hi")) if arith => IntOp::MulHi,
        ("mul", Some("wide")) if wide32 => IntOp::MulWide,
        ("mad", Some("lo")) if arith => IntOp::MadLo,
        ("mad", Some("wide")) if wide32 => IntOp::MadWide,
        ("div", None) if arith => IntOp::Div,
        ("rem", None) if arith => IntOp::Rem,
        ("min", None) if arith => IntOp::Min,
        ("max", None) if arith => IntOp::Max,
        ("shl", None) if bits => IntOp::Shl,
        ("shr", None) if bits || arith => IntOp::Shr,
        ("and", None) if bits => IntOp::And,
        ("or", None) if bits => IntOp::Or,
        ("xor", None) if bits => IntOp::Xor,
        ("not", None) if bits => IntOp::Not,
        ("neg", None) if signed => IntOp::Neg,
        ("abs", None) if signed => IntOp::Abs,
        ("bfi", None) if bits => IntOp::Bfi,
        ("bfe", None) if arith => IntOp::Bfe,
        ("lop3", None) if ty == "b32" => IntOp::Lop3,
        _ => return None,
    })
}

/// f32 (and, with `pair`, `.f32x2`) operations. Without `.rn`, ptxas may contract
/// add/sub/mul into an fma, which rounds differently: only the explicitly rounded forms
/// have one meaning. `.ftz` is modelled only on the approximate instructions, whose model
/// (`crate::approx`) defines it.
fn f32_op(head: &str, m: &mut Mods<'_>, pair: bool, inputs: usize) -> Option<FOp> {
    let rn = m.take("rn");
    let nan = m.take("NaN");
    let abs = m.take("abs");
    let approx = m.take("approx");
    let ftz = m.take("ftz");
    let plain = !nan && !abs && !approx && !ftz;
    let three = inputs == 3;
    if pair {
        return match head {
            "add" if rn && plain => Some(FOp::Add),
            "sub" if rn && plain => Some(FOp::Sub),
            "mul" if rn && plain => Some(FOp::Mul),
            "fma" if rn && plain => Some(FOp::Fma),
            _ => None,
        };
    }
    Some(match head {
        "add" if rn && plain => FOp::Add,
        "sub" if rn && plain => FOp::Sub,
        "mul" if rn && plain => FOp::Mul,
        "div" if rn && plain => FOp::Div,
        "fma" if rn && plain => FOp::Fma,
        "rcp" if rn && plain => FOp::Rcp,
        "rcp" if approx && !rn && !nan && !abs => FOp::RcpApprox { ftz },
        "ex2" if approx && !rn && !nan && !abs => FOp::Ex2Approx { ftz },
        "abs" if !rn && plain => FOp::Abs,
        "neg" if !rn && plain => FOp::Neg,
        "min" if !rn && !approx && !ftz => FOp::Min { nan, abs, three },
        "max" if !rn && !approx && !ftz => FOp::Max { nan, abs, three },
        _ => return None,
    })
}

/// Source operands of `head` (min/max.f32 take two or three; the caller checks which).
fn sources(head: &str) -> usize {
    match head {
        "not" | "neg" | "abs" | "rcp" | "ex2" => 1,
        "mad" | "fma" | "bfe" | "shf" | "prmt" => 3,
        "bfi" | "lop3" => 4,
        _ => 2,
    }
}

/// `prmt.b32{.mode}`: the type comes before the mode.
fn prmt_op(ctx: &Ctx<'_>, m: &mut Mods<'_>) -> Result<IntOp, SimError> {
    let mode = match m.take_any(&["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"]) {
        None => PrmtMode::Generic,
        Some("f4e") => PrmtMode::F4e,
        Some("b4e") => PrmtMode::B4e,
        Some("rc8") => PrmtMode::Rc8,
        Some("ecl") => PrmtMode::Ecl,
        Some("ecr") => PrmtMode::Ecr,
        Some(_) => PrmtMode::Rc16,
    };
    if !m.take("b32") {
        return Err(ctx.unsupported());
    }
    Ok(IntOp::Prmt(mode))
}

fn arith(
    ctx: &Ctx<'_>,
    head: &str,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    const HEADS: [&str; 24] = [
        "add", "sub", "mul", "mad", "div", "rem", "min", "max", "shl", "shr", "and", "or", "xor",
        "not", "neg", "abs", "fma", "bfi", "bfe", "lop3", "shf", "prmt", "rcp", "ex2",
    ];
    if !HEADS.contains(&head) {
        return Err(ctx.unsupported());
    }
    // min/max.f32 with three inputs (PTX ISA 8.8): one more operand than the default.
    let inputs = ops.len().saturating_sub(1);
    let (alu, category) = if head == "prmt" {
        (Alu::I32(prmt_op(ctx, m)?, false), Category::AluInt)
    } else if head == "shf" {
        let left = match m.take_any(&["l", "r"]) {
            Some("l") => true,
            Some(_) => false,
            None => return Err(ctx.unsupported()),
        };
        let clamp = match m.take_any(&["clamp", "wrap"]) {
            Some("clamp") => true,
            Some(_) => false,
            None => return Err(ctx.unsupported()),
        };
        if !m.take("b32") {
            return Err(ctx.unsupported());
        }
        (Alu::I32(IntOp::Shf { left, clamp }, false), Category::AluInt)
    } else {
        let ty = m.last().ok_or_else(|| ctx.unsupported())?;
        match ty {
            "f32" | "f32x2" => {
                let pair = ty == "f32x2";
                let op = f32_op(head, m, pair, inputs).ok_or_else(|| ctx.unsupported())?;
                let category = match op {
                    _ if pair => Category::AluF32x2,
                    FOp::Div | FOp::Rcp => Category::DivF32,
                    FOp::RcpApprox { .. } | FOp::Ex2Approx { .. } => Category::Mufu,
                    _ => Category::AluF32,
                };
                (if pair { Alu::F32x2(op) } else { Alu::F32(op) }, category)
            }
            "bf16x2" if head == "mul" && m.take("rn") => (Alu::Bf16x2Mul, Category::AluF32),
            "u16x2" | "s16x2" if matches!(head, "min" | "max") => {
                let op = if head == "min" { IntOp::Min } else { IntOp::Max };
                (Alu::I16x2(op, ty == "s16x2"), Category::AluInt)
            }
            "pred" => {
                let op = match head {
                    "and" => PredOp::And,
                    "or" => PredOp::Or,
                    "xor" => PredOp::Xor,
                    "not" => PredOp::Not,
                    _ => return Err(ctx.unsupported()),
                };
                (Alu::Pred(op), Category::AluInt)
            }
            _ => {
                let mode = m.take_any(&["lo", "hi", "wide"]);
                let op = int_op(head, mode, ty).ok_or_else(|| ctx.unsupported())?;
                let signed = ty.starts_with('s');
                let alu =
                    if ty.ends_with("64") { Alu::I64(op, signed) } else { Alu::I32(op, signed) };
                (alu, Category::AluInt)
            }
        }
    };
    m.done(ctx)?;
    let three =
        matches!(alu, Alu::F32(FOp::Min { three: true, .. } | FOp::Max { three: true, .. }));
    let n = if three { 3 } else { sources(head) };
    let ops = ctx.count(ops, n + 1)?;
    let mut a = [Src::Imm(0); 4];
    for (slot, o) in a.iter_mut().zip(&ops[1..]) {
        *slot = ctx.src(o)?;
    }
    if alu == Alu::I32(IntOp::Lop3, false) && ctx.imm(&ops[4])? > 0xFF {
        return Err(ctx.bad("lop3 look-up table must be an immediate in 0..=255"));
    }
    Ok((Op::Alu { alu, d: ctx.dst(&ops[0])?, a }, category))
}

fn setp(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let cmp_s = m.next().ok_or_else(|| ctx.unsupported())?;
    let ty_s = m.last().ok_or_else(|| ctx.unsupported())?;
    m.done(ctx)?;
    let ty = match ty_s {
        "u32" | "b32" => CmpTy::U32,
        "s32" => CmpTy::S32,
        "u64" | "b64" => CmpTy::U64,
        "s64" => CmpTy::S64,
        "f32" => CmpTy::F32,
        _ => return Err(ctx.unsupported()),
    };
    let float = ty == CmpTy::F32;
    let unsigned = matches!(ty_s, "u32" | "u64");
    let cmp = match cmp_s {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        _ if ty_s.starts_with('b') => return Err(ctx.unsupported()),
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        "lo" if unsigned => Cmp::Lt,
        "ls" if unsigned => Cmp::Le,
        "hi" if unsigned => Cmp::Gt,
        "hs" if unsigned => Cmp::Ge,
        "equ" if float => Cmp::Equ,
        "neu" if float => Cmp::Neu,
        "ltu" if float => Cmp::Ltu,
        "leu" if float => Cmp::Leu,
        "gtu" if float => Cmp::Gtu,
        "geu" if float => Cmp::Geu,
        "num" if float => Cmp::Num,
        "nan" if float => Cmp::Nan,
        _ => return Err(ctx.unsupported()),
    };
    let ops = ctx.count(ops, 3)?;
    let op = Op::Setp { cmp, ty, d: ctx.dst(&ops[0])?, a: ctx.src(&ops[1])?, b: ctx.src(&ops[2])? };
    Ok((op, if float { Category::AluF32 } else { Category::AluInt }))
}

fn selp(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let ty = m.last().and_then(Ty::from_suffix).ok_or_else(|| ctx.unsupported())?;
    m.done(ctx)?;
    if matches!(ty, Ty::Pred | Ty::B8 | Ty::U8 | Ty::F16 | Ty::Bf16) {
        return Err(ctx.unsupported());
    }
    let ops = ctx.count(ops, 4)?;
    let op = Op::Selp {
        ty,
        d: ctx.dst(&ops[0])?,
        a: ctx.src(&ops[1])?,
        b: ctx.src(&ops[2])?,
        p: ctx.src(&ops[3])?,
    };
    Ok((op, if ty == Ty::F32 { Category::AluF32 } else { Category::AluInt }))
}

fn cvt(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let (cvt, pair) = match m.rest().as_slice() {
        ["u64", "u32"] => (Cvt::U64FromU32, false),
        ["u16", "u32"] => (Cvt::U16FromU32, false),
        ["u32", "u16"] => (Cvt::U32FromU16, false),
        ["f32", "f16"] => (Cvt::F32FromF16, false),
        ["f32", "bf16"] => (Cvt::F32FromBf16, false),
        ["rn", "bf16", "f32"] => (Cvt::Bf16FromF32, false),
        ["rn", "bf16x2", "f32"] => (Cvt::Bf16x2FromF32, true),
        ["rn", "satfinite", "e4m3x2", "f32"] => (Cvt::E4m3x2FromF32, true),
        ["rn", "satfinite", "e2m1x2", "f32"] => (Cvt::E2m1x2FromF32, true),
        [r @ ("rz" | "rp"), "ue8m0x2", "f32"] => {
            (Cvt::Ue8m0x2FromF32 { round_up: *r == "rp", satfinite: false }, true)
        }
        [r @ ("rz" | "rp"), "satfinite", "ue8m0x2", "f32"] => {
            (Cvt::Ue8m0x2FromF32 { round_up: *r == "rp", satfinite: true }, true)
        }
        ["rn", "f16x2", "e4m3x2"] => (Cvt::F16x2FromE4m3x2, false),
        ["rni", "f32", "f32"] => (Cvt::RniF32, false),
        ["rzi", "s32", "f32"] => (Cvt::RziS32FromF32, false),
        _ => return Err(ctx.unsupported()),
    };
    let ops = ctx.count(ops, if pair { 3 } else { 2 })?;
    let b = if pair { Some(ctx.src(&ops[2])?) } else { None };
    Ok((Op::Cvt { cvt, d: ctx.dst(&ops[0])?, a: ctx.src(&ops[1])?, b }, Category::Convert))
}
