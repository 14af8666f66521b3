//! max_tiles, workspace plans, token buckets and expert windows.

use moegen_dsl::TileSize;
use moegen_dsl::abi::Buffer;
use moegen_dsl::plan::{
    BUFFER_ALIGN, BufferPlan, PlanError, TokenBuckets, WorkspaceRequest, max_permuted_rows,
    max_tiles, plan_workspace,
};
use proptest::prelude::*;

#[test]
fn max_tiles_matches_the_corrected_upstream_figures() {
    let e = 16384 * 8;
    assert_eq!(max_tiles(e, 32, 128).unwrap(), 1055);
    assert_eq!(max_tiles(e, 32, 256).unwrap(), 543);
    assert_eq!(max_permuted_rows(e, 32, 256).unwrap(), 543 * 256);
    // E ≤ L: one tile per route at most.
    assert_eq!(max_tiles(5, 32, 128).unwrap(), 5);
    assert_eq!(max_tiles(32, 32, 128).unwrap(), 32);
    assert_eq!(max_tiles(33, 32, 128).unwrap(), 32);
    assert_eq!(max_tiles(1, 1, 128).unwrap(), 1);
}

#[test]
fn max_tiles_rejects_zero_and_overflow() {
    assert_eq!(
        max_tiles(0, 4, 128),
        Err(PlanError::Zero { what: "expanded rows (tokens × top_k)" })
    );
    assert!(matches!(max_tiles(4, 0, 128), Err(PlanError::Zero { .. })));
    assert!(matches!(max_tiles(4, 4, 0), Err(PlanError::Zero { .. })));
    assert!(matches!(max_tiles(u64::MAX, 2, 256), Err(PlanError::Overflow { .. })));
}

proptest! {
    #[test]
    fn real_tile_count_never_exceeds_the_bound(
        loads in proptest::collection::vec(0u64..2000, 1..64),
        tile in prop_oneof![Just(128u64), Just(256u64)],
    ) {
        let e: u64 = loads.iter().sum();
        prop_assume!(e > 0);
        let real: u64 = loads.iter().map(|c| c.div_ceil(tile)).sum();
        prop_assert!(real <= max_tiles(e, loads.len() as u64, tile).unwrap());
    }

    #[test]
    fn the_bound_is_attained(e in 1u64..1_000_000, l in 1u64..512, tile in prop_oneof![Just(128u64), Just(256u64)]) {
        // L−1 experts with one row and the rest on the last one (or one row each if E ≤ L).
        let real = if e <= l { e } else { (l - 1) + (e - (l - 1)).div_ceil(tile) };
        prop_assert_eq!(real, max_tiles(e, l, tile).unwrap());
    }
}

#[test]
fn shared_workspace_serves_every_tile_size() {
    let req = WorkspaceRequest {
        tokens: 16384,
        top_k: 8,
        local_experts: 32,
        intermediate: Some(2048),
        hidden: Some(7168),
        tile_sizes: TileSize::SM100.to_vec(),
        deterministic_scratch: false,
        arch: moegen_dsl::Arch::Sm100,
        activations: moegen_dsl::ActivationFormat::Nvfp4,
    };
    let p = plan_workspace(&req).unwrap();
    let get = |bufs: &[BufferPlan], buffer: Buffer| {
        bufs.iter().find(|b| b.buffer == buffer).unwrap().elements
    };
    assert_eq!(get(&p.shared, Buffer::TileIdxToExpertIdx), 1055, "tile arrays at T = 128");
    assert_eq!(
        get(&p.shared, Buffer::PermutedIdxToExpandedIdx),
        543 * 256,
        "row arrays at T = 256"
    );
    assert_eq!(get(&p.shared, Buffer::ExpandedIdxToPermutedIdx), 131072);
    assert_eq!(get(&p.shared, Buffer::Gemm1Output), 543 * 256 * 1024);
    for t in &p.per_tile {
        for b in &t.buffers {
            assert!(
                get(&p.shared, b.buffer) >= b.elements,
                "{:?} at tile {}",
                b.buffer,
                t.tile_size
            );
        }
        assert!(p.workspace_bytes >= t.workspace_bytes);
    }
    let mut end = 0;
    for b in &p.shared {
        assert_eq!(b.offset % BUFFER_ALIGN, 0, "{:?} aligned", b.buffer);
        assert!(b.offset >= end, "{:?} does not overlap its predecessor", b.buffer);
        end = b.offset + b.bytes;
    }
    assert_eq!(p.workspace_bytes, end);
    assert_eq!(p.deterministic_scratch_bytes, Some(131072 * 7168 * 2));
}

