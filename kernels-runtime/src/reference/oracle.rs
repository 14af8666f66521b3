//! An unquantized f64 oracle of the MoE layer, to measure what NVFP4 costs in accuracy.

use super::gemm2::Routing;
use super::par::par_map;
use crate::error::{Result, RuntimeError, check_len};
use moegen_dsl::plan::MoeShape;

/// `out[t] = Σ_local routes w · down_e · (up_e·x ⊙ silu(gate_e·x))` in f64, from the
/// unquantized weights `up`, `gate` `[L, I, H]`, `down` `[L, H, I]` and activations
/// `[tokens, H]`.
pub fn oracle_moe<T: Copy + Into<f32> + Sync>(
    shape: &MoeShape,
    x: &[T],
    up: &[T],
    gate: &[T],
    down: &[T],
    routing: &Routing,
) -> Result<Vec<f64>> {
    let (h, i, k, l) = (shape.hidden, shape.intermediate, shape.top_k(), shape.local_experts());
    let n = routing.tokens;
    check_len("activations", x.len(), n * h)?;
    for (what, w) in [("up weights", up), ("gate weights", gate), ("down weights", down)] {
        check_len(what, w.len(), l * i * h)?;
    }
    check_len("routing experts", routing.experts.len(), n * k)?;
    check_len("router weights", routing.weights.len(), n * k)?;
    // The device's order: every expert id first, then the weights.
    for (r, &e) in routing.experts.iter().enumerate() {
        if e < 0 || e as usize >= shape.window.num_experts() {
            return Err(RuntimeError::ExpertOutOfRange {
                token: r / k,
                slot: r % k,
                expert: i64::from(e),
                experts: shape.window.num_experts(),
            });
        }
    }
    crate::routing::check_distinct_experts(&routing.experts, k)?;
    crate::routing::check_router_weights(&routing.weights, k)?;
    let f = |v: T| f64::from(v.into());
    // Tokens are independent: one output row each, on every core.
    let token_ids: Vec<usize> = (0..n).collect();
    let rows = par_map(&token_ids, |&t| {
        let xt = &x[t * h..(t + 1) * h];
        let mut row = vec![0f64; h];
        let mut act = vec![0f64; i];
        for s in 0..k {
            let e = routing.experts[t * k + s];
            let Some(le) = (e as usize).checked_sub(shape.window.offset()).filter(|&le| le < l)
            else {
                continue;
            };
            for (j, a) in act.iter_mut().enumerate() {
                let at = (le * i + j) * h;
                let (mut u, mut g) = (0f64, 0f64);
                for c in 0..h {
                    u += f(up[at + c]) * f(xt[c]);
                    g += f(gate[at + c]) * f(xt[c]);
                }
                *a = u * g / (1.0 + (-g).exp());
            }
            let w = f64::from(routing.weights[t * k + s]);
            for (o, out) in row.iter_mut().enumerate() {
                let at = (le * h + o) * i;
                let d: f64 = (0..i).map(|j| f(down[at + j]) * act[j]).sum();
                *out += w * d;
            }
        }
        row
    });
    Ok(rows.concat())
}

/// ‖approx − exact‖₂ / ‖exact‖₂ (0 when both are zero, infinity when only `exact` is).
pub fn relative_l2_error(approx: &[f64], exact: &[f64]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (a, e) in approx.iter().zip(exact) {
        num += (a - e) * (a - e);
        den += e * e;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}
