//! The warpgroup instructions of sm_90a: `wgmma.fence`, `commit_group`, `wait_group`,
//! `wgmma.mma_async` and `setmaxnreg` (PTX ISA "Asynchronous Warpgroup Level Matrix
//! Multiply-Accumulate Instructions", "setmaxnreg"; the register pool of the latter is in
//! `setmaxnreg.rs`).
//!
//! They are `.sync.aligned` over a warpgroup (four consecutive warps, the first a multiple
//! of 4): the lanes of each warp must arrive converged, and the instruction executes once
//! when all 128 threads are at it. A wgmma computes when issued (a legal execution) but
//! stays *in flight* until a `wgmma.wait_group` completes its group, and the simulator
//! reports, as [`SimError::WgmmaHazard`], what the PTX ISA leaves undefined:
//!
//! - an ordinary instruction accessing an accumulator or A-fragment register of an in-flight
//!   wgmma (uncommitted, or committed and not waited for);
//! - a write to shared memory a in-flight wgmma reads (A or B);
//! - a wgmma without a `wgmma.fence` before the first wgmma of the warpgroup, or whose
//!   accumulator or A registers an ordinary instruction accessed since the last fence;
//! - a wgmma using a register of an in-flight wgmma in another role (the PTX ISA orders only
//!   accumulator accesses across wgmmas of the same shape; A fragments may be shared).
//!
//! Fragment layouts (PTX ISA "Register Fragments", m64nNk16 and m64nNk32; CUTLASS
//! `ALayout_64x16`, `CLayout_64xN`): thread l of warp w of the warpgroup holds
//! - A, 16-bit types: register j (0..4), half h: row 16w + l/4 + 8·(j%2), column
//!   2·(l%4) + h + 8·(j/2);
//! - A, e4m3: register j (0..4), byte i (little-endian): row 16w + l/4 + 8·(j%2), column
//!   4·(l%4) + i + 16·(j/2) — the same bytes of the 32-byte K step as the 16-bit layout;
//! - D: register i (0..N/2): row 16w + l/4 + 8·((i/2)%2), column 8·(i/4) + 2·(l%4) + i%2.
//!
//! Shared-memory operands (K-major) are read the same way for every type: a row is the 32
//! bytes of one K step, two 16-byte chunks. The arithmetic is `wgmma_math.rs` (bf16, f16)
//! and `wgmma_fp8.rs` (e4m3).

use super::descriptors::{self, GmmaDesc};
use super::spaces::bad;
use super::state::{Cluster, State};
use super::wgmma_fp8::{Fp8Row, dot_e4m3};
use super::wgmma_math::{Row, dot};
use crate::decode::Inst;
use crate::decode::op::{Op, Src, Wgmma, WgmmaA, WgmmaIn};
use crate::error::SimError;

/// The decoded rows of A (64) and B (N) of one wgmma, by input type.
enum Operands {
    Half(Vec<Row>, Vec<Row>),
    E4m3(Vec<Fp8Row>, Vec<Fp8Row>),
}

/// What an in-flight wgmma uses a register for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Accumulator of a wgmma with this N and input type (which fixes K).
    D {
        n: u32,
        ty: WgmmaIn,
    },
    A,
}

#[derive(Clone, Copy, Debug)]
struct Mark {
    /// Id of the in-flight wgmma (0: none).
    op: u32,
    role: Role,
}

/// An issued wgmma that has not completed.
#[derive(Clone, Debug)]
struct Pending {
    id: u32,
    line: usize,
    /// The commit group, once committed.
    group: Option<u64>,
    /// Shared-memory ranges (offset, length) it reads.
    smem: Vec<(u32, u32)>,
}

