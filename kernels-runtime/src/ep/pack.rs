//! The CPU counterpart of the dispatch pack kernel (`ep_dispatch_pack`): a rank's routing
//! laid out as the all-to-all's fixed per-peer blocks (docs/expert-parallel.md, mode (b)).

use moegen_dsl::abi::ep::NO_ROUTE;

use super::{EpError, EpPartition};
use crate::error::RuntimeError;
use crate::routing::{check_distinct_experts, check_router_weights};

/// A rank's send blocks: `G` blocks of `per_peer` slots, block `d` for rank `d`.
#[derive(Clone, Debug, PartialEq)]
pub struct PackedSend {
    /// Slots per peer block (`C`).
    pub per_peer: usize,
    /// `[G·C]`: each slot's global expert id, [`NO_ROUTE`] on padding.
    pub experts: Vec<i32>,
    /// `[G·C]`: each slot's router weight, 0 on padding.
    pub weights: Vec<f32>,
    /// `[G·C]`: each slot's expanded index `t·k + s` on this rank, −1 on padding.
    pub sent: Vec<i32>,
    /// `[G]`: routes packed for each peer.
    pub counts: Vec<u32>,
}

/// Packs `ids` and `weights` (`[tokens, k]`, global ids) into per-peer blocks of
/// `per_peer` slots: block `d` holds the routes rank `d` owns, by expert and, within an
/// expert, by expanded index (the routing sort's order, [`super::dispatch_routes`]'s
/// lists). [`NO_ROUTE`] ids are routes of no expert and are not packed. The checks and
/// their order are the routing sort's: ids in range, then distinct per token, then finite
/// weights; then every owner's routes must fit its block.
pub fn pack_routes(
    partition: &EpPartition,
    ids: &[i32],
    weights: &[f32],
    tokens: usize,
    per_peer: usize,
) -> Result<PackedSend, EpError> {
    let k = partition.top_k();
    let needed = tokens.checked_mul(k).ok_or(EpError::RoutingLength {
        given: ids.len(),
        tokens,
        top_k: k,
        needed: usize::MAX,
    })?;
    if ids.len() != needed {
        return Err(EpError::RoutingLength { given: ids.len(), tokens, top_k: k, needed });
    }
    if weights.len() != needed {
        return Err(RuntimeError::BufferLength {
            what: "router weights",
            expected: needed,
            actual: weights.len(),
        }
        .into());
    }
    let g = partition.ranks();
    let mut per_rank: Vec<Vec<(i32, usize)>> = vec![Vec::new(); g];
    for (j, &id) in ids.iter().enumerate() {
        if id == NO_ROUTE {
            continue;
        }
        let rank = partition.owner(id).ok_or(EpError::ExpertOutOfRange {
            token: j / k,
            slot: j % k,
            id,
            experts: partition.experts(),
        })?;
        per_rank[rank].push((id, j));
    }
    check_distinct_experts(ids, k)?;
    check_router_weights(weights, k)?;
    let slots = g
        .checked_mul(per_peer)
        .ok_or(moegen_dsl::plan::PlanError::Overflow { what: "all-to-all send slots" })?;
    let mut out = PackedSend {
        per_peer,
        experts: vec![NO_ROUTE; slots],
        weights: vec![0.0; slots],
        sent: vec![-1; slots],
        counts: Vec::with_capacity(g),
    };
    for (rank, routes) in per_rank.iter_mut().enumerate() {
        if routes.len() > per_peer {
            return Err(EpError::PeerOverflow { rank, routes: routes.len(), per_peer });
        }
        // Stable: routes of one expert keep their expanded order.
        routes.sort_by_key(|r| r.0);
        for (pos, &(id, j)) in routes.iter().enumerate() {
            let slot = rank * per_peer + pos;
            out.experts[slot] = id;
            out.weights[slot] = weights[j];
            out.sent[slot] = j as i32;
        }
        out.counts.push(routes.len() as u32);
    }
    Ok(out)
}
