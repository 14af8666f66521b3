//! The one error type of moegen-runtime: every invalid input is reported, never panics.

use moegen_dsl::formats::FormatError;
use moegen_dsl::plan::PlanError;

/// Invalid input to a runtime function.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// A routed expert id outside [0, experts).
    #[error("token {token} slot {slot} routes to expert {expert}, outside [0, {experts})")]
    ExpertOutOfRange {
        /// Token.
        token: usize,
        /// Slot within top_k.
        slot: usize,
        /// The id given.
        expert: i64,
        /// Number of experts.
        experts: usize,
    },
    /// A router weight that is NaN or infinite.
    #[error("token {token} slot {slot}: the router weight is NaN or infinite")]
    NonFiniteRouterWeight {
        /// Token.
        token: usize,
        /// Slot within top_k.
        slot: usize,
    },
    /// A buffer whose length does not match its shape.
    #[error("{what} holds {actual} elements, its shape needs {expected}")]
    BufferLength {
        /// Which buffer.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        actual: usize,
    },
    /// NaN or infinity where a finite value is required.
    #[error("{what} contains NaN or infinity")]
    NonFinite {
        /// What was checked.
        what: &'static str,
    },
    /// A scale that must be positive is not.
    #[error("{what} = {value} must be positive and finite")]
    BadScale {
        /// Which scale.
        what: &'static str,
        /// Its value.
        value: f32,
    },
    /// An NVFP4 block scale with its sign bit set (UE4M3 scales are unsigned: the kernels
    /// would read the code without its sign, the reference with it).
    #[error("{what} holds a negative scale code at byte {offset}")]
    NegativeScaleCode {
        /// Which tensor.
        what: &'static str,
        /// Byte offset.
        offset: usize,
    },
    /// A NaN scale code in a weight tensor.
    #[error("{what} holds a NaN scale code at byte {offset}")]
    NanScaleCode {
        /// Which tensor.
        what: &'static str,
        /// Byte offset.
        offset: usize,
    },
    /// An expert's `up` and `gate` tensors have different global scales (GEMM1 applies one).
    #[error(
        "expert {expert}: up and gate have different global scales ({up} vs {gate}); GEMM1 needs one per expert"
    )]
    MismatchedGlobalScales {
        /// Local expert.
        expert: usize,
        /// Up's global scale.
        up: f32,
        /// Gate's global scale.
        gate: f32,
    },
    /// A block scale an exact conversion cannot represent.
    #[error(
        "{what} of expert {expert}: block {block} needs scale 2^{exponent}, below E4M3's 2^-9 range for this expert"
    )]
    ScaleRange {
        /// Which tensor.
        what: &'static str,
        /// Local expert.
        expert: usize,
        /// Scale block (row-major).
        block: usize,
        /// The exponent needed.
        exponent: i32,
    },
    /// Routing outputs inconsistent with the shape they are used with.
    #[error("routing sort outputs do not match this problem: {reason}")]
    SortMismatch {
        /// What does not match.
        reason: &'static str,
    },
    /// An activation format the called routine does not compute with the given weights.
    #[error("{what}: {reason}")]
    UnsupportedActivations {
        /// The routine or input at fault.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A format routine rejected its input.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A size or shape the planning arithmetic rejects (zero, overflow, alignment, window).
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// Result alias.
pub type Result<T> = std::result::Result<T, RuntimeError>;

pub(crate) fn check_len(what: &'static str, actual: usize, expected: usize) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(RuntimeError::BufferLength { what, expected, actual })
    }
}
