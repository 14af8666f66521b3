//! cp.async (with completion through `cp.async.mbarrier.arrive.noinc`) and the bulk copies
//! and reductions from shared to global memory. Copies complete when issued; what an
//! asynchronous copy wrote into shared memory stays unreadable until the barrier phase it
//! completes on has completed.

use super::alu::round_bf16;
use super::spaces::{bad, check_aligned};
use super::state::{Cluster, Control};
use crate::decode::Inst;
use crate::decode::op::{Addr, BulkLoad, Src, Window};
use crate::error::SimError;
use crate::memory::Device;

/// Tag of bytes written by a cp.async whose completion is not yet tied to a barrier.
pub(super) const CP_ASYNC_TAG: u32 = u32::MAX;

impl Cluster<'_> {
    #[allow(clippy::too_many_arguments)]
    pub fn cp_async(
        &mut self,
        device: &Device,
        c: usize,
        t: usize,
        size: u32,
        dst: Addr,
        src: Addr,
        src_size: Option<Src>,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let size = size as usize;
        let src_size = src_size.map_or(size as u64, |s| self.val(c, t, s) & 0xFFFF_FFFF);
        // PTX ISA: a src-size above cp-size is undefined behaviour.
        if src_size > size as u64 {
            return Err(bad(inst, format!("src-size {src_size} exceeds cp-size {size}")));
        }
        let src_size = src_size as usize;
        let (sc, off) = self.resolve_shared(c, self.addr(c, t, dst), Window::Cta, inst)?;
        check_aligned(inst, u64::from(off), size)?;
        let mut data = [0u8; 16];
        let g = self.addr(c, t, src);
        check_aligned(inst, g, size)?;
        // The PTX ISA promises only that the bytes past src-size are zero-filled, not that
        // the source address goes unused (the L2 prefetch hints still name its line): a
        // copy of nothing must name memory that exists too. A partial copy reads its
        // src-size bytes only.
        let read = if src_size == 0 { size } else { src_size };
        let bytes = self.global_read(device, c, t, g, read, inst)?;
        data[..src_size].copy_from_slice(&bytes[..src_size]);
        self.write_shared(sc, off, &data[..size], CP_ASYNC_TAG, inst, t)?;
        self.ctas[c].threads[t].cp_async.push((sc, off, size as u32));
        Ok(Control::Next)
    }

    /// `cp.async.commit_group`: the thread's uncommitted copies form a group.
    pub fn cp_async_commit(&mut self, c: usize, t: usize) {
        let th = &mut self.ctas[c].threads[t];
        let group = std::mem::take(&mut th.cp_async);
        th.cp_groups.push(group);
    }

    /// `cp.async.wait_group n`: all but the `n` most recent groups have completed, so their
    /// bytes become visible (`wait_all` commits first and waits for every group).
    pub fn cp_async_wait(&mut self, c: usize, t: usize, n: u32, all: bool) {
        if all {
            self.cp_async_commit(c, t);
        }
        let th = &mut self.ctas[c].threads[t];
        let done = th.cp_groups.len().saturating_sub(n as usize);
        let ranges: Vec<_> = th.cp_groups.drain(..done).flatten().collect();
        for (pc, o, l) in ranges {
            for tag in &mut self.ctas[pc].tags[o as usize..(o + l) as usize] {
                if *tag == CP_ASYNC_TAG {
                    *tag = 0;
                }
            }
        }
    }

    /// Every earlier cp.async of the thread (committed to a group or not) now completes on
    /// this barrier's phase, and the thread arrives on it (`.noinc`: the expected count is
    /// not raised).
    pub fn cp_async_mbar_arrive(
        &mut self,
        c: usize,
        t: usize,
        addr: Addr,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let (bc, off) = self.mbar_at(c, t, addr, Window::Cta, inst)?;
        let id = self.mbar_id(bc, off, inst)?;
        let th = &mut self.ctas[c].threads[t];
        let mut ranges = std::mem::take(&mut th.cp_async);
        ranges.extend(th.cp_groups.drain(..).flatten());
        for &(pc, o, l) in &ranges {
            for tag in &mut self.ctas[pc].tags[o as usize..(o + l) as usize] {
                if *tag == CP_ASYNC_TAG {
                    *tag = id;
                }
            }
        }
        self.pending.entry(id).or_default().extend(ranges);
        self.mbar_update(bc, off, 1, 0, inst)?;
        Ok(Control::Next)
    }

    /// `cp.async.bulk.global.shared::cta` and `cp.reduce.async.bulk…add.noftz.bf16`.
    #[allow(clippy::too_many_arguments)]
    pub fn bulk_to_global(
        &mut self,
        device: &mut Device,
        c: usize,
        t: usize,
        dst: Addr,
        src: Addr,
        size: Src,
        reduce_bf16: bool,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let g = self.addr(c, t, dst);
        let (sc, off) = self.resolve_shared(c, self.addr(c, t, src), Window::Cta, inst)?;
        let size = (self.val(c, t, size) & 0xFFFF_FFFF) as usize;
        // PTX ISA cp.async.bulk: 16-byte aligned addresses, a multiple of 16 bytes; a copy of
        // nothing is refused as the mistake it is (a predicate that should have held).
        if size == 0 || !size.is_multiple_of(16) {
            return Err(bad(inst, "bulk copy size must be a positive multiple of 16"));
        }
        check_aligned(inst, g, 16)?;
        check_aligned(inst, u64::from(off), 16)?;
        let src = self.read_shared(sc, off, size, inst, t)?.to_vec();
        if !reduce_bf16 {
            return self.global_write(device, c, t, g, &src, inst).map(|()| Control::Next);
        }
        let old = self.global_read(device, c, t, g, size, inst)?;
        let mut out = Vec::with_capacity(size);
        for (o, s) in old.chunks_exact(2).zip(src.chunks_exact(2)) {
            let a = f32::from_bits(u32::from(u16::from_le_bytes([o[0], o[1]])) << 16);
            let b = f32::from_bits(u32::from(u16::from_le_bytes([s[0], s[1]])) << 16);
            out.extend_from_slice(&round_bf16(a + b).to_le_bytes());
        }
        self.global_write(device, c, t, g, &out, inst)?;
        Ok(Control::Next)
    }

    /// `cp.async.bulk.shared::*.global.mbarrier::complete_tx::bytes`: `size` bytes land in
    /// the destination CTA (or, multicast, at the same offset in every CTA of the mask) and
    /// complete on the barrier at the operand's offset in that CTA. Without multicast the
    /// barrier must be in the destination's CTA (as for TMA loads without .cta_group::2).
    pub fn bulk_load(
        &mut self,
        device: &Device,
        c: usize,
        t: usize,
        bl: &BulkLoad,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let size = (self.val(c, t, bl.size) & 0xFFFF_FFFF) as usize;
        // PTX ISA cp.async.bulk: 16-byte aligned addresses, a positive multiple of 16 bytes.
        if size == 0 || !size.is_multiple_of(16) {
            return Err(bad(inst, "bulk copy size must be a positive multiple of 16"));
        }
        let g = self.addr(c, t, bl.src);
        check_aligned(inst, g, 16)?;
        let (dc, doff) = self.resolve_shared(c, self.addr(c, t, bl.dst), bl.dst_window, inst)?;
        check_aligned(inst, u64::from(doff), 16)?;
        let (bc, boff) = self.resolve_shared(c, self.addr(c, t, bl.bar), Window::Cluster, inst)?;
        let targets: Vec<usize> = match bl.multicast {
            None if bc != dc => {
                return Err(bad(
                    inst,
                    format!(
                        "the mbarrier operand names CTA rank {bc}, not the destination CTA {dc}"
                    ),
                ));
            }
            None => vec![dc],
            Some(mask) => {
                let mask = self.val(c, t, mask) as u16;
                let n = self.ctas.len();
                if u32::from(mask) >> n != 0 {
                    return Err(bad(
                        inst,
                        format!("multicast mask {mask:#x} names CTAs outside the cluster of {n}"),
                    ));
                }
                (0..n).filter(|d| mask & (1 << d) != 0).collect()
            }
        };
        let data = self.global_read(device, c, t, g, size, inst)?.to_vec();
        for d in targets {
            let id = self.mbar_id(d, boff, inst)?;
            self.write_shared(d, doff, &data, id, inst, t)?;
            self.pending.entry(id).or_default().push((d, doff, size as u32));
            self.mbar_update(d, boff, 0, -(size as i64), inst)?;
        }
        Ok(Control::Next)
    }

    /// `cp.async.bulk.prefetch.L2.global`: no effect; the operands follow the PTX ISA rules.
    pub fn prefetch_bulk(
        &self,
        c: usize,
        t: usize,
        src: Addr,
        size: Src,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let size = self.val(c, t, size) & 0xFFFF_FFFF;
        if !size.is_multiple_of(16) {
            return Err(bad(inst, "bulk prefetch size must be a multiple of 16"));
        }
        check_aligned(inst, self.addr(c, t, src), 16)
    }
}
