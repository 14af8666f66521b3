//! Decoding of the warp-level `.sync` instructions: elect, shfl, vote and redux.

use super::op::{Op, ReduxOp, ShflMode, VoteMode};
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
    if !m.take("sync") {
        return Err(ctx.unsupported());
    }
    let op = match head {
        // `elect.sync d|p, mask`: the parser splits `d|p` into two operands.
        "elect" => {
            let ops = ctx.count(ops, 3)?;
            Op::Elect { d: ctx.dst(&ops[0])?, p: ctx.dst(&ops[1])?, mask: ctx.src_plain(&ops[2])? }
        }
        "shfl" => {
            let mode = match m.next() {
                Some("up") => ShflMode::Up,
                Some("down") => ShflMode::Down,
                Some("bfly") => ShflMode::Bfly,
                Some("idx") => ShflMode::Idx,
                _ => return Err(ctx.unsupported()),
            };
            if !m.take("b32") {
                return Err(ctx.unsupported());
            }
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
        "vote" => {
            let mode = match (m.next(), m.next()) {
                (Some("all"), Some("pred")) => VoteMode::All,
                (Some("any"), Some("pred")) => VoteMode::Any,
                (Some("uni"), Some("pred")) => VoteMode::Uni,
                (Some("ballot"), Some("b32")) => VoteMode::Ballot,
                _ => return Err(ctx.unsupported()),
            };
            let ops = ctx.count(ops, 3)?;
            Op::Vote {
                mode,
                d: ctx.dst(&ops[0])?,
                a: ctx.src(&ops[1])?,
                mask: ctx.src_plain(&ops[2])?,
            }
        }
        _ => {
            let op = match (m.next(), m.next()) {
                (Some("add"), Some("u32" | "s32")) => ReduxOp::Add,
                (Some("min"), Some(t @ ("u32" | "s32"))) => ReduxOp::Min { signed: t == "s32" },
                (Some("max"), Some(t @ ("u32" | "s32"))) => ReduxOp::Max { signed: t == "s32" },
                (Some("and"), Some("b32")) => ReduxOp::And,
                (Some("or"), Some("b32")) => ReduxOp::Or,
                (Some("xor"), Some("b32")) => ReduxOp::Xor,
                _ => return Err(ctx.unsupported()),
            };
            let ops = ctx.count(ops, 3)?;
            Op::Redux {
                op,
                d: ctx.dst(&ops[0])?,
                a: ctx.src_plain(&ops[1])?,
                mask: ctx.src_plain(&ops[2])?,
            }
        }
    };
    m.done(ctx)?;
    Ok((op, Category::WarpCollective))
}
