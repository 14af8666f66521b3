//! Decoding of the asynchronous copies: cp.async (with its group and mbarrier completion),
//! TMA tile loads and stores, bulk copies and bulk reductions, and the bulk prefetches.
//!
//! Cache hints have no functional effect, so they are accepted and dropped: the L2
//! prefetch sizes of cp.async (`.L2::64B/128B/256B`) and `.L2::cache_hint`, whose 64-bit
//! cache-policy operand must be present (and is then ignored). The non-tile TMA modes,
//! `.ignore_oob`, `.cp_mask` and the shared::cta → shared::cluster bulk copy are refused.

use super::hints::cache_hint;
use super::op::{BulkLoad, Nop, Op, Src, TmaLoad, Window};
use super::{Ctx, Mods};
use crate::error::SimError;
use crate::profile::Category;
use crate::syntax::Opnd;

pub(super) fn decode(
    ctx: &Ctx<'_>,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    let out = match (m.next(), m.next()) {
        (Some("reduce"), Some("async")) => {
            for part in ["bulk", "global", "shared::cta", "bulk_group", "add", "noftz", "bf16"] {
                if !m.take(part) {
                    return Err(ctx.unsupported());
                }
            }
            let ops = cache_hint(ctx, m, ops)?;
            m.done(ctx)?;
            let ops = ctx.count(ops, 3)?;
            let op = Op::BulkReduceAddBf16 {
                dst: ctx.addr(&ops[0])?,
                src: ctx.addr(&ops[1])?,
                size: ctx.src_plain(&ops[2])?,
            };
            (op, Category::BulkReduce)
        }
        (Some("async"), Some("bulk")) => bulk(ctx, m, ops)?,
        (Some("async"), Some(cache @ ("ca" | "cg"))) => {
            if !(m.take_any(&["shared", "shared::cta"]).is_some() && m.take("global")) {
                return Err(ctx.unsupported());
            }
            m.take_any(&["L2::64B", "L2::128B", "L2::256B"]);
            let ops = cache_hint(ctx, m, ops)?;
            m.done(ctx)?;
            if ops.len() != 3 && ops.len() != 4 {
                return Err(ctx.bad("expected [dst], [src], cp-size and an optional src-size"));
            }
            let size = ctx.imm(&ops[2])?;
            // PTX ISA cp.async: .cg copies 16 bytes; .ca 4, 8 or 16.
            let ok = if cache == "cg" { size == 16 } else { matches!(size, 4 | 8 | 16) };
            if !ok {
                return Err(ctx.bad(format!("cp-size {size} is not allowed with .{cache}")));
            }
            let op = Op::CpAsync {
                size: size as u32,
                dst: ctx.addr(&ops[0])?,
                src: ctx.addr(&ops[1])?,
                src_size: ops.get(3).map(|o| ctx.src_plain(o)).transpose()?,
            };
            (op, Category::CpAsync)
        }
        (Some("async"), Some("commit_group")) => {
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            (Op::CpAsyncCommit, Category::AsyncGroup)
        }
        (Some("async"), Some("wait_group")) => {
            m.done(ctx)?;
            let ops = ctx.count(ops, 1)?;
            let n = u32::try_from(ctx.imm(&ops[0])?).map_err(|_| ctx.bad("group count"))?;
            (Op::CpAsyncWait { n, all: false }, Category::AsyncGroup)
        }
        (Some("async"), Some("wait_all")) => {
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            (Op::CpAsyncWait { n: 0, all: true }, Category::AsyncGroup)
        }
        (Some("async"), Some("mbarrier")) => {
            // Without .noinc the arrive would also raise the expected count: not modelled.
            if !(m.take("arrive") && m.take("noinc") && m.take("b64")) {
                return Err(ctx.unsupported());
            }
            if m.take_any(&["shared", "shared::cta"]).is_none() {
                return Err(ctx.unsupported());
            }
            m.done(ctx)?;
            let ops = ctx.count(ops, 1)?;
            (Op::CpAsyncMbarArrive { addr: ctx.addr(&ops[0])? }, Category::CpAsync)
        }
        _ => return Err(ctx.unsupported()),
    };
    m.done(ctx)?;
    Ok(out)
}

fn bulk(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    if m.take("commit_group") {
        m.done(ctx)?;
        ctx.count(ops, 0)?;
        return Ok((Op::Nop(Nop::BulkCommit), Category::AsyncGroup));
    }
    if m.take("wait_group") {
        m.take("read");
        m.done(ctx)?;
        let ops = ctx.count(ops, 1)?;
        ctx.imm(&ops[0])?;
        return Ok((Op::Nop(Nop::BulkWait), Category::AsyncGroup));
    }
    if m.take("prefetch") {
        return prefetch(ctx, m, ops);
    }
    if m.take("tensor") {
        return tensor(ctx, m, ops);
    }
    if m.take("mbarrier::complete_tx::bytes") {
        return bulk_load(ctx, m, ops);
    }
    if !(m.take("global") && m.take("shared::cta") && m.take("bulk_group")) {
        return Err(ctx.unsupported());
    }
    let ops = cache_hint(ctx, m, ops)?;
    m.done(ctx)?;
    let ops = ctx.count(ops, 3)?;
    let op = Op::BulkStore {
        dst: ctx.addr(&ops[0])?,
        src: ctx.addr(&ops[1])?,
        size: ctx.src_plain(&ops[2])?,
    };
    Ok((op, Category::BulkCopy))
}