/// The wgmma state of one warpgroup of a CTA.
#[derive(Clone, Debug)]
pub(super) struct Warpgroup {
    marks: Vec<Mark>,
    /// Per register: the line of the last ordinary access since the last wgmma.fence (0:
    /// none).
    dirty: Vec<usize>,
    fenced: bool,
    pending: Vec<Pending>,
    /// Committed groups not yet completed, oldest first (empty groups included).
    groups: std::collections::VecDeque<u64>,
    next_group: u64,
    next_id: u32,
    /// Registers per thread: the kernel's `.maxnreg` at launch, then each setmaxnreg's.
    pub(super) maxnreg: Option<u32>,
    /// A `setmaxnreg.inc` to this count waits for the CTA's pool (its threads wait at it).
    pub(super) waiting_inc: Option<u32>,
}

impl Warpgroup {
    pub fn new(registers: usize, maxnreg: Option<u32>) -> Self {
        Self {
            marks: vec![Mark { op: 0, role: Role::A }; registers],
            dirty: vec![0; registers],
            fenced: false,
            pending: Vec::new(),
            groups: Default::default(),
            next_group: 0,
            next_id: 1,
            maxnreg,
            waiting_inc: None,
        }
    }
}

fn hazard(inst: &Inst, block: u32, detail: String) -> SimError {
    SimError::WgmmaHazard { line: inst.line, opcode: inst.opcode.clone(), block, detail }
}

