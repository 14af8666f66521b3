//! Executing one launch. Clusters run one after another (a legal schedule: moegen's kernels
//! never wait on another cluster); the CTAs of a cluster interleave, and inside a CTA the
//! warps interleave, each running until it blocks or its quantum ends; within a warp the
//! threads at the lowest pc execute together, so divergent paths reconverge. A thread that
//! fails an mbarrier wait sleeps until the barrier's phase changes; when every live thread
//! of the cluster sleeps, the launch fails with a deadlock report.
//!
//! Asynchronous copies (cp.async, TMA, multicast) land at once but are *unpublished* until
//! the mbarrier phase they complete on has completed: reading such bytes from shared memory
//! (ld.shared, tcgen05.cp, tcgen05.mma, bulk stores) is reported as a race. That is how a
//! dropped wait shows up even when the bytes happen to be right.

mod alu;
mod exact;
mod mbarrier;
mod mma;
pub mod tensor_map;
mod tmem;

use std::collections::HashMap;

use self::alu::{arith, compare, convert, mask, round_bf16, width};
use self::mbarrier::Mbar;
use self::tensor_map::TensorMap;
use self::tmem::Tmem;
use crate::error::SimError;
use crate::memory::Device;
use crate::parse::{Inst, Kernel, Module, Opnd};

/// A kernel argument.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// `.u32`.
    U32(u32),
    /// `.u64` (pointers).
    U64(u64),
    /// `.f32`.
    F32(f32),
    /// Raw bytes (a by-value struct such as a tensor map).
    Bytes(Vec<u8>),
}

/// Launch configuration.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    /// Grid size (x only), in CTAs.
    pub grid: u32,
    /// Threads per CTA (x only).
    pub block: u32,
    /// Dynamic shared memory bytes.
    pub dynamic_smem: usize,
    /// CTAs per cluster (x only); the grid must be a multiple.
    pub cluster: u32,
    /// Thread-instructions after which the launch is stopped as a runaway.
    pub step_limit: u64,
    /// Schedule fuzzing: with a seed, each round visits the warps in a shuffled order and
    /// gives each a random quantum (1..=96); the run is still deterministic for the seed.
    pub seed: Option<u64>,
}

impl LaunchConfig {
    /// A launch without clusters and with the default step limit (10^10).
    pub fn new(grid: u32, block: u32, dynamic_smem: usize) -> Self {
        Self { grid, block, dynamic_smem, cluster: 1, step_limit: 10_000_000_000, seed: None }
    }
}

/// Counters of one launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Thread-instructions executed.
    pub thread_instructions: u64,
    /// Block-scaled MMA instructions executed.
    pub mma_instructions: u64,
}

const QUANTUM: usize = 64;
/// Tag of bytes written by a cp.async whose completion is not yet tied to a barrier.
const CP_ASYNC_TAG: u32 = u32::MAX;
/// Tag bit marking an address in the parameter space.
const PARAM_SPACE: u64 = 1 << 62;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Running,
    /// Waiting at named barrier `id` for `count` threads (0: every live thread of the CTA).
    Barrier {
        id: u32,
        count: u32,
    },
    ClusterBarrier,
    WaitMbar {
        cta: usize,
        off: u32,
        parity: u64,
    },
    Exited,
}

#[derive(Clone, Debug)]
struct Thread {
    regs: Vec<u64>,
    pc: usize,
    state: State,
    cp_async: Vec<(usize, u32, u32)>,
}

struct Cta {
    ctaid: u32,
    /// Threads that passed `bar.arrive` on each named barrier in its current phase.
    arrivals: HashMap<u32, u32>,
    shared: Vec<u8>,
    tags: Vec<u32>,
    threads: Vec<Thread>,
    tmem: Tmem,
}

struct Cluster<'a> {
    kernel: &'a Kernel,
    params: &'a [u8],
    param_offsets: &'a [usize],
    ctas: Vec<Cta>,
    mbars: HashMap<(usize, u32), Mbar>,
    next_id: u32,
    pending: HashMap<u32, Vec<(usize, u32, u32)>>,
    block: u32,
    grid: u32,
    cluster_size: u32,
    cluster_id: u32,
    step_limit: u64,
    stats: LaunchStats,
    rng: Option<u64>,
}

enum Control {
    Next,
    Jump(usize),
    Block(State),
    Exit,
}

/// An instruction's operands; a missing one reads as `_`, which is no value, so malformed PTX
/// becomes an error rather than a panic.
#[derive(Clone, Copy)]
struct Ops<'a>(&'a [Opnd]);

static MISSING: Opnd = Opnd::Sink;

impl<'a> std::ops::Index<usize> for Ops<'a> {
    type Output = Opnd;
    fn index(&self, i: usize) -> &Opnd {
        self.0.get(i).unwrap_or(&MISSING)
    }
}

impl<'a> Ops<'a> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> Option<&'a Opnd> {
        self.0.get(i)
    }
    fn first(&self) -> Option<&'a Opnd> {
        self.0.first()
    }
    fn last(&self) -> Option<&'a Opnd> {
        self.0.last()
    }
    fn iter(&self) -> std::slice::Iter<'a, Opnd> {
        self.0.iter()
    }
}

fn bad(inst: &Inst, msg: impl Into<String>) -> SimError {
    SimError::BadInstruction { line: inst.line, opcode: inst.opcode.clone(), message: msg.into() }
}

fn unsupported(inst: &Inst) -> SimError {
    SimError::Unsupported { line: inst.line, opcode: inst.opcode.clone() }
}

