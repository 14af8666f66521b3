//! The routing sort (`moe_sort`, moe-pipeline.md §3): index maps that group each local
//! expert's routes into whole tiles. It moves no data.

use moegen_dsl::TileSize;
use moegen_dsl::abi::ep::{NO_ROUTE, Padding};

use crate::error::{Result, RuntimeError, check_len};
pub use moegen_dsl::plan::ExpertWindow;
use moegen_dsl::plan::{PlanError, max_permuted_rows, max_tiles};

/// The six outputs of the routing sort.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortOutputs {
    /// Rows per routing tile.
    pub tile: TileSize,
    /// `[max_tiles]`: local expert of each tile; −1 past `num_non_exiting_tiles`.
    pub tile_idx_to_expert_idx: Vec<i32>,
    /// `[max_tiles]`: exclusive end of the tile's valid permuted rows; 0 past the live tiles.
    pub tile_idx_to_mn_limit: Vec<i32>,
    /// `[N·k]`: permuted row of route (token, slot), −1 if its expert is not local.
    pub expanded_idx_to_permuted_idx: Vec<i32>,
    /// `[max_tiles · T]`: token·k + slot of each valid row; −1 on padding rows (the contract
    /// leaves those unwritten; consumers must predicate on row < mn_limit).
    pub permuted_idx_to_expanded_idx: Vec<i32>,
    /// Σ_e ceil(count_e / T).
    pub num_non_exiting_tiles: i32,
    /// `num_non_exiting_tiles · T`.
    pub total_num_padded_tokens: i32,
}

impl SortOutputs {
    /// Tiles the arrays were sized for.
    pub fn max_tiles(&self) -> usize {
        self.tile_idx_to_expert_idx.len()
    }

    /// The (local expert, token, slot) of permuted row `row` if it is a valid row.
    pub fn route_of_row(&self, row: usize, top_k: usize) -> Option<(usize, usize, usize)> {
        let t = row / self.tile.rows() as usize;
        if t >= self.num_non_exiting_tiles as usize {
            return None;
        }
        if row >= usize::try_from(*self.tile_idx_to_mn_limit.get(t)?).ok()? {
            return None;
        }
        let expert = usize::try_from(*self.tile_idx_to_expert_idx.get(t)?).ok()?;
        let expanded = usize::try_from(*self.permuted_idx_to_expanded_idx.get(row)?).ok()?;
        Some((expert, expanded / top_k, expanded % top_k))
    }
}

/// Sorts `[tokens, top_k]` global expert ids (row-major) into tiles of `tile` rows.
///
/// Within an expert, rows keep ascending expanded index (token·k + slot), which makes the
/// output deterministic; the GPU kernel's contract allows any order within an expert.
/// [`NO_ROUTE`] is out of range like any id outside `[0, experts)`: what the layer's sort
/// does by default. [`moe_sort_padding`] chooses.
pub fn moe_sort(
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
) -> Result<SortOutputs> {
    moe_sort_padding(experts, tokens, window, tile, Padding::Refuse)
}

