//! Decoding of arithmetic, logic, comparisons, selects and conversions. Integer forms are
//! the (operation, type) pairs the PTX ISA defines; f32 forms must say `.rn` where rounding
//! applies, and `.ftz` and `.sat` are refused (the simulator does not model them).

use super::op::{Alu, Cmp, CmpTy, Cvt, FOp, IntOp, Op, PredOp, Src, Ty};
use super::{Ctx, Mods};
use crate::error::SimError;
use crate::parse::Opnd;
use crate::profile::Category;

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
        _ => return None,
    })
}

fn f32_op(head: &str, m: &mut Mods<'_>) -> Option<FOp> {
    let rn = m.take("rn");
    let nan = m.take("NaN");
    Some(match head {
        // Without `.rn`, ptxas may contract add/sub/mul into an fma, which rounds
        // differently: only the explicitly rounded forms have one meaning.
        "add" if rn && !nan => FOp::Add,
        "sub" if rn && !nan => FOp::Sub,
        "mul" if rn && !nan => FOp::Mul,
        "div" if rn && !nan => FOp::Div,
        "fma" if rn && !nan => FOp::Fma,
        "abs" if !rn && !nan => FOp::Abs,
        "neg" if !rn && !nan => FOp::Neg,
        "min" if !rn => {
            if nan {
                FOp::MinNaN
            } else {
                FOp::Min
            }
        }
        "max" if !rn => {
            if nan {
                FOp::MaxNaN
            } else {
                FOp::Max
            }
        }
        _ => return None,
    })
}

fn sources(head: &str) -> usize {
    match head {
        "not" | "neg" | "abs" => 1,
        "mad" | "fma" => 3,
        "bfi" => 4,
        _ => 2,
    }
}

fn arith(
    ctx: &Ctx<'_>,
    head: &str,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    const HEADS: [&str; 18] = [
        "add", "sub", "mul", "mad", "div", "rem", "min", "max", "shl", "shr", "and", "or", "xor",
        "not", "neg", "abs", "fma", "bfi",
    ];
    if !HEADS.contains(&head) {
        return Err(ctx.unsupported());
    }
    let ty = m.last().ok_or_else(|| ctx.unsupported())?;
    let (alu, category) = match ty {
        "f32" => {
            let op = f32_op(head, m).ok_or_else(|| ctx.unsupported())?;
            (Alu::F32(op), if op == FOp::Div { Category::DivF32 } else { Category::AluF32 })
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
            let alu = if ty.ends_with("64") { Alu::I64(op, signed) } else { Alu::I32(op, signed) };
            (alu, Category::AluInt)
        }
    };
    m.done(ctx)?;
    let n = sources(head);
    let ops = ctx.count(ops, n + 1)?;
    let mut a = [Src::Imm(0); 4];
    for (slot, o) in a.iter_mut().zip(&ops[1..]) {
        *slot = ctx.src(o)?;
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
        ["rn", "f16x2", "e4m3x2"] => (Cvt::F16x2FromE4m3x2, false),
        ["rni", "f32", "f32"] => (Cvt::RniF32, false),
        ["rzi", "s32", "f32"] => (Cvt::RziS32FromF32, false),
        _ => return Err(ctx.unsupported()),
    };
    let ops = ctx.count(ops, if pair { 3 } else { 2 })?;
    let b = if pair { Some(ctx.src(&ops[2])?) } else { None };
    Ok((Op::Cvt { cvt, d: ctx.dst(&ops[0])?, a: ctx.src(&ops[1])?, b }, Category::Convert))
}
