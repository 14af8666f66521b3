//! The binding's typed errors and their Python exception classes.
//!
//! Every error reaches Python as an instance of a class of `moegen._errors` (defined in
//! Python, so that `InputError` can also be a `ValueError`) carrying the Rust error's
//! `Display` text unchanged: moegen's own messages, naming the input at fault.

use moegen_runtime::error::RuntimeError;
use moegen_runtime::layer::LayerError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;

/// What the binding refuses before anything reaches moegen, and moegen's own errors.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// An array or tensor of an element type the layer does not take.
    #[error("{input}: dtype {actual}, expected {expected}")]
    Dtype {
        /// The argument.
        input: String,
        /// What was given.
        actual: String,
        /// What is taken.
        expected: &'static str,
    },
    /// An array or tensor of the wrong shape.
    #[error("{input}: shape {actual:?}, expected {expected}")]
    Shape {
        /// The argument.
        input: String,
        /// What was given.
        actual: Vec<usize>,
        /// What is taken, with the layer's sizes.
        expected: String,
    },
    /// A tensor whose elements are not dense in row-major order.
    #[error(
        "{input}: not contiguous (the kernels read dense row-major memory: call .contiguous())"
    )]
    NotContiguous {
        /// The argument.
        input: String,
    },
    /// A tensor on another device than the layer's.
    #[error("{input} is on {actual}, the layer runs on {expected}")]
    Device {
        /// The argument.
        input: String,
        /// Where it is.
        actual: String,
        /// Where the layer is.
        expected: String,
    },
    /// A byte buffer whose length disagrees with its declared dtype and shape.
    #[error("{input}: {actual} bytes for dtype {dtype} and shape {shape:?} ({expected} expected)")]
    Bytes {
        /// The argument.
        input: String,
        /// Bytes given.
        actual: usize,
        /// Bytes the dtype and shape need.
        expected: usize,
        /// The declared dtype.
        dtype: String,
        /// The declared shape.
        shape: Vec<usize>,
    },
    /// A scalar argument out of its range.
    #[error("{input}: {reason}")]
    Value {
        /// The argument.
        input: &'static str,
        /// Why it is refused.
        reason: String,
    },
    /// A layer shape (sizes, expert window, top-k) moegen's planner refuses.
    #[error(transparent)]
    Plan(#[from] moegen_dsl::plan::PlanError),
    /// A device or operation this build cannot serve.
    #[error("{what}: {reason}")]
    Unsupported {
        /// The device or operation.
        what: String,
        /// Why.
        reason: &'static str,
    },
    /// The layer refused the inputs or failed (moegen's own message).
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// Loading or preparing the weights failed (moegen's own message, naming the tensor).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl Error {
    /// The `moegen._errors` class this error is raised as.
    fn class(&self) -> &'static str {
        match self {
            Error::Dtype { .. }
            | Error::Shape { .. }
            | Error::NotContiguous { .. }
            | Error::Device { .. }
            | Error::Bytes { .. }
            | Error::Value { .. }
            | Error::Plan(_) => "InputError",
            Error::Unsupported { .. } => "UnsupportedError",
            // What the routing kernels record on the device, decoded into the host checks'
            // own errors.
            Error::Layer(LayerError::Input(
                RuntimeError::ExpertOutOfRange { .. }
                | RuntimeError::DuplicateExpert { .. }
                | RuntimeError::NonFiniteRouterWeight { .. },
            )) => "RoutingError",
            Error::Runtime(_) | Error::Layer(LayerError::Input(_)) => "WeightError",
            // A failed backend, or an error record the host cannot decode.
            Error::Layer(LayerError::Backend(_) | LayerError::Device(_)) => "DeviceError",
            Error::Layer(_) => "LayerError",
        }
    }
}

impl From<Error> for PyErr {
    fn from(e: Error) -> Self {
        let message = e.to_string();
        Python::attach(|py| {
            let class = py
                .import("moegen._errors")
                .and_then(|m| m.getattr(e.class()))
                .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from));
            match class {
                Ok(class) => PyErr::from_type(class, message),
                // The package's own module is missing: an installation fault, said as such.
                Err(import) => PyRuntimeError::new_err(format!(
                    "{message} (and moegen._errors.{} could not be loaded: {import})",
                    e.class()
                )),
            }
        })
    }
}

/// The binding's results.
pub(crate) type Result<T> = std::result::Result<T, Error>;
