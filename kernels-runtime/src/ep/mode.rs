//! The two expert-parallel modes and a rank's plan in either, so that the layer, its
//! workspace and the caller agree on one mode (docs/expert-parallel.md).

use moegen_dsl::plan::ExpertWindow;

use super::{AllGatherPlan, AllToAllPlan, EpError, EpLayout, EpPartition};

/// How an [`super::ExpertParallel`] step moves tokens between ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EpMode {
    /// (a) vLLM's default: all-gather every rank's tokens, each rank's window over all of
    /// them, reduce-scatter back. Each rank's layer has the model's top-k.
    #[default]
    AllGather,
    /// (b) DeepEP-style: all-to-all of only the routes each rank owns, each owner's window
    /// as a top-1 layer over the routes it received, all-to-all of the rows back.
    AllToAll,
}

impl EpMode {
    /// The window rank `rank`'s layer must be built for: the partition's window, top-1 in
    /// mode (b) (one row per received route).
    pub fn layer_window(
        self,
        partition: &EpPartition,
        rank: usize,
    ) -> Result<ExpertWindow, EpError> {
        let w = partition.window(rank)?;
        match self {
            EpMode::AllGather => Ok(w),
            EpMode::AllToAll => Ok(ExpertWindow::new(w.num_experts(), w.offset(), w.local(), 1)?),
        }
    }
}

/// A rank's buffer plan in one of the modes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpPlan {
    /// Mode (a).
    AllGather(AllGatherPlan),
    /// Mode (b).
    AllToAll(AllToAllPlan),
}

impl From<AllGatherPlan> for EpPlan {
    fn from(p: AllGatherPlan) -> Self {
        EpPlan::AllGather(p)
    }
}

impl From<AllToAllPlan> for EpPlan {
    fn from(p: AllToAllPlan) -> Self {
        EpPlan::AllToAll(p)
    }
}

impl EpPlan {
    /// Its mode.
    pub fn mode(&self) -> EpMode {
        match self {
            EpPlan::AllGather(_) => EpMode::AllGather,
            EpPlan::AllToAll(_) => EpMode::AllToAll,
        }
    }
    /// The partition.
    pub fn partition(&self) -> &EpPartition {
        match self {
            EpPlan::AllGather(p) => &p.partition,
            EpPlan::AllToAll(p) => &p.partition,
        }
    }
    /// Most tokens per rank and step.
    pub fn max_tokens(&self) -> usize {
        match self {
            EpPlan::AllGather(p) => p.max_tokens,
            EpPlan::AllToAll(p) => p.max_tokens,
        }
    }
    /// H.
    pub fn hidden(&self) -> usize {
        match self {
            EpPlan::AllGather(p) => p.hidden,
            EpPlan::AllToAll(p) => p.hidden,
        }
    }
    /// The rank's buffers besides its layer workspace.
    pub fn layout(&self) -> &EpLayout {
        match self {
            EpPlan::AllGather(p) => &p.layout,
            EpPlan::AllToAll(p) => &p.layout,
        }
    }
    /// Tokens (mode b: routes) the rank's layer workspace must serve.
    pub fn layer_tokens(&self) -> usize {
        match self {
            EpPlan::AllGather(p) => p.layer_tokens(),
            EpPlan::AllToAll(p) => p.layer_tokens(),
        }
    }
    /// Routes per token of the rank's layer: the model's top-k, 1 in mode (b).
    pub fn layer_top_k(&self) -> usize {
        match self {
            EpPlan::AllGather(p) => p.partition.top_k(),
            EpPlan::AllToAll(_) => 1,
        }
    }
    /// Mode (a)'s finalize choice, which sizes its buffers; `None` in mode (b), whose
    /// buffers serve both (the layer workspace's spec says which).
    pub fn deterministic(&self) -> Option<bool> {
        match self {
            EpPlan::AllGather(p) => Some(p.deterministic),
            EpPlan::AllToAll(_) => None,
        }
    }
}
