//! A layer [`MoeLayer::try_new`](super::MoeLayer::try_new) refused: the error and the weights it was given, so that
//! nothing the caller uploaded is lost with the refusal.

use super::error::LayerError;
use super::memory::LayerWeights;

/// A layer [`MoeLayer::try_new`](super::MoeLayer::try_new) refused, with the weights it was given.
#[derive(Debug)]
pub struct Refused {
    /// Why.
    pub error: LayerError,
    /// The weights, untouched: release them or build another layer on them.
    pub weights: LayerWeights,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
