//! The schedule of one cluster. The CTAs of a cluster interleave, and inside a CTA the warps
//! interleave, each running until it blocks or its quantum ends; within a warp the threads
//! at the lowest pc execute together, so divergent paths reconverge. A thread that fails an
//! mbarrier wait sleeps until the barrier's phase changes; when every live thread of the
//! cluster sleeps, the launch fails with a deadlock report.

use super::spaces;
use super::state::{Cluster, Control, State, Thread};
use crate::decode::op::Op;
use crate::error::SimError;
use crate::memory::Device;

const QUANTUM: usize = 64;

/// xorshift64.
fn next_random(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

impl Cluster<'_> {
    /// Issues the instruction at `pc` once for the lanes `group` of warp `warp` of CTA `c`.
    fn issue(
        &mut self,
        device: &mut Device,
        c: usize,
        warp: usize,
        group: &[usize],
        pc: usize,
    ) -> Result<(), SimError> {
        let kernel = self.kernel;
        let Some(inst) = kernel.body.get(pc) else {
            for &t in group {
                self.ctas[c].threads[t].state = State::Exited;
            }
            return Ok(());
        };
        self.thread_instructions += group.len() as u64;
        if let Some(p) = &mut self.profile {
            p.add(warp, inst.category);
        }
        if !inst.wg_regs.is_empty() {
            self.wgmma_touch(c, warp, group, inst)?;
        }
        if inst.op.is_warpgroup() {
            return self.warpgroup_arrive(c, warp, group, inst);
        }
        if inst.op.is_collective() {
            return self.exec_collective(c, warp, group, inst);
        }
        if let Op::Bra { target, uni } = inst.op {
            let mut taken = [false; 32];
            for (k, &t) in group.iter().enumerate() {
                taken[k] = self.guard_ok(c, t, inst);
            }
            let taken = &taken[..group.len()];
            if uni && taken.iter().any(|&x| x != taken[0]) {
                return Err(spaces::bad(inst, "bra.uni diverges: its lanes disagree on the guard"));
            }
            for (&t, &taken) in group.iter().zip(taken) {
                let th = &mut self.ctas[c].threads[t];
                th.pc = if taken { target } else { th.pc + 1 };
            }
            return Ok(());
        }
        if self.register_lanes(c, group, inst)? {
            for &t in group {
                self.ctas[c].threads[t].pc += 1;
            }
            return Ok(());
        }
        for &t in group {
            let ctl = if self.guard_ok(c, t, inst) {
                self.exec_thread(device, c, t, inst)?
            } else {
                Control::Next
            };
            let th = &mut self.ctas[c].threads[t];
            match ctl {
                Control::Next => th.pc += 1,
                Control::Jump(pc) => th.pc = pc,
                Control::Block(s) => th.state = s,
                Control::Exit => th.state = State::Exited,
            }
        }
        Ok(())
    }

    /// Runs warp `w` of CTA `c` for up to `quantum` issues; whether anything progressed.
    fn run_warp(
        &mut self,
        device: &mut Device,
        c: usize,
        w: usize,
        quantum: usize,
    ) -> Result<bool, SimError> {
        let n = self.block as usize;
        let lanes = w * 32..((w + 1) * 32).min(n);
        let mut progress = false;
        for _ in 0..quantum {
            // Wake lanes whose barrier phase completed, and find the lowest running pc.
            let mut lowest = None;
            let mbars = &self.mbars;
            let th = &mut self.ctas[c].threads;
            for t in lanes.clone() {
                if let State::WaitMbar { cta, off, parity } = th[t].state
                    && mbars.get(&(cta, off)).is_none_or(|m| m.parity_done(parity))
                {
                    th[t].state = State::Running;
                }
                if th[t].state == State::Running {
                    lowest = Some(lowest.map_or(th[t].pc, |p: usize| p.min(th[t].pc)));
                }
            }
            let Some(pc) = lowest else { break };
            let mut buf = [0usize; 32];
            let mut len = 0;
            for t in lanes.clone() {
                if th[t].state == State::Running && th[t].pc == pc {
                    buf[len] = t;
                    len += 1;
                }
            }
            let group = &buf[..len];
            self.issue(device, c, w, group, pc)?;
            // A failed wait is not progress; anything else is.
            if group
                .iter()
                .any(|&t| !matches!(self.ctas[c].threads[t].state, State::WaitMbar { .. }))
            {
                progress = true;
            }
            if self.thread_instructions > self.step_limit {
                return Err(SimError::StepLimit {
                    block: self.ctas[c].ctaid,
                    limit: self.step_limit,
                    line: self.kernel.body.get(pc).map_or(0, |i| i.line),
                });
            }
        }
        Ok(progress)
    }

    /// Named barriers (PTX ISA bar.sync/bar.arrive): a barrier completes when the threads
    /// waiting plus those that arrived reach its count (every live thread when no count was
    /// given). Then the cluster barrier: it completes when every live thread waits at it.
    fn release_barriers(&mut self) -> bool {
        let mut released = self.retry_register_requests();
        for cta in &mut self.ctas {
            let live = cta.threads.iter().filter(|t| t.state != State::Exited).count() as u32;
            let mut ids: Vec<(u32, u32)> = cta
                .threads
                .iter()
                .filter_map(|t| match t.state {
                    State::Barrier { id, count } => Some((id, count)),
                    _ => None,
                })
                .collect();
            ids.sort_unstable();
            ids.dedup();
            for (id, count) in ids {
                let at = State::Barrier { id, count };
                let waiting = cta.threads.iter().filter(|t| t.state == at).count() as u32;
                let arrived = cta.arrivals[id as usize];
                let need = if count == 0 { live } else { count };
                if waiting + arrived >= need {
                    for t in cta.threads.iter_mut().filter(|t| t.state == at) {
                        t.state = State::Running;
                        t.pc += 1;
                    }
                    cta.arrivals[id as usize] = 0;
                    released = true;
                }
            }
        }
        let threads = || self.ctas.iter().flat_map(|c| c.threads.iter());
        let live = threads().filter(|t| t.state != State::Exited).count();
        let at_cluster = threads().filter(|t| t.state == State::ClusterBarrier).count();
        if at_cluster > 0 && at_cluster == live {
            for t in self.ctas.iter_mut().flat_map(|c| c.threads.iter_mut()) {
                if t.state == State::ClusterBarrier {
                    t.state = State::Running;
                    t.pc += 1;
                }
            }
            released = true;
        }
        released
    }

    fn deadlock(&self, warps: usize) -> SimError {
        let n = self.block as usize;
        let mut detail = Vec::new();
        for cta in &self.ctas {
            for w in 0..warps {
                let first = cta.threads[w * 32..((w + 1) * 32).min(n)]
                    .iter()
                    .find(|t: &&Thread| t.state != State::Exited);
                if let Some(t) = first {
                    let line = self.kernel.body.get(t.pc).map_or(0, |i| i.line);
                    detail
                        .push(format!("CTA {} warp {w} at line {line}: {:?}", cta.ctaid, t.state));
                }
            }
        }
        SimError::Deadlock { block: self.ctas[0].ctaid, detail: detail.join("; ") }
    }

    pub fn run(&mut self, device: &mut Device) -> Result<(), SimError> {
        let warps = (self.block as usize).div_ceil(32);
        let mut order: Vec<(usize, usize)> =
            (0..self.ctas.len()).flat_map(|c| (0..warps).map(move |w| (c, w))).collect();
        loop {
            let mut progress = false;
            if let Some(mut x) = self.rng {
                // Fisher-Yates.
                for i in (1..order.len()).rev() {
                    order.swap(i, (next_random(&mut x) % (i as u64 + 1)) as usize);
                }
                self.rng = Some(x);
            }
            for &(c, w) in &order {
                let quantum = match &mut self.rng {
                    Some(x) => 1 + (next_random(x) % 96) as usize,
                    None => QUANTUM,
                };
                progress |= self.run_warp(device, c, w, quantum)?;
            }
            if self.ctas.iter().all(|cta| cta.threads.iter().all(|t| t.state == State::Exited)) {
                for cta in &self.ctas {
                    if let Some(&(s, n)) = cta.tmem.allocs.first() {
                        return Err(SimError::TmemLeak { block: cta.ctaid, start: s, columns: n });
                    }
                }
                return Ok(());
            }
            let released = self.release_barriers();
            let woken = self
                .ctas
                .iter()
                .flat_map(|c| c.threads.iter())
                .any(|t| self.wait_satisfied(t.state));
            if !progress && !released && !woken {
                return Err(self.deadlock(warps));
            }
        }
    }
}
