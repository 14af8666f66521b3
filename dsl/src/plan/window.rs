//! The expert layout of a layer as one rank sees it, and the layer's shape.

use super::error::{PlanError, Result};

/// Interleave granularity of W1's up/gate rows (moe-pipeline.md §2).
pub const SWIGLU_INTERLEAVE: usize = 64;

/// Experts of the model, the window held on this rank, and routes per token. Only obtained
/// through [`ExpertWindow::new`], so a window is always inside the expert range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct ExpertWindow {
    num_experts: usize,
    offset: usize,
    local: usize,
    top_k: usize,
}

impl ExpertWindow {
    /// Checks sizes: all positive, top_k ≤ experts, the window inside the expert range, and
    /// every count within the kernels' 32-bit indices.
    pub fn new(num_experts: usize, offset: usize, local: usize, top_k: usize) -> Result<Self> {
        if num_experts == 0 {
            return Err(PlanError::Zero { what: "experts" });
        }
        if local == 0 {
            return Err(PlanError::Zero { what: "local experts" });
        }
        if top_k == 0 {
            return Err(PlanError::Zero { what: "top_k" });
        }
        if top_k > num_experts {
            return Err(PlanError::TopKTooLarge {
                top_k: top_k as u64,
                experts: num_experts as u64,
            });
        }
        if offset.checked_add(local).is_none_or(|end| end > num_experts) {
            return Err(PlanError::LocalWindow {
                offset: offset as u64,
                local: local as u64,
                experts: num_experts as u64,
            });
        }
        if num_experts > i32::MAX as usize {
            return Err(PlanError::IndexTooLarge { what: "experts", value: num_experts as u64 });
        }
        Ok(Self { num_experts, offset, local, top_k })
    }

    /// Experts in the model (global ids are `0..num_experts`).
    pub fn num_experts(&self) -> usize {
        self.num_experts
    }
    /// First expert held on this rank.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Experts held on this rank: global ids `offset..offset + local`.
    pub fn local(&self) -> usize {
        self.local
    }
    /// Routes per token.
    pub fn top_k(&self) -> usize {
        self.top_k
    }
    /// The local index of global expert `e`, if it is held here.
    pub fn local_of(&self, e: usize) -> Option<usize> {
        (self.offset..self.offset + self.local).contains(&e).then(|| e - self.offset)
    }
}

/// Hidden size, intermediate size and expert window of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct MoeShape {
    /// H: model width (GEMM1's K, GEMM2's N).
    pub hidden: usize,
    /// I: per-expert intermediate width (GEMM1's N is 2I, GEMM2's K is I).
    pub intermediate: usize,
    /// Experts, local window and top_k.
    pub window: ExpertWindow,
}

fn checked_mul(what: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or(PlanError::Overflow { what })
}

impl MoeShape {
    /// Checks H % 16 == 0 (NVFP4 blocks along K) and I % 64 == 0 (W1's up/gate interleave),
    /// and that the weight tensors' sizes fit in memory. Kernels may need more: see
    /// [`super::check_gemm_shape`].
    pub fn new(hidden: usize, intermediate: usize, window: ExpertWindow) -> Result<Self> {
        if hidden == 0 {
            return Err(PlanError::Zero { what: "hidden size" });
        }
        if intermediate == 0 {
            return Err(PlanError::Zero { what: "intermediate size" });
        }
        if !hidden.is_multiple_of(16) {
            return Err(PlanError::Alignment {
                what: "hidden size",
                value: hidden as u64,
                multiple: 16,
                why: " (NVFP4 scale blocks)",
            });
        }
        if !intermediate.is_multiple_of(SWIGLU_INTERLEAVE) {
            return Err(PlanError::Alignment {
                what: "intermediate size",
                value: intermediate as u64,
                multiple: SWIGLU_INTERLEAVE as u64,
                why: " (W1's up/gate interleave)",
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
