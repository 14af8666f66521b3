//! moegen-candle's typed errors and their mapping into candle's.

use moegen_dsl::{ActivationFormat, Arch};
use moegen_runtime::error::RuntimeError;
use moegen_runtime::layer::LayerError;

/// What `MoeBlock` refuses, each naming the input at fault. `MoeBlock::forward` returns it
/// as a `candle_core::Error` with the same message (candle's wrapped errors keep only the
/// message); `MoeBlock::try_forward` returns it typed.
#[derive(Debug, thiserror::Error)]
pub enum MoeBlockError {
    /// An input tensor of an element type the layer does not take.
    #[error("{input}: dtype {actual:?}, expected {expected}")]
    Dtype {
        /// `xs`, `topk_ids` or `topk_weights`.
        input: &'static str,
        /// What was given.
        actual: candle_core::DType,
        /// What is taken.
        expected: &'static str,
    },
    /// An input tensor of the wrong shape.
    #[error("{input}: shape {actual:?}, expected {expected}")]
    Shape {
        /// The input.
        input: &'static str,
        /// What was given.
        actual: Vec<usize>,
        /// What is taken, in words (`[tokens, hidden]`…) with the layer's sizes.
        expected: String,
    },
    /// An input on another device than the block's.
    #[error("{input} is on {actual}, the block runs on {expected}")]
    Device {
        /// The input.
        input: &'static str,
        /// Where it is.
        actual: String,
        /// Where the block is.
        expected: String,
    },
    /// An expert id that does not fit the kernels' i32 ids.
    #[error("topk_ids: token {token} slot {slot}: id {id} does not fit in i32")]
    IdRange {
        /// Token.
        token: usize,
        /// Slot.
        slot: usize,
        /// The id.
        id: i64,
    },
    /// A candle device this crate was built without (CUDA needs feature `cuda`) or that moegen
    /// has no backend for (Metal).
    #[error("moegen-candle cannot run on {device}: {reason}")]
    UnsupportedDevice {
        /// The device.
        device: String,
        /// Why.
        reason: &'static str,
    },
    /// `MoeBlockConfig::activations` that the checkpoint layout is not run with.
    #[error(
        "activations {activations:?} with CheckpointLayout::{layout}: moegen-candle runs this \
         layout with {expected}"
    )]
    Activations {
        /// What was asked for.
        activations: ActivationFormat,
        /// The layout's variant.
        layout: &'static str,
        /// What the layout is run with.
        expected: &'static str,
    },
    /// A GPU of a generation that has no kernels for the block's activations (MXFP8 off
    /// SM100).
    #[error("activations {activations:?} cannot run on {device} ({arch:?}): {reason}")]
    Generation {
        /// What was asked for.
        activations: ActivationFormat,
        /// The device.
        device: String,
        /// Its generation.
        arch: Arch,
        /// Why, and what runs there instead.
        reason: &'static str,
    },
    /// A candle operation converting the inputs failed (candle's message).
    #[error("candle: {0}")]
    Candle(String),
    /// The layer refused the inputs or failed (moegen's own message).
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// Loading or preparing the weights failed (moegen's own message, naming the tensor).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl From<MoeBlockError> for candle_core::Error {
    fn from(e: MoeBlockError) -> Self {
        candle_core::Error::wrap(e)
    }
}