impl Cluster<'_> {
    fn reg_name(&self, r: u32) -> String {
        let names = &self.kernel.reg_names;
        names
            .iter()
            .find(|&(_, &s)| s == r as usize)
            .map_or(format!("slot {r}"), |(n, _)| n.clone())
    }

    /// An ordinary instruction of warp `warp` accessing registers some wgmma uses: an error
    /// if one is in flight, otherwise remembered until the next wgmma.fence.
    pub fn wgmma_touch(
        &mut self,
        c: usize,
        warp: usize,
        group: &[usize],
        inst: &Inst,
    ) -> Result<(), SimError> {
        if !group.iter().any(|&t| self.guard_ok(c, t, inst)) {
            return Ok(());
        }
        let block = self.ctas[c].ctaid;
        let Some(wg) = self.ctas[c].warpgroups.get(warp / 4) else { return Ok(()) };
        for &r in &inst.wg_regs {
            let mark = wg.marks[r as usize];
            if mark.op != 0 {
                let line = wg.pending.iter().find(|p| p.id == mark.op).map_or(0, |p| p.line);
                let what = if mark.role == Role::A { "A fragment" } else { "accumulator" };
                return Err(hazard(
                    inst,
                    block,
                    format!(
                        "accesses {} (the {what} of the wgmma at line {line}) before a wgmma.wait_group completed it",
                        self.reg_name(r)
                    ),
                ));
            }
        }
        let wg = &mut self.ctas[c].warpgroups[warp / 4];
        for &r in &inst.wg_regs {
            wg.dirty[r as usize] = inst.line;
        }
        Ok(())
    }

    /// A warpgroup instruction reached by the lanes `group` of `warp`: they wait until the
    /// whole warpgroup is here, and the last warp to arrive executes it for all.
    pub fn warpgroup_arrive(
        &mut self,
        c: usize,
        warp: usize,
        group: &[usize],
        inst: &Inst,
    ) -> Result<(), SimError> {
        let taking: Vec<usize> =
            group.iter().copied().filter(|&t| self.guard_ok(c, t, inst)).collect();
        if taking.is_empty() {
            for &t in group {
                self.ctas[c].threads[t].pc += 1;
            }
            return Ok(());
        }
        let wgi = warp / 4;
        let threads = 128 * wgi..128 * (wgi + 1);
        if threads.end > self.block as usize {
            return Err(bad(
                inst,
                format!("warpgroup {wgi} is incomplete: the CTA has {} threads", self.block),
            ));
        }
        let warp_lanes = 32 * warp..32 * (warp + 1);
        if taking.len() != 32 {
            let exited = warp_lanes
                .clone()
                .filter(|&t| self.ctas[c].threads[t].state == State::Exited)
                .count();
            return Err(bad(
                inst,
                format!(
                    "warp {warp} is not converged: {} of its 32 lanes arrived ({exited} exited)",
                    taking.len()
                ),
            ));
        }
        let pc = self.ctas[c].threads[taking[0]].pc;
        for &t in &taking {
            self.ctas[c].threads[t].state = State::Warpgroup { pc };
        }
        for t in threads.clone() {
            match self.ctas[c].threads[t].state {
                State::Warpgroup { pc: p } if p == pc => {}
                State::Warpgroup { pc: p } => {
                    let other = self.kernel.body.get(p).map_or(0, |i| i.line);
                    return Err(bad(
                        inst,
                        format!("warpgroup {wgi} is split: thread {t} waits at line {other}"),
                    ));
                }
                State::Exited => {
                    return Err(bad(inst, format!("thread {t} of warpgroup {wgi} has exited")));
                }
                _ => return Ok(()),
            }
        }
        self.warpgroup_exec(c, wgi, inst)?;
        if self.ctas[c].warpgroups[wgi].waiting_inc.is_some() {
            return Ok(());
        }
        for t in threads {
            let th = &mut self.ctas[c].threads[t];
            th.state = State::Running;
            th.pc += 1;
        }
        Ok(())
    }

    fn warpgroup_exec(&mut self, c: usize, wgi: usize, inst: &Inst) -> Result<(), SimError> {
        let block = self.ctas[c].ctaid;
        let wg = &mut self.ctas[c].warpgroups[wgi];
        match &inst.op {
            Op::WgFence => {
                wg.fenced = true;
                wg.dirty.fill(0);
            }
            Op::WgCommit => {
                let g = wg.next_group;
                wg.next_group += 1;
                wg.groups.push_back(g);
                for p in wg.pending.iter_mut().filter(|p| p.group.is_none()) {
                    p.group = Some(g);
                }
            }
            Op::WgWait { n } => {
                let keep = (*n as usize).min(wg.groups.len());
                let done: Vec<u64> = wg.groups.drain(..wg.groups.len() - keep).collect();
                for g in done {
                    self.complete_group(c, wgi, g);
                }
            }
            Op::SetMaxNReg { inc, n } => self.set_max_nreg(c, wgi, *inc, *n, inst)?,
            Op::Wgmma(w) => self.wgmma(c, wgi, w, inst, block)?,
            _ => return Err(bad(inst, "not a warpgroup instruction")),
        }
        Ok(())
    }

    fn complete_group(&mut self, c: usize, wgi: usize, g: u64) {
        let cta = &mut self.ctas[c];
        let wg = &mut cta.warpgroups[wgi];
        let (done, rest): (Vec<Pending>, Vec<Pending>) =
            wg.pending.drain(..).partition(|p| p.group == Some(g));
        wg.pending = rest;
        for p in done {
            for m in wg.marks.iter_mut().filter(|m| m.op == p.id) {
                m.op = 0;
            }
            for (off, len) in p.smem {
                for l in &mut cta.wg_locks[off as usize..(off + len) as usize] {
                    *l = l.saturating_sub(1);
                }
            }
        }
    }

    /// The value of `s`, which must be the same in every thread of the warpgroup.
    fn uniform(
        &self,
        c: usize,
        wgi: usize,
        s: Src,
        what: &str,
        inst: &Inst,
    ) -> Result<u64, SimError> {
        let v = self.val(c, 128 * wgi, s);
        match (128 * wgi..128 * (wgi + 1)).find(|&t| self.val(c, t, s) != v) {
            Some(t) => Err(bad(inst, format!("{what} differs across the warpgroup (thread {t})"))),
            None => Ok(v),
        }
    }

    /// Rows `0..rows` of a K-major operand in shared memory: the 32 bytes of one K step
    /// each (16 bf16/f16 elements or 32 e4m3 elements, little-endian, K in order), read as
    /// two 16-byte chunks.
    fn operand_rows(
        &self,
        c: usize,
        d: &GmmaDesc,
        rows: u32,
        smem: &mut Vec<(u32, u32)>,
        inst: &Inst,
        t: usize,
    ) -> Result<Vec<[u8; 32]>, SimError> {
        let mut out = Vec::with_capacity(rows as usize);
        for r in 0..rows {
            let mut row = [0u8; 32];
            for q in 0..2 {
                let off = d.chunk(r, q);
                let bytes = self.read_shared(c, off, 16, inst, t)?;
                row[16 * q as usize..16 * (q as usize + 1)].copy_from_slice(&bytes[..16]);
                smem.push((off, 16));
            }
            out.push(row);
        }
        Ok(out)
    }

    fn wgmma(
        &mut self,
        c: usize,
        wgi: usize,
        w: &Wgmma,
        inst: &Inst,
        block: u32,
    ) -> Result<(), SimError> {
        let t0 = 128 * wgi;
        let threads = t0..t0 + 128;
        // Register rules: a fence first, nothing touched since, no other role in flight.
        {
            let wg = &self.ctas[c].warpgroups[wgi];
            if !wg.fenced {
                return Err(hazard(
                    inst,
                    block,
                    format!("no wgmma.fence before the first wgmma.mma_async of warpgroup {wgi}"),
                ));
            }
            let a_regs = match w.a {
                WgmmaA::Regs(r) => r.to_vec(),
                WgmmaA::Desc(_) => Vec::new(),
            };
            let role = Role::D { n: w.n, ty: w.ty };
            for (&r, is_d) in w.d.iter().map(|r| (r, true)).chain(a_regs.iter().map(|r| (r, false)))
            {
                let name = || self.reg_name(r);
                if wg.dirty[r as usize] != 0 {
                    return Err(hazard(
                        inst,
                        block,
                        format!(
                            "{} was accessed at line {} since the last wgmma.fence",
                            name(),
                            wg.dirty[r as usize]
                        ),
                    ));
                }
                let mark = wg.marks[r as usize];
                let same_role = if is_d { mark.role == role } else { mark.role == Role::A };
                if mark.op != 0 && !same_role {
                    let line = wg.pending.iter().find(|p| p.id == mark.op).map_or(0, |p| p.line);
                    return Err(hazard(
                        inst,
                        block,
                        format!(
                            "{} is in use by the in-flight wgmma at line {line} in another role",
                            name()
                        ),
                    ));
                }
            }
        }
        let bdesc = self.uniform(c, wgi, w.bdesc, "b-desc", inst)?;
        let scale_d = self.uniform(c, wgi, w.scale_d, "scale-d", inst)? != 0;
        let bdesc = descriptors::gmma(bdesc, "B", inst)?;
        let mut smem = Vec::new();
        let b_rows = self.operand_rows(c, &bdesc, w.n, &mut smem, inst, t0)?;
        let a_rows: Vec<[u8; 32]> = match w.a {
            WgmmaA::Desc(s) => {
                let adesc = self.uniform(c, wgi, s, "a-desc", inst)?;
                let adesc = descriptors::gmma(adesc, "A", inst)?;
                self.operand_rows(c, &adesc, 64, &mut smem, inst, t0)?
            }
            WgmmaA::Regs(regs) => {
                // Register j holds bytes 4·(l%4) + 16·(j/2) .. +4 of its row, little-endian:
                // two 16-bit elements 2·(l%4) + 8·(j/2) (+1), or four e4m3 elements
                // 4·(l%4) + 16·(j/2) (+0..4).
                let mut rows = vec![[0u8; 32]; 64];
                for t in threads.clone() {
                    let (warp, l) = ((t - t0) / 32, t % 32);
                    for (j, &r) in regs.iter().enumerate() {
                        let v = self.ctas[c].threads[t].regs[r as usize] as u32;
                        let row = 16 * warp + l / 4 + 8 * (j % 2);
                        let byte = 4 * (l % 4) + 16 * (j / 2);
                        rows[row][byte..byte + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
                rows
            }
        };
        let outputs = match w.ty {
            WgmmaIn::E4m3 => {
                let a: Vec<Fp8Row> = a_rows.iter().map(|r| Fp8Row::new(r, w.neg_a)).collect();
                let b: Vec<Fp8Row> = b_rows.iter().map(|r| Fp8Row::new(r, w.neg_b)).collect();
                Operands::E4m3(a, b)
            }
            WgmmaIn::Bf16 | WgmmaIn::F16 => {
                let bf16 = w.ty == WgmmaIn::Bf16;
                let row = |bytes: &[u8; 32], neg: bool| {
                    let h: [u16; 16] = std::array::from_fn(|k| {
                        u16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]])
                    });
                    Row::new(&h, bf16, neg)
                };
                let a: Vec<Row> = a_rows.iter().map(|r| row(r, w.neg_a)).collect();
                let b: Vec<Row> = b_rows.iter().map(|r| row(r, w.neg_b)).collect();
                Operands::Half(a, b)
            }
        };
        for t in threads {
            let (warp, l) = ((t - t0) / 32, t % 32);
            for (i, &r) in w.d.iter().enumerate() {
                let row = 16 * warp + l / 4 + 8 * ((i / 2) % 2);
                let col = 8 * (i / 4) + 2 * (l % 4) + i % 2;
                let reg = &mut self.ctas[c].threads[t].regs[r as usize];
                let old = scale_d.then_some(f32::from_bits(*reg as u32));
                let v = match &outputs {
                    Operands::Half(a, b) => dot(&a[row], &b[col], old),
                    Operands::E4m3(a, b) => dot_e4m3(&a[row], &b[col], old),
                };
                *reg = u64::from(if v.is_nan() { 0x7FFF_FFFF } else { v.to_bits() });
            }
        }
        let cta = &mut self.ctas[c];
        for &(off, len) in &smem {
            for l in &mut cta.wg_locks[off as usize..(off + len) as usize] {
                *l = l.saturating_add(1);
            }
        }
        let wg = &mut cta.warpgroups[wgi];
        let id = wg.next_id;
        wg.next_id = wg.next_id.wrapping_add(1).max(1);
        for &r in &w.d {
            wg.marks[r as usize] = Mark { op: id, role: Role::D { n: w.n, ty: w.ty } };
        }
        if let WgmmaA::Regs(regs) = w.a {
            for r in regs {
                wg.marks[r as usize] = Mark { op: id, role: Role::A };
            }
        }
        wg.pending.push(Pending { id, line: inst.line, group: None, smem });
        self.mma_instructions += 1;
        Ok(())
    }

    /// A shared-memory write overlapping what an in-flight wgmma of CTA `cta` reads.
    pub fn wgmma_smem_conflict(
        &self,
        cta: usize,
        off: u32,
        len: usize,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let locks = &self.ctas[cta].wg_locks;
        let range = off as usize..off as usize + len;
        let Some(i) = locks.get(range.clone()).and_then(|l| l.iter().position(|&x| x != 0)) else {
            return Ok(());
        };
        let byte = range.start + i;
        let line = self.ctas[cta]
            .warpgroups
            .iter()
            .flat_map(|wg| &wg.pending)
            .find(|p| p.smem.iter().any(|&(o, l)| (o as usize..(o + l) as usize).contains(&byte)))
            .map_or(0, |p| p.line);
        Err(hazard(
            inst,
            self.ctas[cta].ctaid,
            format!(
                "writes shared byte {byte:#x}, which the wgmma at line {line} reads, before a wgmma.wait_group completed it"
            ),
        ))
    }
}
