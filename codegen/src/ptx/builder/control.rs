//! Control flow, barriers and fences.

use super::KernelBuilder;
use crate::ptx::instr::Guard;
use crate::ptx::instrs::Elect;
use crate::ptx::operand::{Label, Operand};
use crate::ptx::ops::{Bar, ClusterBarrier, Fence, GridDep, Sync, Tcgen05};
use crate::ptx::reg::{Reg, RegClass};
use crate::ptx::types::Space;

impl KernelBuilder {
    /// Unconditional, warp-uniform branch.
    pub fn bra(&mut self, label: &Label) {
        self.emit(Sync::Bra { uni: true }, vec![label.into()]);
    }
    /// Branch when `pred` holds.
    pub fn bra_if(&mut self, pred: Reg, label: &Label) {
        self.emit_if(Guard::when(pred), Sync::Bra { uni: false }, vec![label.into()]);
    }
    /// Branch when `pred` does not hold.
    pub fn bra_unless(&mut self, pred: Reg, label: &Label) {
        self.emit_if(Guard::unless(pred), Sync::Bra { uni: false }, vec![label.into()]);
    }
    /// `ret`.
    pub fn ret(&mut self) {
        self.emit(Sync::Ret, vec![]);
    }
    /// `bar.sync id` (all threads of the CTA).
    pub fn bar_sync(&mut self, id: impl Into<Operand>) {
        self.emit(Sync::Bar(Bar::Sync), vec![id.into()]);
    }
    /// `bar.warp.sync -1`: reconverges the warp before a `.sync.aligned` instruction.
    pub fn bar_warp_sync(&mut self) {
        self.emit(Sync::Bar(Bar::WarpSync), vec![Operand::Imm(-1)]);
    }
    /// Cluster-wide barrier (release/acquire), used after barrier initialization and before
    /// teardown so no CTA touches a peer's shared memory or TMEM outside its lifetime.
    pub fn cluster_sync(&mut self) {
        self.emit(Sync::ClusterBarrier(ClusterBarrier::ArriveRelease), vec![]);
        self.emit(Sync::ClusterBarrier(ClusterBarrier::WaitAcquire), vec![]);
    }
    /// Cluster-wide execution barrier: a relaxed arrive (no memory barrier in SASS) and an
    /// acquiring wait. Enough where every cross-CTA memory effect to order is already
    /// released by a fence of its own (barrier initialization) or awaited on an mbarrier.
    pub fn cluster_sync_relaxed(&mut self) {
        self.emit(Sync::ClusterBarrier(ClusterBarrier::ArriveRelaxed), vec![]);
        self.emit(Sync::ClusterBarrier(ClusterBarrier::WaitAcquire), vec![]);
    }
    /// `fence.proxy.async.shared::cta`: generic-proxy writes of shared memory become
    /// visible to the async proxy (TMA, tensor cores).
    pub fn fence_proxy_async(&mut self) {
        self.emit(Fence::ProxyAsync(Space::SharedCta), vec![]);
    }
    /// `tcgen05.fence::before_thread_sync`.
    pub fn tcgen05_fence_before(&mut self) {
        self.emit(Tcgen05::FenceBeforeThreadSync, vec![]);
    }
    /// `tcgen05.fence::after_thread_sync`.
    pub fn tcgen05_fence_after(&mut self) {
        self.emit(Tcgen05::FenceAfterThreadSync, vec![]);
    }
    /// `griddepcontrol.launch_dependents`: lets the next kernel, if launched
    /// programmatically, be scheduled before this one finishes.
    pub fn pdl_trigger(&mut self) {
        self.emit(Sync::GridDep(GridDep::LaunchDependents), vec![]);
    }
    /// `griddepcontrol.wait`: when this kernel was launched programmatically, waits until
    /// the kernel before it has completed and its writes are visible (at once otherwise).
    pub fn pdl_wait(&mut self) {
        self.emit(Sync::GridDep(GridDep::Wait), vec![]);
    }
    /// `griddepcontrol.launch_dependents; griddepcontrol.wait;`: lets the next kernel's
    /// prologue start, then waits for the previous kernel's output.
    pub fn pdl_handoff(&mut self) {
        self.emit(Sync::GridDep(GridDep::LaunchDependents), vec![]);
        self.emit(Sync::GridDep(GridDep::Wait), vec![]);
    }
    /// A predicate true on one lane of the (converged) warp: `elect.sync _|p, -1`.
    pub fn elect(&mut self) -> Reg {
        let pred = self.reg(RegClass::Pred);
        self.push(Elect { pred, lane: None, members: u32::MAX });
        pred
    }
}
