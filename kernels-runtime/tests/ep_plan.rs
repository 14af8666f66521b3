//! Expert parallelism's pure parts on the CPU: the expert → rank partition, both modes'
//! per-rank buffer plans, and mode (b)'s dispatch layout.

use moegen_dsl::plan::{ExpertWindow, PlanError};
use moegen_runtime::ep::*;
use moegen_runtime::layer::WORKSPACE_ALIGN;
use proptest::prelude::*;

#[test]
fn deepseek_over_8_ranks_gives_32_contiguous_experts_each() {
    let p = EpPartition::new(256, 8, 8).unwrap();
    assert_eq!(p.local_experts(), 32);
    for r in 0..8 {
        assert_eq!(p.window(r).unwrap(), ExpertWindow::new(256, 32 * r, 32, 8).unwrap());
    }
    assert_eq!(p.owner(0), Some(0));
    assert_eq!(p.owner(31), Some(0));
    assert_eq!(p.owner(32), Some(1));
    assert_eq!(p.owner(255), Some(7));
    assert_eq!(p.owner(256), None);
    assert_eq!(p.owner(-1), None);
    // A token's 8 distinct experts can all be one rank's.
    assert_eq!(p.max_routes_to_rank(16), 128);
    // With 2 experts per rank, at most 2 of a token's routes go to one rank.
    assert_eq!(EpPartition::new(16, 8, 4).unwrap().max_routes_to_rank(10), 20);
}

#[test]
fn bad_partitions_are_typed_errors_naming_the_input() {
    assert_eq!(EpPartition::new(256, 0, 8), Err(EpError::ZeroRanks));
    assert_eq!(
        EpPartition::new(256, 3, 8),
        Err(EpError::ExpertsNotDivisible { experts: 256, ranks: 3 })
    );
    assert_eq!(
        EpPartition::new(0, 2, 1),
        Err(EpError::ExpertsNotDivisible { experts: 0, ranks: 2 })
    );
    assert!(matches!(
        EpPartition::new(16, 2, 17),
        Err(EpError::Plan(PlanError::TopKTooLarge { top_k: 17, experts: 16 }))
    ));
    assert!(matches!(EpPartition::new(16, 2, 0), Err(EpError::Plan(PlanError::Zero { .. }))));
    let p = EpPartition::new(16, 4, 4).unwrap();
    assert_eq!(p.window(4), Err(EpError::RankOutOfRange { rank: 4, ranks: 4 }));
    let e = EpPartition::new(256, 3, 8).unwrap_err().to_string();
    assert!(e.contains("256 experts") && e.contains("3 equal windows"), "{e}");
}

fn check_layout(l: &EpLayout) {
    let mut end = 0;
    for &(b, offset, bytes) in &l.buffers {
        assert_eq!(offset % WORKSPACE_ALIGN, 0, "{b:?}");
        assert!(offset >= end, "{b:?} overlaps the buffer before it");
        end = offset + bytes;
    }
    assert!(l.bytes >= end);
}

#[test]
fn all_gather_plans_size_every_buffer_for_every_rank_s_tokens() {
    let p = EpPartition::new(256, 8, 8).unwrap();
    let (n, h) = (16384, 7168);
    let bulk = AllGatherPlan::new(p, n, h, false).unwrap();
    assert_eq!(bulk.layer_tokens(), 8 * n);
    let g = 8 * n as u64;
    assert_eq!(bulk.layout.get(EpBuffer::Activations).unwrap().1, g * 7168 * 2);
    assert_eq!(bulk.layout.get(EpBuffer::ExpertIds).unwrap().1, g * 8 * 4);
    assert_eq!(bulk.layout.get(EpBuffer::RouterWeights).unwrap().1, g * 8 * 4);
    assert_eq!(bulk.layout.get(EpBuffer::Partial).unwrap().1, g * 7168 * 2);
    assert_eq!(bulk.layout.get(EpBuffer::Routes), None);
    check_layout(&bulk.layout);
    let det = AllGatherPlan::new(p, n, h, true).unwrap();
    assert_eq!(det.layout.get(EpBuffer::Partial), None);
    assert_eq!(det.layout.get(EpBuffer::Routes).unwrap().1, n as u64 * 8 * 7168 * 2);
    assert_eq!(det.layout.get(EpBuffer::AllLocal).unwrap().1, n as u64 * 8 * 4);
    check_layout(&det.layout);
    let spec = det.workspace_spec(
        2048,
        vec![moegen_dsl::TileSize::T128],
        moegen_dsl::Arch::Sm90,
        moegen_dsl::ActivationFormat::Bf16,
    );
    assert_eq!((spec.max_tokens, spec.top_k, spec.max_local_experts), (8 * n, 8, 32));
    assert!(spec.deterministic);
}

