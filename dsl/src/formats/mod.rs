//! Number formats and scale layouts, bit-exact to the PTX conversions the kernels use.
//!
//! Each encoder mirrors one `cvt` form of sm100-ptx.md §9 and is cross-checked, input by
//! input, against NVIDIA's own emulation in `cuda_fp4.hpp`/`cuda_fp8.hpp` by the
//! `cuda_header_oracle` test.

mod block_quant;
mod e2m1;
mod e4m3;
mod minifloat;
mod mxfp8;
mod packing;
mod scale_layout;
mod ue8m0;

pub use block_quant::*;
pub use e2m1::*;
pub use e4m3::*;
pub use mxfp8::*;
pub use packing::*;
pub use scale_layout::*;
pub use ue8m0::*;

/// Invalid input to a format routine.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FormatError {
    /// Nibble packing needs pairs.
    #[error("cannot pack {len} FP4 codes two per byte: the count must be even")]
    OddNibbleCount {
        /// Number of codes given.
        len: usize,
    },
    /// A zero dimension.
    #[error("matrix of {rows}x{cols} has a zero dimension")]
    ZeroSize {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// Shape product does not fit in usize.
    #[error("matrix of {rows}x{cols} overflows the address space")]
    SizeOverflow {
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
    },
    /// K not a multiple of the scale block.
    #[error("{cols} columns is not a multiple of the {block}-element scale block")]
    ColsNotBlockMultiple {
        /// Columns.
        cols: usize,
        /// Block size.
        block: usize,
    },
    /// Buffer length does not match its shape.
    #[error("buffer holds {actual} elements, its shape needs {expected}")]
    LengthMismatch {
        /// Expected length.
        expected: usize,
        /// Actual length.
        actual: usize,
    },
    /// Global scale must be positive and finite.
    #[error("global scale {value} is not a positive finite number")]
    BadGlobalScale {
        /// The scale given.
        value: f32,
    },
    /// NaN or infinity where a finite number is required.
    #[error("{what} contains NaN or infinity")]
    NonFinite {
        /// What was checked.
        what: &'static str,
    },
}
