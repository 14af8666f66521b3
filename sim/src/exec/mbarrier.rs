//! mbarrier objects (PTX ISA §9.7.13.15) and the instructions on them. A barrier has an
//! expected arrival count, the arrivals still pending in the current phase, a transaction
//! count and the phase parity. A phase completes when no arrival is pending and the
//! tx-count is zero; the next phase starts with the expected count again. Completing a phase
//! publishes the asynchronous writes tagged with the barrier.

use super::spaces::{bad, check_aligned};
use super::state::{Cluster, Control, State};
use crate::decode::Inst;
use crate::decode::op::{Addr, Dst, Src, Window};
use crate::error::SimError;

/// Largest arrival count the PTX ISA allows (2^20 - 1).
const MAX_COUNT: u64 = (1 << 20) - 1;

/// One barrier's state.
#[derive(Clone, Debug)]
pub(super) struct Mbar {
    expected: i64,
    pending: i64,
    tx: i64,
    /// Completed phases (parity = phase & 1).
    phase: u64,
    /// Unique id, used to tag asynchronous writes that complete on this barrier.
    pub id: u32,
}

impl Mbar {
    fn new(count: u32, id: u32) -> Self {
        Self { expected: i64::from(count), pending: i64::from(count), tx: 0, phase: 0, id }
    }

    /// Whether the phase with parity `parity` has completed (what try_wait.parity asks).
    pub fn parity_done(&self, parity: u64) -> bool {
        (self.phase & 1) != (parity & 1)
    }

    /// Applies `arrivals` arrivals and a tx-count change; Some(true) if a phase completed,
    /// None if more threads arrived than the phase was waiting for.
    fn update(&mut self, arrivals: i64, tx_delta: i64) -> Option<bool> {
        self.pending -= arrivals;
        self.tx += tx_delta;
        if self.pending < 0 {
            return None;
        }
        if self.pending == 0 && self.tx == 0 {
            self.phase += 1;
            self.pending = self.expected;
            return Some(true);
        }
        Some(false)
    }
}

impl Cluster<'_> {
    /// Arrivals and tx on barrier (cta, off).
    pub fn mbar_update(
        &mut self,
        cta: usize,
        off: u32,
        arrivals: i64,
        tx: i64,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let m = self.mbars.get_mut(&(cta, off)).ok_or_else(|| {
            bad(inst, format!("mbarrier at CTA {cta} offset {off:#x} was never initialized"))
        })?;
        match m.update(arrivals, tx) {
            Some(true) => {
                let id = m.id;
                self.publish(id);
                Ok(())
            }
            Some(false) => Ok(()),
            None => Err(bad(
                inst,
                format!(
                    "mbarrier at CTA {cta} offset {off:#x}: more arrivals than its phase expects"
                ),
            )),
        }
    }

    pub fn mbar_id(&self, cta: usize, off: u32, inst: &Inst) -> Result<u32, SimError> {
        self.mbars.get(&(cta, off)).map(|m| m.id).ok_or_else(|| {
            bad(inst, format!("mbarrier at CTA {cta} offset {off:#x} was never initialized"))
        })
    }

    /// Whether a thread in state `s` may run again.
    pub fn wait_satisfied(&self, s: State) -> bool {
        match s {
            State::WaitMbar { cta, off, parity } => {
                self.mbars.get(&(cta, off)).is_none_or(|m| m.parity_done(parity))
            }
            _ => false,
        }
    }

    /// The barrier an operand names: (CTA, offset), 8-byte aligned, inside shared memory.
    pub fn mbar_at(
        &self,
        c: usize,
        t: usize,
        addr: Addr,
        window: Window,
        inst: &Inst,
    ) -> Result<(usize, u32), SimError> {
        let a = self.addr(c, t, addr);
        let (bc, off) = self.resolve_shared(c, a, window, inst)?;
        check_aligned(inst, u64::from(off), 8)?;
        self.check_shared(bc, off, 8, inst, t)?;
        Ok((bc, off))
    }

    fn count(&self, c: usize, t: usize, src: Src, inst: &Inst) -> Result<i64, SimError> {
        let n = self.val(c, t, src) & 0xFFFF_FFFF;
        if !(1..=MAX_COUNT).contains(&n) {
            return Err(bad(inst, format!("count {n} is outside 1..=2^20-1")));
        }
        Ok(n as i64)
    }

    pub fn mbar_init(
        &mut self,
        c: usize,
        t: usize,
        addr: Addr,
        count: Src,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let (bc, off) = self.mbar_at(c, t, addr, Window::Cta, inst)?;
        let count = self.count(c, t, count, inst)? as u32;
        let id = self.next_id;
        // Ids tag shared bytes; they must stay clear of the cp.async tag.
        if id == super::copies::CP_ASYNC_TAG {
            return Err(bad(inst, "too many mbarrier initializations"));
        }
        self.next_id += 1;
        self.mbars.insert((bc, off), Mbar::new(count, id));
        Ok(Control::Next)
    }

    /// `mbarrier.arrive` (count arrivals, default 1) with an optional expect_tx.
    #[allow(clippy::too_many_arguments)]
    pub fn mbar_arrive(
        &mut self,
        c: usize,
        t: usize,
        window: Window,
        addr: Addr,
        count: Option<Src>,
        tx: Option<Src>,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let (bc, off) = self.mbar_at(c, t, addr, window, inst)?;
        let n = match count {
            Some(s) => self.count(c, t, s, inst)?,
            None => 1,
        };
        let tx = tx.map_or(0, |s| i64::from(self.val(c, t, s) as u32));
        self.mbar_update(bc, off, n, tx, inst)?;
        Ok(Control::Next)
    }

    pub fn mbar_expect_tx(
        &mut self,
        c: usize,
        t: usize,
        window: Window,
        addr: Addr,
        tx: Src,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let (bc, off) = self.mbar_at(c, t, addr, window, inst)?;
        let tx = i64::from(self.val(c, t, tx) as u32);
        self.mbar_update(bc, off, 0, tx, inst)?;
        Ok(Control::Next)
    }

    /// try_wait/test_wait.parity: a failed try_wait sleeps on the barrier and retries the
    /// instruction when its phase changes.
    #[allow(clippy::too_many_arguments)]
    pub fn mbar_wait(
        &mut self,
        c: usize,
        t: usize,
        test: bool,
        d: Dst,
        addr: Addr,
        parity: Src,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let (bc, off) = self.mbar_at(c, t, addr, Window::Cta, inst)?;
        let parity = self.val(c, t, parity);
        let m = self
            .mbars
            .get(&(bc, off))
            .ok_or_else(|| bad(inst, "wait on an uninitialized mbarrier"))?;
        let done = m.parity_done(parity);
        self.set(c, t, d, u64::from(done));
        if !done && !test {
            return Ok(Control::Block(State::WaitMbar { cta: bc, off, parity }));
        }
        Ok(Control::Next)
    }
}
