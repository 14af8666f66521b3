//! An unquantized f64 oracle of the MoE layer, to measure what NVFP4 costs in accuracy.

use super::epilogue::ExpertEpilogue;
use super::gemm2::Routing;
use super::par::par_map;
use crate::error::{Result, RuntimeError, check_len};
use moegen_dsl::Activation;
use moegen_dsl::epilogue_math::ActivationParams;
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
    oracle_moe_epilogue(shape, x, up, gate, down, routing, &ExpertEpilogue::default())
}

/// The f64 activation, by its textbook definition (GeGLU through `tanh`), not the kernels'
/// operation sequence.
fn activation_f64(kind: Activation, p: &ActivationParams, u: f64, g: f64) -> f64 {
    match kind {
        Activation::Swiglu => u * g / (1.0 + (-g).exp()),
        Activation::SwigluClamped => {
            let limit = f64::from(p.limit);
            let g = g.min(limit);
            let u = u.clamp(-limit, limit);
            g / (1.0 + (-f64::from(p.alpha) * g).exp()) * (u + f64::from(p.beta))
        }
        Activation::GegluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * g * (1.0 + (c * (g + 0.044715 * g * g * g)).tanh()) * u
        }
        // Ungated: u is W1·x (+ b1), g is not computed.
        Activation::Relu2 => u.max(0.0).powi(2),
    }
}

/// [`oracle_moe`] with the epilogue functions and data of `ep`: GEMM1's bias added to the
/// up and gate pre-activations, the activation, and GEMM2's bias added before the router
/// weight: `out[t] = Σ w · (down_e · act(W1_e·x + b1_e) + b2_e)`. For an ungated activation
/// (ReLU²) `up` is W1 `[L, I, H]` and `gate` must be empty.
pub fn oracle_moe_epilogue<T: Copy + Into<f32> + Sync>(
    shape: &MoeShape,
    x: &[T],
    up: &[T],
    gate: &[T],
    down: &[T],
    routing: &Routing,
    ep: &ExpertEpilogue,
) -> Result<Vec<f64>> {
    ep.validate(shape)?;
    let kind = ep.spec().activation;
    let (h, i, k, l) = (shape.hidden, shape.intermediate, shape.top_k(), shape.local_experts());
    let n = routing.tokens;
    check_len("activations", x.len(), n * h)?;
    let gated = kind.gated();
    let gate_len = if gated { l * i * h } else { 0 };
    for (what, w, len) in [
        ("up weights", up, l * i * h),
        ("gate weights", gate, gate_len),
        ("down weights", down, l * i * h),
    ] {
        check_len(what, w.len(), len)?;
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
                    if gated {
                        g += f(gate[at + c]) * f(xt[c]);
                    }
                }
                if let Some((bu, bg)) = ep.gemm1_bias(shape, le, j) {
                    u += f64::from(bu);
                    g += f64::from(bg);
                }
                *a = activation_f64(kind, &ep.params(le), u, g);
            }
            let w = f64::from(routing.weights[t * k + s]);
            for (o, out) in row.iter_mut().enumerate() {
                let at = (le * h + o) * i;
                let mut d: f64 = (0..i).map(|j| f(down[at + j]) * act[j]).sum();
                if let Some(b) = ep.gemm2_bias(shape, le, o) {
                    d += f64::from(b);
                }
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
