//! What can go wrong building or running a layer: every variant names the input at fault.

use moegen_dsl::MoeTactic;
use moegen_dsl::plan::PlanError;

use super::candidates::{NoCandidates, Rejection};
use super::host_buffers::HostBufferError;
use super::workspace_refusal::WorkspaceRefusal;

use crate::backend::BackendError;
use crate::error::RuntimeError;
use crate::launch::LaunchError;

/// A layer, workspace or forward-pass failure.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LayerError {
    /// Invalid host-side input (shapes, weights, scales), or a device-side check decoded.
    #[error(transparent)]
    Input(#[from] RuntimeError),
    /// A size the planning arithmetic rejects.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A launch could not be built.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The device failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A buffer smaller than the pass needs.
    #[error("{buffer}: {given} B given, {needed} B needed")]
    BufferTooSmall {
        /// Which buffer.
        buffer: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes given.
        given: u64,
    },
    /// A device address the kernels cannot use.
    #[error("{buffer}: address {ptr:#x} is not {align}-byte aligned")]
    Misaligned {
        /// Which buffer.
        buffer: &'static str,
        /// Its address.
        ptr: u64,
        /// Required alignment.
        align: u64,
    },
    /// Two buffers of a pass that must not overlap do.
    #[error("{first} and {second} overlap: the pass writes {first} before it reads {second}")]
    Aliased {
        /// The buffer written first.
        first: &'static str,
        /// The buffer read after it.
        second: &'static str,
    },
    /// More tokens than the workspace was planned for.
    #[error("{tokens} tokens exceed the workspace's planned maximum of {max}")]
    TooManyTokens {
        /// Tokens given.
        tokens: usize,
        /// The plan's maximum.
        max: usize,
    },
    /// A layer the workspace was not planned for.
    #[error("the workspace cannot serve this layer: {reason}")]
    WorkspaceMismatch {
        /// What does not fit.
        reason: String,
    },
    /// A kernel the chosen tactic needs is not in the kernel set.
    #[error("kernel {0} is not in the kernel set")]
    MissingKernel(String),
    /// No tactic of the kernel set applies to this layer.
    #[error("no tactic of the kernel set applies: {0}")]
    NoTactic(String),
    /// No tactic of the kernel set applies to this layer: each tactic of the generation's
    /// space with the reason it was rejected.
    #[error("no tactic of the kernel set applies: {0}")]
    NoCandidates(#[from] NoCandidates),
    /// A tactic asked for (a dispatch table's choice) that cannot run this layer.
    #[error("tactic {tactic} cannot run this layer: {reason}")]
    TacticRejected {
        /// The tactic.
        tactic: MoeTactic,
        /// Why (boxed: a tactic and a rejection side by side would make every `Result` that
        /// carries a `LayerError` large).
        reason: Box<Rejection>,
    },
    /// A workspace spec that no kernel of the set can serve.
    #[error("the workspace spec cannot be served by the kernel set: {0}")]
    WorkspaceRefused(#[from] WorkspaceRefusal),
    /// A host buffer helper refused its input.
    #[error(transparent)]
    HostBuffer(#[from] HostBufferError),
    /// The device-side error record reports something other than invalid input (a
    /// workspace planned too small, or a record this version cannot decode).
    #[error(transparent)]
    Device(crate::error_record::RecordError),
    /// The autotuner's cache file could not be read or written.
    #[error("tune cache {path}: {reason}")]
    TuneCache {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
}