fn layout_params(k: &Kernel, args: &[Arg]) -> Result<(Vec<u8>, Vec<usize>), SimError> {
    if args.len() != k.params.len() {
        return Err(SimError::Launch(format!(
            "{} takes {} arguments, {} given",
            k.name,
            k.params.len(),
            args.len()
        )));
    }
    let mut buf = Vec::new();
    let mut offs = Vec::new();
    for (p, a) in k.params.iter().zip(args) {
        let bytes = match a {
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::U64(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
            Arg::Bytes(b) => b.clone(),
        };
        if bytes.len() != p.size {
            return Err(SimError::Launch(format!(
                "argument {} has {} bytes, the kernel declares {}",
                p.name,
                bytes.len(),
                p.size
            )));
        }
        let off = buf.len().next_multiple_of(p.align.max(1));
        buf.resize(off, 0);
        offs.push(off);
        buf.extend(bytes);
    }
    Ok((buf, offs))
}

/// Runs `name` from `module` on `device`.
pub fn launch(
    device: &mut Device,
    module: &Module,
    name: &str,
    cfg: &LaunchConfig,
    args: &[Arg],
) -> Result<LaunchStats, SimError> {
    let kernel = module
        .kernels
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| SimError::Launch(format!("no kernel {name}")))?;
    if cfg.block == 0
        || cfg.block > 1024
        || cfg.grid == 0
        || cfg.cluster == 0
        || !cfg.grid.is_multiple_of(cfg.cluster)
    {
        return Err(SimError::Launch(format!(
            "grid {} × block {} with clusters of {} is not a valid launch",
            cfg.grid, cfg.block, cfg.cluster
        )));
    }
    if let Some(n) = kernel.reqntid
        && n != cfg.block
    {
        return Err(SimError::Launch(format!(
            "{name} requires {n} threads per CTA, launched with {}",
            cfg.block
        )));
    }
    if kernel.reqnctapercluster.unwrap_or(1) != cfg.cluster {
        return Err(SimError::Launch(format!(
            "{name} requires clusters of {}, launched with {}",
            kernel.reqnctapercluster.unwrap_or(1),
            cfg.cluster
        )));
    }
    let (params, param_offsets) = layout_params(kernel, args)?;
    let mut stats = LaunchStats::default();
    for cluster_id in 0..cfg.grid / cfg.cluster {
        let ctas = (0..cfg.cluster)
            .map(|r| Cta {
                ctaid: cluster_id * cfg.cluster + r,
                arrivals: HashMap::new(),
                shared: vec![0; cfg.dynamic_smem],
                tags: vec![0; cfg.dynamic_smem],
                threads: (0..cfg.block)
                    .map(|_| Thread {
                        regs: vec![0; kernel.reg_count],
                        pc: 0,
                        state: State::Running,
                        cp_async: Vec::new(),
                    })
                    .collect(),
                tmem: Tmem::new(),
            })
            .collect();
        let mut cl = Cluster {
            kernel,
            params: &params,
            param_offsets: &param_offsets,
            ctas,
            mbars: HashMap::new(),
            next_id: 1,
            pending: HashMap::new(),
            block: cfg.block,
            grid: cfg.grid,
            cluster_size: cfg.cluster,
            cluster_id,
            step_limit: cfg.step_limit,
            stats,
            rng: cfg
                .seed
                .map(|s| s ^ (u64::from(cluster_id) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
        };
        run_cluster(device, &mut cl)?;
        stats = cl.stats;
    }
    Ok(stats)
}

impl Cluster<'_> {
    fn wait_satisfied(&self, s: State) -> bool {
        match s {
            State::WaitMbar { cta, off, parity } => {
                self.mbars.get(&(cta, off)).is_none_or(|m| m.parity_done(parity))
            }
            _ => false,
        }
    }

    fn publish(&mut self, id: u32) {
        if let Some(ranges) = self.pending.remove(&id) {
            for (c, off, len) in ranges {
                let tags = &mut self.ctas[c].tags[off as usize..(off + len) as usize];
                for t in tags.iter_mut().filter(|t| **t == id) {
                    *t = 0;
                }
            }
        }
    }

    /// Arrivals and tx on barrier (cta, off).
    fn mbar_update(
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
        if m.update(arrivals, tx) {
            let id = m.id;
            self.publish(id);
        }
        Ok(())
    }

    fn mbar_id(&self, cta: usize, off: u32, inst: &Inst) -> Result<u32, SimError> {
        self.mbars.get(&(cta, off)).map(|m| m.id).ok_or_else(|| {
            bad(inst, format!("mbarrier at CTA {cta} offset {off:#x} was never initialized"))
        })
    }

    /// Shared address → (CTA index, offset). Addresses below 2^24 are the executing CTA's own
    /// window; `mapa` produces (rank + 1) << 24 | offset.
    fn resolve_shared(&self, me: usize, addr: u64, inst: &Inst) -> Result<(usize, u32), SimError> {
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
        Ok((hi - 1, off))
    }

    fn check_shared(
        &self,
        cta: usize,
        off: u32,
        len: usize,
        inst: &Inst,
        tid: usize,
    ) -> Result<(), SimError> {
        let limit = self.ctas[cta].shared.len();
        if off as usize + len > limit {
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
    fn read_shared(
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

    fn write_shared(
        &mut self,
        cta: usize,
        off: u32,
        data: &[u8],
        tag: u32,
        inst: &Inst,
        tid: usize,
    ) -> Result<(), SimError> {
        self.check_shared(cta, off, data.len(), inst, tid)?;
        let r = off as usize..off as usize + data.len();
        self.ctas[cta].shared[r.clone()].copy_from_slice(data);
        self.ctas[cta].tags[r].fill(tag);
        Ok(())
    }
}

fn run_cluster(device: &mut Device, cl: &mut Cluster<'_>) -> Result<(), SimError> {
    let n = cl.block as usize;
    let warps = n.div_ceil(32);
    let mut order: Vec<(usize, usize)> =
        (0..cl.ctas.len()).flat_map(|c| (0..warps).map(move |w| (c, w))).collect();
    loop {
        let mut progress = false;
        if let Some(mut x) = cl.rng {
            // Fisher-Yates with xorshift64.
            for i in (1..order.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
            cl.rng = Some(x);
        }
        for &(c, w) in &order {
            {
                let lanes = w * 32..((w + 1) * 32).min(n);
                let quantum = match cl.rng {
                    Some(mut x) => {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        cl.rng = Some(x);
                        1 + (x % 96) as usize
                    }
                    None => QUANTUM,
                };
                for _ in 0..quantum {
                    for t in lanes.clone() {
                        let s = cl.ctas[c].threads[t].state;
                        if cl.wait_satisfied(s) {
                            cl.ctas[c].threads[t].state = State::Running;
                        }
                    }
                    let th = &cl.ctas[c].threads;
                    let Some(pc) = lanes
                        .clone()
                        .filter(|&t| th[t].state == State::Running)
                        .map(|t| th[t].pc)
                        .min()
                    else {
                        break;
                    };
                    let mut buf = [0usize; 32];
                    let mut len = 0;
                    for t in lanes.clone() {
                        if th[t].state == State::Running && th[t].pc == pc {
                            buf[len] = t;
                            len += 1;
                        }
                    }
                    let group = &buf[..len];
                    let Some(inst) = cl.kernel.body.get(pc) else {
                        for &t in group {
                            cl.ctas[c].threads[t].state = State::Exited;
                        }
                        continue;
                    };
                    exec_group(device, cl, c, w, group, inst)?;
                    // A failed wait is not progress; anything else is.
                    if group
                        .iter()
                        .any(|&t| !matches!(cl.ctas[c].threads[t].state, State::WaitMbar { .. }))
                    {
                        progress = true;
                    }
                    if cl.stats.thread_instructions > cl.step_limit {
                        return Err(SimError::StepLimit {
                            block: cl.ctas[c].ctaid,
                            limit: cl.step_limit,
                            line: inst.line,
                        });
                    }
                }
            }
        }
        if cl.ctas.iter().all(|cta| cta.threads.iter().all(|t| t.state == State::Exited)) {
            for cta in &cl.ctas {
                if let Some(&(s, n)) = cta.tmem.allocs.first() {
                    return Err(SimError::TmemLeak { block: cta.ctaid, start: s, columns: n });
                }
            }
            return Ok(());
        }
        let mut released = false;
        for cta in &mut cl.ctas {
            // Named barriers (PTX ISA bar.sync/bar.arrive): a barrier completes when the
            // threads waiting plus those that arrived reach its count (every live thread
            // when no count was given).
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
                let waiting =
                    cta.threads.iter().filter(|t| t.state == State::Barrier { id, count }).count()
                        as u32;
                let arrived = cta.arrivals.get(&id).copied().unwrap_or(0);
                let need = if count == 0 { live } else { count };
                if waiting + arrived >= need {
                    for t in
                        cta.threads.iter_mut().filter(|t| t.state == State::Barrier { id, count })
                    {
                        t.state = State::Running;
                        t.pc += 1;
                    }
                    cta.arrivals.remove(&id);
                    released = true;
                }
            }
        }
        let live: usize = cl
            .ctas
            .iter()
            .map(|c| c.threads.iter().filter(|t| t.state != State::Exited).count())
            .sum();
        let at_cluster: usize = cl
            .ctas
            .iter()
            .map(|c| c.threads.iter().filter(|t| t.state == State::ClusterBarrier).count())
            .sum();
        if at_cluster > 0 && at_cluster == live {
            for t in cl
                .ctas
                .iter_mut()
                .flat_map(|c| c.threads.iter_mut())
                .filter(|t| t.state == State::ClusterBarrier)
            {
                t.state = State::Running;
                t.pc += 1;
            }
            released = true;
        }
        let woken =
            cl.ctas.iter().flat_map(|c| c.threads.iter()).any(|t| cl.wait_satisfied(t.state));
        if !progress && !released && !woken {
            let mut detail = Vec::new();
            for cta in &cl.ctas {
                for w in 0..warps {
                    let ts: Vec<&Thread> = cta.threads[w * 32..((w + 1) * 32).min(n)]
                        .iter()
                        .filter(|t| t.state != State::Exited)
                        .collect();
                    if let Some(t) = ts.first() {
                        let line = cl.kernel.body.get(t.pc).map_or(0, |i| i.line);
                        detail.push(format!(
                            "CTA {} warp {w} at line {line}: {:?}",
                            cta.ctaid, t.state
                        ));
                    }
                }
            }
            return Err(SimError::Deadlock { block: cl.ctas[0].ctaid, detail: detail.join("; ") });
        }
    }
}

fn guard_ok(t: &Thread, inst: &Inst) -> bool {
    match inst.guard {
        None => true,
        Some((p, neg)) => (t.regs[p] != 0) != neg,
    }
}

fn exec_group(
    device: &mut Device,
    cl: &mut Cluster<'_>,
    c: usize,
    warp: usize,
    group: &[usize],
    inst: &Inst,
) -> Result<(), SimError> {
    cl.stats.thread_instructions += group.len() as u64;
    let op = inst.opcode.as_str();
    let collective = op == "elect.sync"
        || op.starts_with("shfl.sync")
        || op.starts_with("vote.sync")
        || op.starts_with("redux.sync")
        || op.starts_with("tcgen05.alloc")
        || op.starts_with("tcgen05.dealloc")
        || op.starts_with("tcgen05.relinquish")
        || op.starts_with("tcgen05.ld")
        || op.starts_with("tcgen05.st");
    if collective {
        // `.sync.aligned` warp-wide instructions need every live lane of the warp here.
        let live: Vec<usize> = (warp * 32..((warp + 1) * 32).min(cl.block as usize))
            .filter(|&t| cl.ctas[c].threads[t].state != State::Exited)
            .collect();
        if op != "elect.sync"
            && live.len() != group.len()
            && !op.starts_with("shfl")
            && !op.starts_with("vote")
            && !op.starts_with("redux")
        {
            return Err(bad(
                inst,
                format!(
                    "warp {warp} is not converged: {} of {} live lanes arrived",
                    group.len(),
                    live.len()
                ),
            ));
        }
        return exec_collective(cl, c, warp, group, inst);
    }
    for &t in group {
        let mut th = std::mem::replace(
            &mut cl.ctas[c].threads[t],
            Thread { regs: Vec::new(), pc: 0, state: State::Exited, cp_async: Vec::new() },
        );
        let ctl = if guard_ok(&th, inst) {
            exec_one(device, cl, c, t, &mut th, inst)
        } else {
            Ok(Control::Next)
        };
        let ctl = match ctl {
            Ok(x) => x,
            Err(e) => {
                cl.ctas[c].threads[t] = th;
                return Err(e);
            }
        };
        match ctl {
            Control::Next => th.pc += 1,
            Control::Jump(pc) => th.pc = pc,
            Control::Block(s) => th.state = s,
            Control::Exit => th.state = State::Exited,
        }
        cl.ctas[c].threads[t] = th;
    }
    Ok(())
}

fn exec_collective(
    cl: &mut Cluster<'_>,
    c: usize,
    warp: usize,
    group: &[usize],
    inst: &Inst,
) -> Result<(), SimError> {
    let op = inst.opcode.as_str();
    let ops = Ops(&inst.operands);
    if op == "elect.sync" {
        let leader = group.iter().copied().find(|&t| guard_ok(&cl.ctas[c].threads[t], inst));
        for &t in group {
            if let Some(Opnd::Reg(p)) = ops.get(1) {
                cl.ctas[c].threads[t].regs[*p] = u64::from(Some(t) == leader);
            }
            cl.ctas[c].threads[t].pc += 1;
        }
        return Ok(());
    }
    if op.starts_with("shfl.sync") || op.starts_with("vote.sync") || op.starts_with("redux.sync") {
        return warp_data_op(cl, c, group, inst);
    }
    let first = group[0];
    let val =
        |cl: &Cluster<'_>, t: usize, o: &Opnd| value(cl, c, t, &cl.ctas[c].threads[t], o, inst);
    if op.starts_with("tcgen05.alloc") {
        let slot = address_of(cl, c, first, &cl.ctas[c].threads[first], &ops[0], inst)?;
        let n = val(cl, first, &ops[1])? as u32;
        let start = cl.ctas[c].tmem.alloc(n).map_err(|e| bad(inst, e))?;
        let (sc, off) = cl.resolve_shared(c, slot, inst)?;
        cl.write_shared(sc, off, &start.to_le_bytes(), 0, inst, first)?;
    } else if op.starts_with("tcgen05.dealloc") {
        let taddr = val(cl, first, &ops[0])? as u32;
        let n = val(cl, first, &ops[1])? as u32;
        cl.ctas[c].tmem.dealloc(taddr & 0xFFFF, n).map_err(|e| bad(inst, e))?;
    } else if op.starts_with("tcgen05.st") {
        // tcgen05.st.sync.aligned.32x32b.xN.b32 [taddr], {regs}: the mirror of ld.
        if !op.contains(".32x32b.") {
            return Err(unsupported(inst));
        }
        let Opnd::Vector(srcs) = &ops[1] else { return Err(bad(inst, "source vector")) };
        for &t in group {
            let th = &cl.ctas[c].threads[t];
            let taddr = address_of(cl, c, t, th, &ops[0], inst)? as u32;
            let vals =
                srcs.iter().map(|o| value(cl, c, t, th, o, inst)).collect::<Result<Vec<_>, _>>()?;
            let lane = tmem_lane(taddr, warp, t, inst)?;
            for (i, v) in vals.into_iter().enumerate() {
                cl.ctas[c]
                    .tmem
                    .write(lane, (taddr & 0xFFFF) + i as u32, v as u32)
                    .map_err(|e| bad(inst, e))?;
            }
        }
    } else if op.starts_with("tcgen05.ld") {
        // tcgen05.ld.sync.aligned.32x32b.xN.b32: lane i of warp w reads TMEM lane
        // (taddr.lane + i), N consecutive columns; a warp may only touch its lane quarter.
        if !op.contains(".32x32b.") {
            return Err(unsupported(inst));
        }
        let Opnd::Vector(dsts) = &ops[0] else { return Err(bad(inst, "destination vector")) };
        for &t in group {
            let th = &cl.ctas[c].threads[t];
            let taddr = address_of(cl, c, t, th, &ops[1], inst)? as u32;
            let lane = tmem_lane(taddr, warp, t, inst)?;
            let col = taddr & 0xFFFF;
            let mut vals = Vec::with_capacity(dsts.len());
            for i in 0..dsts.len() as u32 {
                vals.push(cl.ctas[c].tmem.read(lane, col + i).map_err(|e| bad(inst, e))?);
            }
            for (d, v) in dsts.iter().zip(vals) {
                if let Opnd::Reg(r) = d {
                    cl.ctas[c].threads[t].regs[*r] = u64::from(v);
                }
            }
        }
    }
    for &t in group {
        cl.ctas[c].threads[t].pc += 1;
    }
    Ok(())
}

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

/// shfl.sync, vote.sync and redux.sync (PTX ISA §9.7.8): every lane of `group` contributes.
fn warp_data_op(
    cl: &mut Cluster<'_>,
    c: usize,
    group: &[usize],
    inst: &Inst,
) -> Result<(), SimError> {
    let op = inst.opcode.as_str();
    let ops = Ops(&inst.operands);
    let lane_of = |t: usize| (t % 32) as u32;
    // The member mask is the last operand; the group must be exactly its lanes.
    let mask = value(
        cl,
        c,
        group[0],
        &cl.ctas[c].threads[group[0]],
        ops.last().ok_or_else(|| bad(inst, "member mask"))?,
        inst,
    )? as u32;
    let present: u32 = group.iter().fold(0, |m, &t| m | (1 << lane_of(t)));
    if present != mask {
        return Err(bad(
            inst,
            format!("member mask {mask:#010x} but lanes {present:#010x} are here"),
        ));
    }
    let src_i = if op.starts_with("shfl") && ops.len() == 6 { 2 } else { 1 };
    let vals: Vec<u64> = group
        .iter()
        .map(|&t| value(cl, c, t, &cl.ctas[c].threads[t], &ops[src_i], inst))
        .collect::<Result<_, _>>()?;
    let by_lane = |l: u32| group.iter().position(|&t| lane_of(t) == l).map(|i| vals[i]);
    let mut results: Vec<(u64, Option<u64>)> = Vec::with_capacity(group.len());
    for &t in group {
        let th = &cl.ctas[c].threads[t];
        let lane = lane_of(t);
        let r = if op.starts_with("shfl.sync") {
            let b = value(cl, c, t, th, &ops[src_i + 1], inst)? as u32 & 31;
            let cc = value(cl, c, t, th, &ops[src_i + 2], inst)? as u32;
            let (cval, seg) = (cc & 31, (cc >> 8) & 31);
            let max_lane = (lane & seg) | (cval & !seg);
            let min_lane = lane & seg;
            let (j, pval) = if op.contains(".up") {
                let j = lane as i64 - i64::from(b);
                (j, j >= i64::from(max_lane))
            } else if op.contains(".down") {
                let j = i64::from(lane + b);
                (j, j <= i64::from(max_lane))
            } else if op.contains(".bfly") {
                let j = i64::from(lane ^ b);
                (j, j <= i64::from(max_lane))
            } else if op.contains(".idx") {
                let j = i64::from(min_lane | (b & !seg));
                (j, j <= i64::from(max_lane))
            } else {
                return Err(unsupported(inst));
            };
            let j = if pval { j as u32 } else { lane };
            let v = by_lane(j)
                .ok_or_else(|| bad(inst, format!("lane {lane} reads inactive lane {j}")))?;
            (v & 0xFFFF_FFFF, Some(u64::from(pval)))
        } else if op.starts_with("vote.sync") {
            let bits: u32 = group
                .iter()
                .zip(&vals)
                .fold(0, |m, (&t, &v)| if v != 0 { m | (1 << lane_of(t)) } else { m });
            let v = if op.contains(".ballot") {
                u64::from(bits)
            } else if op.contains(".all") {
                u64::from(bits == present)
            } else if op.contains(".any") {
                u64::from(bits != 0)
            } else if op.contains(".uni") {
                u64::from(bits == 0 || bits == present)
            } else {
                return Err(unsupported(inst));
            };
            (v, None)
        } else {
            let signed = op.ends_with(".s32");
            let xs = vals.iter().map(|&v| v as u32);
            let v = if op.contains(".add") {
                xs.fold(0u32, u32::wrapping_add)
            } else if op.contains(".min") && signed {
                xs.map(|x| x as i32).min().unwrap_or(0) as u32
            } else if op.contains(".max") && signed {
                xs.map(|x| x as i32).max().unwrap_or(0) as u32
            } else if op.contains(".min") {
                xs.min().unwrap_or(0)
            } else if op.contains(".max") {
                xs.max().unwrap_or(0)
            } else if op.contains(".and") {
                xs.fold(u32::MAX, |a, x| a & x)
            } else if op.contains(".or") {
                xs.fold(0, |a, x| a | x)
            } else if op.contains(".xor") {
                xs.fold(0, |a, x| a ^ x)
            } else {
                return Err(unsupported(inst));
            };
            (u64::from(v), None)
        };
        results.push(r);
    }
    for (&t, (v, p)) in group.iter().zip(results) {
        let th = &mut cl.ctas[c].threads[t];
        if let Some(r) = dst(&ops[0], inst)? {
            th.regs[r] = v;
        }
        if let (Some(p), true) = (p, ops.len() == 6)
            && let Some(r) = dst(&ops[1], inst)?
        {
            th.regs[r] = p;
        }
        th.pc += 1;
    }
    Ok(())
}

/// Reads an operand as raw bits.
fn value(
    cl: &Cluster<'_>,
    c: usize,
    tid: usize,
    t: &Thread,
    o: &Opnd,
    inst: &Inst,
) -> Result<u64, SimError> {
    Ok(match o {
        Opnd::Reg(r) => t.regs[*r],
        Opnd::NotReg(r) => u64::from(t.regs[*r] == 0),
        Opnd::Imm(v) => *v as u64,
        Opnd::F32(bits) => u64::from(*bits),
        Opnd::Name(n) => {
            special(cl, c, tid, n).ok_or_else(|| bad(inst, format!("unknown symbol {n}")))?
        }
        _ => return Err(bad(inst, format!("operand {o:?} is not a value"))),
    })
}

/// Special registers (PTX ISA §10) and symbol addresses.
fn special(cl: &Cluster<'_>, c: usize, tid: usize, name: &str) -> Option<u64> {
    let tid = tid as u64;
    Some(match name {
        "%tid.x" => tid,
        "%tid.y" | "%tid.z" | "%ctaid.y" | "%ctaid.z" | "%clusterid.y" | "%clusterid.z"
        | "%cluster_ctaid.y" | "%cluster_ctaid.z" => 0,
        "%ntid.x" => u64::from(cl.block),
        "%ctaid.x" => u64::from(cl.ctas[c].ctaid),
        "%nctaid.x" => u64::from(cl.grid),
        "%clusterid.x" => u64::from(cl.cluster_id),
        "%nclusterid.x" => u64::from(cl.grid / cl.cluster_size),
        "%cluster_ctarank" | "%cluster_ctaid.x" => c as u64,
        "%cluster_nctarank" | "%cluster_nctaid.x" => u64::from(cl.cluster_size),
        "%laneid" => tid % 32,
        "%warpid" => tid / 32,
        _ if cl.kernel.dynamic_shared.as_deref() == Some(name) => 0,
        _ if cl.kernel.params.iter().any(|p| p.name == name) => {
            let i = cl.kernel.params.iter().position(|p| p.name == name).unwrap_or(0);
            PARAM_SPACE | cl.param_offsets[i] as u64
        }
        _ => return None,
    })
}

fn dst(o: &Opnd, inst: &Inst) -> Result<Option<usize>, SimError> {
    match o {
        Opnd::Reg(r) => Ok(Some(*r)),
        Opnd::Sink => Ok(None),
        _ => Err(bad(inst, "destination must be a register")),
    }
}

/// The address of a `[base+off]` operand.
fn address_of(
    cl: &Cluster<'_>,
    c: usize,
    tid: usize,
    t: &Thread,
    o: &Opnd,
    inst: &Inst,
) -> Result<u64, SimError> {
    match o {
        Opnd::Addr(base, off) => Ok(value(cl, c, tid, t, base, inst)?.wrapping_add(*off as u64)),
        other => value(cl, c, tid, t, other, inst),
    }
}

fn space_of(op: &str) -> &'static str {
    if op.contains(".param") {
        "param"
    } else if op.contains(".shared") {
        "shared"
    } else {
        "global"
    }
}

fn vector_len(parts: &[&str]) -> usize {
    parts.iter().find_map(|p| p.strip_prefix('v').and_then(|n| n.parse().ok())).unwrap_or(1)
}

fn global_read(
    device: &Device,
    cl: &Cluster<'_>,
    c: usize,
    tid: usize,
    addr: u64,
    len: usize,
    inst: &Inst,
) -> Result<Vec<u8>, SimError> {
    device.download(addr, len).ok_or(SimError::GlobalOutOfBounds {
        line: inst.line,
        addr,
        size: len,
        block: cl.ctas[c].ctaid,
        thread: tid as u32,
    })
}

fn global_write(
    device: &mut Device,
    cl: &Cluster<'_>,
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
        block: cl.ctas[c].ctaid,
        thread: tid as u32,
    })?;
    s.copy_from_slice(data);
    Ok(())
}

fn param_read<'p>(
    cl: &'p Cluster<'_>,
    addr: u64,
    len: usize,
    inst: &Inst,
) -> Result<&'p [u8], SimError> {
    let off = (addr & !PARAM_SPACE) as usize;
    if addr & PARAM_SPACE == 0 {
        return Err(bad(inst, format!("{addr:#x} is not a parameter address")));
    }
    cl.params.get(off..off + len).ok_or_else(|| bad(inst, "parameter read out of range"))
}

