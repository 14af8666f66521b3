//! Decoding: each parsed instruction becomes a typed [`Op`] once, when the module is parsed.
//! An opcode, modifier or operand form the simulator does not model is refused here, with
//! its line, so nothing unmodelled can run with a silently assumed meaning.

mod alu;
mod async_copy;
mod hints;
mod memory;
pub(crate) mod op;
mod operands;
mod sync;
mod tcgen05;
mod types;
mod warp;
mod wgmma;

use std::collections::HashMap;

use self::op::{CtaGroup, Op};
pub(crate) use self::operands::PARAM_SPACE;
use crate::error::SimError;
use crate::profile::Category;
use crate::syntax::{Opnd, RawInst};

/// One decoded instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// Guard: (predicate register slot, negated).
    pub guard: Option<(usize, bool)>,
    /// Opcode with modifiers, as written (for messages).
    pub opcode: String,
    /// Operands as written.
    pub operands: Vec<Opnd>,
    /// 1-based line in the module text.
    pub line: usize,
    pub(crate) op: Op,
    pub(crate) category: Category,
    /// The registers this instruction reads or writes that some `wgmma.mma_async` of the
    /// kernel uses as accumulator or A fragment (empty for the wgmma instructions and for
    /// almost every other instruction): the ones whose accesses the wgmma hazard rules
    /// track.
    pub(crate) wg_regs: Box<[u32]>,
}

/// What decoding an instruction needs to know about its kernel.
pub(crate) struct KernelInfo<'a> {
    pub labels: &'a HashMap<String, usize>,
    /// Parameter names and their byte offsets in the parameter buffer.
    pub params: &'a [(String, usize)],
    pub dynamic_shared: Option<&'a str>,
}

/// Decoding context of one instruction: where errors point.
pub(crate) struct Ctx<'a> {
    pub info: &'a KernelInfo<'a>,
    pub line: usize,
    pub opcode: &'a str,
}

impl Ctx<'_> {
    pub fn unsupported(&self) -> SimError {
        SimError::Unsupported { line: self.line, opcode: self.opcode.to_owned() }
    }

    pub fn bad(&self, message: impl Into<String>) -> SimError {
        SimError::BadInstruction {
            line: self.line,
            opcode: self.opcode.to_owned(),
            message: message.into(),
        }
    }

    /// Exactly `n` operands.
    pub fn count<'o>(&self, ops: &'o [Opnd], n: usize) -> Result<&'o [Opnd], SimError> {
        if ops.len() != n {
            return Err(self.bad(format!("expected {n} operands, found {}", ops.len())));
        }
        Ok(ops)
    }
}

/// The modifiers of an opcode (its dot-separated parts after the first), consumed by the
/// family decoders; any part left over is a modifier the simulator does not model.
pub(crate) struct Mods<'a> {
    parts: Vec<&'a str>,
}

impl<'a> Mods<'a> {
    fn new(opcode: &'a str) -> (&'a str, Self) {
        let mut it = opcode.split('.');
        let head = it.next().unwrap_or("");
        (head, Self { parts: it.collect() })
    }

    /// Removes `m` if present.
    pub fn take(&mut self, m: &str) -> bool {
        match self.parts.iter().position(|&p| p == m) {
            Some(i) => {
                self.parts.remove(i);
                true
            }
            None => false,
        }
    }

    /// Removes the first part that is one of `ms`.
    pub fn take_any(&mut self, ms: &[&'a str]) -> Option<&'a str> {
        let i = self.parts.iter().position(|p| ms.contains(p))?;
        Some(self.parts.remove(i))
    }

    /// Removes the first part (in order).
    pub fn next(&mut self) -> Option<&'a str> {
        (!self.parts.is_empty()).then(|| self.parts.remove(0))
    }

    /// Removes the last part (in order).
    pub fn last(&mut self) -> Option<&'a str> {
        self.parts.pop()
    }

    /// Removes and returns every part left.
    pub fn rest(&mut self) -> Vec<&'a str> {
        std::mem::take(&mut self.parts)
    }

    /// Removes the first part that `f` maps to a value.
    pub fn take_map<T>(&mut self, f: impl Fn(&str) -> Option<T>) -> Option<T> {
        let (i, v) = self.parts.iter().enumerate().find_map(|(i, p)| f(p).map(|v| (i, v)))?;
        self.parts.remove(i);
        Some(v)
    }

    /// Every part was understood.
    pub fn done(&self, ctx: &Ctx<'_>) -> Result<(), SimError> {
        if self.parts.is_empty() { Ok(()) } else { Err(ctx.unsupported()) }
    }

    /// `.cta_group::1|2`, required.
    pub fn cta_group(&mut self, ctx: &Ctx<'_>) -> Result<CtaGroup, SimError> {
        self.cta_group_opt().ok_or_else(|| ctx.unsupported())
    }

    pub fn cta_group_opt(&mut self) -> Option<CtaGroup> {
        match self.take_any(&["cta_group::1", "cta_group::2"])? {
            "cta_group::1" => Some(CtaGroup::One),
            _ => Some(CtaGroup::Two),
        }
    }
}

