//! The MUFU sweep (`CorpusKernel::Mufu`): a corpus kernel that applies each approximate
//! instruction of the Fast epilogue recipe, and its non-ftz form, to inputs `base + i·step`
//! (wrapping, as f32 bit patterns), so that a GPU run can compare the hardware's bits with
//! the simulator's models over all 2^32 inputs (docs/simulator.md, "Approximate
//! instructions"). Codegen emits the kernel from [`MufuOp::ALL`]; the validation harness
//! reads the output words in the same order.

/// An approximate instruction the sweep applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MufuOp {
    /// `ex2.approx.ftz.f32`: what the Fast recipe's SiLU uses.
    Ex2ApproxFtz,
    /// `ex2.approx.f32`.
    Ex2Approx,
    /// `rcp.approx.ftz.f32`: what the Fast recipe's SiLU and quantization use.
    RcpApproxFtz,
    /// `rcp.approx.f32`.
    RcpApprox,
}

impl MufuOp {
    /// Every op, in the order of each input's output words.
    pub const ALL: [MufuOp; 4] =
        [MufuOp::Ex2ApproxFtz, MufuOp::Ex2Approx, MufuOp::RcpApproxFtz, MufuOp::RcpApprox];

    /// The PTX instruction.
    pub const fn ptx(self) -> &'static str {
        match self {
            MufuOp::Ex2ApproxFtz => "ex2.approx.ftz.f32",
            MufuOp::Ex2Approx => "ex2.approx.f32",
            MufuOp::RcpApproxFtz => "rcp.approx.ftz.f32",
            MufuOp::RcpApprox => "rcp.approx.f32",
        }
    }
}

/// Output words (u32) per input: one per op, in [`MufuOp::ALL`] order.
pub const WORDS_PER_INPUT: usize = MufuOp::ALL.len();

/// Threads per block of the sweep kernel.
pub const SWEEP_THREADS: u32 = 256;

/// The input (f32 bit pattern) of sweep index `i`: `base + i·step`, wrapping.
pub const fn sweep_input(base: u32, step: u32, i: u32) -> u32 {
    base.wrapping_add(i.wrapping_mul(step))
}
