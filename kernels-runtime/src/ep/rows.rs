//! The CPU counterparts of the all-to-all mode's row copies (`ep_gather_rows`,
//! `ep_combine_unpack`). An index outside `[0, routes)` (−1 on padding) is padding.

use half::bf16;

use crate::error::{Result, check_len};

/// The route `sent` names, if it is one of `routes`.
fn route(sent: i32, routes: usize) -> Option<usize> {
    usize::try_from(sent).ok().filter(|&r| r < routes)
}

fn elements(what: &'static str, rows: usize, hidden: usize) -> Result<usize> {
    rows.checked_mul(hidden).ok_or_else(|| moegen_dsl::plan::PlanError::Overflow { what }.into())
}

/// Each send slot's activation row, `x[sent / k]` (`x` is `[tokens, hidden]`), zeros on
/// padding: `[sent.len(), hidden]`.
pub fn gather_rows(
    sent: &[i32],
    x: &[bf16],
    tokens: usize,
    hidden: usize,
    top_k: usize,
) -> Result<Vec<bf16>> {
    check_len("activations", x.len(), elements("activations", tokens, hidden)?)?;
    let routes = tokens
        .checked_mul(top_k)
        .ok_or(moegen_dsl::plan::PlanError::Overflow { what: "tokens × top_k" })?;
    let mut out = vec![bf16::ZERO; elements("send rows", sent.len(), hidden)?];
    for (slot, &s) in sent.iter().enumerate() {
        if let Some(r) = route(s, routes) {
            let t = r / top_k;
            out[slot * hidden..(slot + 1) * hidden]
                .copy_from_slice(&x[t * hidden..(t + 1) * hidden]);
        }
    }
    Ok(out)
}

/// Copies each returned row `recv[slot]` (`[sent.len(), hidden]`) to
/// `routes_out[sent[slot]]` (`[routes, hidden]`); padding slots are skipped and the other
/// rows left as they are.
pub fn combine_unpack(
    sent: &[i32],
    recv: &[bf16],
    routes: usize,
    hidden: usize,
    routes_out: &mut [bf16],
) -> Result<()> {
    check_len("returned rows", recv.len(), elements("returned rows", sent.len(), hidden)?)?;
    check_len("route rows", routes_out.len(), elements("route rows", routes, hidden)?)?;
    for (slot, &s) in sent.iter().enumerate() {
        if let Some(r) = route(s, routes) {
            routes_out[r * hidden..(r + 1) * hidden]
                .copy_from_slice(&recv[slot * hidden..(slot + 1) * hidden]);
        }
    }
    Ok(())
}
