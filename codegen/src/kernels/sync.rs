//! Synchronization idioms shared by the kernels (the pipelines and the corpus): mbarrier
//! waits, initialization and remote arrivals, ring positions, grid-stride loops.

use crate::ptx::instrs::{MbarArrive, MbarInit, MbarWait, WaitKind};
use crate::ptx::ops::{Alu, IntOp, Memory};
use crate::ptx::types::{Scope, Sem};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, SReg, Space, Ty};

/// Spins on `mbarrier.try_wait.parity` until the phase with `parity` has completed.
pub fn mbar_wait(b: &mut KernelBuilder, bar: Reg, parity: impl Into<Operand>) {
    spin(b, bar, parity.into(), WaitKind::Try);
}

/// [`mbar_wait`] acquiring at cluster scope: what other CTAs wrote before their releasing
/// arrivals (`mbar_arrive_cluster`) is visible after it.
pub fn mbar_wait_cluster(b: &mut KernelBuilder, bar: Reg, parity: impl Into<Operand>) {
    spin(b, bar, parity.into(), WaitKind::TryCluster);
}

fn spin(b: &mut KernelBuilder, bar: Reg, parity: Operand, kind: WaitKind) {
    let top = b.new_label("wait");
    b.label(&top);
    let p = b.reg(RegClass::Pred);
    b.push(MbarWait { kind, ready: p, bar, parity });
    b.bra_unless(p, &top);
}

/// `mbarrier.init` with an arrival count.
pub fn mbar_init(b: &mut KernelBuilder, bar: Reg, count: u32) {
    b.push(MbarInit { bar, count });
}

/// Arrives on a barrier in CTA `rank` of the cluster (the local CTA when `rank` is ours).
pub fn mbar_arrive_cluster(b: &mut KernelBuilder, bar: Reg, rank: Reg) {
    let remote = map_to_rank(b, bar, rank);
    b.push(MbarArrive {
        bar: remote,
        remote: true,
        order: Some((Sem::Release, Scope::Cluster)),
        expect_tx: None,
    });
}

/// The shared::cluster address of the same offset as `addr` in CTA `rank`.
pub fn map_to_rank(b: &mut KernelBuilder, addr: Reg, rank: Reg) -> Reg {
    b.op(RegClass::B32, Memory::Mapa(Space::SharedCluster, Ty::U32), vec![addr.into(), rank.into()])
}

/// Advances a ring position `(index, phase)` over `depth` slots.
pub fn ring_advance(b: &mut KernelBuilder, index: Reg, phase: Reg, depth: u32) {
    b.inc_u32(index, 1u32);
    let wrap = b.setp_u32(Cmp::Eq, index, depth);
    b.emit_if(Guard::when(wrap), Alu::Mov(Ty::U32), vec![index.into(), 0u32.into()]);
    let flip = Alu::Int(IntOp::Xor, Ty::B32);
    b.emit_if(Guard::when(wrap), flip, vec![phase.into(), phase.into(), 1u32.into()]);
}

/// Advances a ring position `(index, phase)` over `depth` slots by `n` slots at once (a
/// runtime count, possibly many times the depth): the phase flips once per wrap.
pub fn ring_skip(b: &mut KernelBuilder, index: Reg, phase: Reg, depth: u32, n: Reg) {
    let t = b.add_u32(index, n);
    let wraps = b.div_u32(t, depth);
    let back = b.mul_u32(wraps, depth);
    let at = b.sub_u32(t, back);
    b.emit(Alu::Mov(Ty::U32), vec![index.into(), at.into()]);
    let odd = b.and_b32(wraps, 1u32);
    b.emit(Alu::Int(IntOp::Xor, Ty::B32), vec![phase.into(), phase.into(), odd.into()]);
}

/// [`ring_advance`] when `pred` holds, without a branch (a branch inside a wgmma pipeline
/// makes ptxas serialize it).
pub fn ring_advance_if(b: &mut KernelBuilder, index: Reg, phase: Reg, depth: u32, pred: Reg) {
    let add = Alu::Int(IntOp::Add, Ty::U32);
    b.emit_if(Guard::when(pred), add, vec![index.into(), index.into(), 1u32.into()]);
    let wrap = b.setp_u32(Cmp::Eq, index, depth);
    b.emit_if(Guard::when(wrap), Alu::Mov(Ty::U32), vec![index.into(), 0u32.into()]);
    let flip = Alu::Int(IntOp::Xor, Ty::B32);
    b.emit_if(Guard::when(wrap), flip, vec![phase.into(), phase.into(), 1u32.into()]);
}

/// A grid-stride loop `for i in (ctaid·threads + tid .. total).step_by(nctaid·threads)`
/// around `body(i)`; `stem` names its labels.
pub fn grid_stride(
    b: &mut KernelBuilder,
    total: Reg,
    threads: u32,
    stem: &str,
    body: &mut dyn FnMut(&mut KernelBuilder, Reg),
) {
    let tid = b.sreg(SReg::TidX);
    let bid = b.sreg(SReg::CtaidX);
    let nb = b.sreg(SReg::NctaidX);
    let i = b.mad_u32(bid, threads, tid);
    let stride = b.mul_u32(nb, threads);
    let top = b.new_label(stem);
    let done = b.new_label("done");
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, i, total);
    b.bra_if(end, &done);
    body(b, i);
    b.inc_u32(i, stride);
    b.bra(&top);
    b.label(&done);
}