#[test]
fn all_to_all_plans_use_one_worst_case_block_per_peer() {
    let p = EpPartition::new(256, 8, 8).unwrap();
    let plan = AllToAllPlan::new(p, 1024, 7168).unwrap();
    assert_eq!(plan.per_peer, 1024 * 8);
    assert_eq!(plan.layer_tokens(), 8 * 1024 * 8);
    let rows = 8 * 1024 * 8u64;
    assert_eq!(plan.layout.get(EpBuffer::Activations).unwrap().1, rows * 7168 * 2);
    assert_eq!(plan.layout.get(EpBuffer::ExpertIds).unwrap().1, rows * 4);
    assert_eq!(plan.layout.get(EpBuffer::CombineRecv).unwrap().1, rows * 7168 * 2);
    assert_eq!(plan.layout.get(EpBuffer::Routes).unwrap().1, 1024 * 8 * 7168 * 2);
    check_layout(&plan.layout);
    // Fewer experts per rank than k caps the block.
    let narrow = AllToAllPlan::new(EpPartition::new(16, 8, 4).unwrap(), 10, 256).unwrap();
    assert_eq!(narrow.per_peer, 20);
}

#[test]
fn all_to_all_plans_hold_the_pack_s_outputs_and_a_top_1_layer() {
    let p = EpPartition::new(256, 8, 8).unwrap();
    let plan = AllToAllPlan::new(p, 1024, 7168).unwrap();
    let rows = 8 * 1024 * 8u64;
    for b in [EpBuffer::SendExperts, EpBuffer::SendWeights, EpBuffer::SentRoutes] {
        assert_eq!(plan.layout.get(b).unwrap().1, rows * 4, "{b:?}");
    }
    assert_eq!(plan.layout.get(EpBuffer::CombineSend).unwrap().1, rows * 7168 * 2);
    assert_eq!(plan.layout.get(EpBuffer::PeerCounts).unwrap().1, 8 * 4);
    let words = moegen_dsl::abi::error_record::WORDS as u64;
    assert_eq!(plan.layout.get(EpBuffer::PackRecord).unwrap().1, words * 4);
    assert_eq!(plan.layout.get(EpBuffer::Partial), None);
    let spec = plan.workspace_spec(
        2048,
        vec![moegen_dsl::TileSize::T128],
        false,
        moegen_dsl::Arch::Sm90,
        moegen_dsl::ActivationFormat::Bf16,
    );
    assert_eq!((spec.max_tokens, spec.top_k, spec.max_local_experts), (8 * 1024 * 8, 1, 32));
    assert!(!spec.deterministic);
    // The mode's plan and layer window: top-1 in mode (b), the partition's window in (a).
    let ep = EpPlan::from(plan.clone());
    assert_eq!((ep.mode(), ep.layer_top_k(), ep.deterministic()), (EpMode::AllToAll, 1, None));
    assert_eq!(ep.layer_tokens(), plan.layer_tokens());
    let a = EpPlan::from(AllGatherPlan::new(p, 1024, 7168, true).unwrap());
    assert_eq!((a.mode(), a.layer_top_k(), a.deterministic()), (EpMode::AllGather, 8, Some(true)));
    assert_eq!(EpMode::default(), EpMode::AllGather);
    assert_eq!(EpMode::AllGather.layer_window(&p, 3).unwrap(), p.window(3).unwrap());
    assert_eq!(
        EpMode::AllToAll.layer_window(&p, 3).unwrap(),
        ExpertWindow::new(256, 96, 32, 1).unwrap()
    );
    assert_eq!(
        EpMode::AllToAll.layer_window(&p, 8),
        Err(EpError::RankOutOfRange { rank: 8, ranks: 8 })
    );
}

