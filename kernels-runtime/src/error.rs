//! The one error type of moegen-runtime: every invalid input is reported, never panics.

use moegen_dsl::formats::FormatError;

/// Invalid input to a runtime function.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
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
        top_k: usize,
        /// Number of experts.
        experts: usize,
    },
    /// The local expert window does not fit in the expert range.
    #[error("local experts [{offset}, {offset}+{local}) exceed the {experts} experts")]
    LocalWindow {
        /// First local expert.
        offset: usize,
        /// Local expert count.
        local: usize,
        /// Number of experts.
        experts: usize,
    },
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
    /// A dimension that must be a multiple of something is not.
    #[error("{what} = {value} is not a multiple of {multiple}")]
    Alignment {
        /// Which dimension.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The required multiple.
        multiple: usize,
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
    /// A NaN scale code in a weight tensor.
    #[error("{what} holds a NaN scale code at byte {offset}")]
    NanScaleCode {
        /// Which tensor.
        what: &'static str,
        /// Byte offset.
        offset: usize,
    },
    /// Routing outputs inconsistent with the shape they are used with.
    #[error("routing sort outputs do not match this problem: {reason}")]
    SortMismatch {
        /// What does not match.
        reason: &'static str,
    },
    /// A format routine rejected its input.
    #[error(transparent)]
    Format(#[from] FormatError),
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

pub(crate) fn checked_mul(what: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(RuntimeError::Overflow { what })
}
