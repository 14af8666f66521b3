//! Operand values: registers, immediates and special registers of a thread.

use super::state::Cluster;
use crate::decode::op::{Addr, Dst, Special, Src};

impl Cluster<'_> {
    #[inline(never)]
    fn special(&self, c: usize, t: usize, s: Special) -> u64 {
        let t = t as u64;
        match s {
            Special::TidX => t,
            Special::NtidX => u64::from(self.block),
            Special::CtaidX => u64::from(self.ctas[c].ctaid),
            Special::NctaidX => u64::from(self.grid),
            Special::ClusterIdX => u64::from(self.cluster_id),
            Special::NclusterIdX => u64::from(self.grid / self.cluster_size),
            Special::ClusterRank => c as u64,
            Special::ClusterSize => u64::from(self.cluster_size),
            Special::LaneId => t % 32,
            Special::WarpId => t / 32,
        }
    }

    /// The raw bits of `src` for thread `t` of CTA `c`.
    #[inline(always)]
    pub fn val(&self, c: usize, t: usize, src: Src) -> u64 {
        match src {
            Src::Reg(r) => self.ctas[c].threads[t].regs[r as usize],
            Src::NotPred(r) => u64::from(self.ctas[c].threads[t].regs[r as usize] == 0),
            Src::Imm(v) => v,
            Src::Special(s) => self.special(c, t, s),
        }
    }

    /// The address `[base+offset]`.
    #[inline]
    pub fn addr(&self, c: usize, t: usize, a: Addr) -> u64 {
        self.val(c, t, a.base).wrapping_add(a.offset as u64)
    }

    /// Writes a destination register (the sink discards).
    #[inline(always)]
    pub fn set(&mut self, c: usize, t: usize, d: Dst, v: u64) {
        if let Some(r) = d {
            self.ctas[c].threads[t].regs[r as usize] = v;
        }
    }
}