fn exec_one(
    device: &mut Device,
    cl: &mut Cluster<'_>,
    c: usize,
    tid: usize,
    t: &mut Thread,
    inst: &Inst,
) -> Result<Control, SimError> {
    // Split without allocating: opcodes have at most a dozen dot-separated parts.
    let mut part_buf = [""; 16];
    let mut n_parts = 0;
    for p in inst.opcode.split('.').take(16) {
        part_buf[n_parts] = p;
        n_parts += 1;
    }
    let parts = &part_buf[..n_parts];
    let ops = Ops(&inst.operands);
    let ty = *parts.last().unwrap_or(&"");
    macro_rules! v {
        ($i:expr) => {
            value(cl, c, tid, t, ops.get($i).ok_or_else(|| bad(inst, "missing operand"))?, inst)?
        };
    }
    macro_rules! set {
        ($i:expr, $val:expr) => {{
            let val = $val;
            if let Some(r) =
                dst(ops.get($i).ok_or_else(|| bad(inst, "missing destination"))?, inst)?
            {
                t.regs[r] = val;
            }
        }};
    }
    match parts[0] {
        "ret" | "exit" => return Ok(Control::Exit),
        "bra" => {
            let Some(Opnd::Name(l)) = ops.first() else { return Err(bad(inst, "branch target")) };
            let pc =
                *cl.kernel.labels.get(l).ok_or_else(|| bad(inst, format!("unknown label {l}")))?;
            return Ok(Control::Jump(pc));
        }
        "bar" | "barrier"
            if matches!(parts.get(1), Some(&"sync") | Some(&"arrive"))
                && !inst.opcode.contains("cluster") =>
        {
            let id = v!(0) as u32;
            let count = if ops.len() > 1 { v!(1) as u32 } else { 0 };
            if id >= 16 || count % 32 != 0 {
                return Err(bad(inst, format!("barrier {id} with thread count {count}")));
            }
            if parts[1] == "arrive" {
                if count == 0 {
                    return Err(bad(inst, "bar.arrive needs a thread count"));
                }
                *cl.ctas[c].arrivals.entry(id).or_insert(0) += 1;
                return Ok(Control::Next);
            }
            return Ok(Control::Block(State::Barrier { id, count }));
        }
        "barrier" if inst.opcode.starts_with("barrier.cluster.wait") => {
            return Ok(Control::Block(State::ClusterBarrier));
        }
        "barrier" if inst.opcode.starts_with("barrier.cluster.arrive") => {}
        // Ordering fences and PDL: the simulator completes everything in program order.
        "bar" | "fence" | "griddepcontrol" | "prefetch" => {}
        "mov" => {
            let val = match ops.get(1) {
                Some(Opnd::Vector(items)) => {
                    // Packs the items, the first in the low bits (PTX ISA mov with a vector).
                    let total = width(ty).ok_or_else(|| bad(inst, "mov type"))? * 8;
                    let each = total / items.len().max(1);
                    let m = if each >= 64 { u64::MAX } else { (1u64 << each) - 1 };
                    let mut acc = 0u64;
                    for (i, it) in items.iter().enumerate() {
                        acc |= (value(cl, c, tid, t, it, inst)? & m) << (i * each);
                    }
                    acc
                }
                _ => v!(1),
            };
            set!(0, mask(val, ty));
        }
        "cvta" => set!(0, v!(1)),
        "mapa" => {
            let addr = v!(1);
            let rank = v!(2) as usize;
            if rank >= cl.ctas.len() {
                return Err(bad(
                    inst,
                    format!("mapa to rank {rank} in a cluster of {}", cl.ctas.len()),
                ));
            }
            set!(0, (((rank + 1) as u64) << 24) | (addr & 0xFF_FFFF));
        }
        "ld" => {
            let w = width(ty).ok_or_else(|| unsupported(inst))?;
            let n = vector_len(parts);
            let addr =
                address_of(cl, c, tid, t, ops.get(1).ok_or_else(|| bad(inst, "address"))?, inst)?;
            let bytes = match space_of(&inst.opcode) {
                "param" => param_read(cl, addr, w * n, inst)?.to_vec(),
                "shared" => {
                    let (sc, off) = cl.resolve_shared(c, addr, inst)?;
                    cl.read_shared(sc, off, w * n, inst, tid)?.to_vec()
                }
                _ => global_read(device, cl, c, tid, addr, w * n, inst)?,
            };
            let dsts: Vec<Opnd> = match &ops[0] {
                Opnd::Vector(items) => items.clone(),
                other => vec![other.clone()],
            };
            if dsts.len() != n {
                return Err(bad(inst, "vector width"));
            }
            for (i, d) in dsts.iter().enumerate() {
                let mut buf = [0u8; 8];
                buf[..w].copy_from_slice(&bytes[i * w..(i + 1) * w]);
                if let Some(r) = dst(d, inst)? {
                    t.regs[r] = u64::from_le_bytes(buf);
                }
            }
        }
        "st" => {
            let w = width(ty).ok_or_else(|| unsupported(inst))?;
            let addr = address_of(cl, c, tid, t, &ops[0], inst)?;
            let srcs: Vec<Opnd> = match ops.get(1) {
                Some(Opnd::Vector(items)) => items.clone(),
                Some(other) => vec![other.clone()],
                None => return Err(bad(inst, "store value")),
            };
            let mut data = Vec::with_capacity(w * srcs.len());
            for s in &srcs {
                data.extend_from_slice(&value(cl, c, tid, t, s, inst)?.to_le_bytes()[..w]);
            }
            match space_of(&inst.opcode) {
                "shared" => {
                    let (sc, off) = cl.resolve_shared(c, addr, inst)?;
                    cl.write_shared(sc, off, &data, 0, inst, tid)?;
                }
                "global" => global_write(device, cl, c, tid, addr, &data, inst)?,
                _ => return Err(bad(inst, "store to a read-only space")),
            }
        }
        "add" | "sub" | "mul" | "mad" | "div" | "rem" | "min" | "max" | "shl" | "shr" | "and"
        | "or" | "xor" | "neg" | "not" | "abs" | "fma" | "bfi" => {
            let sources = match parts[0] {
                "neg" | "not" | "abs" => 1,
                "mad" | "fma" => 3,
                "bfi" => 4,
                _ => 2,
            };
            if ops.len() != sources + 1 {
                return Err(bad(
                    inst,
                    format!("expected {} operands, found {}", sources + 1, ops.len()),
                ));
            }
            let vals = (1..ops.len())
                .map(|i| value(cl, c, tid, t, &ops[i], inst))
                .collect::<Result<Vec<_>, _>>()?;
            match arith(parts, &vals) {
                Some(Ok(r)) => set!(0, r),
                Some(Err(m)) => return Err(bad(inst, m)),
                None => return Err(unsupported(inst)),
            }
        }
        "setp" => {
            let cmp = parts.get(1).copied().unwrap_or("");
            let r = compare(cmp, ty, v!(1), v!(2)).ok_or_else(|| unsupported(inst))?;
            set!(0, u64::from(r));
        }
        "selp" => {
            let p = v!(3);
            let val = if p != 0 { v!(1) } else { v!(2) };
            set!(0, mask(val, ty));
        }
        "cvt" => {
            let b = if ops.len() > 2 { Some(v!(2)) } else { None };
            set!(0, convert(parts, v!(1), b).ok_or_else(|| unsupported(inst))?);
        }
        "atom" | "red" => {
            // `atom` returns the old value in its first operand; `red` has none.
            let (d, a_i, v_i) =
                if parts[0] == "atom" { (Some(&ops[0]), 1, 2) } else { (None, 0, 1) };
            if width(ty) != Some(4) {
                return Err(unsupported(inst));
            }
            let addr =
                address_of(cl, c, tid, t, ops.get(a_i).ok_or_else(|| bad(inst, "address"))?, inst)?;
            let x = v!(v_i) as u32;
            let shared = space_of(&inst.opcode) == "shared";
            let old_bytes = if shared {
                let (sc, off) = cl.resolve_shared(c, addr, inst)?;
                cl.read_shared(sc, off, 4, inst, tid)?.to_vec()
            } else {
                global_read(device, cl, c, tid, addr, 4, inst)?
            };
            let old = u32::from_le_bytes([old_bytes[0], old_bytes[1], old_bytes[2], old_bytes[3]]);
            let new = if parts.contains(&"add") {
                old.wrapping_add(x)
            } else if parts.contains(&"or") {
                old | x
            } else if parts.contains(&"and") {
                old & x
            } else if parts.contains(&"max") {
                old.max(x)
            } else if parts.contains(&"min") {
                old.min(x)
            } else if parts.contains(&"exch") {
                x
            } else {
                return Err(unsupported(inst));
            };
            if shared {
                let (sc, off) = cl.resolve_shared(c, addr, inst)?;
                cl.write_shared(sc, off, &new.to_le_bytes(), 0, inst, tid)?;
            } else {
                global_write(device, cl, c, tid, addr, &new.to_le_bytes(), inst)?;
            }
            if let Some(d) = d
                && let Some(r) = dst(d, inst)?
            {
                t.regs[r] = u64::from(old);
            }
        }
        "mbarrier" => return mbarrier_op(cl, c, tid, t, inst, parts),
        "cp" => return copy_op(device, cl, c, tid, t, inst),
        "tcgen05" => return tcgen05_op(cl, c, tid, t, inst),
        _ => return Err(unsupported(inst)),
    }
    Ok(Control::Next)
}

