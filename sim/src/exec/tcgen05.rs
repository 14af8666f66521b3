//! tcgen05 data movement and completion: TMEM allocation, `ld`/`st` (32x32b), the
//! `cp.32x128b.warpx4` scale-factor copy and `commit`. Everything completes when issued, so
//! a commit arrives at once.

use super::descriptors::{self, Layout};
use super::mma::{lane0_column, pair};
use super::spaces::{bad, tmem_fault};
use super::state::Cluster;
use crate::decode::Inst;
use crate::decode::op::{Addr, CtaGroup, Dst, Src, Window};
use crate::error::SimError;

/// The TMEM lane thread `t` of `warp` reaches with a 32x32b access at `taddr`: a warp may
/// only touch its lane quarter, 32·(warp % 4) .. +32 (PTX ISA tcgen05 access restrictions).
fn tmem_lane(taddr: u32, warp: usize, t: usize, inst: &Inst) -> Result<u32, SimError> {
    let lane0 = taddr >> 16;
    let quarter = 32 * (warp as u32 % 4);
    if lane0 != quarter {
        return Err(bad(
            inst,
            format!("warp {warp} may access TMEM lanes {quarter}..{}, not {lane0}", quarter + 32),
        ));
    }
    Ok(lane0 + (t as u32 % 32))
}

impl Cluster<'_> {
    /// `tcgen05.alloc` by the (converged) lanes `group`: the start column goes to shared memory.
    pub fn tc_alloc(
        &mut self,
        c: usize,
        group: &[usize],
        dst: Addr,
        ncols: Src,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let first = group[0];
        if self.ctas[c].relinquished {
            return Err(bad(inst, "tcgen05.alloc after tcgen05.relinquish_alloc_permit"));
        }
        let slot = self.addr(c, first, dst);
        let n = self.val(c, first, ncols) as u32;
        let (sc, off) = self.resolve_shared(c, slot, Window::Cta, inst)?;
        let start = self.ctas[c].tmem.alloc(n).map_err(tmem_fault(inst))?;
        self.write_shared(sc, off, &start.to_le_bytes(), 0, inst, first)
    }

    pub fn tc_dealloc(
        &mut self,
        c: usize,
        group: &[usize],
        taddr: Src,
        ncols: Src,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let first = group[0];
        let col = lane0_column(self.val(c, first, taddr), "deallocated", inst)?;
        let n = self.val(c, first, ncols) as u32;
        self.ctas[c].tmem.dealloc(col, n).map_err(tmem_fault(inst))
    }

    /// `tcgen05.ld.32x32b.xN`: lane i of warp w reads TMEM lane (taddr.lane + i), N
    /// consecutive columns.
    pub fn tc_ld(
        &mut self,
        c: usize,
        warp: usize,
        group: &[usize],
        d: &[Dst],
        taddr: Addr,
        inst: &Inst,
    ) -> Result<(), SimError> {
        for &t in group {
            let a = self.addr(c, t, taddr) as u32;
            let lane = tmem_lane(a, warp, t, inst)?;
            let col = a & 0xFFFF;
            for (i, &dst) in d.iter().enumerate() {
                let v = self.ctas[c].tmem.read(lane, col + i as u32).map_err(tmem_fault(inst))?;
                self.set(c, t, dst, u64::from(v));
            }
        }
        Ok(())
    }

    /// `tcgen05.st.32x32b.xN`: the mirror of ld.
    pub fn tc_st(
        &mut self,
        c: usize,
        warp: usize,
        group: &[usize],
        taddr: Addr,
        v: &[Src],
        inst: &Inst,
    ) -> Result<(), SimError> {
        for &t in group {
            let a = self.addr(c, t, taddr) as u32;
            let lane = tmem_lane(a, warp, t, inst)?;
            let col = a & 0xFFFF;
            for (i, &s) in v.iter().enumerate() {
                let x = self.val(c, t, s) as u32;
                self.ctas[c].tmem.write(lane, col + i as u32, x).map_err(tmem_fault(inst))?;
            }
        }
        Ok(())
    }

    /// `tcgen05.cp.32x128b.warpx4`: 32 rows of 16 bytes, broadcast to the four lane
    /// quarters, in each CTA of the group from its own shared memory.
    pub fn tc_cp(
        &mut self,
        c: usize,
        t: usize,
        group: CtaGroup,
        taddr: Addr,
        desc: Src,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let pair = pair(self, c, group, inst)?;
        let col = lane0_column(self.addr(c, t, taddr), "destination", inst)?;
        let desc =
            descriptors::shared_memory(self.val(c, t, desc), Layout::Interleave, "source", inst)?;
        for p in pair {
            for r in 0..32u32 {
                let a = desc.start + (r / 8) * desc.sbo + (r % 8) * 16;
                let mut bytes = [0u8; 16];
                bytes.copy_from_slice(self.read_shared(p, a, 16, inst, t)?);
                for q in 0..4u32 {
                    for (w, word) in bytes.chunks_exact(4).enumerate() {
                        let word = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                        self.ctas[p]
                            .tmem
                            .write(32 * q + r, col + w as u32, word)
                            .map_err(tmem_fault(inst))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `tcgen05.commit`: arrives once on the named barrier, or, with multicast, on the
    /// barrier at the same offset in every CTA of the mask.
    pub fn tc_commit(
        &mut self,
        c: usize,
        t: usize,
        group: CtaGroup,
        bar: Addr,
        mask: Option<Src>,
        inst: &Inst,
    ) -> Result<(), SimError> {
        pair(self, c, group, inst)?;
        let (bc, off) = self.mbar_at(c, t, bar, Window::Cluster, inst)?;
        let Some(mask) = mask else { return self.mbar_update(bc, off, 1, 0, inst) };
        let mask = self.val(c, t, mask) as u16;
        let n = self.ctas.len();
        if u32::from(mask) >> n != 0 {
            return Err(bad(
                inst,
                format!("multicast mask {mask:#x} names CTAs outside the cluster of {n}"),
            ));
        }
        for r in (0..n).filter(|r| mask & (1 << r) != 0) {
            self.mbar_update(r, off, 1, 0, inst)?;
        }
        Ok(())
    }
}
