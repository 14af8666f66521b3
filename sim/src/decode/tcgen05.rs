//! Decoding of tcgen05: TMEM allocation, loads and stores (shape 32x32b), the 32x128b.warpx4
//! copy, commit, fences and waits, and the three MMA kinds the simulator models. The
//! descriptors themselves are register values, checked field by field when executed.

use super::op::{Mma, MmaKind, Nop, Op};
use super::{Ctx, Mods};
use crate::error::SimError;
use crate::profile::Category;
use crate::syntax::Opnd;

pub(super) fn decode(
    ctx: &Ctx<'_>,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    let what = m.next().ok_or_else(|| ctx.unsupported())?;
    let out = match what {
        "alloc" | "dealloc" | "relinquish_alloc_permit" => {
            let cta_group = m.cta_group(ctx)?;
            if !(m.take("sync") && m.take("aligned")) {
                return Err(ctx.unsupported());
            }
            let op = match what {
                "alloc" => {
                    // The generic-address form is not modelled.
                    if !(m.take("shared::cta") && m.take("b32")) {
                        return Err(ctx.unsupported());
                    }
                    m.done(ctx)?;
                    let ops = ctx.count(ops, 2)?;
                    Op::TcAlloc {
                        cta_group,
                        dst: ctx.addr(&ops[0])?,
                        ncols: ctx.src_plain(&ops[1])?,
                    }
                }
                "dealloc" => {
                    if !m.take("b32") {
                        return Err(ctx.unsupported());
                    }
                    m.done(ctx)?;
                    let ops = ctx.count(ops, 2)?;
                    Op::TcDealloc {
                        cta_group,
                        taddr: ctx.src_plain(&ops[0])?,
                        ncols: ctx.src_plain(&ops[1])?,
                    }
                }
                _ => {
                    m.done(ctx)?;
                    ctx.count(ops, 0)?;
                    Op::TcRelinquish { cta_group }
                }
            };
            (op, Category::Tcgen05Alloc)
        }
        "ld" | "st" => {
            if !(m.take("sync") && m.take("aligned") && m.take("32x32b") && m.take("b32")) {
                return Err(ctx.unsupported());
            }
            let n = m
                .take_map(|p| {
                    let n: u32 = p.strip_prefix('x')?.parse().ok()?;
                    (n.is_power_of_two() && n <= 128).then_some(n as usize)
                })
                .ok_or_else(|| ctx.unsupported())?;
            m.done(ctx)?;
            let ops = ctx.count(ops, 2)?;
            if what == "ld" {
                let op = Op::TcLd { d: ctx.dst_vector(&ops[0], n)?, taddr: ctx.addr(&ops[1])? };
                (op, Category::Tcgen05Ld)
            } else {
                let op = Op::TcSt { taddr: ctx.addr(&ops[0])?, v: ctx.src_vector(&ops[1], n)? };
                (op, Category::Tcgen05St)
            }
        }
        "wait::ld" | "wait::st" => {
            if !(m.take("sync") && m.take("aligned")) {
                return Err(ctx.unsupported());
            }
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            (Op::Nop(Nop::Tcgen05Wait), Category::Tcgen05Sync)
        }
        "fence::before_thread_sync" | "fence::after_thread_sync" => {
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            (Op::Nop(Nop::Tcgen05Fence), Category::Tcgen05Sync)
        }
        "commit" => {
            let cta_group = m.cta_group(ctx)?;
            // The generic-address form is not modelled.
            if !(m.take("mbarrier::arrive::one") && m.take("shared::cluster") && m.take("b64")) {
                return Err(ctx.unsupported());
            }
            let multicast = m.take("multicast::cluster");
            m.done(ctx)?;
            let ops = ctx.count(ops, if multicast { 2 } else { 1 })?;
            let mask = if multicast { Some(ctx.src_plain(&ops[1])?) } else { None };
            (Op::TcCommit { cta_group, bar: ctx.addr(&ops[0])?, mask }, Category::Tcgen05Commit)
        }
        "cp" => {
            let cta_group = m.cta_group(ctx)?;
            if !(m.take("32x128b") && m.take("warpx4")) {
                return Err(ctx.unsupported());
            }
            m.done(ctx)?;
            let ops = ctx.count(ops, 2)?;
            let op =
                Op::TcCp { cta_group, taddr: ctx.addr(&ops[0])?, desc: ctx.src_plain(&ops[1])? };
            (op, Category::Tcgen05Cp)
        }
        "mma" => (mma(ctx, m, ops)?, Category::Tcgen05Mma),
        _ => return Err(ctx.unsupported()),
    };
    m.done(ctx)?;
    Ok(out)
}

fn mma(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<Op, SimError> {
    let cta_group = m.cta_group(ctx)?;
    let kind = if m.take("kind::f16") {
        MmaKind::F16
    } else if m.take("kind::mxf4nvf4")
        && m.take("block_scale")
        && m.take_any(&["block16", "scale_vec::4X"]).is_some()
    {
        MmaKind::Mxf4Nvf4Block16
    } else if m.take("kind::mxf8f6f4")
        && m.take("block_scale")
        && m.take_any(&["block32", "scale_vec::1X"]).is_some()
    {
        MmaKind::Mxf8f6f4Block32
    } else {
        return Err(ctx.unsupported());
    };
    m.done(ctx)?;
    let mma = match kind {
        // [d], adesc, bdesc, idesc, enable-input-d (no disable-output-lane, no scale-input-d).
        MmaKind::F16 => {
            let ops = ctx.count(ops, 5)?;
            let d = ctx.addr(&ops[0])?;
            Mma {
                cta_group,
                kind,
                d,
                adesc: ctx.src_plain(&ops[1])?,
                bdesc: ctx.src_plain(&ops[2])?,
                idesc: ctx.src_plain(&ops[3])?,
                sfa: d,
                sfb: d,
                enable: ctx.src(&ops[4])?,
            }
        }
        // [d], adesc, bdesc, idesc, [sfa], [sfb], enable-input-d.
        MmaKind::Mxf4Nvf4Block16 | MmaKind::Mxf8f6f4Block32 => {
            let ops = ctx.count(ops, 7)?;
            Mma {
                cta_group,
                kind,
                d: ctx.addr(&ops[0])?,
                adesc: ctx.src_plain(&ops[1])?,
                bdesc: ctx.src_plain(&ops[2])?,
                idesc: ctx.src_plain(&ops[3])?,
                sfa: ctx.addr(&ops[4])?,
                sfb: ctx.addr(&ops[5])?,
                enable: ctx.src(&ops[6])?,
            }
        }
    };
    Ok(Op::Mma(Box::new(mma)))
}
