//! Decoding of control flow, barriers, fences, programmatic dependent launch and mbarrier
//! operations. Memory-ordering qualifiers (`.release`, `.acquire`, `.relaxed`, scopes) are
//! accepted where the PTX ISA allows them: the simulator completes every access in program
//! order, which satisfies each of them.

use super::op::{Fence, Nop, Op, Scope, Window};
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
        "ret" | "exit" => {
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            Ok((Op::Exit, Category::Exit))
        }
        "bra" => {
            let uni = m.take("uni");
            m.done(ctx)?;
            let ops = ctx.count(ops, 1)?;
            Ok((Op::Bra { target: ctx.label(&ops[0])?, uni }, Category::Branch))
        }
        "bar" | "barrier" => barrier(ctx, m, ops),
        "fence" | "membar" => fence(ctx, head, m, ops),
        "griddepcontrol" => {
            let nop = match m.next() {
                Some("wait") => Nop::GridDepWait,
                Some("launch_dependents") => Nop::GridDepLaunch,
                _ => return Err(ctx.unsupported()),
            };
            m.done(ctx)?;
            ctx.count(ops, 0)?;
            Ok((Op::Nop(nop), Category::GridDependency))
        }
        _ => mbarrier(ctx, m, ops),
    }
}

fn barrier(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    if m.take("cluster") {
        let op = match m.next() {
            Some("arrive") => {
                m.take_any(&["release", "relaxed"]);
                Op::ClusterArrive
            }
            Some("wait") => {
                m.take("acquire");
                Op::ClusterWait
            }
            _ => return Err(ctx.unsupported()),
        };
        m.take("aligned");
        m.done(ctx)?;
        ctx.count(ops, 0)?;
        return Ok((op, Category::BarrierCluster));
    }
    if m.take("warp") {
        if !m.take("sync") {
            return Err(ctx.unsupported());
        }
        m.done(ctx)?;
        let ops = ctx.count(ops, 1)?;
        return Ok((Op::BarWarpSync { mask: ctx.src_plain(&ops[0])? }, Category::BarrierWarp));
    }
    m.take("cta");
    let sync = match m.next() {
        Some("sync") => true,
        Some("arrive") => false,
        _ => return Err(ctx.unsupported()),
    };
    m.take("aligned");
    m.done(ctx)?;
    let op = if sync {
        if ops.is_empty() || ops.len() > 2 {
            return Err(ctx.bad("expected a barrier id and an optional thread count"));
        }
        let count = ops.get(1).map(|o| ctx.src_plain(o)).transpose()?;
        Op::BarSync { id: ctx.src_plain(&ops[0])?, count }
    } else {
        let ops = ctx.count(ops, 2)?;
        Op::BarArrive { id: ctx.src_plain(&ops[0])?, count: ctx.src_plain(&ops[1])? }
    };
    Ok((op, Category::BarrierCta))
}

fn scope(s: &str) -> Option<Scope> {
    Some(match s {
        "cta" => Scope::Cta,
        "cluster" => Scope::Cluster,
        "gpu" | "gl" => Scope::Gpu,
        "sys" => Scope::Sys,
        _ => return None,
    })
}

fn fence(
    ctx: &Ctx<'_>,
    head: &str,
    m: &mut Mods<'_>,
    ops: &[Opnd],
) -> Result<(Op, Category), SimError> {
    let out = fence_kind(ctx, head, m)?;
    m.done(ctx)?;
    ctx.count(ops, 0)?;
    Ok(out)
}

fn fence_kind(ctx: &Ctx<'_>, head: &str, m: &mut Mods<'_>) -> Result<(Op, Category), SimError> {
    if head == "fence" && m.take("mbarrier_init") {
        if !(m.take("release") && m.take("cluster")) {
            return Err(ctx.unsupported());
        }
        return Ok((Op::Fence(Fence::MbarrierInit), Category::FenceCluster));
    }
    if head == "fence" && m.take("proxy") {
        if !m.take("async") {
            return Err(ctx.unsupported());
        }
        m.take_any(&["shared::cta", "shared::cluster", "global"]);
        return Ok((Op::Fence(Fence::ProxyAsync), Category::FenceProxy));
    }
    if head == "fence" {
        m.take_any(&["sc", "acq_rel"]);
    }
    let s = m.next().and_then(scope).ok_or_else(|| ctx.unsupported())?;
    if head == "membar" && s == Scope::Cluster {
        return Err(ctx.unsupported());
    }
    let category = match s {
        Scope::Cta => Category::FenceCta,
        Scope::Cluster => Category::FenceCluster,
        Scope::Gpu => Category::FenceGpu,
        Scope::Sys => Category::FenceSys,
    };
    Ok((Op::Fence(Fence::Scoped(s)), category))
}

