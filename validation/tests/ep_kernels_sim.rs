//! Mode (b)'s SIMT kernels (the dispatch pack, the send rows' gather, the combine's unpack)
//! and the routing sort's padding id, run in moegen-sim against their CPU counterparts:
//! bit-identical outputs, the same typed errors; then the whole exchange (pack, gather,
//! all-to-all, per-route work on the owner, all-to-all back, unpack, finalize) against the
//! single layer's route rows.

use half::bf16;
use moegen_dsl::TileSize;
use moegen_dsl::abi::ep::{NO_ROUTE, Padding};
use moegen_runtime::RuntimeError;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::device_ops::{
    DeviceOpError, device_finalize_reduce, device_moe_sort, device_moe_sort_padding,
};
use moegen_runtime::ep::{
    EpError, EpPartition, PackedSend, combine_unpack, device_ep_combine_unpack,
    device_ep_gather_rows, device_ep_pack, dispatch_routes, gather_rows, pack_routes,
};
use moegen_runtime::routing::{ExpertWindow, moe_sort, moe_sort_padding};

#[path = "../../kernels-runtime/tests/common/mod.rs"]
mod common;
use common::Rng;

/// Distinct experts per token; with `only`, every id from `only`'s window.
fn routing(
    tokens: usize,
    k: usize,
    experts: usize,
    seed: u64,
    only: Option<(i32, i32)>,
) -> Vec<i32> {
    let mut r = Rng(seed);
    let (lo, n) = only.unwrap_or((0, experts as i32));
    let mut ids = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let mut chosen: Vec<i32> = Vec::with_capacity(k);
        while chosen.len() < k {
            let c = lo + (r.next() % n as u64) as i32;
            if !chosen.contains(&c) {
                chosen.push(c);
            }
        }
        ids.extend(chosen);
    }
    ids
}

fn weights(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..n).map(|_| r.normal()).collect()
}

fn rows(n: usize, seed: u64) -> Vec<bf16> {
    let mut r = Rng(seed);
    (0..n).map(|_| bf16::from_f32(r.normal())).collect()
}

/// The pack's blocks hold exactly `dispatch_routes`' lists, then padding.
fn check_layout(p: &EpPartition, ids: &[i32], tokens: usize, got: &PackedSend) {
    let lists = dispatch_routes(p, ids, tokens).unwrap();
    let c = got.per_peer;
    for (d, list) in lists.iter().enumerate() {
        assert_eq!(got.counts[d] as usize, list.len(), "rank {d}'s count");
        for (pos, r) in list.iter().enumerate() {
            assert_eq!(got.sent[d * c + pos], r.expanded(p.top_k()) as i32);
            assert_eq!(got.experts[d * c + pos], r.expert);
        }
        for pos in list.len()..c {
            assert_eq!(
                (got.experts[d * c + pos], got.sent[d * c + pos], got.weights[d * c + pos]),
                (NO_ROUTE, -1, 0.0)
            );
        }
    }
}

