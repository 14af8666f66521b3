//! Building a kernel body: registers are allocated by class, instructions are pushed as
//! values through typed helpers that allocate their destinations.

use moegen_dsl::abi::Param;

use super::instr::{Guard, Instr, Operand, Stmt};
use super::reg::{Reg, RegClass};

/// A kernel under construction.
#[derive(Clone, Debug)]
pub struct KernelBuilder {
    /// Entry name.
    pub name: String,
    /// Parameters in ABI order (from `moegen_dsl::abi::signature`).
    pub params: &'static [Param],
    /// Entry directives (`.reqntid …`, `.reqnctapercluster …`).
    pub directives: Vec<String>,
    /// Whether the kernel uses the dynamic shared array.
    pub dynamic_smem: bool,
    counts: [u32; 6],
    labels: u32,
    body: Vec<Stmt>,
    errors: Vec<String>,
}

/// Name of the dynamic shared-memory array.
pub const SMEM: &str = "moegen_smem";

fn class_slot(c: RegClass) -> usize {
    RegClass::ALL.iter().position(|&x| x == c).unwrap_or(0)
}

impl KernelBuilder {
    /// An empty kernel.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            params: &[],
            directives: Vec::new(),
            dynamic_smem: false,
            counts: [0; 6],
            labels: 0,
            body: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Declares the kernel's parameters: the ABI's list for this kernel, never written here.
    pub fn declare(&mut self, params: &'static [Param]) {
        self.params = params;
    }

    /// Problems found while building (a parameter used but not declared): rendering fails
    /// with them, so a kernel never silently reads a parameter its ABI does not have.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// The declared parameter `name`, recording an error if there is none.
    fn checked_param(&mut self, name: &str) -> String {
        if !self.params.iter().any(|p| p.name == name) {
            self.errors.push(format!("{}: parameter {name} is not in its ABI", self.name));
        }
        name.to_owned()
    }

    /// Register counts per class, in [`RegClass::ALL`] order.
    pub fn reg_counts(&self) -> [(RegClass, u32); 6] {
        let mut out = [(RegClass::Pred, 0); 6];
        for (i, c) in RegClass::ALL.iter().enumerate() {
            out[i] = (*c, self.counts[i]);
        }
        out
    }

    /// The body.
    pub fn body(&self) -> &[Stmt] {
        &self.body
    }

    /// A fresh register.
    pub fn reg(&mut self, class: RegClass) -> Reg {
        let slot = class_slot(class);
        let index = self.counts[slot];
        self.counts[slot] += 1;
        Reg { class, index }
    }

    /// A fresh label name with a readable stem.
    pub fn new_label(&mut self, stem: &str) -> String {
        self.labels += 1;
        format!("L_{stem}_{}", self.labels)
    }

    /// Places a label.
    pub fn label(&mut self, name: &str) {
        self.body.push(Stmt::Label(name.to_owned()));
    }

    /// A comment in the output (why, not what).
    pub fn comment(&mut self, text: &str) {
        self.body.push(Stmt::Comment(text.to_owned()));
    }

    /// Pushes an instruction.
    pub fn ins(&mut self, opcode: &str, operands: Vec<Operand>) {
        self.body.push(Stmt::Instr(Instr { guard: None, opcode: opcode.to_owned(), operands }));
    }

    /// Pushes a guarded instruction (`@p` or, with `negate`, `@!p`).
    pub fn ins_if(&mut self, pred: Reg, negate: bool, opcode: &str, operands: Vec<Operand>) {
        self.body.push(Stmt::Instr(Instr {
            guard: Some(Guard { pred, negate }),
            opcode: opcode.to_owned(),
            operands,
        }));
    }

    /// `op d, args…` into a fresh register of `class`.
    pub fn op(&mut self, class: RegClass, opcode: &str, args: Vec<Operand>) -> Reg {
        let d = self.reg(class);
        let mut ops = vec![Operand::Reg(d)];
        ops.extend(args);
        self.ins(opcode, ops);
        d
    }

