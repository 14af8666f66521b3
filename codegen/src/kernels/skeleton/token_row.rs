//! The token row a permuted row of a routing tile reads: permuted → expanded (the
//! `permuted_idx_to_expanded_idx` table) → token (expanded / top_k).

use crate::ptx::ops::memory::ld;
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, Space, Ty};

/// A permuted row's token and whether the row is valid.
#[derive(Clone, Copy, Debug)]
pub struct TokenRow {
    /// The token (0 for an invalid row: a valid address that the copy then reads nothing
    /// from).
    pub token: Reg,
    /// Whether the row is below the routing tile's `mn_limit`.
    pub valid: Reg,
}

/// The token of permuted `row`; rows at or past `mn_limit` read no table entry (the table
/// holds nothing valid there).
pub fn token_of_row(
    b: &mut KernelBuilder,
    p2e: Reg,
    top_k: Reg,
    row: Reg,
    mn_limit: Reg,
) -> TokenRow {
    let valid = b.setp_u32(Cmp::Lt, row, mn_limit);
    let exp_addr = b.index_addr(p2e, row, 4);
    let expanded = b.mov_u32(0u32);
    b.emit_if(
        Guard::when(valid),
        ld(Space::Global, Ty::U32),
        vec![expanded.into(), Operand::addr(exp_addr)],
    );
    let token = b.div_u32(expanded, top_k);
    TokenRow { token, valid }
}