fn mbarrier_op(
    cl: &mut Cluster<'_>,
    c: usize,
    tid: usize,
    t: &mut Thread,
    inst: &Inst,
    parts: &[&str],
) -> Result<Control, SimError> {
    let ops = Ops(&inst.operands);
    let op = parts.get(1).copied().unwrap_or("");
    // The barrier operand is the first address operand.
    let bar_i = ops
        .iter()
        .position(|o| matches!(o, Opnd::Addr(..)))
        .ok_or_else(|| bad(inst, "barrier address"))?;
    let addr = address_of(cl, c, tid, t, &ops[bar_i], inst)?;
    let (bc, off) = cl.resolve_shared(c, addr, inst)?;
    if off % 8 != 0 {
        return Err(bad(inst, format!("mbarrier at offset {off:#x} is not 8-byte aligned")));
    }
    cl.check_shared(bc, off, 8, inst, tid)?;
    match op {
        "init" => {
            let count = value(cl, c, tid, t, &ops[1], inst)? as u32;
            let id = cl.next_id;
            cl.next_id += 1;
            cl.mbars.insert((bc, off), Mbar::new(count, id));
        }
        "arrive" if parts.contains(&"expect_tx") => {
            let tx = value(cl, c, tid, t, &ops[2], inst)? as i64;
            cl.mbar_update(bc, off, 1, tx, inst)?;
        }
        "arrive" => {
            let n = if ops.len() > bar_i + 1 {
                value(cl, c, tid, t, &ops[bar_i + 1], inst)? as i64
            } else {
                1
            };
            cl.mbar_update(bc, off, n, 0, inst)?;
        }
        "expect_tx" => {
            let tx = value(cl, c, tid, t, &ops[1], inst)? as i64;
            cl.mbar_update(bc, off, 0, tx, inst)?;
        }
        "try_wait" | "test_wait" if parts.contains(&"parity") => {
            let parity = value(cl, c, tid, t, &ops[2], inst)?;
            let m = cl
                .mbars
                .get(&(bc, off))
                .ok_or_else(|| bad(inst, "wait on an uninitialized mbarrier"))?;
            let done = m.parity_done(parity);
            if let Some(r) = dst(&ops[0], inst)? {
                t.regs[r] = u64::from(done);
            }
            if !done && op == "try_wait" {
                // Sleep on the barrier and retry this instruction when its phase changes.
                return Ok(Control::Block(State::WaitMbar { cta: bc, off, parity }));
            }
        }
        _ => return Err(unsupported(inst)),
    }
    Ok(Control::Next)
}

