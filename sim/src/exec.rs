//! Executing one launch: CTAs run one after another (a legal schedule for kernels that do
//! not wait on other CTAs); inside a CTA, warps interleave, each running until it blocks or
//! its quantum ends; within a warp, the threads at the lowest pc execute together (so
//! divergent paths reconverge). Semantics follow the PTX ISA (cited per instruction family);
//! the 4- and 8-bit conversions use moegen-dsl's codecs, which are checked input by input
//! against NVIDIA's emulation of the same `cvt` instructions.

use moegen_dsl::formats::{cvt_e2m1x2, cvt_e4m3x2, e4m3_to_f32};

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
    /// Grid size (x only).
    pub grid: u32,
    /// Threads per CTA (x only).
    pub block: u32,
    /// Dynamic shared memory bytes.
    pub dynamic_smem: usize,
    /// Thread-instructions after which the launch is stopped as a runaway (a kernel that
    /// spins forever would otherwise hang its test).
    pub step_limit: u64,
}

impl LaunchConfig {
    /// A launch with the default step limit (10^10 thread-instructions).
    pub fn new(grid: u32, block: u32, dynamic_smem: usize) -> Self {
        Self { grid, block, dynamic_smem, step_limit: 10_000_000_000 }
    }
}

/// Counters of one launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Thread-instructions executed.
    pub thread_instructions: u64,
}

/// Instructions a warp runs before the scheduler moves on.
const QUANTUM: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Running,
    Barrier,
    Exited,
}

struct Thread {
    regs: Vec<u64>,
    pc: usize,
    state: State,
}

struct Cta<'a> {
    kernel: &'a Kernel,
    params: &'a [u8],
    param_offsets: Vec<usize>,
    shared: Vec<u8>,
    block: u32,
    grid: u32,
    ctaid: u32,
    step_limit: u64,
}

enum Control {
    Next,
    Jump(usize),
    Barrier,
    Exit,
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
    if cfg.block == 0 || cfg.block > 1024 || cfg.grid == 0 {
        return Err(SimError::Launch(format!(
            "grid {} × block {} is not a valid launch",
            cfg.grid, cfg.block
        )));
    }
    let (params, param_offsets) = layout_params(kernel, args)?;
    let mut stats = LaunchStats::default();
    for ctaid in 0..cfg.grid {
        let mut cta = Cta {
            kernel,
            params: &params,
            param_offsets: param_offsets.clone(),
            shared: vec![0; cfg.dynamic_smem],
            block: cfg.block,
            grid: cfg.grid,
            ctaid,
            step_limit: cfg.step_limit,
        };
        run_cta(device, &mut cta, &mut stats)?;
    }
    Ok(stats)
}

fn run_cta(
    device: &mut Device,
    cta: &mut Cta<'_>,
    stats: &mut LaunchStats,
) -> Result<(), SimError> {
    let n = cta.block as usize;
    let mut threads: Vec<Thread> = (0..n)
        .map(|_| Thread { regs: vec![0; cta.kernel.reg_count], pc: 0, state: State::Running })
        .collect();
    let warps = n.div_ceil(32);
    loop {
        let mut progress = false;
        for w in 0..warps {
            let lanes = w * 32..((w + 1) * 32).min(n);
            for _ in 0..QUANTUM {
                let pc = lanes
                    .clone()
                    .filter(|&t| threads[t].state == State::Running)
                    .map(|t| threads[t].pc)
                    .min();
                let Some(pc) = pc else { break };
                let group: Vec<usize> = lanes
                    .clone()
                    .filter(|&t| threads[t].state == State::Running && threads[t].pc == pc)
                    .collect();
                let Some(inst) = cta.kernel.body.get(pc) else {
                    for &t in &group {
                        threads[t].state = State::Exited;
                    }
                    continue;
                };
                progress = true;
                exec_group(device, cta, &mut threads, &group, inst, stats)?;
                if stats.thread_instructions > cta.step_limit {
                    return Err(SimError::StepLimit {
                        block: cta.ctaid,
                        limit: cta.step_limit,
                        line: inst.line,
                    });
                }
            }
        }
        if threads.iter().all(|t| t.state == State::Exited) {
            return Ok(());
        }
        let waiting = threads.iter().filter(|t| t.state == State::Barrier).count();
        let live = threads.iter().filter(|t| t.state != State::Exited).count();
        if waiting > 0 && waiting == live {
            for t in threads.iter_mut().filter(|t| t.state == State::Barrier) {
                t.state = State::Running;
                t.pc += 1;
            }
            continue;
        }
        if !progress {
            let detail = threads
                .iter()
                .enumerate()
                .filter(|(_, t)| t.state != State::Exited)
                .map(|(i, t)| {
                    format!(
                        "thread {i} at line {} ({:?})",
                        cta.kernel.body.get(t.pc).map_or(0, |x| x.line),
                        t.state
                    )
                })
                .take(8)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(SimError::Deadlock { block: cta.ctaid, detail });
        }
    }
}

