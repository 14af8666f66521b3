//! moegen-codegen: turns kernel descriptions into artifacts. Today it renders the tactic
//! space with its resource budgets and the workspace plan, and finds the NVIDIA tools
//! that check generated code; PTX emission lands next (see the README's status ladder).

pub mod check;
pub mod emit;
pub mod kernel_set;
pub mod kernels;
pub mod manifest;
pub mod ptx;
pub mod ptxas;
pub mod report;
pub mod tools;