fn copy_op(
    device: &mut Device,
    cl: &mut Cluster<'_>,
    c: usize,
    tid: usize,
    t: &mut Thread,
    inst: &Inst,
) -> Result<Control, SimError> {
    let op = inst.opcode.as_str();
    let ops = Ops(&inst.operands);
    let addr = |cl: &Cluster<'_>, t: &Thread, i: usize| -> Result<u64, SimError> {
        address_of(cl, c, tid, t, ops.get(i).ok_or_else(|| bad(inst, "operand"))?, inst)
    };
    if op == "cp.async.bulk.commit_group"
        || op.starts_with("cp.async.bulk.wait_group")
        || op == "cp.async.commit_group"
        || op.starts_with("cp.async.wait")
    {
        // Copies complete when issued.
        return Ok(Control::Next);
    }
    if op.starts_with("cp.async.mbarrier.arrive") {
        if !op.contains(".noinc") {
            return Err(unsupported(inst));
        }
        let (bc, off) = cl.resolve_shared(c, addr(cl, t, 0)?, inst)?;
        let id = cl.mbar_id(bc, off, inst)?;
        // The thread's earlier cp.async bytes now complete on this barrier's phase.
        for (pc, o, l) in t.cp_async.drain(..) {
            cl.ctas[pc].tags[o as usize..(o + l) as usize]
                .iter_mut()
                .filter(|x| **x == CP_ASYNC_TAG)
                .for_each(|x| *x = id);
            cl.pending.entry(id).or_default().push((pc, o, l));
        }
        cl.mbar_update(bc, off, 1, 0, inst)?;
        return Ok(Control::Next);
    }
    if op.starts_with("cp.async.cg.shared.global") || op.starts_with("cp.async.ca.shared.global") {
        let size = value(cl, c, tid, t, &ops[2], inst)? as usize;
        let src_size =
            if ops.len() > 3 { value(cl, c, tid, t, &ops[3], inst)? as usize } else { size };
        let (sc, off) = cl.resolve_shared(c, addr(cl, t, 0)?, inst)?;
        let mut data = vec![0u8; size];
        if src_size > 0 {
            let g = addr(cl, t, 1)?;
            data[..src_size.min(size)].copy_from_slice(&global_read(
                device,
                cl,
                c,
                tid,
                g,
                src_size.min(size),
                inst,
            )?);
        }
        cl.write_shared(sc, off, &data, CP_ASYNC_TAG, inst, tid)?;
        t.cp_async.push((sc, off, size as u32));
        return Ok(Control::Next);
    }
    if op.starts_with("cp.async.bulk.tensor") {
        let Some(Opnd::TensorRef(map_o, coords_o)) =
            ops.iter().find(|o| matches!(o, Opnd::TensorRef(..)))
        else {
            return Err(bad(inst, "tensor reference"));
        };
        let map_addr = value(cl, c, tid, t, map_o, inst)?;
        let map = TensorMap::decode(param_read(cl, map_addr, 128, inst)?)
            .ok_or_else(|| bad(inst, "operand is not a tensor map encoded for the simulator"))?;
        let coords = coords_o
            .iter()
            .map(|o| value(cl, c, tid, t, o, inst).map(|v| v as u32 as i32 as i64))
            .collect::<Result<Vec<_>, _>>()?;
        if coords.len() != map.dims.len() {
            return Err(bad(
                inst,
                format!("{} coordinates for a rank-{} map", coords.len(), map.dims.len()),
            ));
        }
        // Observed on an H200: an inner coordinate that is not a multiple of 16 bytes faults
        // (illegal instruction), and so does a tile store at a negative coordinate.
        if (coords[0] * map.dtype.bits() as i64 / 8).rem_euclid(16) != 0 {
            return Err(bad(
                inst,
                format!(
                    "TMA box at inner coordinate {} is not 16-byte aligned (illegal instruction on hardware)",
                    coords[0]
                ),
            ));
        }
        let addrs = map.box_addresses(&coords);
        if op.contains(".global.shared::cta") {
            if coords.iter().any(|&c| c < 0) {
                return Err(bad(
                    inst,
                    format!(
                        "TMA store at negative coordinates {coords:?} (illegal instruction on hardware)"
                    ),
                ));
            }
            // Store: shared box → global, elements outside the tensor are not written.
            let (sc, off) = cl.resolve_shared(c, addr(cl, t, 1)?, inst)?;
            let base = u64::from(off);
            for (i, g) in addrs.iter().enumerate() {
                if let Some(g) = g {
                    let s = map.swizzle_addr(base + i as u64) as u32;
                    let b = cl.read_shared(sc, s, 1, inst, tid)?[0];
                    global_write(device, cl, c, tid, *g, &[b], inst)?;
                }
            }
            return Ok(Control::Next);
        }
        // Load: global box → shared of every destination CTA, completing tx on the barrier.
        let dst_addr = addr(cl, t, 0)?;
        let (dc, doff) = cl.resolve_shared(c, dst_addr, inst)?;
        let bar_i = ops.len() - if op.contains(".multicast::cluster") { 2 } else { 1 };
        let (bc, boff) = cl.resolve_shared(c, addr(cl, t, bar_i)?, inst)?;
        let dests: Vec<usize> = if op.contains(".multicast::cluster") {
            let m = value(cl, c, tid, t, &ops[bar_i + 1], inst)? as u32;
            (0..cl.ctas.len()).filter(|r| m & (1 << r) != 0).collect()
        } else {
            vec![dc]
        };
        let mut data = vec![0u8; addrs.len()];
        for (i, g) in addrs.iter().enumerate() {
            if let Some(g) = g {
                data[i] = global_read(device, cl, c, tid, *g, 1, inst)?[0];
            }
        }
        for d in dests {
            // With .cta_group::2 the barrier is the pair leader's (at the given offset);
            // multicast signals the barrier at the same offset in each destination.
            let bar_cta = if op.contains(".cta_group::2") {
                d & !1
            } else if op.contains(".multicast::cluster") {
                d
            } else {
                bc
            };
            let id = cl.mbar_id(bar_cta, boff, inst)?;
            for (i, b) in data.iter().enumerate() {
                let s = map.swizzle_addr(u64::from(doff) + i as u64) as u32;
                cl.write_shared(d, s, &[*b], id, inst, tid)?;
            }
            cl.pending.entry(id).or_default().push((d, doff, data.len() as u32));
            cl.mbar_update(bar_cta, boff, 0, -(data.len() as i64), inst)?;
        }
        return Ok(Control::Next);
    }
    if op.starts_with("cp.async.bulk.global.shared::cta")
        || op.starts_with("cp.reduce.async.bulk.global.shared::cta")
    {
        let g = addr(cl, t, 0)?;
        let (sc, off) = cl.resolve_shared(c, addr(cl, t, 1)?, inst)?;
        let size = value(cl, c, tid, t, &ops[2], inst)? as usize;
        if !size.is_multiple_of(16) {
            return Err(bad(inst, "bulk copy size must be a multiple of 16"));
        }
        let src = cl.read_shared(sc, off, size, inst, tid)?.to_vec();
        if op.starts_with("cp.reduce") {
            if !op.ends_with(".add.noftz.bf16") {
                return Err(unsupported(inst));
            }
            let old = global_read(device, cl, c, tid, g, size, inst)?;
            let mut out = Vec::with_capacity(size);
            for (o, s) in old.chunks_exact(2).zip(src.chunks_exact(2)) {
                let a = f32::from_bits(u32::from(u16::from_le_bytes([o[0], o[1]])) << 16);
                let b = f32::from_bits(u32::from(u16::from_le_bytes([s[0], s[1]])) << 16);
                out.extend_from_slice(&round_bf16(a + b).to_le_bytes());
            }
            global_write(device, cl, c, tid, g, &out, inst)?;
        } else {
            global_write(device, cl, c, tid, g, &src, inst)?;
        }
        return Ok(Control::Next);
    }
    Err(unsupported(inst))
}