fn exec_group(
    device: &mut Device,
    cta: &mut Cta<'_>,
    threads: &mut [Thread],
    group: &[usize],
    inst: &Inst,
    stats: &mut LaunchStats,
) -> Result<(), SimError> {
    // Warp-collective instructions act on the group as a whole.
    if inst.opcode == "elect.sync" {
        let leader =
            group.iter().copied().find(|&t| guard_ok(&threads[t], inst)).unwrap_or(usize::MAX);
        for &t in group {
            if let Some(Opnd::Reg(p)) = inst.operands.get(1) {
                threads[t].regs[*p] = u64::from(t == leader);
            }
            threads[t].pc += 1;
        }
        stats.thread_instructions += group.len() as u64;
        return Ok(());
    }
    for &t in group {
        stats.thread_instructions += 1;
        let thread = &mut threads[t];
        if !guard_ok(thread, inst) {
            thread.pc += 1;
            continue;
        }
        match exec_one(device, cta, thread, t as u32, inst)? {
            Control::Next => thread.pc += 1,
            Control::Jump(pc) => thread.pc = pc,
            Control::Barrier => thread.state = State::Barrier,
            Control::Exit => thread.state = State::Exited,
        }
    }
    Ok(())
}

fn guard_ok(t: &Thread, inst: &Inst) -> bool {
    match inst.guard {
        None => true,
        Some((p, neg)) => (t.regs[p] != 0) != neg,
    }
}

/// Reads an operand as raw bits.
fn value(cta: &Cta<'_>, t: &Thread, tid: u32, o: &Opnd, inst: &Inst) -> Result<u64, SimError> {
    Ok(match o {
        Opnd::Reg(r) => t.regs[*r],
        Opnd::NotReg(r) => u64::from(t.regs[*r] == 0),
        Opnd::Imm(v) => *v as u64,
        Opnd::F32(bits) => u64::from(*bits),
        Opnd::Name(n) => {
            special(cta, tid, n).ok_or_else(|| bad(inst, format!("unknown symbol {n}")))?
        }
        _ => return Err(bad(inst, format!("operand {o:?} is not a value"))),
    })
}

