//! What can go wrong checking a layer case; every variant names the case.

use moegen_dsl::formats::FormatError;
use moegen_runtime::RuntimeError;
use moegen_runtime::backend::BackendError;
use moegen_runtime::layer::LayerError;

/// A layer case that could not be built, run or compared.
#[derive(Debug, thiserror::Error)]
pub enum LayerCheckError {
    /// The case plans its workspace for fewer tokens than it runs.
    #[error("{case}: planned for fewer tokens than it runs")]
    PlannedTooFew {
        /// The case's label.
        case: String,
    },
    /// The routing pattern needs more distinct experts than the window has.
    #[error("{case}: too few experts for the routing pattern")]
    TooFewExperts {
        /// The case's label.
        case: String,
    },
    /// Graph replay is compared byte for byte, which only the deterministic finalize allows.
    #[error("{case}: graph replay is compared byte for byte only with the deterministic finalize")]
    NotDeterministic {
        /// The case's label.
        case: String,
    },
    /// SM100 multiplies NVFP4 weights by NVFP4 activations and MXFP4 weights by MXFP8
    /// activations, nothing else.
    #[error("{case}: SM100 runs NVFP4 weights with NVFP4 activations and MXFP4 weights with MXFP8")]
    Sm100Format {
        /// The case's label.
        case: String,
    },
    /// Quantizing the case's synthetic data.
    #[error("{case}: {source}")]
    Format {
        /// The case's label.
        case: String,
        /// The quantizer's error.
        source: FormatError,
    },
    /// Preparing the case's weights or computing its reference or oracle.
    #[error("{case}: {source}")]
    Reference {
        /// The case's label.
        case: String,
        /// The reference's error.
        source: Box<RuntimeError>,
    },
    /// The backend, outside the layer.
    #[error("{case}: {source}")]
    Backend {
        /// The case's label.
        case: String,
        /// The backend's error.
        source: Box<BackendError>,
    },
    /// Building, running or releasing the layer.
    #[error("{case}: {source}")]
    Layer {
        /// The case's label.
        case: String,
        /// The layer's error (boxed: it is large).
        source: Box<LayerError>,
    },
    /// One tactic's forward pass.
    #[error("{case}: {tactic}: {source}")]
    Tactic {
        /// The case's label.
        case: String,
        /// The tactic that failed.
        tactic: String,
        /// The layer's error (boxed: it is large).
        source: Box<LayerError>,
    },
}
