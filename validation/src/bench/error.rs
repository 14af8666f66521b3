//! What can go wrong writing moe-bench's folder or timing a variant; every variant names the
//! shape, variant or file at fault.

use std::path::PathBuf;

use moegen_dsl::Arch;
use moegen_dsl::formats::FormatError;
use moegen_dsl::plan::PlanError;
use moegen_runtime::RuntimeError;
use moegen_runtime::backend::BackendError;
use moegen_runtime::layer::LayerError;

use crate::npy::NpyError;

/// A bench shape, variant or file that failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The bench shape is not a valid MoE shape.
    #[error("{shape}: {source}")]
    Shape {
        /// The shape's name.
        shape: &'static str,
        /// The shape's error.
        source: PlanError,
    },
    /// The workload has no token count.
    #[error("no inputs")]
    NoInputs,
    /// The activations' global scale.
    #[error(transparent)]
    InputScale(#[from] FormatError),
    /// The variant's weights could not be imported or converted.
    #[error("{variant}: {source}")]
    Weights {
        /// The variant's name.
        variant: &'static str,
        /// The reference's error.
        source: Box<RuntimeError>,
    },
    /// The variant's kernels could not be generated.
    #[error("{variant}: generating its kernels: {source}")]
    Kernels {
        /// The variant's name.
        variant: &'static str,
        /// The generator's error (boxed: it is large).
        source: Box<moegen_codegen::kernel_set::GenerateError>,
    },
    /// The variant's weights could not be uploaded.
    #[error("{variant}: {source}")]
    Upload {
        /// The variant's name.
        variant: &'static str,
        /// The layer's error (boxed: it is large).
        source: Box<LayerError>,
    },
    /// The variant needs another generation.
    #[error("{variant} does not run on {arch:?}")]
    WrongArch {
        /// The variant's name.
        variant: &'static str,
        /// The device's generation.
        arch: Arch,
    },
    /// Building, tuning, running or releasing the layer.
    #[error("{shape} {variant}: {source}")]
    Layer {
        /// The shape's name.
        shape: &'static str,
        /// The variant's name.
        variant: &'static str,
        /// The layer's error (boxed: it is large).
        source: Box<LayerError>,
    },
    /// The backend, outside the layer.
    #[error("{shape} {variant}: {source}")]
    Backend {
        /// The shape's name.
        shape: &'static str,
        /// The variant's name.
        variant: &'static str,
        /// The backend's error.
        source: Box<BackendError>,
    },
    /// Writing a `.npy`/`.npz` file (the error names the file).
    #[error(transparent)]
    Npy(#[from] NpyError),
    /// Creating the folder or writing `inputs.json`.
    #[error("{}: {source}", path.display())]
    Io {
        /// The folder or file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A `--tactics` name that is not one of the variant's candidates at this shape.
    #[error("{shape} {variant}: no candidate tactic {name:?} (candidates: {})", candidates.join(", "))]
    UnknownTactic {
        /// The shape's name.
        shape: &'static str,
        /// The variant's name.
        variant: &'static str,
        /// The name asked for.
        name: String,
        /// The candidates' names.
        candidates: Vec<String>,
    },
    /// Serializing `inputs.json` or the tuner's trials (`tune_<variant>.json`).
    #[error("serializing JSON: {0}")]
    Json(#[from] serde_json::Error),
}