    /// `mov.u32 d, src` (src may be a special register name such as `%tid.x`).
    pub fn mov_u32(&mut self, src: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "mov.u32", vec![src.into()])
    }
    /// A special register read.
    pub fn sreg(&mut self, name: &str) -> Reg {
        self.op(RegClass::B32, "mov.u32", vec![Operand::Name(name.to_owned())])
    }
    /// `ld.param.u32`.
    pub fn ld_param_u32(&mut self, name: &str) -> Reg {
        let name = self.checked_param(name);
        self.op(RegClass::B32, "ld.param.u32", vec![Operand::Name(name).at(0)])
    }
    /// `ld.param.u64`.
    pub fn ld_param_u64(&mut self, name: &str) -> Reg {
        let name = self.checked_param(name);
        self.op(RegClass::B64, "ld.param.u64", vec![Operand::Name(name).at(0)])
    }
    /// The generic address of a by-value tensor-map parameter (naming the param directly in
    /// `cp.async.bulk.tensor` is rejected by ptxas).
    pub fn param_generic_addr(&mut self, name: &str) -> Reg {
        let name = self.checked_param(name);
        let d = self.op(RegClass::B64, "mov.u64", vec![Operand::Name(name)]);
        self.ins("cvta.param.u64", vec![d.into(), d.into()]);
        d
    }
    /// The 32-bit shared-window address of the dynamic shared array plus `offset`.
    pub fn smem_addr(&mut self, offset: u32) -> Reg {
        self.dynamic_smem = true;
        let base = self.op(RegClass::B32, "mov.u32", vec![Operand::Name(SMEM.to_owned())]);
        if offset == 0 { base } else { self.add_u32(base, offset) }
    }

    /// `add.u32`.
    pub fn add_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "add.u32", vec![a.into(), b.into()])
    }
    /// `sub.u32`.
    pub fn sub_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "sub.u32", vec![a.into(), b.into()])
    }
    /// `mul.lo.u32`.
    pub fn mul_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "mul.lo.u32", vec![a.into(), b.into()])
    }
    /// `mad.lo.u32 d, a, b, c` = a·b + c.
    pub fn mad_u32(
        &mut self,
        a: impl Into<Operand>,
        b: impl Into<Operand>,
        c: impl Into<Operand>,
    ) -> Reg {
        self.op(RegClass::B32, "mad.lo.u32", vec![a.into(), b.into(), c.into()])
    }
    /// `div.u32`.
    pub fn div_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "div.u32", vec![a.into(), b.into()])
    }
    /// `rem.u32`.
    pub fn rem_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "rem.u32", vec![a.into(), b.into()])
    }
    /// `min.u32`.
    pub fn min_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "min.u32", vec![a.into(), b.into()])
    }
    /// `shl.b32`.
    pub fn shl_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "shl.b32", vec![a.into(), b.into()])
    }
    /// `shr.u32`.
    pub fn shr_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "shr.u32", vec![a.into(), b.into()])
    }
    /// `and.b32`.
    pub fn and_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "and.b32", vec![a.into(), b.into()])
    }
    /// `or.b32`.
    pub fn or_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "or.b32", vec![a.into(), b.into()])
    }
    /// `xor.b32`.
    pub fn xor_b32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B32, "xor.b32", vec![a.into(), b.into()])
    }
    /// `setp.<cmp> p, a, b`, e.g. cmp = `lt.u32`.
    pub fn setp(&mut self, cmp: &str, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::Pred, &format!("setp.{cmp}"), vec![a.into(), b.into()])
    }
    /// `selp.b32 d, a, b, p`.
    pub fn selp_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>, p: Reg) -> Reg {
        self.op(RegClass::B32, "selp.b32", vec![a.into(), b.into(), p.into()])
    }
    /// `cvt.u64.u32`.
    pub fn cvt_u64_u32(&mut self, a: Reg) -> Reg {
        self.op(RegClass::B64, "cvt.u64.u32", vec![a.into()])
    }
    /// `mul.wide.u32`.
    pub fn mul_wide_u32(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B64, "mul.wide.u32", vec![a.into(), b.into()])
    }
    /// `add.u64`.
    pub fn add_u64(&mut self, a: impl Into<Operand>, b: impl Into<Operand>) -> Reg {
        self.op(RegClass::B64, "add.u64", vec![a.into(), b.into()])
    }
    /// `base + index·scale` as a 64-bit address.
    pub fn index_addr(&mut self, base: Reg, index: impl Into<Operand>, scale: u32) -> Reg {
        let off = self.mul_wide_u32(index, scale);
        self.add_u64(base, off)
    }
    /// Global load `ld.global.<ty>` into a fresh register of `class`.
    pub fn ld_global(&mut self, ty: &str, class: RegClass, addr: Reg) -> Reg {
        self.op(class, &format!("ld.global.{ty}"), vec![Operand::Reg(addr).at(0)])
    }
    /// Unconditional branch.
    pub fn bra(&mut self, label: &str) {
        self.ins("bra.uni", vec![Operand::Name(label.to_owned())]);
    }
    /// Branch when `pred` (or its negation) holds.
    pub fn bra_if(&mut self, pred: Reg, negate: bool, label: &str) {
        self.ins_if(pred, negate, "bra", vec![Operand::Name(label.to_owned())]);
    }
    /// Copies `src` into an existing register (loop variables).
    pub fn assign(&mut self, opcode: &str, dst: Reg, src: impl Into<Operand>) {
        self.ins(opcode, vec![dst.into(), src.into()]);
    }
}
