//! The one error of the planning arithmetic: sizes that are zero, overflow, do not fit the
//! kernels' 32-bit indices, or break an alignment the kernels need.

/// An invalid size or shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A size that must be positive is zero.
    #[error("{what} must be positive")]
    Zero {
        /// Which size.
        what: &'static str,
    },
    /// A product or sum of sizes overflows.
    #[error("{what} overflows")]
    Overflow {
        /// Which computation.
        what: &'static str,
    },
    /// An index that kernels store as i32 would not fit.
    #[error("{what} = {value} does not fit the kernels' 32-bit indices")]
    IndexTooLarge {
        /// Which quantity.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// top_k larger than the number of experts.
    #[error("top_k {top_k} exceeds the {experts} experts")]
    TopKTooLarge {
        /// Requested top_k.
        top_k: u64,
        /// Number of experts.
        experts: u64,
    },
    /// The local expert window does not fit in the expert range.
    #[error("local experts [{offset}, {offset}+{local}) exceed the {experts} experts")]
    LocalWindow {
        /// First local expert.
        offset: u64,
        /// Local expert count.
        local: u64,
        /// Number of experts.
        experts: u64,
    },
    /// Activations a generation's kernels do not exchange.
    #[error("{arch:?} layers do not take {activations:?} activations")]
    Activations {
        /// The generation.
        arch: crate::tactic::Arch,
        /// The activation format asked for.
        activations: crate::options::ActivationFormat,
    },
    /// A dimension that must be a multiple of something is not.
    #[error("{what} = {value} is not a multiple of {multiple}{why}")]
    Alignment {
        /// Which dimension.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The required multiple.
        multiple: u64,
        /// Who requires it (e.g. " (the sm_100 GEMM kernels)"), or empty.
        why: &'static str,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, PlanError>;
