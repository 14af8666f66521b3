//! Mode (b)'s arithmetic argument on the CPU reference: each owner rank runs its window as a
//! top-1 layer over the routes dispatched to it (compacted, expert-sorted), which yields each
//! route's bf16 row exactly as the single layer computes it; the home rank puts the rows
//! back at their expanded indices and sums them in slot order. The result is the single
//! layer's, bit for bit, in both finalize modes (the reference's bulk order is slot order).

use half::bf16;
use moegen_dsl::formats::{block_amax, nvfp4_global_scale};
use moegen_dsl::{FinalizeMode, TileSize};
use moegen_runtime::ep::{EpPartition, dispatch_routes};
use moegen_runtime::reference::*;
use moegen_runtime::routing::ExpertWindow;

mod common;
use common::Rng;

const H: usize = 256;
const I: usize = 128;
const E: usize = 16;
const K: usize = 4;

struct Model {
    up: Vec<f32>,
    gate: Vec<f32>,
    down: Vec<f32>,
    x: Vec<f32>,
    ids: Vec<i32>,
    weights: Vec<f32>,
    scale: f32,
}

fn model(tokens: usize, seed: u64, experts: &[i32]) -> Model {
    let mut r = Rng(seed);
    let s = 1.0 / (H as f32).sqrt();
    let up = (0..E * I * H).map(|_| r.normal() * s).collect();
    let gate = (0..E * I * H).map(|_| r.normal() * s).collect();
    let down = (0..E * H * I).map(|_| r.normal() / (I as f32).sqrt()).collect();
    let x: Vec<f32> = (0..tokens * H).map(|_| bf16::from_f32(r.normal()).to_f32()).collect();
    let mut ids = Vec::new();
    for _ in 0..tokens {
        let mut pool = experts.to_vec();
        for _ in 0..K {
            ids.push(pool.swap_remove((r.next() % pool.len() as u64) as usize));
        }
    }
    let weights = (0..tokens * K).map(|_| 0.05 + (r.next() % 1000) as f32 / 1000.0).collect();
    let scale = nvfp4_global_scale(block_amax(&x)).unwrap();
    Model { up, gate, down, x, ids, weights, scale }
}

fn weights_of(m: &Model, shape: &MoeShape) -> PreparedWeights {
    let (first, l) = (shape.window.offset(), shape.local_experts());
    let part = |v: &[f32]| v[first * I * H..(first + l) * I * H].to_vec();
    prepare_weights(shape, &part(&m.up), &part(&m.gate), &part(&m.down), m.scale, 336.0).unwrap()
}

fn opts(finalize: FinalizeMode) -> ReferenceOptions {
    ReferenceOptions { finalize, ..Default::default() }
}

fn single(m: &Model, tokens: usize, finalize: FinalizeMode) -> Vec<bf16> {
    let shape = MoeShape::new(H, I, ExpertWindow::new(E, 0, E, K).unwrap()).unwrap();
    let acts = quantize_activations(&m.x, tokens, H, m.scale).unwrap();
    let routing = Routing { tokens, experts: m.ids.clone(), weights: m.weights.clone() };
    moe_reference(&shape, &acts, &weights_of(m, &shape), &routing, TileSize::T128, opts(finalize))
        .unwrap()
        .output
}

/// Mode (b) over `g` ranks of `n` tokens each: dispatch, per-owner top-1 layers, combine.
fn all_to_all(m: &Model, g: usize, n: usize, finalize: FinalizeMode) -> Vec<bf16> {
    let p = EpPartition::new(E, g, K).unwrap();
    // What each owner receives: one block per home rank, in home-rank order.
    let mut received: Vec<Vec<(usize, moegen_runtime::ep::SentRoute)>> = vec![Vec::new(); g];
    for home in 0..g {
        let ids = &m.ids[home * n * K..(home + 1) * n * K];
        for (owner, routes) in dispatch_routes(&p, ids, n).unwrap().into_iter().enumerate() {
            assert!(routes.len() <= p.max_routes_to_rank(n));
            received[owner].extend(routes.into_iter().map(|r| (home, r)));
        }
    }
    let mut contrib = vec![0f32; g * n * K * H];
    for (owner, routes) in received.iter().enumerate() {
        if routes.is_empty() {
            continue;
        }
        let shape =
            MoeShape::new(H, I, ExpertWindow::new(E, owner * E / g, E / g, 1).unwrap()).unwrap();
        let token = |&(home, r): &(usize, moegen_runtime::ep::SentRoute)| home * n + r.token;
        let x: Vec<f32> =
            routes.iter().flat_map(|hr| m.x[token(hr) * H..(token(hr) + 1) * H].to_vec()).collect();
        let acts = quantize_activations(&x, routes.len(), H, m.scale).unwrap();
        let routing = Routing {
            tokens: routes.len(),
            experts: routes.iter().map(|(_, r)| r.expert).collect(),
            weights: routes.iter().map(|hr| m.weights[token(hr) * K + hr.1.slot]).collect(),
        };
        let w = weights_of(m, &shape);
        let rows = moe_reference(&shape, &acts, &w, &routing, TileSize::T128, opts(finalize))
            .unwrap()
            .output;
        // The combine: each row back to its home rank, at its expanded index.
        for (j, &(home, r)) in routes.iter().enumerate() {
            let at = (home * n * K + r.expanded(K)) * H;
            for (c, v) in contrib[at..at + H].iter_mut().zip(&rows[j * H..(j + 1) * H]) {
                *c = v.to_f32();
            }
        }
    }
    moegen_runtime::reference::finalize(&contrib, g * n, K, H, finalize).unwrap()
}

#[test]
fn all_to_all_routes_recombined_in_slot_order_equal_the_single_layer() {
    for finalize in [FinalizeMode::Deterministic, FinalizeMode::BulkReduceAdd] {
        for (g, n, seed) in [(2, 3, 1), (4, 2, 2), (8, 2, 3)] {
            let all: Vec<i32> = (0..E as i32).collect();
            let m = model(g * n, seed, &all);
            assert_eq!(all_to_all(&m, g, n, finalize), single(&m, g * n, finalize), "G = {g}");
        }
        // Owners 2 and 3 of 4 receive nothing; then every route to rank 0 of 2.
        let m = model(8, 4, &(0..8).collect::<Vec<_>>());
        assert_eq!(all_to_all(&m, 4, 2, finalize), single(&m, 8, finalize), "idle owners");
        assert_eq!(all_to_all(&m, 2, 4, finalize), single(&m, 8, finalize), "one owner");
    }
}
