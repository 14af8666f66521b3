//! Decoding of the warp-level `.sync` instructions: elect, shfl, vote and redux.

use super::op::{Op, ReduxOp, ShflMode, VoteMode};
use super::{Ctx, Mods};
use crate::error::SimError;
use crate::profile::Category;
use crate::syntax::Opnd;

/// The mode an opcode's modifiers select.
enum Kind {
    Elect,
    Shfl(ShflMode),
    Vote(VoteMode),
    Redux(ReduxOp),
}

fn kind(ctx: &Ctx<'_>, head: &str, m: &mut Mods<'_>) -> Result<Kind, SimError> {
    if !m.take("sync") {
        return Err(ctx.unsupported());
    }
    Ok(match (head, m.next(), m.next()) {
        ("elect", None, None) => Kind::Elect,
        ("shfl", Some(mode), Some("b32")) => Kind::Shfl(match mode {
            "up" => ShflMode::Up,
            "down" => ShflMode::Down,
            "bfly" => ShflMode::Bfly,
            "idx" => ShflMode::Idx,
            _ => return Err(ctx.unsupported()),
        }),
        ("vote", Some("all"), Some("pred")) => Kind::Vote(VoteMode::All),
        ("vote", Some("any"), Some("pred")) => Kind::Vote(VoteMode::Any),
        ("vote", Some("uni"), Some("pred")) => Kind::Vote(VoteMode::Uni),
        ("vote", Some("ballot"), Some("b32")) => Kind::Vote(VoteMode::Ballot),
        ("redux", Some(op), Some(ty)) => Kind::Redux(match (op, ty) {
            ("add", "u32" | "s32") => ReduxOp::Add,
            ("min", "u32" | "s32") => ReduxOp::Min { signed: ty == "s32" },
            ("max", "u32" | "s32") => ReduxOp::Max { signed: ty == "s32" },
            ("and", "b32") => ReduxOp::And,
            ("or", "b32") => ReduxOp::Or,
            ("xor", "b32") => ReduxOp::Xor,
            _ => return Err(ctx.unsupported()),
        }),
        _ => return Err(ctx.unsupported()),
    })
}

pub(super) fn decode(
    ctx: &Ctx<'_>,
    head: &str,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    let kind = kind(ctx, head, m)?;
    m.done(ctx)?;
    let op = match kind {
        // `elect.sync d|p, mask`: the parser splits `d|p` into two operands.
        Kind::Elect => {
            let ops = ctx.count(ops, 3)?;
            Op::Elect { d: ctx.dst(&ops[0])?, p: ctx.dst(&ops[1])?, mask: ctx.src_plain(&ops[2])? }
        }
        Kind::Shfl(mode) => {
            // `d|p, a, b, c, mask` or `d, a, b, c, mask`.
            let (p, rest) = match ops.len() {
                6 => (ctx.dst(&ops[1])?, &ops[2..]),
                5 => (None, &ops[1..]),
                n => return Err(ctx.bad(format!("expected 5 or 6 operands, found {n}"))),
            };
            Op::Shfl {
                mode,
                d: ctx.dst(&ops[0])?,
                p,
                a: ctx.src_plain(&rest[0])?,
                b: ctx.src_plain(&rest[1])?,
                c: ctx.src_plain(&rest[2])?,
                mask: ctx.src_plain(&rest[3])?,
            }
        }
        Kind::Vote(mode) => {
            let ops = ctx.count(ops, 3)?;
            Op::Vote {
                mode,
                d: ctx.dst(&ops[0])?,
                a: ctx.src(&ops[1])?,
                mask: ctx.src_plain(&ops[2])?,
            }
        }
        Kind::Redux(op) => {
            let ops = ctx.count(ops, 3)?;
            Op::Redux {
                op,
                d: ctx.dst(&ops[0])?,
                a: ctx.src_plain(&ops[1])?,
                mask: ctx.src_plain(&ops[2])?,
            }
        }
    };
    Ok((op, Category::WarpCollective))
}