#[test]
fn workspace_rejects_bad_requests() {
    let base = WorkspaceRequest {
        tokens: 16,
        top_k: 2,
        local_experts: 4,
        intermediate: None,
        hidden: None,
        tile_sizes: vec![TileSize::T128],
        deterministic_scratch: false,
        arch: moegen_dsl::Arch::Sm100,
        activations: moegen_dsl::ActivationFormat::Nvfp4,
    };
    let with = |f: &dyn Fn(&mut WorkspaceRequest)| {
        let mut r = base.clone();
        f(&mut r);
        plan_workspace(&r)
    };
    assert!(with(&|_| {}).is_ok());
    assert!(matches!(with(&|r| r.tokens = 0), Err(PlanError::Zero { .. })));
    assert!(matches!(with(&|r| r.top_k = 0), Err(PlanError::Zero { .. })));
    assert!(matches!(with(&|r| r.local_experts = 0), Err(PlanError::Zero { .. })));
    assert!(matches!(with(&|r| r.tile_sizes.clear()), Err(PlanError::Zero { .. })));
    assert!(matches!(with(&|r| r.intermediate = Some(100)), Err(PlanError::Alignment { .. })));
    assert!(matches!(with(&|r| r.hidden = Some(0)), Err(PlanError::Zero { .. })));
    assert!(matches!(with(&|r| r.tokens = 1 << 31), Err(PlanError::IndexTooLarge { .. })));
    assert!(matches!(with(&|r| r.tokens = u64::MAX), Err(PlanError::Overflow { .. })));
    assert!(matches!(with(&|r| r.hidden = Some(100)), Err(PlanError::Alignment { .. })));
    assert!(matches!(with(&|r| r.deterministic_scratch = true), Err(PlanError::Zero { .. })));
}

#[test]
fn a_forward_workspace_holds_every_buffer_the_layer_exchanges() {
    let req = WorkspaceRequest {
        tokens: 300,
        top_k: 4,
        local_experts: 6,
        intermediate: Some(512),
        hidden: Some(768),
        tile_sizes: TileSize::SM100.to_vec(),
        deterministic_scratch: true,
        arch: moegen_dsl::Arch::Sm100,
        activations: moegen_dsl::ActivationFormat::Nvfp4,
    };
    let p = plan_workspace(&req).unwrap();
    let elems = |b| p.buffer(b).unwrap().elements;
    assert_eq!(elems(Buffer::Activations), 300 * 768 / 2);
    assert_eq!(elems(Buffer::ActivationScales), 300 * 768 / 16);
    assert_eq!(elems(Buffer::FinalizeScratch), 1200 * 768);
    assert_eq!(elems(Buffer::SortBlockCounts), 2 * 6, "ceil(1200 / 1024) blocks × L");
    assert_eq!(elems(Buffer::ErrorFlags), moegen_dsl::plan::ERROR_WORDS);
    assert_eq!(p.tile_capacity(), elems(Buffer::TileIdxToExpertIdx));
    assert_eq!(p.row_capacity(), elems(Buffer::PermutedIdxToExpandedIdx));
    assert_eq!(p.row_capacity(), p.tile(TileSize::T256).unwrap().max_permuted_rows);
    assert_eq!(p.tile_capacity(), p.tile(TileSize::T128).unwrap().max_tiles);
    // Every buffer fits, aligned, without overlap.
    let mut end = 0;
    for b in &p.shared {
        assert_eq!(b.offset % BUFFER_ALIGN, 0);
        assert!(b.offset >= end);
        end = b.offset + b.bytes;
    }
    assert_eq!(p.workspace_bytes, end);
}

