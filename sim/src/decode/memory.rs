//! Decoding of moves, address conversions and loads, stores and atomics. Every access names
//! its state space: generic addressing is not modelled, and neither are cache operators,
//! memory-ordering qualifiers on ld/st/atom, or vector widths above 4. Cache hints on
//! global loads and stores (eviction priorities, prefetch sizes, cache policies) are
//! accepted as the no-ops they are functionally.

use super::hints::cache_hint;
use super::op::{AtomOp, Dst, Op, Space, Ty, Window};
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
        "mov" => mov(ctx, m, ops),
        "cvta" => {
            // The simulator's global and parameter addresses are already generic.
            m.take("to");
            if m.take_any(&["param", "global"]).is_none() || !m.take("u64") {
                return Err(ctx.unsupported());
            }
            m.done(ctx)?;
            let ops = ctx.count(ops, 2)?;
            Ok((Op::Cvta { d: ctx.dst(&ops[0])?, a: ctx.src(&ops[1])? }, Category::Move))
        }
        "mapa" => {
            if !m.take("shared::cluster") || !m.take("u32") {
                return Err(ctx.unsupported());
            }
            m.done(ctx)?;
            let ops = ctx.count(ops, 3)?;
            let op =
                Op::Mapa { d: ctx.dst(&ops[0])?, a: ctx.src(&ops[1])?, rank: ctx.src(&ops[2])? };
            Ok((op, Category::Move))
        }
        "ld" | "st" => load_store(ctx, head == "ld", m, ops),
        "ldmatrix" | "stmatrix" => matrix(ctx, head == "ldmatrix", m, ops),
        _ => atomic(ctx, head == "atom", m, ops),
    }
}

fn mov(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let ty = m.last().and_then(Ty::from_suffix).ok_or_else(|| ctx.unsupported())?;
    m.done(ctx)?;
    if matches!(ty, Ty::B8 | Ty::U8) {
        return Err(ctx.unsupported());
    }
    let ops = ctx.count(ops, 2)?;
    let total = 8 * ty.bytes() as u32;
    if let Opnd::Vector(items) = &ops[0] {
        // Unpacking: the same part sizes as packing, the first part from the low bits.
        let n = items.len() as u32;
        if !matches!(ty, Ty::B16 | Ty::B32 | Ty::B64) || !matches!(n, 2 | 4) || total / n < 8 {
            return Err(ctx.unsupported());
        }
        let parts = items.iter().map(|o| ctx.dst_reg(o)).collect::<Result<_, _>>()?;
        let a = ctx.src_plain(&ops[1])?;
        return Ok((Op::MovUnpack { a, parts, bits: total / n }, Category::Move));
    }
    let d = ctx.dst_reg(&ops[0])?;
    if let Opnd::Vector(items) = &ops[1] {
        // Packing: b16 from 2 bytes, b32 from 2 halves or 4 bytes, b64 from 2 or 4 parts.
        let n = items.len() as u32;
        if !matches!(ty, Ty::B16 | Ty::B32 | Ty::B64) || !matches!(n, 2 | 4) || total / n < 8 {
            return Err(ctx.unsupported());
        }
        let parts = ctx.src_vector(&ops[1], 0)?;
        return Ok((Op::MovPack { d, parts, bits: total / n }, Category::Move));
    }
    Ok((Op::Mov { ty, d, a: ctx.src(&ops[1])? }, Category::Move))
}

fn space(m: &mut Mods<'_>) -> Option<Space> {
    Some(match m.take_any(&["global", "shared", "shared::cta", "shared::cluster", "param"])? {
        "global" => Space::Global,
        "param" => Space::Param,
        "shared::cluster" => Space::Shared(Window::Cluster),
        _ => Space::Shared(Window::Cta),
    })
}

