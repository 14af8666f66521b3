//! The routing sort's six outputs.

use moegen_dsl::TileSize;
use moegen_dsl::plan::{PlanError, max_tiles};
use moegen_runtime::RuntimeError;
use moegen_runtime::routing::{ExpertWindow, SortOutputs, moe_sort};
use proptest::prelude::*;

fn window(experts: usize, offset: usize, local: usize, k: usize) -> ExpertWindow {
    ExpertWindow::new(experts, offset, local, k).unwrap()
}

#[test]
fn hand_worked_example() {
    // 8 experts, local window [2, 6), k = 2, 5 tokens, T = 128.
    let experts = [2, 7, 5, 2, 0, 1, 2, 5, 3, 6];
    let w = window(8, 2, 4, 2);
    let s = moe_sort(&experts, 5, &w, TileSize::T128).unwrap();
    // Local counts: expert 2 (local 0): routes 0, 3, 6; local 1 (expert 3): route 8;
    // local 3 (expert 5): routes 2, 7; local 2 (expert 4): none.
    assert_eq!(s.num_non_exiting_tiles, 3);
    assert_eq!(s.total_num_padded_tokens, 384);
    assert_eq!(s.max_tiles(), max_tiles(10, 4, 128).unwrap() as usize);
    assert_eq!(&s.tile_idx_to_expert_idx[..3], &[0, 1, 3]);
    assert_eq!(&s.tile_idx_to_mn_limit[..3], &[3, 129, 258]);
    assert!(s.tile_idx_to_expert_idx[3..].iter().all(|&e| e == -1));
    assert!(s.tile_idx_to_mn_limit[3..].iter().all(|&m| m == 0));
    assert_eq!(s.expanded_idx_to_permuted_idx, vec![0, -1, 256, 1, -1, -1, 2, 257, 128, -1]);
    // Expanded ids (token·k + slot), not token ids (FlashInfer #2629).
    assert_eq!(&s.permuted_idx_to_expanded_idx[..3], &[0, 3, 6]);
    assert_eq!(s.permuted_idx_to_expanded_idx[128], 8);
    assert_eq!(&s.permuted_idx_to_expanded_idx[256..258], &[2, 7]);
    assert_eq!(s.permuted_idx_to_expanded_idx[3], -1, "padding rows");
    assert_eq!(s.route_of_row(257, 2), Some((3, 3, 1)));
    assert_eq!(s.route_of_row(3, 2), None);
}

#[test]
fn edge_cases() {
    let w = window(8, 4, 4, 1);
    // All tokens on one expert.
    let s = moe_sort(&[5; 300], 300, &w, TileSize::T128).unwrap();
    assert_eq!(s.num_non_exiting_tiles, 3);
    assert_eq!(&s.tile_idx_to_expert_idx[..3], &[1, 1, 1]);
    assert_eq!(&s.tile_idx_to_mn_limit[..3], &[128, 256, 300]);
    // No local routes at all.
    let s = moe_sort(&[0, 1, 2, 3], 4, &w, TileSize::T256).unwrap();
    assert_eq!((s.num_non_exiting_tiles, s.total_num_padded_tokens), (0, 0));
    assert!(s.expanded_idx_to_permuted_idx.iter().all(|&p| p == -1));
    assert!(s.permuted_idx_to_expanded_idx.iter().all(|&p| p == -1));
    // Empty local experts between used ones get no tiles.
    let s = moe_sort(&[4, 7], 2, &w, TileSize::T128).unwrap();
    assert_eq!(&s.tile_idx_to_expert_idx[..2], &[0, 3]);
    assert_eq!(&s.tile_idx_to_mn_limit[..2], &[1, 129]);
}

#[test]
fn invalid_input_is_a_typed_error() {
    let w = window(8, 0, 8, 2);
    assert_eq!(
        moe_sort(&[0, 8], 1, &w, TileSize::T128),
        Err(RuntimeError::ExpertOutOfRange { token: 0, slot: 1, expert: 8, experts: 8 })
    );
    assert!(matches!(
        moe_sort(&[-1, 0], 1, &w, TileSize::T128),
        Err(RuntimeError::ExpertOutOfRange { .. })
    ));
    // One expert at two slots of a token: the first such route, the earliest same slot.
    let w4 = window(8, 0, 8, 4);
    assert_eq!(
        moe_sort(&[0, 1, 2, 3, 4, 5, 4, 5, 6, 6, 6, 7], 3, &w4, TileSize::T128),
        Err(RuntimeError::DuplicateExpert { token: 1, slot: 2, earlier_slot: 0, expert: 4 })
    );
    // Non-local experts too (the routing is wrong whatever the rank).
    let w_far = window(8, 0, 2, 4);
    assert_eq!(
        moe_sort(&[7, 0, 7, 1], 1, &w_far, TileSize::T128),
        Err(RuntimeError::DuplicateExpert { token: 0, slot: 2, earlier_slot: 0, expert: 7 })
    );
    // An out-of-range id anywhere wins over a duplicate earlier in the routing.
    assert!(matches!(
        moe_sort(&[0, 0, 1, 2, 3, 4, 5, 9], 2, &w4, TileSize::T128),
        Err(RuntimeError::ExpertOutOfRange { token: 1, slot: 3, .. })
    ));
    assert!(matches!(
        moe_sort(&[0, 1, 2], 1, &w, TileSize::T128),
        Err(RuntimeError::BufferLength { .. })
    ));
    assert!(matches!(
        moe_sort(&[], 0, &w, TileSize::T128),
        Err(RuntimeError::Plan(PlanError::Zero { .. }))
    ));
    assert!(matches!(ExpertWindow::new(8, 0, 8, 9), Err(PlanError::TopKTooLarge { .. })));
    assert!(matches!(ExpertWindow::new(8, 6, 4, 2), Err(PlanError::LocalWindow { .. })));
    assert!(matches!(ExpertWindow::new(8, usize::MAX, 4, 2), Err(PlanError::LocalWindow { .. })));
    assert!(matches!(ExpertWindow::new(0, 0, 1, 1), Err(PlanError::Zero { .. })));
    assert!(matches!(ExpertWindow::new(8, 0, 0, 1), Err(PlanError::Zero { .. })));
}

