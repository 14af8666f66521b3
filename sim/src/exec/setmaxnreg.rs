//! `setmaxnreg.{inc,dec}.sync.aligned.u32` (PTX ISA "setmaxnreg"): no functional effect,
//! but with a `.maxnreg` directive (the launch count) the CTA's register pool is modelled,
//! so a kernel whose consumers ask for more registers than its producers gave back
//! deadlocks here as it would hang on hardware. The warpgroup arrival rules are those of
//! the other warpgroup instructions (`wgmma.rs`).

use super::spaces::bad;
use super::state::{Cluster, State};
use crate::decode::Inst;
use crate::error::SimError;

impl Cluster<'_> {
    /// `setmaxnreg` to `n` registers by warpgroup `wgi` of CTA `c`, all 128 threads at it.
    pub(super) fn set_max_nreg(
        &mut self,
        c: usize,
        wgi: usize,
        inc: bool,
        n: u32,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let wg = &mut self.ctas[c].warpgroups[wgi];
        // PTX ISA: .inc raises the per-thread maximum to n, .dec lowers it to n.
        if let Some(cur) = wg.maxnreg
            && ((inc && n < cur) || (!inc && n > cur))
        {
            let verb = if inc { "raise" } else { "lower" };
            return Err(bad(inst, format!("cannot {verb} the register count from {cur} to {n}")));
        }
        // With a known launch count (.maxnreg) the CTA's pool is modelled: .dec
        // gives registers to it, .inc waits until it holds enough (on hardware a
        // kernel that never releases enough hangs; here it is a deadlock).
        match (self.kernel.maxnreg, wg.maxnreg) {
            (Some(_), Some(cur)) if !inc => {
                wg.maxnreg = Some(n);
                self.ctas[c].reg_pool += cur - n;
            }
            (Some(_), Some(_)) => {
                wg.waiting_inc = Some(n);
                self.take_registers(c, wgi);
            }
            _ => wg.maxnreg = Some(n),
        }
        Ok(())
    }

    /// A waiting `setmaxnreg.inc` of warpgroup `wgi` takes its registers if the pool has
    /// them; whether it did.
    fn take_registers(&mut self, c: usize, wgi: usize) -> bool {
        let cta = &mut self.ctas[c];
        let wg = &mut cta.warpgroups[wgi];
        let (Some(n), Some(cur)) = (wg.waiting_inc, wg.maxnreg) else { return false };
        let need = n - cur;
        if cta.reg_pool < need {
            return false;
        }
        cta.reg_pool -= need;
        wg.maxnreg = Some(n);
        wg.waiting_inc = None;
        true
    }

    /// Retries the waiting `setmaxnreg.inc`s (after a round of the scheduler); whether one
    /// completed and released its warpgroup.
    pub fn retry_register_requests(&mut self) -> bool {
        let mut released = false;
        for c in 0..self.ctas.len() {
            for wgi in 0..self.ctas[c].warpgroups.len() {
                let waiting = self.ctas[c].warpgroups[wgi].waiting_inc.is_some();
                if waiting && self.take_registers(c, wgi) {
                    for t in 128 * wgi..128 * (wgi + 1) {
                        let th = &mut self.ctas[c].threads[t];
                        th.state = State::Running;
                        th.pc += 1;
                    }
                    released = true;
                }
            }
        }
        released
    }
}