/// Reads a shared-memory matrix descriptor (PTX ISA tcgen05 "shared memory descriptor"):
/// start address, leading and stride byte offsets, version bits 46-48 = 1, swizzle mode.
struct SmemDesc {
    start: u32,
    sbo: u32,
    swizzle: u64,
}

fn decode_desc(d: u64, inst: &Inst) -> Result<SmemDesc, SimError> {
    if (d >> 46) & 7 != 1 {
        return Err(bad(inst, format!("descriptor {d:#x}: bits 46-48 must be 0b001")));
    }
    Ok(SmemDesc {
        start: ((d & 0x3FFF) << 4) as u32,
        sbo: (((d >> 32) & 0x3FFF) << 4) as u32,
        swizzle: (d >> 61) & 7,
    })
}

fn tcgen05_op(
    cl: &mut Cluster<'_>,
    c: usize,
    tid: usize,
    t: &mut Thread,
    inst: &Inst,
) -> Result<Control, SimError> {
    let op = inst.opcode.as_str();
    let ops = Ops(&inst.operands);
    if op.starts_with("tcgen05.fence") || op.starts_with("tcgen05.wait") {
        return Ok(Control::Next);
    }
    let pair: Vec<usize> = if op.contains("cta_group::2") {
        if !c.is_multiple_of(2) {
            return Err(bad(inst, "cta_group::2 operations are issued by the even CTA of a pair"));
        }
        vec![c, c + 1]
    } else {
        vec![c]
    };
    if pair.iter().any(|&p| p >= cl.ctas.len()) {
        return Err(bad(inst, "cta_group::2 needs a CTA pair in the cluster"));
    }
    if op.starts_with("tcgen05.commit") {
        // Prior tcgen05 operations of this thread completed when issued: arrive once now.
        let a = address_of(cl, c, tid, t, &ops[0], inst)?;
        let (bc, off) = cl.resolve_shared(c, a, inst)?;
        if op.contains(".multicast::cluster") {
            let m = value(cl, c, tid, t, &ops[1], inst)? as u32;
            for r in (0..cl.ctas.len()).filter(|r| m & (1 << r) != 0) {
                cl.mbar_update(r, off, 1, 0, inst)?;
            }
        } else {
            cl.mbar_update(bc, off, 1, 0, inst)?;
        }
        return Ok(Control::Next);
    }
    if op.starts_with("tcgen05.cp") {
        // 32x128b.warpx4: 32 rows of 16 bytes, broadcast to all four lane quarters.
        if !op.contains(".32x128b.warpx4") {
            return Err(unsupported(inst));
        }
        let taddr = address_of(cl, c, tid, t, &ops[0], inst)? as u32;
        let desc = decode_desc(value(cl, c, tid, t, &ops[1], inst)?, inst)?;
        if desc.swizzle != 0 {
            return Err(unsupported(inst));
        }
        let col = taddr & 0xFFFF;
        for &p in &pair {
            for r in 0..32u32 {
                let a = desc.start + (r / 8) * desc.sbo + (r % 8) * 16;
                let bytes = cl.read_shared(p, a, 16, inst, tid)?.to_vec();
                for q in 0..4u32 {
                    for w in 0..4u32 {
                        let word = u32::from_le_bytes(
                            bytes[4 * w as usize..4 * w as usize + 4].try_into().unwrap_or([0; 4]),
                        );
                        cl.ctas[p]
                            .tmem
                            .write(32 * q + r, col + w, word)
                            .map_err(|e| bad(inst, e))?;
                    }
                }
            }
        }
        return Ok(Control::Next);
    }
    if op.starts_with("tcgen05.mma") && op.ends_with(".kind::f16") {
        mma_f16(cl, c, tid, t, inst, &pair)?;
        cl.stats.mma_instructions += 1;
        return Ok(Control::Next);
    }
    if op.starts_with("tcgen05.mma") {
        if !op.contains(".kind::mxf4nvf4.block_scale.block16") {
            return Err(unsupported(inst));
        }
        mma(cl, c, tid, t, inst, &pair)?;
        cl.stats.mma_instructions += 1;
        return Ok(Control::Next);
    }
    Err(unsupported(inst))
}

