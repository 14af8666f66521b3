//! The Hopper target's vocabulary: tactics, resource model, descriptions and the weight
//! fragment layout.

use std::collections::HashSet;

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::sm90_weights::{
    SCALE_TILE_BYTES, TILE_BYTES, scale_bytes, scale_position, value_bytes, value_position,
};
use moegen_dsl::abi::{KernelId, launch_facts};
use moegen_dsl::*;

#[test]
fn the_hopper_space_has_24_tactics_whose_wgmma_n_is_the_routing_tile() {
    let ts = sm90_tactics();
    assert_eq!(ts.len(), 24);
    let names: HashSet<String> = ts.iter().map(|t| t.to_string()).collect();
    assert_eq!(names.len(), 24);
    for t in &ts {
        assert_eq!(t.arch(), Arch::Sm90);
        for g in [t.gemm1(), t.gemm2()] {
            assert_eq!(g.mma_tiler()[0], t.tile().rows(), "{t}");
            assert_eq!(g.cluster(), [1, 1], "{t}");
        }
        assert!(t.gemm1().mma_tiler()[1] >= 128, "{t}: GEMM1 holds an up/gate pair");
        assert!(t.to_string().contains("_sm90_"), "{t}");
    }
    // Nothing mixes generations.
    let g1 = GemmTactic::new_sm90(GemmKind::Gemm1, 128, 128).unwrap();
    let g2 = GemmTactic::new(GemmKind::Gemm2, [128, 128], [1, 1], Raster::AlongN).unwrap();
    assert_eq!(MoeTactic::new(TileSize::T128, g1, g2), Err(TacticError::MixedArch));
    assert!(matches!(
        GemmTactic::new_sm90(GemmKind::Gemm1, 256, 128),
        Err(TacticError::UnsupportedSm90Tile { tile: 256 })
    ));
    assert!(matches!(
        GemmTactic::new_sm90(GemmKind::Gemm1, 64, 64),
        Err(TacticError::UnsupportedSm90N { n: 64, .. })
    ));
    // SM100 tactics still refuse tiles below 128.
    assert_eq!(
        GemmTactic::new(GemmKind::Gemm1, [64, 128], [1, 1], Raster::AlongN),
        Err(TacticError::UnsupportedMmaM { m: 64 })
    );
}

#[test]
fn every_hopper_kernel_fits_and_is_named_by_its_options() {
    for t in sm90_tactics() {
        for g in [t.gemm1(), t.gemm2()] {
            let b = plan_gemm(Target::Sm90a, g).unwrap();
            assert!(b.ab_stages >= 2, "{g}");
            assert!(b.smem_bytes <= Target::Sm90a.limits().max_dynamic_smem, "{g}");
            assert_eq!(b.tmem_alloc_columns, 0);
            assert_eq!(b.stage_bytes % 1024, 0, "{g}");
            assert!(b.stage_bytes >= b.a_stage_bytes + b.b_stage_bytes + b.sfb_stage_bytes);
            for a in [ActivationFormat::Bf16, ActivationFormat::Nvfp4] {
                for f in [WeightFormat::Nvfp4, WeightFormat::Mxfp4] {
                    let d = KernelDescBuilder::new(*g)
                        .target(Target::Sm90a)
                        .activations(a)
                        .format(f)
                        .build()
                        .unwrap_or_else(|e| panic!("{g}: {e}"));
                    let key = d.key();
                    assert_eq!(key.desc().unwrap(), d);
                    let name = key.name();
                    assert!(name.starts_with("moegen_sm90_"), "{name}");
                    assert!(name.contains(if a == ActivationFormat::Bf16 {
                        "_a16"
                    } else {
                        "_a4"
                    }));
                    let facts = launch_facts(&KernelId::Gemm(key)).unwrap();
                    assert_eq!(facts.threads % 128, 0);
                    assert!((256..=384).contains(&facts.threads), "{name}: {}", facts.threads);
                    assert_eq!(facts.smem.fixed, b.smem_bytes);
                }
            }
        }
    }
    // The wrong generation for a target is refused, by name.
    let sm100 = nvfp4_tactics()[0];
    let e = KernelDescBuilder::new(*sm100.gemm1()).target(Target::Sm90a).build().unwrap_err();
    assert!(e.to_string().contains("another GPU generation"), "{e}");
    let e = KernelDescBuilder::new(*sm100.gemm1())
        .activations(ActivationFormat::Bf16)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("bf16 activations"), "{e}");
}

