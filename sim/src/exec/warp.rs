//! Warp-collective instructions, executed once for the lanes of a warp that are together at
//! them: elect, shfl, vote, redux (PTX ISA §9.7.8), bar.warp.sync, and the `.sync.aligned`
//! tcgen05 instructions. Lanes whose guard is false step over; the member mask must be
//! exactly the lanes taking part, and `.aligned` instructions need every live lane.

use super::spaces::bad;
use super::state::{Cluster, State};
use crate::decode::Inst;
use crate::decode::op::{Op, ReduxOp, ShflMode, VoteMode};
use crate::error::SimError;

fn lane_of(t: usize) -> u32 {
    (t % 32) as u32
}

impl Cluster<'_> {
    #[inline]
    pub fn guard_ok(&self, c: usize, t: usize, inst: &Inst) -> bool {
        match inst.guard {
            None => true,
            Some((p, neg)) => (self.ctas[c].threads[t].regs[p] != 0) != neg,
        }
    }

    /// The member mask operand must name exactly the lanes in `part`.
    fn check_mask(
        &self,
        c: usize,
        part: &[usize],
        mask: crate::decode::op::Src,
        inst: &Inst,
    ) -> Result<u32, SimError> {
        let mask = self.val(c, part[0], mask) as u32;
        let present: u32 = part.iter().fold(0, |m, &t| m | (1 << lane_of(t)));
        if present != mask {
            return Err(bad(
                inst,
                format!("member mask {mask:#010x} but lanes {present:#010x} are here"),
            ));
        }
        Ok(present)
    }

    pub fn exec_collective(
        &mut self,
        c: usize,
        warp: usize,
        group: &[usize],
        inst: &Inst,
    ) -> Result<(), SimError> {
        let mut buf = [0usize; 32];
        let mut n = 0;
        for &t in group {
            if self.guard_ok(c, t, inst) {
                buf[n] = t;
                n += 1;
            } else {
                self.ctas[c].threads[t].pc += 1;
            }
        }
        let part = &buf[..n];
        if part.is_empty() {
            return Ok(());
        }
        if matches!(inst.op, Op::BarWarpSync { .. }) {
            return self.warp_sync(c, warp, part, inst);
        }
        match &inst.op {
            Op::Elect { d, p, mask } => {
                self.check_mask(c, part, *mask, inst)?;
                let leader = part[0];
                for &t in part {
                    self.set(c, t, *d, u64::from(lane_of(leader)));
                    self.set(c, t, *p, u64::from(t == leader));
                }
            }
            Op::Shfl { .. } | Op::Vote { .. } | Op::Redux { .. } => {
                self.warp_data(c, part, inst)?
            }
            _ => {
                // `.sync.aligned`: every live lane of the warp executes it together.
                let live = (warp * 32..((warp + 1) * 32).min(self.block as usize))
                    .filter(|&t| self.ctas[c].threads[t].state != State::Exited)
                    .count();
                if live != part.len() {
                    return Err(bad(
                        inst,
                        format!(
                            "warp {warp} is not converged: {} of {live} live lanes arrived",
                            part.len()
                        ),
                    ));
                }
                match &inst.op {
                    Op::TcAlloc { dst, ncols, .. } => self.tc_alloc(c, part, *dst, *ncols, inst)?,
                    Op::TcDealloc { taddr, ncols, .. } => {
                        self.tc_dealloc(c, part, *taddr, *ncols, inst)?
                    }
                    Op::TcRelinquish { .. } => self.ctas[c].relinquished = true,
                    Op::TcLd { d, taddr } => self.tc_ld(c, warp, part, d, *taddr, inst)?,
                    Op::TcSt { taddr, v } => self.tc_st(c, warp, part, *taddr, v, inst)?,
                    Op::LdMatrix { trans, d, addr } => {
                        self.ldmatrix(c, part, *trans, d, *addr, inst)?
                    }
                    Op::StMatrix { trans, addr, v } => {
                        self.stmatrix(c, part, *trans, *addr, v, inst)?
                    }
                    _ => return Err(bad(inst, "not a warp-collective instruction")),
                }
            }
        }
        for &t in part {
            self.ctas[c].threads[t].pc += 1;
        }
        Ok(())
    }

    /// `bar.warp.sync`: the lanes wait until every lane of the mask has arrived.
    fn warp_sync(
        &mut self,
        c: usize,
        warp: usize,
        part: &[usize],
        inst: &Inst,
    ) -> Result<(), SimError> {
        let Op::BarWarpSync { mask } = inst.op else { return Ok(()) };
        for &t in part {
            let m = self.val(c, t, mask) as u32;
            if m & (1 << lane_of(t)) == 0 {
                return Err(bad(
                    inst,
                    format!("lane {} is not in its member mask {m:#010x}", lane_of(t)),
                ));
            }
            self.ctas[c].threads[t].state = State::WarpSync { mask: m };
        }
        let m = self.val(c, part[0], mask) as u32;
        let mut members = Vec::with_capacity(32);
        for l in (0..32).filter(|l| m & (1 << l) != 0) {
            let t = warp * 32 + l;
            match self.ctas[c].threads.get(t).map(|th| th.state) {
                None | Some(State::Exited) => {
                    return Err(bad(
                        inst,
                        format!("member mask {m:#010x} names lane {l}, which is not running"),
                    ));
                }
                Some(State::WarpSync { mask }) if mask == m => members.push(t),
                // Not there yet: the lanes here wait for it.
                Some(_) => return Ok(()),
            }
        }
        for t in members {
            let th = &mut self.ctas[c].threads[t];
            th.state = State::Running;
            th.pc += 1;
        }
        Ok(())
    }

    /// shfl.sync, vote.sync and redux.sync: every lane of `part` contributes.
    fn warp_data(&mut self, c: usize, part: &[usize], inst: &Inst) -> Result<(), SimError> {
        let (a, mask) = match &inst.op {
            Op::Shfl { a, mask, .. } | Op::Vote { a, mask, .. } | Op::Redux { a, mask, .. } => {
                (*a, *mask)
            }
            _ => return Err(bad(inst, "not a warp data instruction")),
        };
        let present = self.check_mask(c, part, mask, inst)?;
        let vals: Vec<u64> = part.iter().map(|&t| self.val(c, t, a)).collect();
        let by_lane = |l: u32| part.iter().position(|&t| lane_of(t) == l).map(|i| vals[i]);
        let mut results: Vec<(u64, Option<u64>)> = Vec::with_capacity(part.len());
        for &t in part {
            let lane = lane_of(t);
            let r = match &inst.op {
                Op::Shfl { mode, b, c: cc, .. } => {
                    let b = self.val(c, t, *b) as u32 & 31;
                    let cc = self.val(c, t, *cc) as u32;
                    let (cval, seg) = (cc & 31, (cc >> 8) & 31);
                    let max_lane = (lane & seg) | (cval & !seg);
                    let min_lane = lane & seg;
                    let (j, pval) = match mode {
                        ShflMode::Up => {
                            let j = i64::from(lane) - i64::from(b);
                            (j, j >= i64::from(max_lane))
                        }
                        ShflMode::Down => {
                            let j = i64::from(lane + b);
                            (j, j <= i64::from(max_lane))
                        }
                        ShflMode::Bfly => {
                            let j = i64::from(lane ^ b);
                            (j, j <= i64::from(max_lane))
                        }
                        ShflMode::Idx => {
                            let j = i64::from(min_lane | (b & !seg));
                            (j, j <= i64::from(max_lane))
                        }
                    };
                    let j = if pval { j as u32 } else { lane };
                    let v = by_lane(j)
                        .ok_or_else(|| bad(inst, format!("lane {lane} reads inactive lane {j}")))?;
                    (v & 0xFFFF_FFFF, Some(u64::from(pval)))
                }
                Op::Vote { mode, .. } => {
                    let bits: u32 = part
                        .iter()
                        .zip(&vals)
                        .fold(0, |m, (&t, &v)| if v != 0 { m | (1 << lane_of(t)) } else { m });
                    let v = match mode {
                        VoteMode::Ballot => u64::from(bits),
                        VoteMode::All => u64::from(bits == present),
                        VoteMode::Any => u64::from(bits != 0),
                        VoteMode::Uni => u64::from(bits == 0 || bits == present),
                    };
                    (v, None)
                }
                Op::Redux { op, .. } => {
                    let xs = vals.iter().map(|&v| v as u32);
                    let v = match op {
                        ReduxOp::Add => xs.fold(0u32, u32::wrapping_add),
                        ReduxOp::Min { signed: true } => {
                            xs.map(|x| x as i32).min().unwrap_or(0) as u32
                        }
                        ReduxOp::Max { signed: true } => {
                            xs.map(|x| x as i32).max().unwrap_or(0) as u32
                        }
                        ReduxOp::Min { signed: false } => xs.min().unwrap_or(0),
                        ReduxOp::Max { signed: false } => xs.max().unwrap_or(0),
                        ReduxOp::And => xs.fold(u32::MAX, |a, x| a & x),
                        ReduxOp::Or => xs.fold(0, |a, x| a | x),
                        ReduxOp::Xor => xs.fold(0, |a, x| a ^ x),
                    };
                    (u64::from(v), None)
                }
                _ => return Err(bad(inst, "not a warp data instruction")),
            };
            results.push(r);
        }
        let (d, p) = match &inst.op {
            Op::Shfl { d, p, .. } => (*d, *p),
            Op::Vote { d, .. } | Op::Redux { d, .. } => (*d, None),
            _ => (None, None),
        };
        for (&t, (v, pv)) in part.iter().zip(results) {
            self.set(c, t, d, v);
            if let Some(pv) = pv {
                self.set(c, t, p, pv);
            }
        }
        Ok(())
    }
}
