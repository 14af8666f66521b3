//! Per-rank buffer planning for both expert-parallel modes, for the per-rank worst case, so
//! that nothing is sized from routing data at run time (no host read of device counts: the
//! step stays capturable). Pure arithmetic, checked for overflow.
//!
//! - All-gather mode (a): every rank's `N` tokens are gathered (`G·N` rows), the rank's
//!   layer runs its window over all of them, and its partial outputs (bulk finalize) or its
//!   routes' rows (deterministic finalize) are reduce-scattered back.
//! - All-to-all mode (b): each rank sends a peer only the routes that peer owns. A token
//!   names distinct experts, so at most `min(k, E/G)` of its routes go to one peer: a
//!   per-peer block of `C = N·min(k, E/G)` routes always suffices, and the all-to-all moves
//!   fixed `C`-route blocks (the real count travels in the block's expert ids, padding
//!   routes marked), as engines with CUDA graphs do.

use moegen_dsl::plan::PlanError;

use moegen_dsl::abi::error_record::WORDS;

use super::{EpError, EpPartition};
use crate::layer::WORKSPACE_ALIGN;

/// A buffer of an expert-parallel rank's workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EpBuffer {
    /// bf16 `[rows, H]`: gathered (a) or received (b) activations.
    Activations,
    /// i32 `[rows, k]` (a) or `[rows]` (b): global expert ids.
    ExpertIds,
    /// f32 like `ExpertIds`: router weights.
    RouterWeights,
    /// bf16 `[G·N, H]`: the rank's partial output over every gathered token (a, bulk).
    Partial,
    /// bf16 `[N·k, H]`: the home rank's own routes' rows in expanded order (a and b,
    /// deterministic): what the single layer's finalize scratch holds.
    Routes,
    /// i32 `[N·k]` zeros: every route counted by the finalize (a and b, deterministic).
    AllLocal,
    /// bf16 `[G·C, H]`: the routes to send back, one row per received route (b).
    CombineSend,
    /// bf16 `[G·C, H]`: this rank's routes' rows as their owners computed them (b).
    CombineRecv,
    /// i32 `[G·C]`: each sent route's expanded index `t·k + s` on its home rank, −1 for
    /// padding (b): where the combine puts the row that comes back.
    SentRoutes,
    /// i32 `[G·C]`: each send slot's global expert id, `NO_ROUTE` on padding (b).
    SendExperts,
    /// f32 `[G·C]`: each send slot's router weight, 0 on padding (b).
    SendWeights,
    /// i32 `[G]`: routes packed for each peer (b); read only to name a peer overflow.
    PeerCounts,
    /// u32 error record of the dispatch pack (b): its own, because the rank's layer resets
    /// the layer workspace's record before its sort.
    PackRecord,
}

/// Offsets and sizes of one rank's buffers; every offset is a multiple of
/// [`WORKSPACE_ALIGN`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpLayout {
    /// `(buffer, offset, bytes)`, in allocation order.
    pub buffers: Vec<(EpBuffer, u64, u64)>,
    /// Bytes of the whole allocation.
    pub bytes: u64,
}

impl EpLayout {
    fn new(parts: &[(EpBuffer, u64)]) -> Result<Self, EpError> {
        let overflow = || PlanError::Overflow { what: "expert-parallel workspace" };
        let mut buffers = Vec::with_capacity(parts.len());
        let mut at = 0u64;
        for &(b, bytes) in parts {
            buffers.push((b, at, bytes));
            at = at
                .checked_add(bytes)
                .and_then(|e| e.checked_next_multiple_of(WORKSPACE_ALIGN))
                .ok_or_else(overflow)?;
        }
        Ok(Self { buffers, bytes: at })
    }

    /// Offset and size of `b`, if the layout has it.
    pub fn get(&self, b: EpBuffer) -> Option<(u64, u64)> {
        self.buffers.iter().find(|e| e.0 == b).map(|e| (e.1, e.2))
    }
}

fn mul(what: &'static str, factors: &[usize]) -> Result<u64, EpError> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f as u64))
        .ok_or(EpError::Plan(PlanError::Overflow { what }))
}

/// Mode (a)'s per-rank plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllGatherPlan {
    /// The partition.
    pub partition: EpPartition,
    /// Most tokens per rank and step (`N`).
    pub max_tokens: usize,
    /// H.
    pub hidden: usize,
    /// Deterministic finalize (route rows reduce-scattered) or bulk (partial outputs).
    pub deterministic: bool,
    /// The rank's buffers besides its layer workspace.
    pub layout: EpLayout,
}

