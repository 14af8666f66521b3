//! Errors a kernel builder records; rendering reports them instead of emitting PTX.

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
    /// A kernel builder used two facts that disagree (a programming error caught at
    /// generation time instead of emitting wrong PTX).
    #[error("{kernel}: inconsistent {what}")]
    Inconsistent {
        /// Kernel.
        kernel: String,
        /// What disagrees.
        what: &'static str,
    },
}