/// Special registers (PTX ISA §10) and symbol addresses.
fn special(cta: &Cta<'_>, tid: u32, name: &str) -> Option<u64> {
    Some(match name {
        "%tid.x" => u64::from(tid),
        "%tid.y" | "%tid.z" | "%ctaid.y" | "%ctaid.z" | "%cluster_ctarank" => 0,
        "%ntid.x" => u64::from(cta.block),
        "%ctaid.x" | "%clusterid.x" => u64::from(cta.ctaid),
        "%nctaid.x" | "%nclusterid.x" => u64::from(cta.grid),
        "%laneid" => u64::from(tid % 32),
        "%warpid" => u64::from(tid / 32),
        _ if cta.kernel.dynamic_shared.as_deref() == Some(name) => 0,
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

fn f32_of(bits: u64) -> f32 {
    f32::from_bits(bits as u32)
}

fn bits_f32(v: f32) -> u64 {
    u64::from(v.to_bits())
}

/// Width in bytes of a memory type suffix.
fn width(ty: &str) -> Option<usize> {
    Some(match ty {
        "u8" | "s8" | "b8" => 1,
        "u16" | "s16" | "b16" => 2,
        "u32" | "s32" | "b32" | "f32" => 4,
        "u64" | "s64" | "b64" | "f64" => 8,
        _ => return None,
    })
}

fn exec_one(
    device: &mut Device,
    cta: &mut Cta<'_>,
    t: &mut Thread,
    tid: u32,
    inst: &Inst,
) -> Result<Control, SimError> {
    let parts: Vec<&str> = inst.opcode.split('.').collect();
    let ops = &inst.operands;
    let v = |i: usize, t: &Thread| -> Result<u64, SimError> {
        value(cta, t, tid, ops.get(i).ok_or_else(|| bad(inst, "missing operand"))?, inst)
    };
    let set = |t: &mut Thread, i: usize, val: u64| -> Result<(), SimError> {
        if let Some(r) = dst(ops.get(i).ok_or_else(|| bad(inst, "missing destination"))?, inst)? {
            t.regs[r] = val;
        }
        Ok(())
    };
    let ty = *parts.last().unwrap_or(&"");
    match parts[0] {
        "ret" | "exit" => return Ok(Control::Exit),
        "bra" => {
            let Some(Opnd::Name(l)) = ops.first() else { return Err(bad(inst, "branch target")) };
            let pc =
                *cta.kernel.labels.get(l).ok_or_else(|| bad(inst, format!("unknown label {l}")))?;
            return Ok(Control::Jump(pc));
        }
        "bar" if parts.get(1) == Some(&"sync") => return Ok(Control::Barrier),
        "bar" if parts.get(1) == Some(&"warp") => {}
        "mov" => {
            let val = match ops.get(1) {
                Some(Opnd::Vector(items)) => {
                    // Packs the items, first in the low bits, each as wide as the destination
                    // divided by their count (PTX ISA: mov with vector source).
                    let total = width(ty).ok_or_else(|| bad(inst, "mov type"))? * 8;
                    let each = total / items.len().max(1);
                    let mut acc = 0u64;
                    for (i, it) in items.iter().enumerate() {
                        let m = if each >= 64 { u64::MAX } else { (1u64 << each) - 1 };
                        let x = value(cta, t, tid, it, inst)? & m;
                        acc |= x << (i * each);
                    }
                    acc
                }
                Some(Opnd::Name(n)) if cta.kernel.params.iter().any(|p| &p.name == n) => {
                    // The address of a kernel parameter in the param space.
                    let i = cta.kernel.params.iter().position(|p| &p.name == n).unwrap_or(0);
                    PARAM_SPACE | cta.param_offsets[i] as u64
                }
                _ => v(1, t)?,
            };
            set(t, 0, mask(val, ty))?;
        }
        "cvta" => set(t, 0, v(1, t)?)?,
        "ld" => return load(device, cta, t, tid, inst, &parts),
        "st" => return store(device, cta, t, tid, inst, &parts),
        "add" | "sub" | "mul" | "mad" | "div" | "rem" | "min" | "max" | "shl" | "shr" | "and"
        | "or" | "xor" | "neg" | "abs" | "fma" | "bfi" => {
            let val = arith(cta, t, tid, inst, &parts)?;
            set(t, 0, val)?;
        }
        "setp" => {
            let cmp = parts.get(1).copied().unwrap_or("");
            let (a, b) = (v(1, t)?, v(2, t)?);
            let r = compare(cmp, ty, a, b).ok_or_else(|| unsupported(inst))?;
            set(t, 0, u64::from(r))?;
        }
        "selp" => {
            let p = v(3, t)?;
            let val = if p != 0 { v(1, t)? } else { v(2, t)? };
            set(t, 0, mask(val, ty))?;
        }
        "cvt" => {
            let val = convert(&parts, v(1, t)?, ops.get(2).map(|_| v(2, t)).transpose()?)
                .ok_or_else(|| unsupported(inst))?;
            set(t, 0, val)?;
        }
        "atom" | "red" => return atomic(device, cta, t, tid, inst, &parts),
        _ => return Err(unsupported(inst)),
    }
    Ok(Control::Next)
}

/// Tag bit marking an address in the parameter space.
const PARAM_SPACE: u64 = 1 << 62;

fn mask(v: u64, ty: &str) -> u64 {
    match width(ty) {
        Some(1) => v & 0xFF,
        Some(2) => v & 0xFFFF,
        Some(4) => v & 0xFFFF_FFFF,
        _ if ty == "pred" => u64::from(v != 0),
        _ => v,
    }
}

fn compare(cmp: &str, ty: &str, a: u64, b: u64) -> Option<bool> {
    Some(match ty {
        "u32" | "b32" => {
            let (a, b) = (a as u32, b as u32);
            match cmp {
                "lt" => a < b,
                "le" => a <= b,
                "gt" => a > b,
                "ge" => a >= b,
                "eq" => a == b,
                "ne" => a != b,
                _ => return None,
            }
        }
        "s32" => {
            let (a, b) = (a as u32 as i32, b as u32 as i32);
            match cmp {
                "lt" => a < b,
                "le" => a <= b,
                "gt" => a > b,
                "ge" => a >= b,
                "eq" => a == b,
                "ne" => a != b,
                _ => return None,
            }
        }
        "f32" => {
            // Ordered comparisons are false when either operand is NaN; `nan` is true then.
            let (a, b) = (f32_of(a), f32_of(b));
            match cmp {
                "lt" => a < b,
                "le" => a <= b,
                "gt" => a > b,
                "ge" => a >= b,
                "eq" => a == b,
                "ne" => a != b && !a.is_nan() && !b.is_nan(),
                "nan" => a.is_nan() || b.is_nan(),
                _ => return None,
            }
        }
        _ => return None,
    })
}

fn arith(
    cta: &Cta<'_>,
    t: &Thread,
    tid: u32,
    inst: &Inst,
    parts: &[&str],
) -> Result<u64, SimError> {
    let ops = &inst.operands;
    let v = |i: usize| -> Result<u64, SimError> {
        value(cta, t, tid, ops.get(i).ok_or_else(|| bad(inst, "missing operand"))?, inst)
    };
    let ty = *parts.last().unwrap_or(&"");
    let op = parts[0];
    if ty == "f32" {
        let (a, b) = (f32_of(v(1)?), if ops.len() > 2 { f32_of(v(2)?) } else { 0.0 });
        // `.rn` (and no modifier, which our kernels never rely on) is IEEE round-to-nearest.
        let r = match op {
            "add" => a + b,
            "sub" => a - b,
            "mul" => a * b,
            "div" => a / b,
            "fma" => a.mul_add(b, f32_of(v(3)?)),
            "abs" => a.abs(),
            "neg" => -a,
            // min/max prefer the non-NaN operand; `.NaN` propagates NaN (PTX ISA min/max).
            "min" if parts.contains(&"NaN") => {
                if a.is_nan() || b.is_nan() {
                    f32::NAN
                } else {
                    a.min(b)
                }
            }
            "max" if parts.contains(&"NaN") => {
                if a.is_nan() || b.is_nan() {
                    f32::NAN
                } else {
                    a.max(b)
                }
            }
            "min" => a.min(b),
            "max" => a.max(b),
            _ => return Err(unsupported(inst)),
        };
        return Ok(bits_f32(r));
    }
    if ty == "pred" {
        let (a, b) = (v(1)? != 0, v(2)? != 0);
        return match op {
            "and" => Ok(u64::from(a && b)),
            "or" => Ok(u64::from(a || b)),
            "xor" => Ok(u64::from(a ^ b)),
            _ => Err(unsupported(inst)),
        };
    }
    if op == "bfi" {
        // bfi.b32 d, a, b, pos, len: b with bits [pos, pos+len) replaced by a's low bits.
        let (a, b, pos, len) =
            (v(1)? as u32, v(2)? as u32, (v(3)? & 0xFF) as u32, (v(4)? & 0xFF) as u32);
        let len = len.min(32 - pos.min(32));
        if len == 0 || pos >= 32 {
            return Ok(u64::from(b));
        }
        let m = if len == 32 { u32::MAX } else { ((1u32 << len) - 1) << pos };
        return Ok(u64::from((b & !m) | ((a << pos) & m)));
    }
    let wide = parts.contains(&"wide");
    match ty {
        "u64" | "s64" | "b64" => {
            let (a, b) = (v(1)?, if ops.len() > 2 { v(2)? } else { 0 });
            Ok(match op {
                "add" => a.wrapping_add(b),
                "sub" => a.wrapping_sub(b),
                "mul" => a.wrapping_mul(b),
                "and" => a & b,
                "or" => a | b,
                "xor" => a ^ b,
                "shl" => a.checked_shl(b as u32).unwrap_or(0),
                "shr" => a.checked_shr(b as u32).unwrap_or(0),
                _ => return Err(unsupported(inst)),
            })
        }
        "u32" | "b32" | "s32" => {
            let a = v(1)? as u32;
            let b = if ops.len() > 2 { v(2)? as u32 } else { 0 };
            let signed = ty == "s32";
            Ok(match op {
                "add" => u64::from(a.wrapping_add(b)),
                "sub" => u64::from(a.wrapping_sub(b)),
                "mul" if wide => u64::from(a) * u64::from(b),
                "mul" => u64::from(a.wrapping_mul(b)),
                "mad" => u64::from(a.wrapping_mul(b).wrapping_add(v(3)? as u32)),
                // Division by zero has no defined result in PTX; a simulated kernel that
                // divides by zero is reported rather than given a made-up value.
                "div" | "rem" if b == 0 => return Err(bad(inst, "division by zero")),
                "div" if signed => u64::from(((a as i32).wrapping_div(b as i32)) as u32),
                "rem" if signed => u64::from(((a as i32).wrapping_rem(b as i32)) as u32),
                "div" => u64::from(a / b),
                "rem" => u64::from(a % b),
                "min" if signed => u64::from((a as i32).min(b as i32) as u32),
                "max" if signed => u64::from((a as i32).max(b as i32) as u32),
                "min" => u64::from(a.min(b)),
                "max" => u64::from(a.max(b)),
                "shl" => u64::from(if b >= 32 { 0 } else { a << b }),
                "shr" if signed => u64::from(((a as i32) >> b.min(31)) as u32),
                "shr" => u64::from(if b >= 32 { 0 } else { a >> b }),
                "and" => u64::from(a & b),
                "or" => u64::from(a | b),
                "xor" => u64::from(a ^ b),
                "neg" => u64::from(a.wrapping_neg()),
                _ => return Err(unsupported(inst)),
            })
        }
        _ => Err(unsupported(inst)),
    }
}

fn f16_bits_to_f32(h: u16) -> f32 {
    // IEEE binary16 → binary32, exact.
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x3FF);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: value = man · 2^-24.
            let v = man as f32 * 2f32.powi(-24);
            return if sign != 0 { -v } else { v };
        }
        31 => sign | 0x7F80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

fn f32_to_f16_bits_exact(x: f32) -> u16 {
    // Only used for E4M3 values, which f16 represents exactly.
    if x.is_nan() {
        return 0x7E00;
    }
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    let a = x.abs();
    if a == 0.0 {
        return sign;
    }
    if a < 2f32.powi(-14) {
        return sign | (a * 2f32.powi(24)) as u16;
    }
    let bits = a.to_bits();
    let exp = ((bits >> 23) & 0xFF) as i32 - 127 + 15;
    sign | ((exp as u16) << 10) | ((bits >> 13) & 0x3FF) as u16
}

fn round_bf16(x: f32) -> u16 {
    if x.is_nan() {
        return 0x7FC0;
    }
    let b = x.to_bits();
    (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// `cvt` forms (PTX ISA §9.7.9.21), keyed by the opcode's parts.
fn convert(parts: &[&str], a: u64, b: Option<u64>) -> Option<u64> {
    let key: Vec<&str> = parts[1..].to_vec();
    Some(match key.as_slice() {
        ["u64", "u32"] => a & 0xFFFF_FFFF,
        ["u16", "u32"] => a & 0xFFFF,
        ["u32", "u16"] => a & 0xFFFF,
        ["f32", "f16"] => bits_f32(f16_bits_to_f32(a as u16)),
        ["f32", "bf16"] => bits_f32(f32::from_bits(((a as u32) & 0xFFFF) << 16)),
        ["rn", "bf16", "f32"] => u64::from(round_bf16(f32_of(a))),
        // d = {a → upper half, b → lower half}.
        ["rn", "bf16x2", "f32"] => {
            (u64::from(round_bf16(f32_of(a))) << 16) | u64::from(round_bf16(f32_of(b?)))
        }
        ["rn", "satfinite", "e4m3x2", "f32"] => u64::from(cvt_e4m3x2(f32_of(a), f32_of(b?))),
        ["rn", "satfinite", "e2m1x2", "f32"] => u64::from(cvt_e2m1x2(f32_of(a), f32_of(b?))),
        // Byte i of the source becomes half i of the result.
        ["rn", "f16x2", "e4m3x2"] => {
            let lo = f32_to_f16_bits_exact(e4m3_to_f32(a as u8));
            let hi = f32_to_f16_bits_exact(e4m3_to_f32((a >> 8) as u8));
            (u64::from(hi) << 16) | u64::from(lo)
        }
        ["rni", "f32", "f32"] => bits_f32(f32_of(a).round_ties_even()),
        // Float → int saturates; NaN gives 0 (PTX ISA cvt).
        ["rzi", "s32", "f32"] => u64::from(f32_of(a).trunc() as i32 as u32),
        _ => return None,
    })
}

fn address(cta: &Cta<'_>, t: &Thread, tid: u32, o: &Opnd, inst: &Inst) -> Result<u64, SimError> {
    let Opnd::Addr(base, off) = o else { return Err(bad(inst, "expected [address]")) };
    let b = match base.as_ref() {
        Opnd::Name(n) if cta.kernel.params.iter().any(|p| &p.name == n) => {
            let i = cta.kernel.params.iter().position(|p| &p.name == n).unwrap_or(0);
            PARAM_SPACE | cta.param_offsets[i] as u64
        }
        other => value(cta, t, tid, other, inst)?,
    };
    Ok(b.wrapping_add(*off as u64))
}

fn space_of(parts: &[&str]) -> &'static str {
    if parts.contains(&"param") {
        "param"
    } else if parts.contains(&"shared") || parts.iter().any(|p| p.starts_with("shared")) {
        "shared"
    } else {
        "global"
    }
}

fn read_bytes(
    device: &Device,
    cta: &Cta<'_>,
    space: &str,
    addr: u64,
    len: usize,
    tid: u32,
    inst: &Inst,
) -> Result<Vec<u8>, SimError> {
    match space {
        "param" => {
            let off = (addr & !PARAM_SPACE) as usize;
            cta.params
                .get(off..off + len)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| bad(inst, "parameter read out of range"))
        }
        "shared" => cta.shared.get(addr as usize..addr as usize + len).map(<[u8]>::to_vec).ok_or(
            SimError::SharedOutOfBounds {
                line: inst.line,
                addr,
                size: len,
                limit: cta.shared.len(),
                block: cta.ctaid,
                thread: tid,
            },
        ),
        _ => device.download(addr, len).ok_or(SimError::GlobalOutOfBounds {
            line: inst.line,
            addr,
            size: len,
            block: cta.ctaid,
            thread: tid,
        }),
    }
}

fn write_bytes(
    device: &mut Device,
    cta: &mut Cta<'_>,
    space: &str,
    addr: u64,
    data: &[u8],
    tid: u32,
    inst: &Inst,
) -> Result<(), SimError> {
    match space {
        "shared" => {
            let limit = cta.shared.len();
            let s = cta.shared.get_mut(addr as usize..addr as usize + data.len()).ok_or(
                SimError::SharedOutOfBounds {
                    line: inst.line,
                    addr,
                    size: data.len(),
                    limit,
                    block: cta.ctaid,
                    thread: tid,
                },
            )?;
            s.copy_from_slice(data);
            Ok(())
        }
        "global" => {
            let s = device.slice_mut(addr, data.len()).ok_or(SimError::GlobalOutOfBounds {
                line: inst.line,
                addr,
                size: data.len(),
                block: cta.ctaid,
                thread: tid,
            })?;
            s.copy_from_slice(data);
            Ok(())
        }
        _ => Err(bad(inst, "store to a read-only space")),
    }
}

fn vector_len(parts: &[&str]) -> usize {
    parts.iter().find_map(|p| p.strip_prefix('v').and_then(|n| n.parse().ok())).unwrap_or(1)
}

fn load(
    device: &mut Device,
    cta: &mut Cta<'_>,
    t: &mut Thread,
    tid: u32,
    inst: &Inst,
    parts: &[&str],
) -> Result<Control, SimError> {
    let ty = *parts.last().unwrap_or(&"");
    let w = width(ty).ok_or_else(|| unsupported(inst))?;
    let n = vector_len(parts);
    let addr =
        address(cta, t, tid, inst.operands.get(1).ok_or_else(|| bad(inst, "address"))?, inst)?;
    let bytes = read_bytes(device, cta, space_of(parts), addr, w * n, tid, inst)?;
    let dsts: Vec<Opnd> = match &inst.operands[0] {
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
    Ok(Control::Next)
}

fn store(
    device: &mut Device,
    cta: &mut Cta<'_>,
    t: &mut Thread,
    tid: u32,
    inst: &Inst,
    parts: &[&str],
) -> Result<Control, SimError> {
    let ty = *parts.last().unwrap_or(&"");
    let w = width(ty).ok_or_else(|| unsupported(inst))?;
    let addr = address(cta, t, tid, &inst.operands[0], inst)?;
    let srcs: Vec<Opnd> = match inst.operands.get(1) {
        Some(Opnd::Vector(items)) => items.clone(),
        Some(other) => vec![other.clone()],
        None => return Err(bad(inst, "store value")),
    };
    let mut data = Vec::with_capacity(w * srcs.len());
    for s in &srcs {
        data.extend_from_slice(&value(cta, t, tid, s, inst)?.to_le_bytes()[..w]);
    }
    write_bytes(device, cta, space_of(parts), addr, &data, tid, inst)?;
    Ok(Control::Next)
}

fn atomic(
    device: &mut Device,
    cta: &mut Cta<'_>,
    t: &mut Thread,
    tid: u32,
    inst: &Inst,
    parts: &[&str],
) -> Result<Control, SimError> {
    // `atom` returns the old value in its first operand; `red` has none.
    let (d, a_i, v_i) =
        if parts[0] == "atom" { (Some(&inst.operands[0]), 1, 2) } else { (None, 0, 1) };
    let ty = *parts.last().unwrap_or(&"");
    if width(ty) != Some(4) {
        return Err(unsupported(inst));
    }
    let addr =
        address(cta, t, tid, inst.operands.get(a_i).ok_or_else(|| bad(inst, "address"))?, inst)?;
    let x =
        value(cta, t, tid, inst.operands.get(v_i).ok_or_else(|| bad(inst, "value"))?, inst)? as u32;
    let space = space_of(parts);
    let old_bytes = read_bytes(device, cta, space, addr, 4, tid, inst)?;
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
    write_bytes(device, cta, space, addr, &new.to_le_bytes(), tid, inst)?;
    if let Some(d) = d
        && let Some(r) = dst(d, inst)?
    {
        t.regs[r] = u64::from(old);
    }
    Ok(Control::Next)
}