/// [`moe_sort`] with the device sort's `accept_padding`: under [`Padding::Skip`] (the
/// expert-parallel owner's sort of its padded peer blocks) [`NO_ROUTE`] is a route of no
/// expert, never local, never a duplicate, no error; under [`Padding::Refuse`] it is out of
/// range, named by token and slot.
pub fn moe_sort_padding(
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
    padding: Padding,
) -> Result<SortOutputs> {
    if tokens == 0 {
        return Err(RuntimeError::from(PlanError::Zero { what: "tokens" }));
    }
    let expanded = tokens
        .checked_mul(window.top_k())
        .ok_or(RuntimeError::from(PlanError::Overflow { what: "tokens × top_k" }))?;
    check_len("routing experts", experts.len(), expanded)?;
    if expanded > i32::MAX as usize {
        return Err(RuntimeError::from(PlanError::IndexTooLarge {
            what: "tokens × top_k",
            value: expanded as u64,
        }));
    }
    let t = tile.rows() as usize;
    let tiles_cap = max_tiles(expanded as u64, window.local() as u64, t as u64)? as usize;
    let rows_cap = max_permuted_rows(expanded as u64, window.local() as u64, t as u64)?;
    if rows_cap > i32::MAX as u64 {
        return Err(RuntimeError::from(PlanError::IndexTooLarge {
            what: "max_permuted_rows",
            value: rows_cap,
        }));
    }
    let rows_cap = rows_cap as usize;

    // Local expert of each route, or None.
    let mut local_of = Vec::with_capacity(expanded);
    for (i, &e) in experts.iter().enumerate() {
        if e == NO_ROUTE && padding == Padding::Skip {
            local_of.push(None);
            continue;
        }
        if e < 0 || e as usize >= window.num_experts() {
            return Err(RuntimeError::ExpertOutOfRange {
                token: i / window.top_k(),
                slot: i % window.top_k(),
                expert: i64::from(e),
                experts: window.num_experts(),
            });
        }
        let e = e as usize;
        local_of.push(window.local_of(e));
    }
    check_distinct_experts(experts, window.top_k())?;
    let mut counts = vec![0usize; window.local()];
    for l in local_of.iter().flatten() {
        counts[*l] += 1;
    }
    // First permuted row of each expert; each expert starts on a tile boundary.
    let mut start_tile = vec![0usize; window.local()];
    let mut live_tiles = 0usize;
    for (e, &c) in counts.iter().enumerate() {
        start_tile[e] = live_tiles;
        live_tiles += c.div_ceil(t);
    }
    let mut tile_expert = vec![-1i32; tiles_cap];
    let mut tile_limit = vec![0i32; tiles_cap];
    for (e, &c) in counts.iter().enumerate() {
        let first = start_tile[e];
        for k in 0..c.div_ceil(t) {
            tile_expert[first + k] = e as i32;
            tile_limit[first + k] = ((first + k + 1) * t).min(first * t + c) as i32;
        }
    }
    let mut e2p = vec![-1i32; expanded];
    let mut p2e = vec![-1i32; rows_cap];
    let mut next_row: Vec<usize> = start_tile.iter().map(|&s| s * t).collect();
    for (i, l) in local_of.iter().enumerate() {
        if let Some(l) = *l {
            let row = next_row[l];
            next_row[l] += 1;
            e2p[i] = row as i32;
            p2e[row] = i as i32;
        }
    }
    Ok(SortOutputs {
        tile,
        tile_idx_to_expert_idx: tile_expert,
        tile_idx_to_mn_limit: tile_limit,
        expanded_idx_to_permuted_idx: e2p,
        permuted_idx_to_expanded_idx: p2e,
        num_non_exiting_tiles: live_tiles as i32,
        total_num_padded_tokens: (live_tiles * t) as i32,
    })
}

/// [`moe_sort`] of a router's ids, which must not hold [`NO_ROUTE`] (refused as out of
/// range, at the first offending route): what the CPU references sort. The same as
/// [`moe_sort`] ([`Padding::Refuse`]); named so the references say whose ids they sort.
pub fn moe_sort_router(
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
) -> Result<SortOutputs> {
    moe_sort_padding(experts, tokens, window, tile, Padding::Refuse)
}

/// The first route (in expanded order) whose expert id is outside `[0, experts)`, the
/// padding id [`NO_ROUTE`] included: what a router's ids must satisfy, and what the sort
/// under [`Padding::Refuse`] reports first. Host paths check it before any upload, so a bad
/// id is refused before anything runs.
pub fn check_user_expert_ids(ids: &[i32], top_k: usize, experts: usize) -> Result<()> {
    if top_k == 0 {
        return Err(RuntimeError::from(PlanError::Zero { what: "top_k" }));
    }
    match ids.iter().position(|&e| usize::try_from(e).map_or(true, |e| e >= experts)) {
        Some(i) => Err(RuntimeError::ExpertOutOfRange {
            token: i / top_k,
            slot: i % top_k,
            expert: i64::from(ids[i]),
            experts,
        }),
        None => Ok(()),
    }
}

/// The first route (in expanded order) whose expert id an earlier slot of the same token
/// already names, with that earliest slot: the same error the device-side check reports.
/// Checked after the ids' range, before the router weights (the device record's order).
pub fn check_distinct_experts(experts: &[i32], top_k: usize) -> Result<()> {
    if top_k == 0 {
        return Err(RuntimeError::from(PlanError::Zero { what: "top_k" }));
    }
    for (token, ids) in experts.chunks(top_k).enumerate() {
        for (slot, &e) in ids.iter().enumerate() {
            // Callers that refuse NO_ROUTE do so in their range check, which comes first;
            // where it is accepted, two padding slots are no duplicate.
            if e == NO_ROUTE {
                continue;
            }
            if let Some(earlier_slot) = ids[..slot].iter().position(|&o| o == e) {
                return Err(RuntimeError::DuplicateExpert {
                    token,
                    slot,
                    earlier_slot,
                    expert: i64::from(e),
                });
            }
        }
    }
    Ok(())
}

/// The first route (in expanded order) whose router weight is NaN or infinite, named by token
/// and slot: the same error the device-side check reports.
pub fn check_router_weights(weights: &[f32], top_k: usize) -> Result<()> {
    match weights.iter().position(|w| !w.is_finite()) {
        Some(i) if top_k > 0 => {
            Err(RuntimeError::NonFiniteRouterWeight { token: i / top_k, slot: i % top_k })
        }
        Some(_) => Err(RuntimeError::from(PlanError::Zero { what: "top_k" })),
        None => Ok(()),
    }
}