#[test]
fn buckets_follow_the_hybrid_scheme() {
    let b = TokenBuckets::new(16384).unwrap();
    let mut want: Vec<u64> = (0..=8).map(|i| 1 << i).collect();
    want.extend((2..=8).map(|i| i * 256));
    want.extend([2560, 3072, 3584, 4096, 8192, 16384]);
    assert_eq!(b.buckets(), want.as_slice());
    let b = TokenBuckets::new(3000).unwrap();
    assert_eq!(b.buckets().last(), Some(&3000), "the maximum is always a bucket");
    assert_eq!(b.buckets()[b.buckets().len() - 2], 2560);
    assert_eq!(TokenBuckets::new(1).unwrap().buckets(), &[1]);
    assert!(TokenBuckets::new(0).is_err());
}

#[test]
fn mapping_above_the_maximum_is_not_capped() {
    let b = TokenBuckets::new(8192).unwrap();
    assert_eq!(b.bucket_for(8192).unwrap(), 8192);
    assert_eq!(b.bucket_for(8193).unwrap(), 16384, "PR #3216: never reuse the 8192 tactic");
    assert_eq!(b.bucket_for(16384).unwrap(), 16384);
    assert_eq!(b.bucket_for(1).unwrap(), 1);
    assert_eq!(b.bucket_for(257).unwrap(), 512);
    assert_eq!(b.bucket_for(2049).unwrap(), 2560);
    assert!(b.bucket_for(0).is_err());
    assert!(matches!(b.bucket_for(u64::MAX), Err(PlanError::Overflow { .. })));
}

proptest! {
    #[test]
    fn mapper_is_monotone_and_minimal(max in 1u64..100_000, a in 1u64..300_000, b in 1u64..300_000) {
        let buckets = TokenBuckets::new(max).unwrap();
        let (lo, hi) = (a.min(b), a.max(b));
        let (blo, bhi) = (buckets.bucket_for(lo).unwrap(), buckets.bucket_for(hi).unwrap());
        prop_assert!(blo <= bhi);
        for n in [lo, hi] {
            let got = buckets.bucket_for(n).unwrap();
            prop_assert!(got >= n);
            if n <= max {
                let smallest = *buckets.buckets().iter().find(|&&x| x >= n).unwrap();
                prop_assert_eq!(got, smallest);
            } else {
                prop_assert!(got > max);
            }
        }
    }
}

#[test]
fn expert_windows_stay_inside_the_expert_range() {
    use moegen_dsl::plan::ExpertWindow;
    let w = ExpertWindow::new(256, 32, 32, 8).unwrap();
    assert_eq!((w.num_experts(), w.offset(), w.local(), w.top_k()), (256, 32, 32, 8));
    assert_eq!(w.local_of(32), Some(0));
    assert_eq!(w.local_of(63), Some(31));
    assert_eq!(w.local_of(64), None);
    assert_eq!(w.local_of(31), None);
    assert_eq!(
        ExpertWindow::new(8, 6, 4, 2),
        Err(PlanError::LocalWindow { offset: 6, local: 4, experts: 8 })
    );
    assert_eq!(
        ExpertWindow::new(8, usize::MAX, 4, 2).map(|_| ()),
        Err(PlanError::LocalWindow { offset: usize::MAX as u64, local: 4, experts: 8 })
    );
    assert_eq!(
        ExpertWindow::new(4, 0, 4, 5),
        Err(PlanError::TopKTooLarge { top_k: 5, experts: 4 })
    );
    assert!(matches!(ExpertWindow::new(0, 0, 1, 1), Err(PlanError::Zero { what: "experts" })));
    assert!(matches!(
        ExpertWindow::new(4, 0, 0, 1),
        Err(PlanError::Zero { what: "local experts" })
    ));
    assert!(matches!(ExpertWindow::new(4, 0, 4, 0), Err(PlanError::Zero { what: "top_k" })));
}