/// `tcgen05.mma.kind::f16` with an f32 accumulator: K = 16 f16 or bf16 values per row (32
/// bytes of a 128B-swizzled K-major tile), products exact, summed with the accumulator exactly
/// and rounded once (the same model as the block-scaled kind).
fn mma_f16(
    cl: &mut Cluster<'_>,
    c: usize,
    tid: usize,
    t: &Thread,
    inst: &Inst,
    pair: &[usize],
) -> Result<(), SimError> {
    let ops = Ops(&inst.operands);
    if ops.len() != 5 {
        return Err(bad(
            inst,
            "only the five-operand form [d], adesc, bdesc, idesc, enable is modelled",
        ));
    }
    let d_addr = address_of(cl, c, tid, t, &ops[0], inst)? as u32;
    let adesc = decode_desc(value(cl, c, tid, t, &ops[1], inst)?, inst)?;
    let bdesc = decode_desc(value(cl, c, tid, t, &ops[2], inst)?, inst)?;
    let idesc = value(cl, c, tid, t, &ops[3], inst)? as u32;
    let enable = value(cl, c, tid, t, &ops[4], inst)? != 0;
    // PTX ISA instruction descriptor for kind::f16: D format bits 4-5 (F32 = 1), A/B formats
    // bits 7-9 / 10-12 (F16 = 0, BF16 = 1), negate 13/14, transpose 15/16, N >> 3 in 17-22,
    // M >> 4 in 24-28.
    let (d_fmt, a_fmt, b_fmt) = ((idesc >> 4) & 3, (idesc >> 7) & 7, (idesc >> 10) & 7);
    let n = ((idesc >> 17) & 0x3F) << 3;
    let m = ((idesc >> 24) & 0x1F) << 4;
    if d_fmt != 1 || a_fmt > 1 || a_fmt != b_fmt || (idesc >> 13) & 0xF != 0 {
        return Err(bad(
            inst,
            format!(
                "instruction descriptor {idesc:#x}: only F32 += F16×F16 or BF16×BF16, K-major, no negation, is modelled"
            ),
        ));
    }
    if m != 128 * pair.len() as u32 || n == 0 || n > 256 || adesc.swizzle != 2 || bdesc.swizzle != 2
    {
        return Err(bad(inst, format!("M = {m}, N = {n} with these descriptors is not modelled")));
    }
    let parts = |h: u16| if a_fmt == 0 { exact::f16_parts(h) } else { exact::bf16_parts(h) };
    let row = |cl: &Cluster<'_>,
               p: usize,
               d: &SmemDesc,
               r: u32|
     -> Result<Vec<Option<(i64, i32)>>, SimError> {
        let mut v = Vec::with_capacity(16);
        for k in 0..16u32 {
            let mut h = [0u8; 2];
            for (j, byte) in h.iter_mut().enumerate() {
                let logical = d.start + (r / 8) * d.sbo + (r % 8) * 128 + 2 * k + j as u32;
                let phys = (u64::from(logical) ^ (((u64::from(logical) >> 7) & 7) << 4)) as u32;
                *byte = cl.read_shared(p, phys, 1, inst, tid)?[0];
            }
            v.push(parts(u16::from_le_bytes(h)));
        }
        Ok(v)
    };
    let nb = n / pair.len() as u32;
    let mut b_rows = Vec::with_capacity(n as usize);
    for &p in pair {
        for r in 0..nb {
            b_rows.push(row(cl, p, &bdesc, r)?);
        }
    }
    let d_col = d_addr & 0xFFFF;
    for &p in pair {
        for r in 0..128u32 {
            let a = row(cl, p, &adesc, r)?;
            for (j, brow) in b_rows.iter().enumerate() {
                let col = d_col + j as u32;
                let old = f32::from_bits(cl.ctas[p].tmem.read(r, col).map_err(|e| bad(inst, e))?);
                let mut terms = Vec::with_capacity(17);
                let mut nan = false;
                for (x, y) in a.iter().zip(brow) {
                    match (x, y) {
                        (Some((ma, ea)), Some((mb, eb))) => terms.push((ma * mb, ea + eb)),
                        _ => nan = true,
                    }
                }
                if enable {
                    match exact::f32_parts(old) {
                        Some(t) => terms.push(t),
                        None => nan = true,
                    }
                }
                let result = if nan { f32::NAN } else { exact::round_sum_to_f32(&terms) };
                cl.ctas[p].tmem.write(r, col, result.to_bits()).map_err(|e| bad(inst, e))?;
            }
        }
    }
    Ok(())
}