/// Decodes one instruction.
fn decode_op(ctx: &Ctx<'_>, ops: &[Opnd]) -> Result<(Op, Category), SimError> {
    let (head, mut m) = Mods::new(ctx.opcode);
    let m = &mut m;
    match head {
        "ret" | "exit" | "bra" | "bar" | "barrier" | "fence" | "membar" | "griddepcontrol"
        | "mbarrier" => sync::decode(ctx, head, m, ops),
        "elect" | "shfl" | "vote" | "redux" => warp::decode(ctx, head, m, ops),
        "mov" | "cvta" | "mapa" | "ld" | "st" | "atom" | "red" | "ldmatrix" | "stmatrix" => {
            memory::decode(ctx, head, m, ops)
        }
        "cp" => async_copy::decode(ctx, m, ops),
        "prefetch" | "createpolicy" => hints::decode(ctx, head, m, ops),
        "tcgen05" => tcgen05::decode(ctx, m, ops),
        "wgmma" | "setmaxnreg" => wgmma::decode(ctx, head, m, ops),
        _ => alu::decode(ctx, head, m, ops),
    }
}

/// Decodes a kernel body. The PTX ISA requires every tcgen05 instruction of a kernel to use
/// the same `.cta_group`; a mix is refused here.
pub(crate) fn decode_body(raw: Vec<RawInst>, info: &KernelInfo<'_>) -> Result<Vec<Inst>, SimError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut group: Option<(CtaGroup, usize)> = None;
    for r in raw {
        let ctx = Ctx { info, line: r.line, opcode: &r.opcode };
        let (op, category) = decode_op(&ctx, &r.operands)?;
        match (op.cta_group(), group) {
            (Some(g), Some((first, line))) if g != first => {
                return Err(ctx.bad(format!(
                    "mixes .cta_group::{} with .cta_group::{} (line {line}) in one kernel",
                    g.ctas(),
                    first.ctas()
                )));
            }
            (Some(g), None) => group = Some((g, r.line)),
            _ => {}
        }
        out.push(Inst {
            guard: r.guard,
            opcode: r.opcode,
            operands: r.operands,
            line: r.line,
            op,
            category,
            wg_regs: Box::default(),
        });
    }
    mark_wgmma_registers(&mut out);
    Ok(out)
}

/// Every register slot an operand names.
fn operand_registers(o: &Opnd, out: &mut Vec<u32>) {
    match o {
        Opnd::Reg(r) | Opnd::NotReg(r) => out.push(*r as u32),
        Opnd::Addr(base, _) => operand_registers(base, out),
        Opnd::Vector(items) => items.iter().for_each(|i| operand_registers(i, out)),
        Opnd::TensorRef(base, coords) => {
            operand_registers(base, out);
            coords.iter().for_each(|i| operand_registers(i, out));
        }
        Opnd::Imm(_) | Opnd::F32(_) | Opnd::Name(_) | Opnd::Sink => {}
    }
}

/// Fills [`Inst::wg_regs`]: the accesses of wgmma accumulator and A-fragment registers by
/// other instructions, found once here so that execution checks only those.
fn mark_wgmma_registers(body: &mut [Inst]) {
    let mut used: Vec<u32> = Vec::new();
    for i in body.iter() {
        if let Op::Wgmma(w) = &i.op {
            used.extend(&w.d);
            if let op::WgmmaA::Regs(r) = w.a {
                used.extend(r);
            }
        }
    }
    if used.is_empty() {
        return;
    }
    used.sort_unstable();
    used.dedup();
    for i in body.iter_mut().filter(|i| !i.op.is_warpgroup()) {
        let mut regs = Vec::new();
        i.operands.iter().for_each(|o| operand_registers(o, &mut regs));
        if let Some((p, _)) = i.guard {
            regs.push(p as u32);
        }
        regs.retain(|r| used.binary_search(r).is_ok());
        regs.sort_unstable();
        regs.dedup();
        i.wg_regs = regs.into_boxed_slice();
    }
}