/// `cp.async.bulk.{shared::cta|shared::cluster}.global.mbarrier::complete_tx::bytes
/// {.multicast::cluster}{.L2::cache_hint} [dst], [src], size, [mbar]{, ctaMask}{, policy}`.
fn bulk_load(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let dst_window = match m.take_any(&["shared::cluster", "shared::cta"]) {
        Some("shared::cluster") => Window::Cluster,
        Some(_) => Window::Cta,
        None => return Err(ctx.unsupported()),
    };
    if !m.take("global") {
        return Err(ctx.unsupported());
    }
    let multicast = m.take("multicast::cluster");
    if multicast && dst_window == Window::Cta {
        return Err(ctx.unsupported());
    }
    let ops = cache_hint(ctx, m, ops)?;
    m.done(ctx)?;
    let ops = ctx.count(ops, if multicast { 5 } else { 4 })?;
    let load = BulkLoad {
        dst_window,
        dst: ctx.addr(&ops[0])?,
        src: ctx.addr(&ops[1])?,
        size: ctx.src_plain(&ops[2])?,
        bar: ctx.addr(&ops[3])?,
        multicast: if multicast { Some(ctx.src_plain(&ops[4])?) } else { None },
    };
    Ok((Op::BulkLoad(Box::new(load)), Category::BulkLoad))
}

/// `[tensor-map, {coordinates}]` of a rank-`dims` map.
fn tensor_ref(ctx: &Ctx<'_>, o: &Opnd, dims: usize) -> Result<(Src, Vec<Src>), SimError> {
    match o {
        Opnd::TensorRef(map, coords) if coords.len() == dims => {
            let coords = coords.iter().map(|c| ctx.src_plain(c)).collect::<Result<_, _>>()?;
            Ok((ctx.src_plain(map)?, coords))
        }
        _ => Err(ctx.bad(format!("expected [tensor-map, {{{dims} coordinates}}]"))),
    }
}

fn dims(ctx: &Ctx<'_>, m: &mut Mods<'_>) -> Result<usize, SimError> {
    match m.take_any(&["1d", "2d", "3d", "4d", "5d"]) {
        Some(d) => Ok(usize::from(d.as_bytes()[0] - b'0')),
        None => Err(ctx.unsupported()),
    }
}

/// `cp.async.bulk.prefetch.L2.global{.L2::cache_hint} [src], size` and
/// `cp.async.bulk.prefetch.tensor.Nd.L2.global{.tile}{.L2::cache_hint} [map, {…}]`: no
/// effect on memory; the operands are still checked when executed.
fn prefetch(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let tensor = m.take("tensor");
    let dims = if tensor { Some(dims(ctx, m)?) } else { None };
    if !(m.take("L2") && m.take("global")) {
        return Err(ctx.unsupported());
    }
    if tensor {
        m.take("tile");
    }
    let ops = cache_hint(ctx, m, ops)?;
    m.done(ctx)?;
    let op = match dims {
        Some(d) => {
            let ops = ctx.count(ops, 1)?;
            let (map, coords) = tensor_ref(ctx, &ops[0], d)?;
            Op::PrefetchTensor { map, coords }
        }
        None => {
            let ops = ctx.count(ops, 2)?;
            Op::PrefetchBulk { src: ctx.addr(&ops[0])?, size: ctx.src_plain(&ops[1])? }
        }
    };
    Ok((op, Category::Prefetch))
}

fn tensor(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let dims = dims(ctx, m)?;
    m.take("tile");
    if m.take("bulk_group") {
        if !(m.take("global") && m.take("shared::cta")) {
            return Err(ctx.unsupported());
        }
        let ops = cache_hint(ctx, m, ops)?;
        m.done(ctx)?;
        let ops = ctx.count(ops, 2)?;
        let (map, coords) = tensor_ref(ctx, &ops[0], dims)?;
        return Ok((Op::TmaStore { map, coords, src: ctx.addr(&ops[1])? }, Category::TmaStore));
    }
    let dst_window = match m.take_any(&["shared::cluster", "shared::cta"]) {
        Some("shared::cluster") => Window::Cluster,
        Some(_) => Window::Cta,
        None => return Err(ctx.unsupported()),
    };
    if !(m.take("global") && m.take("mbarrier::complete_tx::bytes")) {
        return Err(ctx.unsupported());
    }
    let multicast = m.take("multicast::cluster");
    if multicast && dst_window == Window::Cta {
        return Err(ctx.unsupported());
    }
    let cta_group = m.cta_group_opt();
    let ops = cache_hint(ctx, m, ops)?;
    m.done(ctx)?;
    let ops = ctx.count(ops, if multicast { 4 } else { 3 })?;
    let (map, coords) = tensor_ref(ctx, &ops[1], dims)?;
    let load = TmaLoad {
        dst_window,
        cta_group,
        dst: ctx.addr(&ops[0])?,
        map,
        coords,
        bar: ctx.addr(&ops[2])?,
        multicast: if multicast { Some(ctx.src_plain(&ops[3])?) } else { None },
    };
    Ok((Op::TmaLoad(Box::new(load)), Category::TmaLoad))
}
