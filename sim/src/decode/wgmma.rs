//! Decoding of the warpgroup instructions of sm_90a: `wgmma.fence`, `commit_group`,
//! `wait_group`, `wgmma.mma_async` (dense, `.m64nNk16.f32` with bf16 or f16 inputs or
//! `.m64nNk32.f32` with e4m3 inputs, A from registers or a shared-memory descriptor, B from
//! a descriptor) and `setmaxnreg`.
//! The descriptors are register values, checked field by field when executed.

use super::op::{Op, Src, Wgmma, WgmmaA, WgmmaIn};
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
    if head == "setmaxnreg" {
        let inc = match m.take_any(&["inc", "dec"]) {
            Some("inc") => true,
            Some(_) => false,
            None => return Err(ctx.unsupported()),
        };
        if !(m.take("sync") && m.take("aligned") && m.take("u32")) {
            return Err(ctx.unsupported());
        }
        m.done(ctx)?;
        let ops = ctx.count(ops, 1)?;
        let n = ctx.imm(&ops[0])?;
        // PTX ISA setmaxnreg: a multiple of 8 in 24..=256.
        if !(24..=256).contains(&n) || !n.is_multiple_of(8) {
            return Err(ctx.bad(format!("register count {n} is not a multiple of 8 in 24..=256")));
        }
        return Ok((Op::SetMaxNReg { inc, n: n as u32 }, Category::SetMaxNReg));
    }
    let what = m.next().ok_or_else(|| ctx.unsupported())?;
    if !(m.take("sync") && m.take("aligned")) {
        return Err(ctx.unsupported());
    }
    let op = match what {
        "fence" => {
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            Op::WgFence
        }
        "commit_group" => {
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            Op::WgCommit
        }
        "wait_group" => {
            m.done(ctx)?;
            let ops = ctx.count(ops, 1)?;
            let n = u32::try_from(ctx.imm(&ops[0])?).map_err(|_| ctx.bad("group count"))?;
            Op::WgWait { n }
        }
        "mma_async" => return mma(ctx, m, ops),
        _ => return Err(ctx.unsupported()),
    };
    Ok((op, Category::WgmmaSync))
}

/// N and K of `.m64nNkK`, for N in 8..=256 step 8 and K 16 or 32.
fn shape(s: &str) -> Option<(u32, u32)> {
    let (n, k) = s.strip_prefix("m64n")?.split_once('k')?;
    let (n, k): (u32, u32) = (n.parse().ok()?, k.parse().ok()?);
    // The canonical spelling only (no sign, no leading zero).
    let canonical = format!("m64n{n}k{k}") == s;
    (canonical && (8..=256).contains(&n) && n.is_multiple_of(8) && matches!(k, 16 | 32))
        .then_some((n, k))
}

/// A register slot (no sink, no immediate).
fn reg(ctx: &Ctx<'_>, o: &Opnd) -> Result<u32, SimError> {
    match o {
        Opnd::Reg(r) => Ok(*r as u32),
        _ => Err(ctx.bad(format!("operand {o:?} must be a register"))),
    }
}

/// An immediate operand that must be one of `allowed` (the rest are not modelled).
fn imm_in(ctx: &Ctx<'_>, o: &Opnd, what: &str, allowed: &[i64]) -> Result<i64, SimError> {
    match o {
        Opnd::Imm(v) if allowed.contains(v) => Ok(*v),
        Opnd::Imm(v) => Err(ctx.bad(format!("{what} {v} is not modelled (allowed: {allowed:?})"))),
        _ => Err(ctx.bad(format!("{what} must be an immediate"))),
    }
}

/// `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16.bf16|f16.f16} d, a, b-desc, scale-d,
/// imm-scale-a, imm-scale-b{, imm-trans-a}, imm-trans-b` and
/// `wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3 d, a, b-desc, scale-d, imm-scale-a,
/// imm-scale-b` (the PTX ISA has transposes only for the 16-bit types; `.e5m2` and the mixed
/// 8-bit forms are not modelled).
fn mma(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    // In order: the shape, the accumulator type, then the types of A and B.
    let (n, k) = m.next().and_then(shape).ok_or_else(|| ctx.unsupported())?;
    let ty = match (k, m.next(), m.next(), m.next()) {
        (16, Some("f32"), Some("bf16"), Some("bf16")) => WgmmaIn::Bf16,
        (16, Some("f32"), Some("f16"), Some("f16")) => WgmmaIn::F16,
        (32, Some("f32"), Some("e4m3"), Some("e4m3")) => WgmmaIn::E4m3,
        _ => return Err(ctx.unsupported()),
    };
    m.done(ctx)?;
    let a_regs = matches!(ops.get(1), Some(Opnd::Vector(_)));
    // d, a, b-desc, scale-d, imm-scale-a, imm-scale-b, then the imm-trans operands.
    let trans = match ty {
        WgmmaIn::E4m3 => 0,
        _ if a_regs => 1,
        _ => 2,
    };
    let ops = ctx.count(ops, 6 + trans)?;
    let Opnd::Vector(ds) = &ops[0] else {
        return Err(ctx.bad("the accumulator must be a vector of registers"));
    };
    if ds.len() != n as usize / 2 {
        return Err(ctx.bad(format!("m64n{n}k{k}.f32 takes {} accumulator registers", n / 2)));
    }
    let d: Vec<u32> = ds.iter().map(|o| reg(ctx, o)).collect::<Result<_, _>>()?;
    let a = if let Opnd::Vector(items) = &ops[1] {
        if items.len() != 4 {
            return Err(ctx.bad("the A fragment is four registers"));
        }
        let r: Vec<u32> = items.iter().map(|o| reg(ctx, o)).collect::<Result<_, _>>()?;
        WgmmaA::Regs([r[0], r[1], r[2], r[3]])
    } else {
        WgmmaA::Desc(ctx.src_plain(&ops[1])?)
    };
    let mut all: Vec<u32> = d.clone();
    if let WgmmaA::Regs(r) = a {
        all.extend(r);
    }
    all.sort_unstable();
    if all.windows(2).any(|w| w[0] == w[1]) {
        return Err(ctx.bad("accumulator and A-fragment registers must be distinct"));
    }
    let scale_d = ctx.src(&ops[3])?;
    if let Src::Imm(v) = scale_d
        && v > 1
    {
        return Err(ctx.bad("scale-d must be a predicate, 0 or 1"));
    }
    // Negation of A or B (-1) is an exact sign flip of the products: modelled.
    let neg_a = imm_in(ctx, &ops[4], "imm-scale-a", &[1, -1])? == -1;
    let neg_b = imm_in(ctx, &ops[5], "imm-scale-b", &[1, -1])? == -1;
    // Transposes (MN-major operands, 16-bit types only) are not modelled.
    for o in &ops[6..] {
        imm_in(ctx, o, "imm-trans (MN-major)", &[0])?;
    }
    let w = Wgmma { n, ty, d, a, bdesc: ctx.src_plain(&ops[2])?, scale_d, neg_a, neg_b };
    Ok((Op::Wgmma(Box::new(w)), Category::Wgmma))
}