/// Checks every documented property of the outputs against the input.
fn check_invariants(experts: &[i32], w: &ExpertWindow, s: &SortOutputs) {
    let t = s.tile.rows() as usize;
    let mut counts = vec![0usize; w.local()];
    for &e in experts {
        if (w.offset()..w.offset() + w.local()).contains(&(e as usize)) {
            counts[e as usize - w.offset()] += 1;
        }
    }
    let tiles: usize = counts.iter().map(|c| c.div_ceil(t)).sum();
    assert_eq!(s.num_non_exiting_tiles as usize, tiles);
    assert_eq!(s.total_num_padded_tokens as usize, tiles * t);
    assert!(tiles <= s.max_tiles());
    // Tiles of each expert are contiguous and in expert order.
    let live = &s.tile_idx_to_expert_idx[..tiles];
    assert!(live.windows(2).all(|p| p[0] <= p[1]));
    let mut start = 0;
    for (e, &c) in counts.iter().enumerate() {
        let n = c.div_ceil(t);
        for k in 0..n {
            assert_eq!(s.tile_idx_to_expert_idx[start + k], e as i32);
            assert_eq!(
                s.tile_idx_to_mn_limit[start + k] as usize,
                ((start + k + 1) * t).min(start * t + c)
            );
        }
        start += n;
    }
    // Maps are inverse; each local route is placed once, inside its expert's tiles.
    for (i, &e) in experts.iter().enumerate() {
        let p = s.expanded_idx_to_permuted_idx[i];
        let local = (w.offset()..w.offset() + w.local()).contains(&(e as usize));
        assert_eq!(p >= 0, local, "route {i}");
        if local {
            assert_eq!(s.permuted_idx_to_expanded_idx[p as usize], i as i32);
            let tile = p as usize / t;
            assert_eq!(s.tile_idx_to_expert_idx[tile] as usize, e as usize - w.offset());
            assert!((p as usize) < s.tile_idx_to_mn_limit[tile] as usize);
        }
    }
    let placed = s.permuted_idx_to_expanded_idx.iter().filter(|&&x| x >= 0).count();
    assert_eq!(placed, counts.iter().sum::<usize>());
}

proptest! {
    #[test]
    fn outputs_satisfy_the_contract(
        tokens in 1usize..400,
        k in 1usize..5,
        num_experts in 4usize..40,
        seed in any::<u64>(),
        big_tile in any::<bool>(),
    ) {
        let local = 1 + (seed as usize % num_experts);
        let offset = (seed as usize / 7) % (num_experts - local + 1);
        let w = ExpertWindow::new(num_experts, offset, local, k.min(num_experts)).unwrap();
        let mut x = seed | 1;
        let mut next = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
        let mut experts: Vec<i32> = Vec::with_capacity(tokens * w.top_k());
        for _ in 0..tokens {
            // Half the tokens name one expert, to exercise long runs; a token's experts
            // are distinct.
            let mut chosen: Vec<i32> = Vec::with_capacity(w.top_k());
            if next() % 2 == 0 {
                chosen.push((offset + local / 2) as i32);
            }
            while chosen.len() < w.top_k() {
                let c = (next() % num_experts as u64) as i32;
                if !chosen.contains(&c) {
                    chosen.push(c);
                }
            }
            experts.extend(chosen);
        }
        let tile = if big_tile { TileSize::T256 } else { TileSize::T128 };
        let s = moe_sort(&experts, tokens, &w, tile).unwrap();
        check_invariants(&experts, &w, &s);
    }
}

#[test]
fn the_padding_id_is_skipped_only_when_the_caller_asks() {
    use moegen_dsl::abi::ep::{NO_ROUTE, Padding};
    use moegen_runtime::routing::{moe_sort_padding, moe_sort_router};
    let w = window(8, 2, 4, 2);
    // Token 1 is all padding (no duplicate when skipped); token 2 keeps one real route.
    let ids = [2, 5, NO_ROUTE, NO_ROUTE, 3, NO_ROUTE];
    let skipped = moe_sort_padding(&ids, 3, &w, TileSize::T128, Padding::Skip).unwrap();
    // The same outputs as the ids with the padding routed outside the window.
    let outside = [2, 5, 0, 1, 3, 0];
    assert_eq!(skipped, moe_sort(&outside, 3, &w, TileSize::T128).unwrap());
    let refused = RuntimeError::ExpertOutOfRange {
        token: 1,
        slot: 0,
        expert: i64::from(NO_ROUTE),
        experts: 8,
    };
    assert_eq!(
        moe_sort_padding(&ids, 3, &w, TileSize::T128, Padding::Refuse),
        Err(refused.clone())
    );
    assert_eq!(moe_sort(&ids, 3, &w, TileSize::T128), Err(refused.clone()));
    assert_eq!(moe_sort_router(&ids, 3, &w, TileSize::T128), Err(refused));
    assert_eq!(Padding::default(), Padding::Refuse);
    assert_eq!((Padding::Refuse.scalar(), Padding::Skip.scalar()), (0, 1));
}
