//! Kernel builders: one module per kernel family.

pub mod epilogue_math;
pub mod gemm;
pub mod gemm_layout;
pub mod sync;
