//! A token's route and the row the routing sort placed it in: the lookup of the SIMT kernels
//! that walk a token's top-k slots (the A8 token quantizer's scale scatter, the
//! deterministic finalize's reduction), written once.

use crate::ptx::{Cmp, KernelBuilder, Label, Reg, RegClass, Ty};

/// Route `token · top_k + slot` and its permuted row.
#[derive(Clone, Copy, Debug)]
pub struct LocalRoute {
    /// The expanded index (`token · top_k + slot`).
    pub route: Reg,
    /// Its row in the permuted order.
    pub permuted: Reg,
}

/// Reads where the sort put route `token · top_k + slot` (`e2p`:
/// `expanded_idx_to_permuted_idx`) and branches to `skip` when its expert is not local
/// (the sort wrote −1 there).
pub fn local_route(
    b: &mut KernelBuilder,
    e2p: Reg,
    token: Reg,
    top_k: Reg,
    slot: Reg,
    skip: &Label,
) -> LocalRoute {
    let route = b.mad_u32(token, top_k, slot);
    let at = b.index_addr(e2p, route, 4);
    let permuted = b.ld_global(Ty::S32, RegClass::B32, at);
    let nonlocal = b.setp_s32(Cmp::Lt, permuted, 0i32);
    b.bra_if(nonlocal, skip);
    LocalRoute { route, permuted }
}
