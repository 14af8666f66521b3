//! The tactic space and its invariants.

use std::collections::HashSet;

use moegen_dsl::*;

#[test]
fn enumeration_has_the_sixteen_nvfp4_tactics() {
    let ts = nvfp4_tactics();
    assert_eq!(ts.len(), 16);
    let names: HashSet<String> = ts.iter().map(|t| t.to_string()).collect();
    assert_eq!(names.len(), 16, "tactics are distinct");
    for t in &ts {
        let tile = t.tile().rows();
        for g in [t.gemm1(), t.gemm2()] {
            assert_eq!(g.mma_tiler()[0], tile, "{t}: MMA M equals the routing tile");
            assert_eq!(g.cluster()[0], tile / 128, "{t}: cluster M is the CTA-group size");
            assert_eq!(g.cta_group().size(), tile / 128);
        }
        assert_eq!(t.gemm1().cluster()[1], 1, "{t}: GEMM1 never multicasts A");
        assert_eq!(t.gemm1().kind(), GemmKind::Gemm1);
        assert_eq!(t.gemm2().kind(), GemmKind::Gemm2);
    }
    for tile in TileSize::SM100 {
        assert_eq!(ts.iter().filter(|t| t.tile() == tile).count(), 8);
    }
    let g2: HashSet<([u32; 2], [u32; 2])> =
        ts.iter().map(|t| (t.gemm2().mma_tiler(), t.gemm2().cluster())).collect();
    assert_eq!(g2.len(), 8, "8 distinct GEMM2 kernels, 4 per tile size");
}

#[test]
fn the_one_cta_gemm2_for_tile_256_cannot_be_built() {
    // FlashInfer #3067: a 128-row GEMM2 under 256-row routing tiles.
    let g1 = GemmTactic::new(GemmKind::Gemm1, [256, 128], [2, 1], Raster::AlongN).unwrap();
    let g2 = GemmTactic::new(GemmKind::Gemm2, [128, 128], [1, 1], Raster::AlongN).unwrap();
    assert_eq!(
        MoeTactic::new(TileSize::T256, g1, g2),
        Err(TacticError::MmaMNotTileSize { gemm: GemmKind::Gemm2, mma_m: 128, tile: 256 })
    );
    // Nor can 2-CTA be chosen apart from M.
    assert_eq!(
        GemmTactic::new(GemmKind::Gemm2, [256, 128], [1, 1], Raster::AlongN),
        Err(TacticError::ClusterMNotCtaGroup { cluster_m: 1, mma_m: 256 })
    );
    assert_eq!(
        GemmTactic::new(GemmKind::Gemm2, [128, 128], [2, 1], Raster::AlongN),
        Err(TacticError::ClusterMNotCtaGroup { cluster_m: 2, mma_m: 128 })
    );
}

#[test]
fn invalid_gemm_tactics_are_typed_errors() {
    use GemmKind::*;
    assert_eq!(
        GemmTactic::new(Gemm1, [64, 128], [1, 1], Raster::AlongN),
        Err(TacticError::UnsupportedMmaM { m: 64 })
    );
    assert_eq!(
        GemmTactic::new(Gemm1, [128, 96], [1, 1], Raster::AlongN),
        Err(TacticError::UnsupportedMmaN { n: 96 })
    );
    assert_eq!(
        GemmTactic::new(Gemm1, [128, 128], [1, 2], Raster::AlongN),
        Err(TacticError::GatherCannotMulticast { cluster_n: 2 })
    );
    assert_eq!(
        GemmTactic::new(Gemm2, [128, 128], [1, 4], Raster::AlongN),
        Err(TacticError::UnsupportedClusterN { cluster_n: 4 })
    );
    let g = GemmTactic::new(Gemm2, [128, 128], [1, 1], Raster::AlongN).unwrap();
    assert_eq!(
        MoeTactic::new(TileSize::T128, g, g),
        Err(TacticError::WrongGemmKind { expected: Gemm1, actual: Gemm2 })
    );
}

#[test]
fn guard_drops_tactics_whose_cluster_exceeds_the_tiles() {
    let ts = nvfp4_tactics();
    // H = 256: GEMM2 with N = 256 has one N tile, so a 2-wide cluster cannot be formed.
    let ok = tactic::applicable_tactics(&ts, |_| 10, 256, 256);
    assert!(ok.iter().all(|t| !(t.gemm2().mma_tiler()[1] == 256 && t.gemm2().cluster()[1] == 2)));
    assert!(ok.iter().any(|t| t.gemm2().mma_tiler()[1] == 128 && t.gemm2().cluster()[1] == 2));
    assert_eq!(ok.len(), 12);
    // H = 384 at N = 128 gives 3 N tiles (a 2-wide GEMM2 cluster's second one past H), at
    // N = 256 gives 2 (the second one partial): every tactic applies. H = 192 at N = 256 is
    // one tile: the 2-wide N 256 clusters drop out again.
    let ok = tactic::applicable_tactics(&ts, |_| 10, 256, 384);
    assert_eq!(ok.len(), 16);
    let ok = tactic::applicable_tactics(&ts, |_| 10, 256, 192);
    assert!(ok.iter().all(|t| !(t.gemm2().mma_tiler()[1] == 256 && t.gemm2().cluster()[1] == 2)));
    assert_eq!(ok.len(), 12);
    // Large shapes admit everything; no routing tile admits nothing.
    assert_eq!(tactic::applicable_tactics(&ts, |_| 10, 2048, 7168).len(), 16);
    assert!(tactic::applicable_tactics(&ts, |_| 0, 2048, 7168).is_empty());
}

#[test]
fn targets_parse_and_print() {
    assert_eq!("sm_100f".parse::<Target>(), Ok(Target::Sm100f));
    assert_eq!("sm_100a".parse::<Target>(), Ok(Target::Sm100a));
    assert!("sm_90".parse::<Target>().is_err());
    assert_eq!(Target::default(), Target::Sm100f);
    assert_eq!(Target::Sm100a.to_string(), "sm_100a");
    assert_eq!(Target::Sm100f.ptx_version(), "8.8");
}
