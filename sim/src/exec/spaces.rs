//! Memory of the state spaces as instructions see it: shared memory (with the cluster's
//! distributed window and the visibility tags of asynchronous writes), global memory and
//! the parameter buffer. Every access is bounds-checked and names the instruction.

use super::state::Cluster;
use crate::decode::op::Window;
use crate::decode::{Inst, PARAM_SPACE};
use crate::error::SimError;
use crate::error::TmemError;
use crate::memory::Device;

pub(super) fn bad(inst: &Inst, msg: impl Into<String>) -> SimError {
    SimError::BadInstruction { line: inst.line, opcode: inst.opcode.clone(), message: msg.into() }
}

/// A TMEM error of `inst`.
pub(super) fn tmem_fault(inst: &Inst) -> impl Fn(TmemError) -> SimError + '_ {
    |source| SimError::Tmem { line: inst.line, opcode: inst.opcode.clone(), source }
}

/// Natural alignment: an access of `size` bytes (a power of two) at `addr`. The hardware
/// faults on a misaligned address.
pub(super) fn check_aligned(inst: &Inst, addr: u64, size: usize) -> Result<(), SimError> {
    if size.is_power_of_two() && !addr.is_multiple_of(size as u64) {
        return Err(bad(inst, format!("address {addr:#x} is not aligned to {size} bytes")));
    }
    Ok(())
}

impl Cluster<'_> {
    /// Shared address → (CTA index, offset). Addresses below 2^24 are the executing CTA's
    /// own window; `mapa` produces (rank + 1) << 24 | offset, a shared::cluster address. A
    /// `.shared::cta` access must stay in the executing CTA.
    pub fn resolve_shared(
        &self,
        me: usize,
        addr: u64,
        window: Window,
        inst: &Inst,
    ) -> Result<(usize, u32), SimError> {
        let hi = (addr >> 24) as usize;
        let off = (addr & 0xFF_FFFF) as u32;
        if hi == 0 {
            return Ok((me, off));
        }
        if hi > self.ctas.len() || addr >> 32 != 0 {
            return Err(bad(
                inst,
                format!("shared::cluster address {addr:#x} names no CTA of this cluster"),
            ));
        }
        if window == Window::Cta && hi - 1 != me {
            return Err(bad(
                inst,
                format!("shared::cta access at {addr:#x} names CTA rank {} of the cluster", hi - 1),
            ));
        }
        Ok((hi - 1, off))
    }

    pub fn check_shared(
        &self,
        cta: usize,
        off: u32,
        len: usize,
        inst: &Inst,
        tid: usize,
    ) -> Result<(), SimError> {
        let limit = self.ctas[cta].shared.len();
        if (off as usize).checked_add(len).is_none_or(|end| end > limit) {
            return Err(SimError::SharedOutOfBounds {
                line: inst.line,
                addr: u64::from(off),
                size: len,
                limit,
                block: self.ctas[cta].ctaid,
                thread: tid as u32,
            });
        }
        Ok(())
    }

    /// Reads shared bytes, failing on bytes whose asynchronous write is unpublished.
    pub fn read_shared(
        &self,
        cta: usize,
        off: u32,
        len: usize,
        inst: &Inst,
        tid: usize,
    ) -> Result<&[u8], SimError> {
        self.check_shared(cta, off, len, inst, tid)?;
        let r = off as usize..off as usize + len;
        if let Some(i) = self.ctas[cta].tags[r.clone()].iter().position(|&t| t != 0) {
            return Err(SimError::AsyncRace {
                line: inst.line,
                block: self.ctas[cta].ctaid,
                addr: u64::from(off) + i as u64,
            });
        }
        Ok(&self.ctas[cta].shared[r])
    }

    /// Writes shared bytes; `tag` 0 makes them visible at once, else they are published when
    /// the barrier with that id completes a phase.
    pub fn write_shared(
        &mut self,
        cta: usize,
        off: u32,
        data: &[u8],
        tag: u32,
        inst: &Inst,
        tid: usize,
    ) -> Result<(), SimError> {
        self.check_shared(cta, off, data.len(), inst, tid)?;
        if !self.ctas[cta].wg_locks.is_empty() {
            self.wgmma_smem_conflict(cta, off, data.len(), inst)?;
        }
        let r = off as usize..off as usize + data.len();
        self.ctas[cta].shared[r.clone()].copy_from_slice(data);
        self.ctas[cta].tags[r].fill(tag);
        Ok(())
    }

    /// Makes the asynchronous writes waiting on barrier `id` visible.
    pub fn publish(&mut self, id: u32) {
        if let Some(ranges) = self.pending.remove(&id) {
            for (c, off, len) in ranges {
                let Some(cta) = self.ctas.get_mut(c) else { continue };
                let end = (off as usize + len as usize).min(cta.tags.len());
                for t in cta.tags.get_mut(off as usize..end).into_iter().flatten() {
                    if *t == id {
                        *t = 0;
                    }
                }
            }
        }
    }

    pub fn global_read<'d>(
        &self,
        device: &'d Device,
        c: usize,
        tid: usize,
        addr: u64,
        len: usize,
        inst: &Inst,
    ) -> Result<&'d [u8], SimError> {
        device.slice(addr, len).ok_or(SimError::GlobalOutOfBounds {
            line: inst.line,
            addr,
            size: len,
            block: self.ctas[c].ctaid,
            thread: tid as u32,
        })
    }

    pub fn global_write(
        &self,
        device: &mut Device,
        c: usize,
        tid: usize,
        addr: u64,
        data: &[u8],
        inst: &Inst,
    ) -> Result<(), SimError> {
        let s = device.slice_mut(addr, data.len()).ok_or(SimError::GlobalOutOfBounds {
            line: inst.line,
            addr,
            size: data.len(),
            block: self.ctas[c].ctaid,
            thread: tid as u32,
        })?;
        s.copy_from_slice(data);
        Ok(())
    }

    pub fn param_read(&self, addr: u64, len: usize, inst: &Inst) -> Result<&[u8], SimError> {
        if addr & PARAM_SPACE == 0 {
            return Err(bad(inst, format!("{addr:#x} is not a parameter address")));
        }
        let off = (addr & !PARAM_SPACE) as usize;
        off.checked_add(len)
            .and_then(|end| self.params.get(off..end))
            .ok_or_else(|| bad(inst, "parameter read out of range"))
    }
}
