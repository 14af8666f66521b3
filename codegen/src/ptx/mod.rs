//! A small typed PTX builder and its one printer.

pub mod builder;
pub mod instr;
pub mod module;
pub mod reg;

pub use builder::{KernelBuilder, SMEM};
pub use instr::{Instr, Operand, Stmt};
pub use module::{ModuleHeader, render_module};
pub use reg::{Reg, RegClass};