#[test]
fn plans_refuse_zero_and_overflowing_sizes() {
    let p = EpPartition::new(16, 2, 4).unwrap();
    assert_eq!(
        AllGatherPlan::new(p, 0, 256, false),
        Err(EpError::Plan(PlanError::Zero { what: "tokens per rank" }))
    );
    assert_eq!(AllToAllPlan::new(p, 4, 0), Err(EpError::Plan(PlanError::Zero { what: "hidden" })));
    assert!(matches!(
        AllGatherPlan::new(p, usize::MAX / 2, 7168, true),
        Err(EpError::Plan(PlanError::Overflow { .. }))
    ));
}

#[test]
fn dispatch_refuses_bad_routing_naming_token_and_slot() {
    let p = EpPartition::new(16, 4, 2).unwrap();
    assert_eq!(
        dispatch_routes(&p, &[0, 1, 2, 16], 2),
        Err(EpError::ExpertOutOfRange { token: 1, slot: 1, id: 16, experts: 16 })
    );
    assert_eq!(
        dispatch_routes(&p, &[0, 1, 2], 2),
        Err(EpError::RoutingLength { given: 3, tokens: 2, top_k: 2, needed: 4 })
    );
    // Every route on one rank: the others receive nothing.
    let d = dispatch_routes(&p, &[3, 0, 1, 2], 2).unwrap();
    assert_eq!(d[0].len(), 4);
    assert!(d[1..].iter().all(Vec::is_empty));
    assert_eq!(
        d[0].iter().map(|r| (r.expert, r.expanded(2))).collect::<Vec<_>>(),
        vec![(0, 1), (1, 2), (2, 3), (3, 0)]
    );
}

/// Routing of `tokens` tokens, each naming `k` distinct experts of `experts`.
fn routing(experts: usize, k: usize) -> impl Strategy<Value = (usize, Vec<i32>)> {
    (1usize..24).prop_flat_map(move |tokens| {
        let token = Just((0..experts as i32).collect::<Vec<_>>())
            .prop_shuffle()
            .prop_map(move |v| v[..k].to_vec());
        (Just(tokens), proptest::collection::vec(token, tokens))
            .prop_map(|(t, rows)| (t, rows.concat()))
    })
}

proptest! {
    #[test]
    fn dispatch_sends_every_route_once_to_its_owner_expert_sorted(
        (ranks, (tokens, ids)) in (1usize..=4).prop_flat_map(|g| (Just(g), routing(16, 4)))
    ) {
        let g = [1, 2, 4, 8][ranks - 1];
        let p = EpPartition::new(16, g, 4).unwrap();
        let d = dispatch_routes(&p, &ids, tokens).unwrap();
        prop_assert_eq!(d.len(), g);
        let mut seen = vec![false; ids.len()];
        for (rank, routes) in d.iter().enumerate() {
            prop_assert!(routes.len() <= p.max_routes_to_rank(tokens));
            let w = p.window(rank).unwrap();
            for r in routes {
                prop_assert!(w.local_of(r.expert as usize).is_some());
                prop_assert_eq!(ids[r.expanded(4)], r.expert);
                prop_assert!(!seen[r.expanded(4)]);
                seen[r.expanded(4)] = true;
            }
            // Expert-sorted, and by expanded index within an expert (the routing sort's order).
            for pair in routes.windows(2) {
                prop_assert!((pair[0].expert, pair[0].expanded(4)) < (pair[1].expert, pair[1].expanded(4)));
            }
        }
        prop_assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn windows_tile_the_experts_and_owner_agrees(ranks in 1usize..=16, per in 1usize..=8) {
        let experts = ranks * per;
        let p = EpPartition::new(experts, ranks, 1).unwrap();
        for e in 0..experts {
            let r = p.owner(e as i32).unwrap();
            prop_assert!(p.window(r).unwrap().local_of(e).is_some());
            for other in (0..ranks).filter(|&o| o != r) {
                prop_assert!(p.window(other).unwrap().local_of(e).is_none());
            }
        }
    }

    #[test]
    fn plan_layouts_never_overlap(ranks in 1usize..=8, n in 1usize..5000, h in 1usize..9000, det: bool) {
        let p = EpPartition::new(8 * ranks, ranks, 8).unwrap();
        check_layout(&AllGatherPlan::new(p, n, h, det).unwrap().layout);
        check_layout(&AllToAllPlan::new(p, n, h).unwrap().layout);
    }
}
