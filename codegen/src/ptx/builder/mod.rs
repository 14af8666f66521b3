//! Building a kernel body: registers are allocated by class, instructions are pushed as
//! typed values, mostly through helpers (in the submodules) that allocate their
//! destinations. Problems are recorded as [`BuildError`]s that rendering reports.

mod alu;
mod control;
mod memory;

use moegen_dsl::abi::{Param, ParamKind, ParamType};

use super::error::BuildError;
use super::instr::{Guard, Instr, Stmt};
use super::instrs::{TypedInstr, is_typed};
use super::operand::{Label, Operand};
use super::ops::Op;
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
    counts: [u32; RegClass::ALL.len()],
    labels: u32,
    body: Vec<Stmt>,
    errors: Vec<BuildError>,
}

impl KernelBuilder {
    /// An empty kernel.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            params: &[],
            directives: Vec::new(),
            dynamic_smem: false,
            counts: [0; RegClass::ALL.len()],
            labels: 0,
            body: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Declares the kernel's parameters: the ABI's list for this kernel, never written here.
    pub fn declare(&mut self, params: &'static [Param]) {
        self.params = params;
    }

    /// Problems found while building: rendering fails with them, so a kernel never silently
    /// reads a parameter its ABI does not have or uses a layout that does not fit.
    pub fn errors(&self) -> &[BuildError] {
        &self.errors
    }

    /// Records a problem for rendering to report.
    pub fn error(&mut self, e: BuildError) {
        self.errors.push(e);
    }

    /// The declared parameter carrying `kind`, recording an error if there is none.
    pub(crate) fn param_by(&mut self, kind: ParamKind) -> Operand {
        match self.params.iter().find(|p| p.kind == kind) {
            Some(p) => Operand::Param(p.name),
            None => self.undeclared(format!("{kind:?}")),
        }
    }

    /// The declared parameter at `index` (validation kernels bind by position), recording an
    /// error if there is none or it is not of type `ty`.
    pub(crate) fn param_at(&mut self, index: usize, ty: ParamType) -> Operand {
        match self.params.get(index) {
            Some(p) if p.ty() == ty => Operand::Param(p.name),
            _ => self.undeclared(format!("argument {index} of type {ty:?}")),
        }
    }

    fn undeclared(&mut self, param: String) -> Operand {
        self.errors.push(BuildError::UndeclaredParam { kernel: self.name.clone(), param });
        Operand::Param("undeclared")
    }

    /// Register counts per class, in [`RegClass::ALL`] order.
    pub fn reg_counts(&self) -> [(RegClass, u32); RegClass::ALL.len()] {
        RegClass::ALL.map(|c| (c, self.counts[c.slot()]))
    }

    /// The body.
    pub fn body(&self) -> &[Stmt] {
        &self.body
    }

    /// A fresh register.
    pub fn reg(&mut self, class: RegClass) -> Reg {
        let slot = class.slot();
        let index = self.counts[slot];
        self.counts[slot] += 1;
        Reg { class, index }
    }

    /// `n` fresh registers.
    pub fn regs(&mut self, class: RegClass, n: u32) -> Vec<Reg> {
        (0..n).map(|_| self.reg(class)).collect()
    }

    /// A fresh label with a readable stem.
    pub fn new_label(&mut self, stem: &str) -> Label {
        self.labels += 1;
        Label(format!("L_{stem}_{}", self.labels))
    }

    /// Places a label.
    pub fn label(&mut self, l: &Label) {
        self.body.push(Stmt::Label(l.clone()));
    }

    /// A comment in the output (why, not what).
    pub fn comment(&mut self, text: &str) {
        self.body.push(Stmt::Comment(text.to_owned()));
    }

    /// Pushes an instruction with positional operands. The instructions that have a
    /// typed-operand struct ([`super::instrs`]) are refused here: they go through
    /// [`KernelBuilder::push`].
    pub fn emit(&mut self, op: impl Into<Op>, operands: Vec<Operand>) {
        self.emit_checked(None, op.into(), operands);
    }

    /// Pushes a guarded instruction with positional operands (see [`KernelBuilder::emit`]).
    pub fn emit_if(&mut self, guard: Guard, op: impl Into<Op>, operands: Vec<Operand>) {
        self.emit_checked(Some(guard), op.into(), operands);
    }

    fn emit_checked(&mut self, guard: Option<Guard>, op: Op, operands: Vec<Operand>) {
        if is_typed(&op) {
            let kernel = self.name.clone();
            self.errors.push(BuildError::Untyped { kernel, op: op.to_string() });
        }
        self.body.push(Stmt::Instr(Instr { guard, op, operands }));
    }

    /// Pushes an instruction built from its named operands, recording an error (and
    /// pushing nothing) if an operand does not fit.
    pub fn push(&mut self, instr: impl TypedInstr) {
        self.push_guarded(None, instr);
    }

    /// Pushes a guarded instruction built from its named operands (see
    /// [`KernelBuilder::push`]).
    pub fn push_if(&mut self, guard: Guard, instr: impl TypedInstr) {
        self.push_guarded(Some(guard), instr);
    }

    fn push_guarded(&mut self, guard: Option<Guard>, instr: impl TypedInstr) {
        match instr.lower() {
            Ok((op, operands)) => self.body.push(Stmt::Instr(Instr { guard, op, operands })),
            Err(source) => {
                let kernel = self.name.clone();
                self.errors.push(BuildError::Operand { kernel, source });
            }
        }
    }

    /// `op d, args…` into a fresh register of `class`.
    pub fn op(&mut self, class: RegClass, op: impl Into<Op>, args: Vec<Operand>) -> Reg {
        let d = self.reg(class);
        self.emit_to(d, op, args);
        d
    }

    /// `op dst, args…` into an existing register (loop variables, accumulators).
    pub fn emit_to(&mut self, dst: Reg, op: impl Into<Op>, args: Vec<Operand>) {
        let mut ops = Vec::with_capacity(args.len() + 1);
        ops.push(Operand::Reg(dst));
        ops.extend(args);
        self.emit(op, ops);
    }
}