#[test]
fn the_fragment_layout_is_a_bijection_onto_the_packed_bytes() {
    for (rows, k) in [(64, 64), (128, 192), (256, 128)] {
        let mut seen = HashSet::new();
        let mut scales = HashSet::new();
        for r in 0..rows {
            for c in 0..k {
                let (byte, nibble) = value_position(rows, k, r, c).unwrap();
                assert!(byte < value_bytes(rows, k));
                assert!(seen.insert((byte, nibble)), "({r}, {c}) collides");
                let s = scale_position(rows, k, r, c).unwrap();
                assert!(s < scale_bytes(rows, k));
                scales.insert(s);
                // A scale is shared by exactly its 16-block.
                assert_eq!(scale_position(rows, k, r, c - c % 16), Some(s));
            }
        }
        assert_eq!(seen.len(), rows * k);
        assert_eq!(scales.len(), rows * k / 16);
    }
    assert_eq!(value_position(64, 64, 64, 0), None);
    assert_eq!(value_position(96, 64, 0, 0), None, "rows must be a multiple of 64");
    // One stage of a 256-row CTA is contiguous: 4 row blocks at one k block.
    let base = value_position(512, 128, 256, 64).unwrap().0;
    let end = value_position(512, 128, 511, 127).unwrap().0;
    assert_eq!(base % TILE_BYTES, 0);
    assert!(end < base + 4 * TILE_BYTES);
    assert_eq!(scale_position(512, 128, 256, 64).unwrap() % SCALE_TILE_BYTES, 0);
}

#[test]
fn thread_words_hold_the_wgmma_a_fragment() {
    // Thread 37 (warp 1, lane 5) at K step 2 of the first tile: rows 16 + 1 and +8, columns
    // 32 + 2 and +1, +8, +9.
    let want = [(17, 34), (17, 35), (25, 34), (25, 35), (17, 42), (17, 43), (25, 42), (25, 43)];
    for (i, (r, c)) in want.into_iter().enumerate() {
        // Register i / 2's two values are nibbles i / 2 and i / 2 + 4 (low and high half).
        let n = i / 2 + 4 * (i % 2);
        let (byte, nibble) = value_position(64, 64, r, c).unwrap();
        assert_eq!((byte, nibble), ((2 * 128 + 37) * 4 + n / 2, (n % 2) as u32), "a{i}");
    }
}

/// A stage's full barrier waits for the bytes that really arrive: weights and their scales,
/// and for GEMM2 the activation tile (GEMM1 gathers its activations by cp.async); never the
/// stage's padded size, which would leave the barrier waiting forever.
#[test]
fn the_announced_stage_bytes_are_the_bytes_that_arrive() {
    for t in moegen_dsl::sm90_tactics() {
        for g in [t.gemm1(), t.gemm2()] {
            let b = moegen_dsl::plan_gemm(moegen_dsl::Target::Sm90a, g).unwrap();
            let [tile, n] = g.mma_tiler();
            let weights = n * 64 / 2 + n * 64 / 16;
            let want = match g.kind() {
                moegen_dsl::GemmKind::Gemm1 => weights,
                moegen_dsl::GemmKind::Gemm2 => weights + tile * 64 * 2,
            };
            assert_eq!(b.tma_tx_bytes_per_stage, want, "{g}");
            assert!(b.tma_tx_bytes_per_stage <= b.stage_bytes);
        }
    }
}
