//! Per-thread execution of everything that is not warp-collective: control flow, named and
//! cluster barriers, moves, loads, stores, atomics and arithmetic here; mbarriers, copies,
//! TMA and tcgen05 in their own files.

use super::alu;
use super::spaces::{bad, check_aligned};
use super::state::{Cluster, Control, State};
use crate::decode::Inst;
use crate::decode::op::{Addr, AtomOp, Dst, Op, Space, Src, Ty};
use crate::error::SimError;
use crate::memory::Device;

impl Cluster<'_> {
    pub fn exec_thread(
        &mut self,
        device: &mut Device,
        c: usize,
        t: usize,
        inst: &Inst,
    ) -> Result<Control, SimError> {
        match &inst.op {
            Op::Exit => return Ok(Control::Exit),
            Op::Bra { target, .. } => return Ok(Control::Jump(*target)),
            Op::BarSync { id, count } => {
                let (id, count) = self.named_barrier(c, t, *id, *count, inst)?;
                return Ok(Control::Block(State::Barrier { id, count }));
            }
            Op::BarArrive { id, count } => {
                let (id, count) = self.named_barrier(c, t, *id, Some(*count), inst)?;
                if count == 0 {
                    return Err(bad(inst, "bar.arrive needs a thread count"));
                }
                let a = &mut self.ctas[c].arrivals[id as usize];
                *a = a.saturating_add(1);
            }
            Op::ClusterWait => return Ok(Control::Block(State::ClusterBarrier)),
            // The cluster barrier completes when every live thread waits (a legal schedule).
            Op::ClusterArrive | Op::Fence(_) | Op::Nop(_) => {}
            Op::Mov { .. }
            | Op::MovPack { .. }
            | Op::MovUnpack { .. }
            | Op::Cvta { .. }
            | Op::Alu { .. }
            | Op::Setp { .. }
            | Op::Selp { .. }
            | Op::Cvt { .. } => {
                self.register_lanes(c, &[t], inst)?;
            }
            Op::Mapa { d, a, rank } => {
                let addr = self.val(c, t, *a);
                let rank = self.val(c, t, *rank);
                if rank >= self.ctas.len() as u64 {
                    return Err(bad(
                        inst,
                        format!("mapa to rank {rank} in a cluster of {}", self.ctas.len()),
                    ));
                }
                if addr >> 24 != 0 {
                    return Err(bad(
                        inst,
                        format!("mapa of {addr:#x}, which is not a shared::cta address"),
                    ));
                }
                self.set(c, t, *d, ((rank + 1) << 24) | addr);
            }
            Op::Ld { space, ty, d, addr } => {
                self.load(device, c, t, *space, *ty, d, *addr, inst)?
            }
            Op::St { space, ty, addr, v } => {
                self.store(device, c, t, *space, *ty, *addr, v, inst)?
            }
            Op::Atom { space, op, d, addr, a } => {
                self.atomic(device, c, t, *space, *op, *d, *addr, *a, inst)?
            }
            Op::MbarInit { addr, count } => return self.mbar_init(c, t, *addr, *count, inst),
            Op::MbarArrive { window, addr, count, tx } => {
                return self.mbar_arrive(c, t, *window, *addr, *count, *tx, inst);
            }
            Op::MbarExpectTx { window, addr, tx } => {
                return self.mbar_expect_tx(c, t, *window, *addr, *tx, inst);
            }
            Op::MbarWait { test, d, addr, parity } => {
                return self.mbar_wait(c, t, *test, *d, *addr, *parity, inst);
            }
            Op::CpAsync { size, dst, src, src_size } => {
                return self.cp_async(device, c, t, *size, *dst, *src, *src_size, inst);
            }
            Op::CpAsyncMbarArrive { addr } => return self.cp_async_mbar_arrive(c, t, *addr, inst),
            Op::CpAsyncCommit => self.cp_async_commit(c, t),
            Op::CpAsyncWait { n, all } => self.cp_async_wait(c, t, *n, *all),
            Op::TmaLoad(ld) => return self.tma_load(device, c, t, ld, inst),
            Op::TmaStore { map, coords, src } => {
                return self.tma_store(device, c, t, *map, coords, *src, inst);
            }
            Op::BulkLoad(bl) => return self.bulk_load(device, c, t, bl, inst),
            Op::PrefetchBulk { src, size } => self.prefetch_bulk(c, t, *src, *size, inst)?,
            Op::PrefetchTensor { map, coords } => self.prefetch_tensor(c, t, *map, coords, inst)?,
            Op::PrefetchTensorMap { addr } => self.prefetch_tensor_map(c, t, *addr, inst)?,
            Op::BulkStore { dst, src, size } => {
                return self.bulk_to_global(device, c, t, *dst, *src, *size, false, inst);
            }
            Op::BulkReduceAddBf16 { dst, src, size } => {
                return self.bulk_to_global(device, c, t, *dst, *src, *size, true, inst);
            }
            Op::TcCommit { cta_group, bar, mask } => {
                self.tc_commit(c, t, *cta_group, *bar, *mask, inst)?
            }
            Op::TcCp { cta_group, taddr, desc } => {
                self.tc_cp(c, t, *cta_group, *taddr, *desc, inst)?
            }
            Op::Mma(m) => self.mma(c, t, m, inst)?,
            Op::Elect { .. }
            | Op::Shfl { .. }
            | Op::Vote { .. }
            | Op::Redux { .. }
            | Op::BarWarpSync { .. }
            | Op::TcAlloc { .. }
            | Op::TcDealloc { .. }
            | Op::TcRelinquish { .. }
            | Op::TcLd { .. }
            | Op::TcSt { .. }
            | Op::LdMatrix { .. }
            | Op::StMatrix { .. }
            | Op::WgFence
            | Op::WgCommit
            | Op::WgWait { .. }
            | Op::Wgmma(_)
            | Op::SetMaxNReg { .. } => {
                return Err(bad(inst, "warp-collective instruction run per thread"));
            }
        }
        Ok(Control::Next)
    }

    /// Instructions that only read and write registers, for the lanes of `group` whose guard
    /// holds, with the dispatch on the operation outside the lane loop (the hot path of the
    /// SIMT code); false when `inst` is not one of them. The caller advances the pcs.
    pub fn register_lanes(
        &mut self,
        c: usize,
        group: &[usize],
        inst: &Inst,
    ) -> Result<bool, SimError> {
        macro_rules! lanes {
            (|$t:ident| $body:expr) => {
                for &$t in group {
                    if self.guard_ok(c, $t, inst) {
                        $body;
                    }
                }
            };
        }
        match &inst.op {
            Op::Alu { alu, d, a } => lanes!(|t| {
                // Not `a.map(…)`: array map optimizes poorly on this hot path.
                let v = [
                    self.val(c, t, a[0]),
                    self.val(c, t, a[1]),
                    self.val(c, t, a[2]),
                    self.val(c, t, a[3]),
                ];
                let r = alu::eval(*alu, v).map_err(|m| bad(inst, m))?;
                self.set(c, t, *d, r)
            }),
            Op::Setp { cmp, ty, d, a, b } => lanes!(|t| {
                let r = alu::compare(*cmp, *ty, self.val(c, t, *a), self.val(c, t, *b));
                self.set(c, t, *d, u64::from(r))
            }),
            Op::Selp { ty, d, a, b, p } => lanes!(|t| {
                let v =
                    if self.val(c, t, *p) != 0 { self.val(c, t, *a) } else { self.val(c, t, *b) };
                self.set(c, t, *d, ty.mask(v))
            }),
            Op::Mov { ty, d, a } => lanes!(|t| self.set(c, t, *d, ty.mask(self.val(c, t, *a)))),
            Op::MovPack { d, parts, bits } => lanes!(|t| {
                let m = if *bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
                let v = parts
                    .iter()
                    .enumerate()
                    .fold(0u64, |acc, (i, &p)| acc | (self.val(c, t, p) & m) << (i as u32 * bits));
                self.set(c, t, *d, v)
            }),
            Op::MovUnpack { a, parts, bits } => lanes!(|t| {
                let v = self.val(c, t, *a);
                let m = if *bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
                for (i, &p) in parts.iter().enumerate() {
                    self.set(c, t, p, (v >> (i as u32 * bits)) & m);
                }
            }),
            Op::Cvta { d, a } => lanes!(|t| self.set(c, t, *d, self.val(c, t, *a))),
            Op::Cvt { cvt, d, a, b } => lanes!(|t| {
                let b = b.map_or(0, |b| self.val(c, t, b));
                self.set(c, t, *d, alu::convert(*cvt, self.val(c, t, *a), b))
            }),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Named barrier id (0..16) and thread count (a multiple of 32; 0: all threads).
    fn named_barrier(
        &self,
        c: usize,
        t: usize,
        id: Src,
        count: Option<Src>,
        inst: &Inst,
    ) -> Result<(u32, u32), SimError> {
        let id = self.val(c, t, id) as u32;
        let count = count.map_or(0, |s| self.val(c, t, s) as u32);
        if id >= 16 || !count.is_multiple_of(32) {
            return Err(bad(inst, format!("barrier {id} with thread count {count}")));
        }
        Ok((id, count))
    }

    /// Reads `len` bytes of `space` at `addr` into `buf`.
    #[allow(clippy::too_many_arguments)]
    fn read_space(
        &self,
        device: &Device,
        c: usize,
        t: usize,
        space: Space,
        addr: u64,
        buf: &mut [u8],
        inst: &Inst,
    ) -> Result<(), SimError> {
        check_aligned(inst, addr, buf.len())?;
        let len = buf.len();
        match space {
            Space::Param => buf.copy_from_slice(self.param_read(addr, len, inst)?),
            Space::Shared(w) => {
                let (sc, off) = self.resolve_shared(c, addr, w, inst)?;
                buf.copy_from_slice(self.read_shared(sc, off, len, inst, t)?);
            }
            Space::Global => buf.copy_from_slice(self.global_read(device, c, t, addr, len, inst)?),
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn load(
        &mut self,
        device: &Device,
        c: usize,
        t: usize,
        space: Space,
        ty: Ty,
        d: &[Dst],
        addr: Addr,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let w = ty.bytes();
        let mut buf = [0u8; 32];
        let bytes = &mut buf[..w * d.len()];
        self.read_space(device, c, t, space, self.addr(c, t, addr), bytes, inst)?;
        for (i, &dst) in d.iter().enumerate() {
            let mut word = [0u8; 8];
            word[..w].copy_from_slice(&buf[i * w..(i + 1) * w]);
            self.set(c, t, dst, u64::from_le_bytes(word));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        device: &mut Device,
        c: usize,
        t: usize,
        space: Space,
        ty: Ty,
        addr: Addr,
        v: &[Src],
        inst: &Inst,
    ) -> Result<(), SimError> {
        let w = ty.bytes();
        let mut buf = [0u8; 32];
        for (i, &s) in v.iter().enumerate() {
            buf[i * w..(i + 1) * w].copy_from_slice(&self.val(c, t, s).to_le_bytes()[..w]);
        }
        let data = &buf[..w * v.len()];
        let addr = self.addr(c, t, addr);
        check_aligned(inst, addr, data.len())?;
        match space {
            Space::Shared(win) => {
                let (sc, off) = self.resolve_shared(c, addr, win, inst)?;
                self.write_shared(sc, off, data, 0, inst, t)
            }
            Space::Global => self.global_write(device, c, t, addr, data, inst),
            Space::Param => Err(bad(inst, "store to the parameter space")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        device: &mut Device,
        c: usize,
        t: usize,
        space: Space,
        op: AtomOp,
        d: Option<Dst>,
        addr: Addr,
        a: Src,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let addr = self.addr(c, t, addr);
        let x = self.val(c, t, a) as u32;
        let mut old = [0u8; 4];
        self.read_space(device, c, t, space, addr, &mut old, inst)?;
        let old = u32::from_le_bytes(old);
        let new = match op {
            AtomOp::Add => old.wrapping_add(x),
            AtomOp::And => old & x,
            AtomOp::Or => old | x,
            AtomOp::Xor => old ^ x,
            AtomOp::Min { signed: true } => (old as i32).min(x as i32) as u32,
            AtomOp::Max { signed: true } => (old as i32).max(x as i32) as u32,
            AtomOp::Min { signed: false } => old.min(x),
            AtomOp::Max { signed: false } => old.max(x),
            AtomOp::Exch => x,
        };
        match space {
            Space::Shared(w) => {
                let (sc, off) = self.resolve_shared(c, addr, w, inst)?;
                self.write_shared(sc, off, &new.to_le_bytes(), 0, inst, t)?;
            }
            _ => self.global_write(device, c, t, addr, &new.to_le_bytes(), inst)?,
        }
        if let Some(d) = d {
            self.set(c, t, d, u64::from(old));
        }
        Ok(())
    }
}
