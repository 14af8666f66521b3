//! Synchronization idioms shared by the kernels: mbarrier waits and arrivals, elected
//! lanes, cluster barriers.

use crate::ptx::{KernelBuilder, Operand, Reg, RegClass};

/// Spins on `mbarrier.try_wait.parity` until the phase with `parity` has completed.
pub fn mbar_wait(b: &mut KernelBuilder, bar: Reg, parity: impl Into<Operand>) {
    let top = b.new_label("wait");
    let parity = parity.into();
    b.label(&top);
    let p = b.reg(RegClass::Pred);
    b.ins(
        "mbarrier.try_wait.parity.shared::cta.b64",
        vec![p.into(), Operand::Reg(bar).at(0), parity],
    );
    b.bra_if(p, true, &top);
}

/// `mbarrier.init` with an arrival count.
pub fn mbar_init(b: &mut KernelBuilder, bar: Reg, count: u32) {
    b.ins("mbarrier.init.shared::cta.b64", vec![Operand::Reg(bar).at(0), count.into()]);
}

/// Arrives on a barrier in CTA `rank` of the cluster (the local CTA when `rank` is ours).
pub fn mbar_arrive_cluster(b: &mut KernelBuilder, bar: Reg, rank: Reg) {
    let remote = b.op(RegClass::B32, "mapa.shared::cluster.u32", vec![bar.into(), rank.into()]);
    b.ins(
        "mbarrier.arrive.release.cluster.shared::cluster.b64",
        vec![Operand::Sink, Operand::Reg(remote).at(0)],
    );
}

/// A predicate true on one lane of the (converged) warp.
pub fn elect(b: &mut KernelBuilder) -> Reg {
    let p = b.reg(RegClass::Pred);
    b.ins("elect.sync", vec![Operand::Name(format!("_|{p}")), Operand::Hex(0xFFFF_FFFF)]);
    p
}

/// Cluster-wide barrier (release/acquire), used after barrier initialization and before
/// teardown so no CTA touches a peer's shared memory or TMEM outside its lifetime.
pub fn cluster_sync(b: &mut KernelBuilder) {
    b.ins("barrier.cluster.arrive.release.aligned", vec![]);
    b.ins("barrier.cluster.wait.acquire.aligned", vec![]);
}

/// Flips a phase bit register in place.
pub fn flip(b: &mut KernelBuilder, bit: Reg) {
    b.ins("xor.b32", vec![bit.into(), bit.into(), 1u32.into()]);
}

/// Advances a ring position `(index, phase)` over `depth` slots.
pub fn ring_advance(b: &mut KernelBuilder, index: Reg, phase: Reg, depth: u32) {
    b.ins("add.u32", vec![index.into(), index.into(), 1u32.into()]);
    let wrap = b.setp("eq.u32", index, depth);
    b.ins_if(wrap, false, "mov.u32", vec![index.into(), 0u32.into()]);
    b.ins_if(wrap, false, "xor.b32", vec![phase.into(), phase.into(), 1u32.into()]);
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
    let tid = b.sreg("%tid.x");
    let bid = b.sreg("%ctaid.x");
    let nb = b.sreg("%nctaid.x");
    let i = b.mad_u32(bid, threads, tid);
    let stride = b.mul_u32(nb, threads);
    let top = b.new_label(stem);
    let done = b.new_label("done");
    b.label(&top);
    let end = b.setp("ge.u32", i, total);
    b.bra_if(end, false, &done);
    body(b, i);
    b.ins("add.u32", vec![i.into(), i.into(), stride.into()]);
    b.bra(&top);
    b.label(&done);
}