#[test]
fn dispatch_pack_matches_the_cpu_pack_bit_for_bit() {
    // (experts, ranks, k, tokens, ids from one window): several chunks of 256 routes, k
    // above and below E/G, every route to one rank.
    let cases = [
        (8, 2, 2, 1, None),
        (8, 2, 2, 37, None),
        (16, 4, 4, 300, None),
        (16, 4, 2, 129, Some((4, 4))),
        (64, 8, 8, 97, None),
        (12, 4, 6, 50, None),
    ];
    for (i, &(experts, ranks, k, tokens, only)) in cases.iter().enumerate() {
        let p = EpPartition::new(experts, ranks, k).unwrap();
        let ids = routing(tokens, k, experts, 5 + i as u64, only);
        let w = weights(tokens * k, 50 + i as u64);
        let c = p.max_routes_to_rank(tokens);
        let want = pack_routes(&p, &ids, &w, tokens, c).unwrap();
        check_layout(&p, &ids, tokens, &want);
        let mut sim = SimBackend::new();
        let got = device_ep_pack(&mut sim, &p, &ids, &w, tokens, c).unwrap();
        assert_eq!(got.experts, want.experts, "case {i}");
        assert_eq!(got.sent, want.sent, "case {i}");
        assert_eq!(got.counts, want.counts, "case {i}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got.weights), bits(&want.weights), "case {i}");
        if only.is_some() {
            let busy = got.counts.iter().filter(|&&n| n > 0).count();
            assert_eq!(busy, 1, "every route to one rank, the others receive nothing");
        }
    }
}

#[test]
fn dispatch_pack_skips_the_padding_id_and_names_bad_input() {
    let p = EpPartition::new(8, 2, 2).unwrap();
    // A dropped route (NO_ROUTE) is packed nowhere and raises nothing, on both sides.
    let ids = [0, NO_ROUTE, 5, 1, NO_ROUTE, NO_ROUTE];
    let w = [0.5, 0.0, 0.25, 1.0, 0.0, 0.0];
    let want = pack_routes(&p, &ids, &w, 3, 6).unwrap();
    assert_eq!(want.counts, vec![2, 1]);
    let got = device_ep_pack(&mut SimBackend::new(), &p, &ids, &w, 3, 6).unwrap();
    assert_eq!(got, want);
    // Out of range, the first offender: the device's record decodes to the CPU pack's error.
    let ids = [0, 1, 2, 8, -1, 3];
    let w = [1.0; 6];
    let want = EpError::ExpertOutOfRange { token: 1, slot: 1, id: 8, experts: 8 };
    assert_eq!(device_ep_pack(&mut SimBackend::new(), &p, &ids, &w, 3, 6), Err(want.clone()));
    assert_eq!(pack_routes(&p, &ids, &w, 3, 6), Err(want));
    // A duplicate expert of a token, then a non-finite weight, named as the single layer
    // names them.
    let dup = [0, 1, 4, 4];
    let want = EpError::Input(RuntimeError::DuplicateExpert {
        token: 1,
        slot: 1,
        earlier_slot: 0,
        expert: 4,
    });
    let err = device_ep_pack(&mut SimBackend::new(), &p, &dup, &[1.0; 4], 2, 4).unwrap_err();
    assert_eq!(err, want);
    assert_eq!(pack_routes(&p, &dup, &[1.0; 4], 2, 4), Err(want));
    let nan = [1.0, 1.0, f32::NAN, 1.0];
    let want = EpError::Input(RuntimeError::NonFiniteRouterWeight { token: 1, slot: 0 });
    let err = device_ep_pack(&mut SimBackend::new(), &p, &[0, 1, 2, 3], &nan, 2, 4).unwrap_err();
    assert_eq!(err, want);
    assert_eq!(pack_routes(&p, &[0, 1, 2, 3], &nan, 2, 4), Err(want));
    // Blocks planned too small: the same peer overflow on both sides (the device's counts
    // name the peer), nothing written past the blocks.
    let ids = [0, 1, 2, 3];
    let want = EpError::PeerOverflow { rank: 0, routes: 4, per_peer: 3 };
    let err = device_ep_pack(&mut SimBackend::new(), &p, &ids, &[1.0; 4], 2, 3).unwrap_err();
    assert_eq!(err, want);
    assert_eq!(pack_routes(&p, &ids, &[1.0; 4], 2, 3), Err(want));
    // The second peer over its block, the first within it.
    let want = EpError::PeerOverflow { rank: 1, routes: 3, per_peer: 2 };
    let uneven = [0, 4, 5, 6];
    let err = device_ep_pack(&mut SimBackend::new(), &p, &uneven, &[1.0; 4], 2, 2);
    assert_eq!(err, Err(want.clone()));
    assert_eq!(pack_routes(&p, &uneven, &[1.0; 4], 2, 2), Err(want));
    let ids = &ids[..];
    // Wrong lengths.
    assert!(matches!(
        device_ep_pack(&mut SimBackend::new(), &p, ids, &[1.0; 3], 2, 4),
        Err(EpError::Input(RuntimeError::BufferLength { what: "router weights", .. }))
    ));
    assert!(matches!(
        pack_routes(&p, ids, &[1.0; 3], 2, 4),
        Err(EpError::Input(RuntimeError::BufferLength { what: "router weights", .. }))
    ));
    assert!(matches!(pack_routes(&p, ids, &[1.0; 4], 3, 4), Err(EpError::RoutingLength { .. })));
}

/// Both SIMT flavours of the sort: sm_100f, then sm_90a.
fn both_targets() -> [SimBackend; 2] {
    [SimBackend::new(), SimBackend::hopper()]
}

#[test]
fn the_routing_sort_skips_the_padding_id_silently_only_when_asked() {
    let skip = Padding::Skip;
    for mut b in both_targets() {
        // An owner's top-1 layer over a received block: real routes, then padding.
        let w = ExpertWindow::new(8, 4, 4, 1).unwrap();
        let mut ids = vec![5, 4, 7, 5];
        ids.extend([NO_ROUTE; 6]);
        let n = ids.len();
        let want = moe_sort_padding(&ids, n, &w, TileSize::T128, skip).unwrap();
        assert!(want.expanded_idx_to_permuted_idx[4..].iter().all(|&p| p == -1));
        let got = device_moe_sort_padding(&mut b, &ids, n, &w, TileSize::T128, skip).unwrap();
        assert_eq!(got, want);
        // Refused by default, at its first slot, on both sides.
        let refused = RuntimeError::ExpertOutOfRange {
            token: 4,
            slot: 0,
            expert: i64::from(NO_ROUTE),
            experts: 8,
        };
        assert_eq!(moe_sort(&ids, n, &w, TileSize::T128), Err(refused.clone()));
        assert_eq!(
            device_moe_sort(&mut b, &ids, n, &w, TileSize::T128),
            Err(DeviceOpError::Input(refused))
        );
        // Two padding slots of one token are no duplicate when skipped; −1 is still an error.
        let w2 = ExpertWindow::new(8, 0, 4, 2).unwrap();
        let ids = [1, NO_ROUTE, NO_ROUTE, NO_ROUTE, 3, 2];
        let want = moe_sort_padding(&ids, 3, &w2, TileSize::T128, skip).unwrap();
        let got = device_moe_sort_padding(&mut b, &ids, 3, &w2, TileSize::T128, skip).unwrap();
        assert_eq!(got, want);
        // Refused, the first padding slot is reported as out of range (not the duplicate
        // pair after it), as −1 would be.
        let refused = RuntimeError::ExpertOutOfRange {
            token: 0,
            slot: 1,
            expert: i64::from(NO_ROUTE),
            experts: 8,
        };
        assert_eq!(moe_sort(&ids, 3, &w2, TileSize::T128), Err(refused.clone()));
        assert_eq!(
            device_moe_sort_padding(&mut b, &ids, 3, &w2, TileSize::T128, Padding::Refuse),
            Err(DeviceOpError::Input(refused))
        );
        let bad = [1, -1, 2, 3];
        let want = RuntimeError::ExpertOutOfRange { token: 0, slot: 1, expert: -1, experts: 8 };
        for padding in [Padding::Refuse, skip] {
            assert_eq!(moe_sort_padding(&bad, 2, &w2, TileSize::T128, padding), Err(want.clone()));
            assert_eq!(
                device_moe_sort_padding(&mut b, &bad, 2, &w2, TileSize::T128, padding),
                Err(DeviceOpError::Input(want.clone()))
            );
        }
    }
}

#[test]
fn row_copies_match_the_cpu_copies_bit_for_bit() {
    let (tokens, k, hidden) = (5, 2, 6);
    let x = rows(tokens * hidden, 3);
    // Real routes, padding, and indices past the routes (skipped, never read or written).
    let sent = [3, -1, 9, 0, 10, 1 << 20, 4, -7];
    let want = gather_rows(&sent, &x, tokens, hidden, k).unwrap();
    let got = device_ep_gather_rows(&mut SimBackend::new(), &sent, &x, tokens, hidden, k).unwrap();
    assert_eq!(got, want);
    assert_eq!(&got[hidden..2 * hidden], &[bf16::ZERO; 6], "padding rows are zeros");
    assert_eq!(&got[2 * hidden..3 * hidden], &x[4 * hidden..5 * hidden], "route 9 is token 4's");
    let recv = rows(sent.len() * hidden, 4);
    let mut want = rows(tokens * k * hidden, 6);
    let mut got = want.clone();
    combine_unpack(&sent, &recv, tokens * k, hidden, &mut want).unwrap();
    device_ep_combine_unpack(&mut SimBackend::new(), &sent, &recv, hidden, &mut got).unwrap();
    assert_eq!(got, want);
    assert_eq!(&got[9 * hidden..10 * hidden], &recv[2 * hidden..3 * hidden]);
    assert!(matches!(
        device_ep_gather_rows(&mut SimBackend::new(), &sent, &x, tokens, 5, k),
        Err(DeviceOpError::Input(RuntimeError::Plan(_)))
    ));
    assert!(matches!(
        combine_unpack(&sent, &recv[1..], tokens * k, hidden, &mut want),
        Err(RuntimeError::BufferLength { what: "returned rows", .. })
    ));
}

/// The owner's stand-in for its top-1 layer: a function of the route's row, expert and
/// weight only (as the layer's route row is), rounded to bf16.
fn owner_row(row: &[bf16], expert: i32, weight: f32) -> Vec<bf16> {
    row.iter().map(|v| bf16::from_f32(v.to_f32() * weight + expert as f32)).collect()
}

#[test]
fn the_exchange_puts_every_route_row_at_its_home_slot() {
    // (experts, ranks, k, tokens, ids from one window)
    for (case, &(experts, ranks, k, tokens, only)) in
        [(8, 2, 2, 9, None), (16, 4, 4, 40, None), (16, 4, 2, 17, Some((8, 4)))].iter().enumerate()
    {
        let hidden = 4;
        let p = EpPartition::new(experts, ranks, k).unwrap();
        let c = p.max_routes_to_rank(tokens);
        // A nonzero seed: the generator's state 0 is a fixed point.
        let seed = 100 * case as u64 + 1;
        let ids: Vec<Vec<i32>> =
            (0..ranks).map(|r| routing(tokens, k, experts, seed + r as u64, only)).collect();
        let ws: Vec<Vec<f32>> =
            (0..ranks).map(|r| weights(tokens * k, seed + 50 + r as u64)).collect();
        let xs: Vec<Vec<bf16>> =
            (0..ranks).map(|r| rows(tokens * hidden, seed + 90 + r as u64)).collect();
        let mut sims: Vec<SimBackend> = (0..ranks).map(|_| SimBackend::new()).collect();
        // Dispatch on every rank's device.
        let mut packs = Vec::new();
        let mut sends = Vec::new();
        for r in 0..ranks {
            let pk = device_ep_pack(&mut sims[r], &p, &ids[r], &ws[r], tokens, c).unwrap();
            sends.push(
                device_ep_gather_rows(&mut sims[r], &pk.sent, &xs[r], tokens, hidden, k).unwrap(),
            );
            packs.push(pk);
        }
        // The all-to-all: rank d receives block d of every rank r, at block r; the owner
        // computes each received route's row and sends block r back to rank r.
        let block = c * hidden;
        let mut back: Vec<Vec<bf16>> = vec![vec![bf16::ZERO; ranks * block]; ranks];
        for d in 0..ranks {
            for r in 0..ranks {
                for pos in 0..c {
                    let slot = d * c + pos;
                    let e = packs[r].experts[slot];
                    if e == NO_ROUTE {
                        continue;
                    }
                    let row = &sends[r][slot * hidden..(slot + 1) * hidden];
                    let out = owner_row(row, e, packs[r].weights[slot]);
                    back[r][slot * hidden..(slot + 1) * hidden].copy_from_slice(&out);
                }
            }
        }
        for r in 0..ranks {
            let mut routes = vec![bf16::from_f32(f32::NAN); tokens * k * hidden];
            device_ep_combine_unpack(&mut sims[r], &packs[r].sent, &back[r], hidden, &mut routes)
                .unwrap();
            // The single layer's route rows: every route computed at home.
            let mut want = Vec::with_capacity(tokens * k * hidden);
            for j in 0..tokens * k {
                let t = j / k;
                want.extend(owner_row(&xs[r][t * hidden..(t + 1) * hidden], ids[r][j], ws[r][j]));
            }
            assert_eq!(routes, want, "case {case}, rank {r}: every route row at its slot");
            let f = |v: &[bf16]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
            let all_local = vec![0; tokens * k];
            let got =
                device_finalize_reduce(&mut sims[r], &f(&routes), &all_local, tokens, k, hidden)
                    .unwrap();
            let single =
                device_finalize_reduce(&mut sims[r], &f(&want), &all_local, tokens, k, hidden)
                    .unwrap();
            assert_eq!(got, single, "case {case}, rank {r}: the finalize, bit for bit");
        }
    }
}

#[test]
fn the_gpu_check_s_simulated_sort_cases_agree_with_the_cpu_padding_included() {
    // What `gpu-check --parts simt` compares on a device (the padding id under both
    // `accept_padding` values among it), here on both simulated flavours.
    use moegen_dsl::abi::SimtTarget;
    use moegen_validation::simt_check::{CASES, SimtCase, check, simulator_for};
    for target in [SimtTarget::Sm100f, SimtTarget::Sm90a] {
        for &(case, simulated) in CASES {
            if !simulated || !matches!(case, SimtCase::Sort(..)) {
                continue;
            }
            let row = check(&mut simulator_for(target), case, false).unwrap();
            assert!(row.device_equal, "{target:?}: {}", row.case);
        }
    }
}
