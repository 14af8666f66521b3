//! TMA tile loads and stores (`cp.async.bulk.tensor`). A load copies the box into the
//! shared memory of each destination CTA and completes its bytes on an mbarrier; which
//! barrier follows the operand, as the hardware translates it:
//!
//! - without `.cta_group::2`, the barrier must be in the destination's CTA;
//! - with `.cta_group::2`, it may be in the destination's CTA or its peer (the CTA whose rank
//!   differs in bit 0), and it is the one the operand names;
//! - with `.multicast::cluster`, each destination CTA d of the mask is signalled at the
//!   barrier's offset in d, or, with `.cta_group::2`, in the CTA of d's pair whose rank bit 0
//!   is that of the CTA the operand names (CUTLASS names the leader by clearing bit 24 of
//!   the address; moegen's codegen uses `mapa` to the leader).
//!
//! A 16U4_ALIGN16B map's box lands padded (`TensorMap::shared_image`) while its barrier
//! counts the packed global bytes; stores of such a map are refused.

use super::spaces::bad;
use super::state::{Cluster, Control};
use super::tensor_map::{TensorMap, TmaDataType};
use crate::decode::Inst;
use crate::decode::op::{Addr, CtaGroup, Src, TmaLoad, Window};
use crate::error::SimError;
use crate::memory::Device;