/// `.shared` / `.shared::cta` / `.shared::cluster`; generic addresses are not modelled.
fn mbar_window(ctx: &Ctx<'_>, m: &mut Mods<'_>) -> Result<Window, SimError> {
    match m.take_any(&["shared", "shared::cta", "shared::cluster"]) {
        Some("shared::cluster") => Ok(Window::Cluster),
        Some(_) => Ok(Window::Cta),
        None => Err(ctx.unsupported()),
    }
}

fn mbarrier(ctx: &Ctx<'_>, m: &mut Mods<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let what = m.next().ok_or_else(|| ctx.unsupported())?;
    let window = mbar_window(ctx, m)?;
    if !m.take("b64") {
        return Err(ctx.unsupported());
    }
    let expect_tx = what == "arrive" && m.take("expect_tx");
    let wait = matches!(what, "try_wait" | "test_wait");
    match what {
        "init" if window == Window::Cta => {}
        "arrive" => {
            m.take_any(&["release", "relaxed"]);
            m.take_any(&["cta", "cluster"]);
        }
        "expect_tx" => {
            m.take("relaxed");
            m.take_any(&["cta", "cluster"]);
        }
        "try_wait" | "test_wait" if window == Window::Cta && m.take("parity") => {
            m.take_any(&["acquire", "relaxed"]);
            m.take_any(&["cta", "cluster"]);
        }
        _ => return Err(ctx.unsupported()),
    }
    m.done(ctx)?;
    if what == "init" {
        let ops = ctx.count(ops, 2)?;
        let op = Op::MbarInit { addr: ctx.addr(&ops[0])?, count: ctx.src_plain(&ops[1])? };
        return Ok((op, Category::MbarrierInit));
    }
    if what == "expect_tx" {
        let ops = ctx.count(ops, 2)?;
        let op = Op::MbarExpectTx { window, addr: ctx.addr(&ops[0])?, tx: ctx.src_plain(&ops[1])? };
        return Ok((op, Category::MbarrierExpectTx));
    }
    if wait {
        let test = what == "test_wait";
        // try_wait may carry a suspend-time hint; a wait that sleeps until the phase
        // completes is one of the behaviours the hint allows.
        if ops.len() != 3 && (test || ops.len() != 4) {
            return Err(ctx.bad("expected p, [bar], parity and, for try_wait, a hint"));
        }
        if let Some(h) = ops.get(3) {
            ctx.src_plain(h)?;
        }
        let op = Op::MbarWait {
            test,
            d: ctx.dst(&ops[0])?,
            addr: ctx.addr(&ops[1])?,
            parity: ctx.src_plain(&ops[2])?,
        };
        return Ok((op, Category::MbarrierWait));
    }
    // The returned state is opaque and only test_wait/try_wait without .parity (not
    // modelled) could use it, so the destination must be the sink.
    if expect_tx {
        let ops = ctx.count(ops, 3)?;
        ctx.sink(&ops[0])?;
        let tx = Some(ctx.src_plain(&ops[2])?);
        let op = Op::MbarArrive { window, addr: ctx.addr(&ops[1])?, count: None, tx };
        return Ok((op, Category::MbarrierArrive));
    }
    if ops.len() != 2 && ops.len() != 3 {
        return Err(ctx.bad("expected _, [bar] and an optional count"));
    }
    ctx.sink(&ops[0])?;
    let count = ops.get(2).map(|o| ctx.src_plain(o)).transpose()?;
    let op = Op::MbarArrive { window, addr: ctx.addr(&ops[1])?, count, tx: None };
    Ok((op, Category::MbarrierArrive))
}
