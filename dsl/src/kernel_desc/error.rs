//! Why a kernel description cannot be built.

use crate::gemm_key::GemmKey;
use crate::resources::ResourceError;
use crate::tactic::{GemmKind, TacticError};
use crate::target::Target;

/// A description that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescError {
    /// An option that belongs to the other GEMM.
    #[error("the {option} option does not apply to {gemm}")]
    OptionForOtherGemm {
        /// Option name.
        option: &'static str,
        /// The GEMM being built.
        gemm: GemmKind,
    },
    /// A key whose parts do not name one kernel: rebuilding it gives another key.
    #[error("{} is not a kernel's key: its parts build {}", given.name(), built.name())]
    NotAKernel {
        /// The key given.
        given: GemmKey,
        /// The key of the description its parts build.
        built: GemmKey,
    },
    /// The target cannot hold the tactic.
    #[error(transparent)]
    Resources(#[from] ResourceError),
    /// The tactic itself is invalid.
    #[error(transparent)]
    Tactic(#[from] TacticError),
    /// An option codegen does not implement for this target.
    #[error("{option} is not implemented for {target}")]
    Unsupported {
        /// The option and the value refused.
        option: &'static str,
        /// The target.
        target: Target,
    },
}
