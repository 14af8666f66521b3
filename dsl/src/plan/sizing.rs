//! Worst-case tile and row counts (moe-pipeline.md §4): every buffer and static launch grid
//! derives from [`max_tiles`].

use super::error::{PlanError, Result};

/// The most routing tiles `expanded_rows` routes (N·k) can occupy over `local_experts`
/// experts with `tile`-row tiles, over every possible distribution:
/// `E ≤ L ? E : (E + (T−1)·L) / T`.
///
/// Σ_e ceil(K_e/T) ≤ Σ_e (K_e+T−1)/T = (E + (T−1)L)/T, and the sum is an integer, so its
/// floor bounds it; L−1 experts holding one row and one holding the rest attains it. With
/// E ≤ L at most E experts hold a row, one tile each. (The upstream bound L + ceil((E−L)/T)
/// over-counts by one whenever (E−L) mod T ≠ 0.)
pub fn max_tiles(expanded_rows: u64, local_experts: u64, tile: u64) -> Result<u64> {
    if expanded_rows == 0 {
        return Err(PlanError::Zero { what: "expanded rows (tokens × top_k)" });
    }
    if local_experts == 0 {
        return Err(PlanError::Zero { what: "local experts" });
    }
    if tile == 0 {
        return Err(PlanError::Zero { what: "tile size" });
    }
    if expanded_rows <= local_experts {
        return Ok(expanded_rows);
    }
    let overflow = PlanError::Overflow { what: "max_tiles" };
    let padding = (tile - 1).checked_mul(local_experts).ok_or(overflow.clone())?;
    Ok(expanded_rows.checked_add(padding).ok_or(overflow)? / tile)
}

/// Rows of the permuted (padded) activation buffers: `max_tiles · T`.
pub fn max_permuted_rows(expanded_rows: u64, local_experts: u64, tile: u64) -> Result<u64> {
    max_tiles(expanded_rows, local_experts, tile)?
        .checked_mul(tile)
        .ok_or(PlanError::Overflow { what: "max_permuted_rows" })
}

/// N·k with overflow checking.
pub fn expanded_rows(tokens: u64, top_k: u64) -> Result<u64> {
    if tokens == 0 {
        return Err(PlanError::Zero { what: "tokens" });
    }
    if top_k == 0 {
        return Err(PlanError::Zero { what: "top_k" });
    }
    tokens.checked_mul(top_k).ok_or(PlanError::Overflow { what: "tokens × top_k" })
}