fn load_store(
    ctx: &Ctx<'_>,
    load: bool,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    let sp = space(m).ok_or_else(|| ctx.unsupported())?;
    let ty = m.last().and_then(Ty::from_suffix).ok_or_else(|| ctx.unsupported())?;
    let n = match m.take_any(&["v2", "v4"]) {
        Some("v2") => 2,
        Some(_) => 4,
        None => 1,
    };
    // Global accesses may carry cache hints, which have no functional effect: an L1
    // eviction priority, an L2 prefetch size (loads) and an L2 cache policy.
    let mut ops = ops;
    if sp == Space::Global {
        m.take_any(&[
            "L1::evict_normal",
            "L1::evict_unchanged",
            "L1::evict_first",
            "L1::evict_last",
            "L1::no_allocate",
        ]);
        if load {
            m.take_any(&["L2::64B", "L2::128B", "L2::256B"]);
        }
        ops = cache_hint(ctx, m, ops)?;
    }
    m.done(ctx)?;
    if ty == Ty::Pred || (!load && sp == Space::Param) {
        return Err(ctx.unsupported());
    }
    let ops = ctx.count(ops, 2)?;
    if load {
        let d: Vec<Dst> =
            if n == 1 { vec![ctx.dst(&ops[0])?] } else { ctx.dst_vector(&ops[0], n)? };
        let category = match sp {
            Space::Global => Category::LoadGlobal,
            Space::Shared(_) => Category::LoadShared,
            Space::Param => Category::LoadParam,
        };
        return Ok((Op::Ld { space: sp, ty, d, addr: ctx.addr(&ops[1])? }, category));
    }
    let v = if n == 1 { vec![ctx.src_plain(&ops[1])?] } else { ctx.src_vector(&ops[1], n)? };
    let category = if sp == Space::Global { Category::StoreGlobal } else { Category::StoreShared };
    Ok((Op::St { space: sp, ty, addr: ctx.addr(&ops[0])?, v }, category))
}

fn atomic(
    ctx: &Ctx<'_>,
    atom: bool,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    let sp = match space(m) {
        Some(s @ (Space::Global | Space::Shared(Window::Cta))) => s,
        _ => return Err(ctx.unsupported()),
    };
    let ty = m.last().ok_or_else(|| ctx.unsupported())?;
    let opname = m.next().ok_or_else(|| ctx.unsupported())?;
    m.done(ctx)?;
    let op = match (opname, ty) {
        ("add", "u32" | "s32") => AtomOp::Add,
        ("and", "b32") => AtomOp::And,
        ("or", "b32") => AtomOp::Or,
        ("xor", "b32") => AtomOp::Xor,
        ("min", "u32" | "s32") => AtomOp::Min { signed: ty == "s32" },
        ("max", "u32" | "s32") => AtomOp::Max { signed: ty == "s32" },
        ("exch", "b32") if atom => AtomOp::Exch,
        _ => return Err(ctx.unsupported()),
    };
    let category =
        if sp == Space::Global { Category::AtomicGlobal } else { Category::AtomicShared };
    let (d, rest) = if atom {
        let ops = ctx.count(ops, 3)?;
        (Some(ctx.dst(&ops[0])?), &ops[1..])
    } else {
        (None, ctx.count(ops, 2)?)
    };
    let op = Op::Atom { space: sp, op, d, addr: ctx.addr(&rest[0])?, a: ctx.src(&rest[1])? };
    Ok((op, category))
}

/// `ldmatrix`/`stmatrix.sync.aligned.m8n8.xN{.trans}.shared{::cta}.b16`: the 16-bit 8x8
/// shape only (the 8-bit and packed shapes of sm_100 are refused), shared state space named.
fn matrix(
    ctx: &Ctx<'_>,
    load: bool,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    if !(m.take("sync") && m.take("aligned") && m.take("m8n8") && m.take("b16")) {
        return Err(ctx.unsupported());
    }
    let n = match m.take_any(&["x1", "x2", "x4"]) {
        Some("x1") => 1,
        Some("x2") => 2,
        Some(_) => 4,
        None => return Err(ctx.unsupported()),
    };
    let trans = m.take("trans");
    if m.take_any(&["shared", "shared::cta"]).is_none() {
        return Err(ctx.unsupported());
    }
    m.done(ctx)?;
    let ops = ctx.count(ops, 2)?;
    if load {
        let d = ctx.dst_vector(&ops[0], n)?;
        if d.iter().any(Option::is_none) {
            return Err(ctx.bad("ldmatrix destinations must be registers"));
        }
        let op = Op::LdMatrix { trans, d, addr: ctx.addr(&ops[1])? };
        return Ok((op, Category::LoadMatrix));
    }
    let op = Op::StMatrix { trans, addr: ctx.addr(&ops[0])?, v: ctx.src_vector(&ops[1], n)? };
    Ok((op, Category::StoreMatrix))
}
