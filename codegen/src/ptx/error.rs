//! Errors a kernel builder records; rendering reports them instead of emitting PTX.

use super::instrs::OperandError;
use super::smem::SmemError;

/// A problem found while building a kernel.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// A parameter read that the kernel's ABI does not declare.
    #[error("{kernel}: parameter {param} is not in its ABI")]
    UndeclaredParam {
        /// Kernel.
        kernel: String,
        /// The parameter read.
        param: String,
    },
    /// The kernel's shared-memory layout does not fit its budget.
    #[error("{kernel}: {source}")]
    Smem {
        /// Kernel.
        kernel: String,
        /// What does not fit.
        source: SmemError,
    },
    /// A role arrives on a ring's barrier in a way the ring's arrival count does not
    /// include (the count would never, or too early, complete a phase).
    #[error("{kernel}: {ring} {side} barrier: {arrival} is not one of its declared arrivals")]
    UndeclaredArrival {
        /// Kernel.
        kernel: String,
        /// The ring.
        ring: &'static str,
        /// `full` or `empty`.
        side: &'static str,
        /// The arrival emitted.
        arrival: &'static str,
    },
    /// A kernel builder used two facts that disagree (a programming error caught at
    /// generation time instead of emitting wrong PTX).
    #[error("{kernel}: inconsistent {what}")]
    Inconsistent {
        /// Kernel.
        kernel: String,
        /// What disagrees.
        what: &'static str,
    },
    /// An instruction whose operands do not fit it.
    #[error("{kernel}: {source}")]
    Operand {
        /// Kernel.
        kernel: String,
        /// The operand at fault.
        source: OperandError,
    },
    /// An instruction that has named operands was given positional ones.
    #[error("{kernel}: {op} takes named operands (ptx::instrs), not a positional list")]
    Untyped {
        /// Kernel.
        kernel: String,
        /// The opcode.
        op: String,
    },
}
