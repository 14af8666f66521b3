//! Mode (b)'s dispatch layout on the host: which routes of a rank's tokens go to which
//! peer, compacted and expert-sorted. This is the specification the device dispatch
//! follows and what the CPU-side tests build mode (b)'s per-rank problems from.

use super::{EpError, EpPartition};

/// One route, as its owner receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentRoute {
    /// Token on its home rank.
    pub token: usize,
    /// Slot among the token's `k`.
    pub slot: usize,
    /// Global expert id.
    pub expert: i32,
}

impl SentRoute {
    /// The route's expanded index on its home rank, `token·k + slot`: where its row goes back.
    pub fn expanded(&self, top_k: usize) -> usize {
        self.token * top_k + self.slot
    }
}

/// For each rank, the routes among `ids` (`[tokens, k]`, global ids) whose expert it holds,
/// sorted by expert and, within an expert, by expanded index (the routing sort's order).
/// Each list has at most `partition.max_routes_to_rank(tokens)` routes when no token names
/// an expert twice.
pub fn dispatch_routes(
    partition: &EpPartition,
    ids: &[i32],
    tokens: usize,
) -> Result<Vec<Vec<SentRoute>>, EpError> {
    let k = partition.top_k();
    let needed = tokens * k;
    if ids.len() != needed {
        return Err(EpError::RoutingLength { given: ids.len(), tokens, top_k: k, needed });
    }
    let mut per_rank = vec![Vec::new(); partition.ranks()];
    for (j, &id) in ids.iter().enumerate() {
        let (token, slot) = (j / k, j % k);
        let rank = partition.owner(id).ok_or(EpError::ExpertOutOfRange {
            token,
            slot,
            id,
            experts: partition.experts(),
        })?;
        per_rank[rank].push(SentRoute { token, slot, expert: id });
    }
    for routes in &mut per_rank {
        // Stable: routes of one expert keep their expanded order.
        routes.sort_by_key(|r| r.expert);
    }
    Ok(per_rank)
}
