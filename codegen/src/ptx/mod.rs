//! A small typed PTX builder and its one printer: instruction families with typed modifiers
//! ([`ops`]), the complex instructions' named operands ([`instrs`]), operands ([`operand`]),
//! registers ([`reg`]), shared-memory regions ([`smem`]), the kernel builder, and the module
//! skeleton.

pub mod builder;
pub mod error;
pub mod instr;
pub mod instrs;
pub mod module;
pub mod operand;
pub mod ops;
pub mod reg;
pub mod smem;
pub mod types;

pub use builder::KernelBuilder;
pub use error::BuildError;
pub use instr::{Guard, Instr, Stmt};
pub use instrs::{Accumulate, OperandError, TmemAddr, TypedInstr};
pub use module::{ModuleHeader, RenderError, render_module};
pub use operand::{Label, Operand, SMEM, SReg};
pub use ops::Op;
pub use reg::{Reg, RegClass};
pub use types::{Cmp, CtaGroup, Rnd, Scope, Sem, Space, Ty, VecWidth};