fn mma(
    cl: &mut Cluster<'_>,
    c: usize,
    tid: usize,
    t: &Thread,
    inst: &Inst,
    pair: &[usize],
) -> Result<(), SimError> {
    let ops = Ops(&inst.operands);
    let d_addr = address_of(cl, c, tid, t, &ops[0], inst)? as u32;
    let adesc = decode_desc(value(cl, c, tid, t, &ops[1], inst)?, inst)?;
    let bdesc = decode_desc(value(cl, c, tid, t, &ops[2], inst)?, inst)?;
    let idesc = value(cl, c, tid, t, &ops[3], inst)? as u32;
    let sfa = address_of(cl, c, tid, t, &ops[4], inst)? as u32 & 0xFFFF;
    let sfb = address_of(cl, c, tid, t, &ops[5], inst)? as u32 & 0xFFFF;
    let enable = value(cl, c, tid, t, &ops[6], inst)? != 0;
    // Instruction descriptor (block-scaled kinds): A/B type bits 7-9 / 10-12 (E2M1 = 1),
    // scale type bit 23 (UE4M3 = 0), N >> 3 in bits 17-22, M >> 4 in bits 24-28, SF ids
    // bits 4-5 / 29-30 (0 for block16), transposes 15/16 (must be 0: K-major only).
    let a_ty = (idesc >> 7) & 7;
    let b_ty = (idesc >> 10) & 7;
    let n = ((idesc >> 17) & 0x3F) << 3;
    let m = ((idesc >> 24) & 0x1F) << 4;
    if a_ty != 1
        || b_ty != 1
        || (idesc >> 23) & 1 != 0
        || (idesc >> 15) & 3 != 0
        || (idesc >> 4) & 3 != 0
        || (idesc >> 29) & 3 != 0
    {
        return Err(bad(
            inst,
            format!(
                "instruction descriptor {idesc:#x} is not NVFP4 E2M1×E2M1 with UE4M3 block16 scales, K-major"
            ),
        ));
    }
    if m != 128 * pair.len() as u32 || n == 0 || n > 256 {
        return Err(bad(
            inst,
            format!("M = {m}, N = {n} is not a valid shape for cta_group::{}", pair.len()),
        ));
    }
    if adesc.swizzle != 2 || bdesc.swizzle != 2 {
        return Err(bad(inst, "only 128B-swizzled K-major operands are modelled"));
    }
    // Element bytes of row r of an operand tile in CTA p: 32 bytes (64 FP4) of this K step.
    let row_bytes =
        |cl: &Cluster<'_>, p: usize, d: &SmemDesc, r: u32| -> Result<[u8; 32], SimError> {
            let mut out = [0u8; 32];
            for (j, o) in out.iter_mut().enumerate() {
                let logical = d.start + (r / 8) * d.sbo + (r % 8) * 128 + j as u32;
                let phys = (u64::from(logical) ^ (((u64::from(logical) >> 7) & 7) << 4)) as u32;
                *o = cl.read_shared(p, phys, 1, inst, tid)?[0];
            }
            Ok(out)
        };
    // Decode each operand row once: 64 values as 2 · e2m1 (integers).
    let decode = |bytes: [u8; 32]| -> [i32; 64] {
        let mut v = [0i32; 64];
        for (j, b) in bytes.iter().enumerate() {
            v[2 * j] = mma::twice_e2m1(b & 0xF) as i32;
            v[2 * j + 1] = mma::twice_e2m1(b >> 4) as i32;
        }
        v
    };
    let nb = n / pair.len() as u32;
    let mut b_rows = Vec::with_capacity(n as usize);
    for &p in pair {
        for r in 0..nb {
            b_rows.push(decode(row_bytes(cl, p, &bdesc, r)?));
        }
    }
    for &p in pair {
        let sfb: Vec<[Option<i64>; 4]> = (0..n)
            .map(|j| {
                cl.ctas[p]
                    .tmem
                    .read(j % 32, sfb + j / 32)
                    .map(|w| std::array::from_fn(|kb| mma::scaled_e4m3((w >> (8 * kb)) as u8)))
            })
            .collect::<Result<_, _>>()
            .map_err(|e| bad(inst, e))?;
        let d_col = d_addr & 0xFFFF;
        // Bounds of the accumulator columns, checked once.
        cl.ctas[p].tmem.read(0, d_col).map_err(|e| bad(inst, e))?;
        cl.ctas[p].tmem.read(127, d_col + n - 1).map_err(|e| bad(inst, e))?;
        for r in 0..128u32 {
            let a = decode(row_bytes(cl, p, &adesc, r)?);
            let sfa_word = cl.ctas[p].tmem.read(r, sfa + r / 32).map_err(|e| bad(inst, e))?;
            let sfa_v: [Option<i64>; 4] =
                std::array::from_fn(|kb| mma::scaled_e4m3((sfa_word >> (8 * kb)) as u8));
            for (j, brow) in b_rows.iter().enumerate() {
                let mut sum: i128 = 0;
                let mut nan = false;
                for kb in 0..4 {
                    let (Some(sa), Some(sb)) = (sfa_v[kb], sfb[j][kb]) else {
                        nan = true;
                        continue;
                    };
                    let s: i32 = (16 * kb..16 * kb + 16).map(|e| a[e] * brow[e]).sum();
                    sum += i128::from(s) * i128::from(sa) * i128::from(sb);
                }
                let col = d_col + j as u32;
                let idx = (r * tmem::COLUMNS + col) as usize;
                let old = f32::from_bits(cl.ctas[p].tmem.data[idx]);
                let result = if nan {
                    f32::NAN
                } else if enable {
                    match mma::f32_to_fixed(old) {
                        Some(o) => mma::fixed_to_f32(o + sum),
                        None => f32::NAN,
                    }
                } else {
                    mma::fixed_to_f32(sum)
                };
                cl.ctas[p].tmem.data[idx] = result.to_bits();
            }
        }
    }
    Ok(())
}