impl Cluster<'_> {
    pub(super) fn tensor_map(
        &self,
        c: usize,
        t: usize,
        map: Src,
        inst: &Inst,
    ) -> Result<TensorMap, SimError> {
        let map_addr = self.val(c, t, map);
        TensorMap::decode(self.param_read(map_addr, 128, inst)?)
            .ok_or_else(|| bad(inst, "operand is not a tensor map encoded for the simulator"))
    }

    pub(super) fn coords(
        &self,
        c: usize,
        t: usize,
        map: &TensorMap,
        coords: &[Src],
        inst: &Inst,
    ) -> Result<Vec<i64>, SimError> {
        let coords: Vec<i64> =
            coords.iter().map(|&s| i64::from(self.val(c, t, s) as u32 as i32)).collect();
        if coords.len() != map.dims.len() {
            return Err(bad(
                inst,
                format!("{} coordinates for a rank-{} map", coords.len(), map.dims.len()),
            ));
        }
        // Observed on an H200: an inner coordinate that is not a multiple of 16 bytes faults
        // (illegal instruction).
        if (coords[0] * map.dtype.bits() as i64 / 8).rem_euclid(16) != 0 {
            return Err(bad(
                inst,
                format!(
                    "TMA box at inner coordinate {} is not 16-byte aligned (illegal instruction on hardware)",
                    coords[0]
                ),
            ));
        }
        Ok(coords)
    }

    /// The CTAs a load writes and the barrier (CTA) each one's bytes complete on.
    fn tma_targets(
        &self,
        c: usize,
        t: usize,
        ld: &TmaLoad,
        (dc, bc): (usize, usize),
        inst: &Inst,
    ) -> Result<Vec<(usize, usize)>, SimError> {
        let n = self.ctas.len();
        let peer_ok = ld.cta_group == Some(CtaGroup::Two) && bc == dc ^ 1;
        if bc != dc && !peer_ok {
            return Err(bad(
                inst,
                format!(
                    "the mbarrier operand names CTA rank {bc}, which is neither the destination CTA {dc}{}",
                    if ld.cta_group == Some(CtaGroup::Two) {
                        " nor its peer"
                    } else {
                        " (only .cta_group::2 may signal the peer CTA)"
                    }
                ),
            ));
        }
        let Some(mask) = ld.multicast else { return Ok(vec![(dc, bc)]) };
        let mask = self.val(c, t, mask) as u16;
        if u32::from(mask) >> n != 0 {
            return Err(bad(
                inst,
                format!("multicast mask {mask:#x} names CTAs outside the cluster of {n}"),
            ));
        }
        let mut out = Vec::new();
        for d in (0..n).filter(|d| mask & (1 << d) != 0) {
            let b = if ld.cta_group == Some(CtaGroup::Two) { (d & !1) | (bc & 1) } else { d };
            if b >= n {
                return Err(bad(inst, format!("CTA {d} has no peer CTA in the cluster")));
            }
            out.push((d, b));
        }
        Ok(out)
    }

    pub fn tma_load(
        &mut self,
        device: &Device,
        c: usize,
        t: usize,
        ld: &TmaLoad,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let map = self.tensor_map(c, t, ld.map, inst)?;
        let coords = self.coords(c, t, &map, &ld.coords, inst)?;
        let (dc, doff) = self.resolve_shared(c, self.addr(c, t, ld.dst), ld.dst_window, inst)?;
        // PTX ISA: the shared destination of a tensor copy is 128-byte aligned.
        if doff % 128 != 0 {
            return Err(bad(inst, format!("shared destination {doff:#x} is not 128-byte aligned")));
        }
        let (bc, boff) = self.resolve_shared(c, self.addr(c, t, ld.bar), Window::Cluster, inst)?;
        let targets = self.tma_targets(c, t, ld, (dc, bc), inst)?;
        if map.shared_box_bytes() > self.ctas[dc].shared.len() {
            return Err(bad(
                inst,
                format!("a box of {} B exceeds shared memory", map.shared_box_bytes()),
            ));
        }
        let addrs = map.box_addresses(&coords);
        let mut data = vec![0u8; addrs.len()];
        // Runs of consecutive global addresses are read at once.
        let mut i = 0;
        while i < addrs.len() {
            let Some(start) = addrs[i] else {
                i += 1;
                continue;
            };
            let mut j = i + 1;
            while j < addrs.len() && addrs[j] == Some(start + (j - i) as u64) {
                j += 1;
            }
            data[i..j].copy_from_slice(self.global_read(device, c, t, start, j - i, inst)?);
            i = j;
        }
        // The barrier counts the bytes read from global memory; for 16U4_ALIGN16B that is
        // the packed count, not the padded image (docs/simulator.md: to confirm on hardware).
        let tx = data.len() as i64;
        let data = map.shared_image(data);
        for (d, b) in targets {
            let id = self.mbar_id(b, boff, inst)?;
            // The swizzle permutes 16-byte chunks, so each chunk lands whole.
            for (k, chunk) in data.chunks(16).enumerate() {
                let s = map.swizzle_addr(u64::from(doff) + 16 * k as u64) as u32;
                self.write_shared(d, s, chunk, id, inst, t)?;
            }
            // The swizzle stays inside 128-byte rows: the written bytes lie in this range.
            let span = data.len().next_multiple_of(128) as u32;
            self.pending.entry(id).or_default().push((d, doff, span));
            self.mbar_update(b, boff, 0, -tx, inst)?;
        }
        Ok(Control::Next)
    }

    /// Store: shared box → global; elements outside the tensor are not written.
    #[allow(clippy::too_many_arguments)]
    pub fn tma_store(
        &mut self,
        device: &mut Device,
        c: usize,
        t: usize,
        map: Src,
        coords: &[Src],
        src: crate::decode::op::Addr,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        let map = self.tensor_map(c, t, map, inst)?;
        if map.dtype == TmaDataType::U4Padded {
            return Err(bad(
                inst,
                "TMA store with a 16U4_ALIGN16B (U4Padded) tensor map is not modelled (only loads of it are)",
            ));
        }
        let coords = self.coords(c, t, &map, coords, inst)?;
        // Observed on an H200: a tile store at a negative coordinate faults.
        if coords.iter().any(|&c| c < 0) {
            return Err(bad(
                inst,
                format!(
                    "TMA store at negative coordinates {coords:?} (illegal instruction on hardware)"
                ),
            ));
        }
        let (sc, off) = self.resolve_shared(c, self.addr(c, t, src), Window::Cta, inst)?;
        if off % 128 != 0 {
            return Err(bad(inst, format!("shared source {off:#x} is not 128-byte aligned")));
        }
        if map.box_bytes() > self.ctas[sc].shared.len() {
            return Err(bad(inst, format!("a box of {} B exceeds shared memory", map.box_bytes())));
        }
        let base = u64::from(off);
        for (i, g) in map.box_addresses(&coords).into_iter().enumerate() {
            if let Some(g) = g {
                let s = map.swizzle_addr(base + i as u64) as u32;
                let b = self.read_shared(sc, s, 1, inst, t)?[0];
                self.global_write(device, c, t, g, &[b], inst)?;
            }
        }
        Ok(Control::Next)
    }

    /// `cp.async.bulk.prefetch.tensor`: no effect, but the map and coordinates must be
    /// those a load could use (a box may lie partly or wholly outside the tensor).
    pub fn prefetch_tensor(
        &self,
        c: usize,
        t: usize,
        map: Src,
        coords: &[Src],
        inst: &Inst,
    ) -> Result<(), SimError> {
        let map = self.tensor_map(c, t, map, inst)?;
        self.coords(c, t, &map, coords, inst).map(|_| ())
    }

    /// `prefetch.tensormap`: the address must hold a tensor map.
    pub fn prefetch_tensor_map(
        &self,
        c: usize,
        t: usize,
        addr: Addr,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let a = self.addr(c, t, addr);
        TensorMap::decode(self.param_read(a, 128, inst)?)
            .map(|_| ())
            .ok_or_else(|| bad(inst, "prefetch.tensormap of an address that holds no tensor map"))
    }
}