impl AllGatherPlan {
    /// The plan for `max_tokens` tokens per rank of an `hidden`-wide layer.
    pub fn new(
        partition: EpPartition,
        max_tokens: usize,
        hidden: usize,
        deterministic: bool,
    ) -> Result<Self, EpError> {
        if max_tokens == 0 {
            return Err(PlanError::Zero { what: "tokens per rank" }.into());
        }
        if hidden == 0 {
            return Err(PlanError::Zero { what: "hidden" }.into());
        }
        let (g, n, k) = (partition.ranks(), max_tokens, partition.top_k());
        let mut parts = vec![
            (EpBuffer::Activations, mul("gathered activations", &[g, n, hidden, 2])?),
            (EpBuffer::ExpertIds, mul("gathered expert ids", &[g, n, k, 4])?),
            (EpBuffer::RouterWeights, mul("gathered router weights", &[g, n, k, 4])?),
        ];
        if deterministic {
            parts.push((EpBuffer::Routes, mul("route rows", &[n, k, hidden, 2])?));
            parts.push((EpBuffer::AllLocal, mul("route map", &[n, k, 4])?));
        } else {
            parts.push((EpBuffer::Partial, mul("partial output", &[g, n, hidden, 2])?));
        }
        let layout = EpLayout::new(&parts)?;
        Ok(Self { partition, max_tokens, hidden, deterministic, layout })
    }

    /// Tokens the rank's layer workspace must serve: every rank's, gathered.
    pub fn layer_tokens(&self) -> usize {
        self.partition.ranks() * self.max_tokens
    }
}

/// Mode (b)'s per-rank plan. The dispatch's send rows live in `CombineSend`: nothing else
/// uses it until the owner's layer writes its rows there, after the dispatch's all-to-all
/// on the same stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllToAllPlan {
    /// The partition.
    pub partition: EpPartition,
    /// Most tokens per rank and step (`N`).
    pub max_tokens: usize,
    /// H.
    pub hidden: usize,
    /// Routes per peer block: `N·min(k, E/G)`.
    pub per_peer: usize,
    /// The rank's buffers besides its layer workspace.
    pub layout: EpLayout,
}

impl AllToAllPlan {
    /// The plan for `max_tokens` tokens per rank of an `hidden`-wide layer.
    pub fn new(partition: EpPartition, max_tokens: usize, hidden: usize) -> Result<Self, EpError> {
        if max_tokens == 0 {
            return Err(PlanError::Zero { what: "tokens per rank" }.into());
        }
        if hidden == 0 {
            return Err(PlanError::Zero { what: "hidden" }.into());
        }
        let (g, n, k) = (partition.ranks(), max_tokens, partition.top_k());
        let c = partition.max_routes_to_rank(n);
        let layout = EpLayout::new(&[
            (EpBuffer::Activations, mul("received activations", &[g, c, hidden, 2])?),
            (EpBuffer::ExpertIds, mul("received expert ids", &[g, c, 4])?),
            (EpBuffer::RouterWeights, mul("received router weights", &[g, c, 4])?),
            (EpBuffer::SentRoutes, mul("sent routes", &[g, c, 4])?),
            (EpBuffer::SendExperts, mul("send expert ids", &[g, c, 4])?),
            (EpBuffer::SendWeights, mul("send router weights", &[g, c, 4])?),
            (EpBuffer::PeerCounts, mul("peer counts", &[g, 4])?),
            (EpBuffer::PackRecord, mul("pack error record", &[WORDS, 4])?),
            (EpBuffer::CombineSend, mul("combine send", &[g, c, hidden, 2])?),
            (EpBuffer::CombineRecv, mul("combine receive", &[g, c, hidden, 2])?),
            (EpBuffer::Routes, mul("route rows", &[n, k, hidden, 2])?),
            (EpBuffer::AllLocal, mul("route map", &[n, k, 4])?),
        ])?;
        Ok(Self { partition, max_tokens, hidden, per_peer: c, layout })
    }

    /// Routes the rank's layer (top-1 over received routes) must serve: a full block from
    /// every peer.
    pub fn layer_tokens(&self) -> usize {
        self.partition.ranks() * self.per_peer
    }
}
