//! Decoding of the instructions that are performance hints only: `prefetch` (data into a
//! cache level, or a tensor map) and `createpolicy` (a cache-eviction policy for the
//! `.L2::cache_hint` operands, which the simulator ignores). They have no functional
//! effect here; malformed forms are refused like any other instruction.

use super::op::{Nop, Op, Src, Ty};
use super::{Ctx, Mods};
use crate::error::SimError;
use crate::profile::Category;
use crate::syntax::Opnd;

/// The value `createpolicy` writes. On hardware the policy is an opaque 64-bit encoding;
/// the simulator ignores every cache-policy operand, so any fixed value will do, and a
/// recognisable one shows up if a kernel ever uses it as data.
pub(crate) const CACHE_POLICY: u64 = 0x5349_4D00_C0DE_0000;

/// `.L2::cache_hint`: when present, the last operand is the cache policy, which is checked
/// to be a value and dropped. Returns the operands without it.
pub(super) fn cache_hint<'o>(
    ctx: &Ctx<'_>,
    m: &mut Mods<'_>,
    ops: &'o [Opnd],
) -> Result<&'o [Opnd], SimError> {
    if !m.take("L2::cache_hint") {
        return Ok(ops);
    }
    let (policy, rest) =
        ops.split_last().ok_or_else(|| ctx.bad("missing the cache-policy operand"))?;
    ctx.src_plain(policy)?;
    Ok(rest)
}

pub(super) fn decode(
    ctx: &Ctx<'_>,
    head: &str,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    let op =
        if head == "createpolicy" { createpolicy(ctx, m, ops)? } else { prefetch(ctx, m, ops)? };
    m.done(ctx)?;
    Ok((op, Category::Prefetch))
}

/// `prefetch.global.{L1,L2,L2::evict_last,L2::evict_normal} [a]` (no effect; the address
/// is not checked, as a prefetch never faults) and `prefetch{.param}.tensormap [a]` (the
/// address must hold a tensor map, checked when executed).
fn prefetch(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<Op, SimError> {
    let ops = ctx.count(ops, 1)?;
    let addr = ctx.addr(&ops[0])?;
    if m.take("tensormap") {
        // Generic (the simulator's parameter addresses are generic) or .param; the
        // simulator keeps tensor maps in the parameter space only.
        m.take("param");
        return Ok(Op::PrefetchTensorMap { addr });
    }
    if !(m.take("global")
        && m.take_any(&["L1", "L2", "L2::evict_last", "L2::evict_normal"]).is_some())
    {
        return Err(ctx.unsupported());
    }
    Ok(Op::Nop(Nop::Prefetch))
}

/// `createpolicy.fractional.L2::primary{.L2::secondary}.b64 d{, fraction}` with the
/// fraction an f32 in (0, 1]. The range and conversion forms are refused.
fn createpolicy(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<Op, SimError> {
    const PRIMARY: [&str; 4] =
        ["L2::evict_last", "L2::evict_normal", "L2::evict_first", "L2::evict_unchanged"];
    if !(m.take("fractional") && m.take("b64") && m.take_any(&PRIMARY).is_some()) {
        return Err(ctx.unsupported());
    }
    m.take_any(&["L2::evict_first", "L2::evict_unchanged"]);
    if ops.is_empty() || ops.len() > 2 {
        return Err(ctx.bad("expected the policy register and an optional fraction"));
    }
    if let Some(f) = ops.get(1) {
        let fraction = match f {
            Opnd::F32(bits) => f32::from_bits(*bits),
            Opnd::Name(n) => n.parse::<f32>().map_err(|_| ctx.bad("fraction must be an f32"))?,
            _ => return Err(ctx.bad("fraction must be an f32 immediate")),
        };
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(ctx.bad(format!("fraction {fraction} is not in (0, 1]")));
        }
    }
    Ok(Op::Mov { ty: Ty::B64, d: ctx.dst_reg(&ops[0])?, a: Src::Imm(CACHE_POLICY) })
}
