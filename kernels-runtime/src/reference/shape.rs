//! The shape of one MoE layer as one rank sees it.

use crate::error::{Result, RuntimeError, checked_mul};
use crate::routing::ExpertWindow;

/// Interleave granularity of W1's up/gate rows.
pub const SWIGLU_INTERLEAVE: usize = 64;

/// Hidden size, intermediate size and expert window of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    /// H: model width (GEMM1's K, GEMM2's N).
    pub hidden: usize,
    /// I: per-expert intermediate width (GEMM1's N is 2I, GEMM2's K is I).
    pub intermediate: usize,
    /// Experts, local window and top_k.
    pub window: ExpertWindow,
}

impl MoeShape {
    /// Checks H % 16 == 0 (NVFP4 blocks along K) and I % 64 == 0 (W1's up/gate interleave),
    /// and that the weight tensors' sizes fit in memory.
    pub fn new(hidden: usize, intermediate: usize, window: ExpertWindow) -> Result<Self> {
        if hidden == 0 {
            return Err(RuntimeError::Zero { what: "hidden size" });
        }
        if intermediate == 0 {
            return Err(RuntimeError::Zero { what: "intermediate size" });
        }
        if !hidden.is_multiple_of(16) {
            return Err(RuntimeError::Alignment {
                what: "hidden size",
                value: hidden,
                multiple: 16,
            });
        }
        if !intermediate.is_multiple_of(SWIGLU_INTERLEAVE) {
            return Err(RuntimeError::Alignment {
                what: "intermediate size",
                value: intermediate,
                multiple: SWIGLU_INTERLEAVE,
            });
        }
        let per_expert = checked_mul("W1 size", 2 * intermediate, hidden)?;
        checked_mul("W1 size", per_expert, window.local)?;
        Ok(Self { hidden, intermediate, window })
    }

    /// Local experts.
    pub fn local_experts(&self) -> usize {
        self.window.local
    }
    /// Routes per token.
    pub fn top_k(&self) -> usize {
        self.window.top_k
    }
}
