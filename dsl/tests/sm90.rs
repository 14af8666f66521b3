//! The Hopper target's vocabulary: tactics, resource model, descriptions and the weight
//! fragment layout.

use std::collections::HashSet;

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::sm90_weights::{
    MXFP4_SCALE_TILE_BYTES, SCALE_TILE_BYTES, TILE_BYTES, VALUE_BITS, code_at, place_code,
    scale_bytes, scale_position, scale_tile_bytes, value_bytes, value_position,
};
use moegen_dsl::abi::{KernelId, launch_facts};
use moegen_dsl::*;

#[test]
fn the_hopper_space_has_43_tactics_whose_wgmma_n_is_the_routing_tile() {
    let ts = sm90_tactics();
    assert_eq!(ts.len(), 43);
    let names: HashSet<String> = ts.iter().map(|t| t.to_string()).collect();
    assert_eq!(names.len(), 43);
    // Split K at T 16: GEMM1 N 128 with GEMM2 N 64, each GEMM over 1, 2 or 4 CTAs (not
    // both 1), and with GEMM2 N 128 both over 2 or 4; clusters of that many CTAs.
    let split: Vec<&MoeTactic> =
        ts.iter().filter(|t| t.gemm1().split_k() > 1 || t.gemm2().split_k() > 1).collect();
    assert_eq!(split.len(), 10);
    let mut combos = HashSet::new();
    for t in &split {
        let (s1, s2) = (t.gemm1().split_k(), t.gemm2().split_k());
        assert_eq!(t.tile(), TileSize::T16, "{t}");
        assert_eq!(t.gemm1().mma_tiler()[1], 128, "{t}");
        assert_eq!((t.gemm1().cluster_ctas(), t.gemm2().cluster_ctas()), (s1, s2), "{t}");
        assert!(t.gemm1_wide().is_none(), "{t}");
        assert!(combos.insert((s1, t.gemm2().mma_tiler()[1], s2)), "{t}");
        if t.gemm2().mma_tiler()[1] == 128 {
            assert_eq!(s1, s2, "{t}");
        }
    }
    // GEMM1 N 128 paired with N 256 at T 16 and 32, with each GEMM2.
    let paired: Vec<&MoeTactic> = ts.iter().filter(|t| t.gemm1_wide().is_some()).collect();
    assert_eq!(paired.len(), 6);
    for t in &paired {
        assert!(matches!(t.tile(), TileSize::T16 | TileSize::T32), "{t}");
        assert_eq!(t.gemm1().mma_tiler()[1], 128, "{t}");
        assert_eq!(t.gemm1_wide().map(|w| w.mma_tiler()), Some([t.tile().rows(), 256]), "{t}");
        let single = MoeTactic::new(t.tile(), *t.gemm1(), *t.gemm2()).unwrap();
        assert!(ts.contains(&single), "{t}: its narrow half is a tactic of its own");
        assert_eq!(t.to_string(), single.to_string().replacen("n128:", "n128|n256:", 1));
    }
    // Only a wider sibling of the same family pairs.
    let n128 = GemmTactic::new_sm90(GemmKind::Gemm1, 16, 128).unwrap();
    let n256 = GemmTactic::new_sm90(GemmKind::Gemm1, 16, 256).unwrap();
    let g2 = GemmTactic::new_sm90(GemmKind::Gemm2, 16, 128).unwrap();
    let t = MoeTactic::new(TileSize::T16, n128, g2).unwrap();
    let wide32 = GemmTactic::new_sm90(GemmKind::Gemm1, 32, 256).unwrap();
    let pp = GemmTactic::new_sm90_scheduled(GemmKind::Gemm1, 128, 128, Schedule::PingPong).unwrap();
    for bad in [n128, wide32, g2] {
        assert!(t.with_gemm1_wide(bad).is_err(), "{bad}");
    }
    let t128 = MoeTactic::new(
        TileSize::T128,
        pp,
        GemmTactic::new_sm90(GemmKind::Gemm2, 128, 128).unwrap(),
    )
    .unwrap();
    let w128 = GemmTactic::new_sm90(GemmKind::Gemm1, 128, 256).unwrap();
    assert!(matches!(t128.with_gemm1_wide(w128), Err(TacticError::NotAWiderSibling { .. })));
    assert!(matches!(t.with_gemm1_wide(g2), Err(TacticError::WrongGemmKind { .. })));
    let wide = MoeTactic::new(TileSize::T16, n256, g2).unwrap();
    assert!(matches!(wide.with_gemm1_wide(n128), Err(TacticError::NotAWiderSibling { .. })));
    // Ping-pong: GEMM1 N 128 at T 128, with each GEMM2.
    let pp: Vec<&MoeTactic> =
        ts.iter().filter(|t| t.gemm1().schedule() == Schedule::PingPong).collect();
    assert_eq!(pp.len(), 3);
    for t in pp {
        assert_eq!(t.gemm1().mma_tiler(), [128, 128], "{t}");
        assert!(t.to_string().contains("gemm1_sm90_t128n128_pp"), "{t}");
        assert_eq!(t.gemm2().schedule(), Schedule::Cooperative, "{t}");
    }
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
    // Ping-pong needs whole 128-row units, and is built for GEMM1 only.
    for (kind, n) in [(GemmKind::Gemm1, 256), (GemmKind::Gemm2, 128)] {
        assert_eq!(
            GemmTactic::new_sm90_scheduled(kind, 128, n, Schedule::PingPong),
            Err(TacticError::UnsupportedSchedule { gemm: kind, n, schedule: Schedule::PingPong })
        );
    }
    // SM100 tactics still refuse tiles below 128.
    assert_eq!(
        GemmTactic::new(GemmKind::Gemm1, [64, 128], [1, 1], Raster::AlongN),
        Err(TacticError::UnsupportedMmaM { m: 64 })
    );
}

/// Hopper N blocks may end partial: every N applies once the dimension is a multiple of the
/// granule (GEMM2 64 rows, GEMM1 one consumer's 128), so gpt-oss (H = I = 2880) gets the
/// wide tactics; SM100 keeps its own rule.
#[test]
fn wide_hopper_tactics_apply_to_dimensions_that_are_multiples_of_the_granule() {
    assert_eq!(sm90_n_granule(GemmKind::Gemm1), 128);
    assert_eq!(sm90_n_granule(GemmKind::Gemm2), 64);
    let ts = sm90_tactics();
    // gpt-oss: 2I = 5760 = 22 · 256 + 128, H = 2880 = 11 · 256 + 64 = 22 · 128 + 64.
    let gpt_oss = tactic::applicable_tactics(&ts, |_| 4, 2880, 2880);
    assert_eq!(gpt_oss.len(), 43);
    assert!(
        gpt_oss.iter().any(|t| t.gemm1().mma_tiler()[1] == 256 && t.gemm2().mma_tiler()[1] == 256)
    );
    // H = 320, I = 192: 2I = 384 = 256 + 128 and H = 256 + 64. K: GEMM1's 320 and GEMM2's
    // 192 have 3 and 2 stages of 128, enough for a split of 2, not 4.
    let small = tactic::applicable_tactics(&ts, |_| 1, 192, 320);
    assert_eq!(small.len(), 33 + 4);
    let at_most_2 = |t: &MoeTactic| t.gemm1().split_k() <= 2 && t.gemm2().split_k() <= 2;
    assert!(small.iter().all(at_most_2), "a split of 4 needs 4 stages");
    // Below the granule nothing applies: H = 352 is not a multiple of 64, and I = 96 makes
    // 2I = 192 half a consumer short.
    assert!(tactic::applicable_tactics(&ts, |_| 1, 192, 352).is_empty());
    assert!(tactic::applicable_tactics(&ts, |_| 1, 96, 320).is_empty());
    // No routing tile: nothing applies.
    assert!(tactic::applicable_tactics(&ts, |_| 0, 2880, 2880).is_empty());
    // SM100 tiles round up to whole N tiles; a 2-wide GEMM2 cluster takes an odd count (H =
    // 384 is 3 tiles of 128: the last cluster's second tile lies past H) but needs two.
    let g2 = GemmTactic::new(GemmKind::Gemm2, [128, 128], [1, 2], Raster::AlongN).unwrap();
    assert!(g2.fits_n(384) && g2.fits_n(512) && g2.fits_n(192));
    assert!(!g2.fits_n(128) && !g2.fits_n(64));
    let h = GemmTactic::new_sm90(GemmKind::Gemm2, 16, 256).unwrap();
    assert!(h.fits_n(2880) && h.fits_n(64) && !h.fits_n(2880 + 32) && !h.fits_n(0));
    // The launch's work units count the partial block: ⌈2880 / 256⌉ = 12 per tile for
    // GEMM2, ⌈5760 / 256⌉ = 23 for GEMM1.
    for (kind, per_tile) in [(GemmKind::Gemm2, 12), (GemmKind::Gemm1, 23)] {
        let g = GemmTactic::new_sm90(kind, 16, 256).unwrap();
        let key = KernelDescBuilder::new(g).target(Target::Sm90a).build().unwrap().key();
        assert_eq!(abi::persistent_units(&key, 3, 2880, 2880), Some(3 * per_tile), "{g}");
    }
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
        for r in 0..rows {
            for c in 0..k {
                let (byte, bits) = value_position(rows, k, r, c).unwrap();
                assert!(byte % 4 == 0 && byte < value_bytes(rows, k));
                for b in bits {
                    assert!(seen.insert(byte * 8 + b as usize), "({r}, {c}) collides");
                }
            }
        }
        // Four bits per value: every bit of the packed bytes is some value's, once.
        assert_eq!(seen.len(), rows * k * 4);
        for f in [WeightFormat::Nvfp4, WeightFormat::Mxfp4] {
            let block = f.block() as usize;
            let mut scales = HashSet::new();
            for r in 0..rows {
                for c in 0..k {
                    let s = scale_position(f, rows, k, r, c).unwrap();
                    assert!(s < scale_bytes(f, rows, k), "{f:?}");
                    scales.insert(s);
                    // A scale is shared by exactly its block.
                    assert_eq!(scale_position(f, rows, k, r, c - c % block), Some(s), "{f:?}");
                }
            }
            // One byte per block, every byte used.
            assert_eq!(scales.len(), rows * k / block, "{f:?}");
            assert_eq!(scale_bytes(f, rows, k), rows * k / block, "{f:?}");
        }
    }
    assert_eq!(value_position(64, 64, 64, 0), None);
    assert_eq!(value_position(96, 64, 0, 0), None, "rows must be a multiple of 64");
    // One stage of a 256-row CTA is contiguous: 4 row blocks at one k block.
    let base = value_position(512, 128, 256, 64).unwrap().0;
    let end = value_position(512, 128, 511, 127).unwrap().0;
    assert_eq!(base % TILE_BYTES, 0);
    assert!(end < base + 4 * TILE_BYTES);
    for (f, tile) in
        [(WeightFormat::Nvfp4, SCALE_TILE_BYTES), (WeightFormat::Mxfp4, MXFP4_SCALE_TILE_BYTES)]
    {
        assert_eq!(scale_tile_bytes(f), tile);
        let base = scale_position(f, 512, 128, 256, 64).unwrap();
        assert_eq!(base % tile, 0, "{f:?}");
        assert!(scale_position(f, 512, 128, 511, 127).unwrap() < base + 4 * tile, "{f:?}");
    }
}

/// The scale words a consumer thread loads (`sm90/mainloop.rs`): NVFP4, row r's word at
/// `r · 4` (byte j: K16 step j) and row r + 8's; MXFP4, one word at `(t / 4) · 4` holding
/// (block 0, r), (block 0, r + 8), (block 1, r), (block 1, r + 8), r = 16w + l/4.
#[test]
fn thread_scale_words_hold_the_rows_of_its_fragment() {
    for t in 0..128 {
        let (w, l) = (t / 32, t % 32);
        let r = 16 * w + l / 4;
        for c in 0..64 {
            assert_eq!(
                scale_position(WeightFormat::Nvfp4, 64, 64, r, c),
                Some(r * 4 + c / 16),
                "NVFP4 thread {t}"
            );
            assert_eq!(
                scale_position(WeightFormat::Nvfp4, 64, 64, r + 8, c),
                Some((r + 8) * 4 + c / 16),
                "NVFP4 thread {t}"
            );
            let word = (t / 4) * 4;
            assert_eq!(
                scale_position(WeightFormat::Mxfp4, 64, 64, r, c),
                Some(word + (c / 32) * 2),
                "MXFP4 thread {t}"
            );
            assert_eq!(
                scale_position(WeightFormat::Mxfp4, 64, 64, r + 8, c),
                Some(word + (c / 32) * 2 + 1),
                "MXFP4 thread {t}"
            );
        }
    }
}

#[test]
fn thread_words_hold_the_wgmma_a_fragment() {
    // Thread 37 (warp 1, lane 5) at K step 2 of the first tile: rows 16 + 1 and +8, columns
    // 32 + 2 and +1, +8, +9.
    let want = [(17, 34), (17, 35), (25, 34), (25, 35), (17, 42), (17, 43), (25, 42), (25, 43)];
    for (i, (r, c)) in want.into_iter().enumerate() {
        // Value i's bits are VALUE_BITS[i] of the thread's word for the step.
        let (byte, bits) = value_position(64, 64, r, c).unwrap();
        assert_eq!((byte, bits), ((2 * 128 + 37) * 4, VALUE_BITS[i]), "a{i}");
    }
}

/// A stage's full barrier waits for the bytes that really arrive: weights and their scales,
/// and for GEMM2 the activation tile (GEMM1 gathers its activations by cp.async); never the
/// stage's padded size, which would leave the barrier waiting forever.
#[test]
fn the_announced_stage_bytes_are_the_bytes_that_arrive() {
    for t in moegen_dsl::sm90_tactics() {
        for g in [t.gemm1(), t.gemm2()] {
            let [tile, n] = g.mma_tiler();
            // bf16 activations: one scale byte per block of the format (64 rows × 64 K per
            // tile: `scale_tile_bytes`).
            for f in [WeightFormat::Nvfp4, WeightFormat::Mxfp4] {
                let b = moegen_dsl::plan_gemm_with(
                    moegen_dsl::Target::Sm90a,
                    g,
                    f,
                    ActivationFormat::Bf16,
                )
                .unwrap();
                let weights = n * 64 / 2 + n / 64 * scale_tile_bytes(f) as u32;
                let want = match g.kind() {
                    moegen_dsl::GemmKind::Gemm1 => weights,
                    moegen_dsl::GemmKind::Gemm2 => weights + tile * 64 * 2,
                };
                assert_eq!(b.tma_tx_bytes_per_stage, want, "{g} {f:?}");
                assert!(b.tma_tx_bytes_per_stage <= b.stage_bytes);
                // The format moves no stage count: the padding to 1 KiB absorbs it.
                let nv = moegen_dsl::plan_gemm(moegen_dsl::Target::Sm90a, g).unwrap();
                assert_eq!((b.ab_stages, b.ctas_per_sm), (nv.ab_stages, nv.ctas_per_sm), "{g}");
            }
        }
    }
}

#[test]
fn hopper_kernels_that_share_an_sm_split_its_registers_and_shared_memory() {
    use moegen_dsl::abi::roles::sm90_roles_for;
    use moegen_dsl::abi::sm90_residency::{
        CTA_RESERVED_SMEM, MAX_CTAS_PER_SM, SM_REGISTERS, SM_SHARED_MEMORY,
        sm90_consumer_regs_needed, sm90_registers,
    };
    let mut shared = 0;
    for t in sm90_tactics() {
        for g in [t.gemm1(), t.gemm2()] {
            let b = plan_gemm(Target::Sm90a, g).unwrap();
            let p = b.ctas_per_sm;
            assert!((1..=MAX_CTAS_PER_SM).contains(&p), "{g}: {p}");
            let [tile, n] = g.mma_tiler();
            let roles = sm90_roles_for(n, g.schedule());
            let regs = sm90_registers(&roles, p);
            let threads = roles.warps * 32;
            // The resident CTAs' launch registers fit the register file, and what the
            // producer gives up covers what the consumers take.
            assert!(p * threads * regs.launch <= SM_REGISTERS, "{g}");
            assert!(
                regs.producer * 128 + regs.consumer * 128 * roles.consumers
                    <= regs.launch * threads,
                "{g}"
            );
            assert_eq!(regs.launch % 8, 0);
            assert_eq!(regs.consumer % 8, 0);
            // Their shared memory fits the SM with the system's reserve per CTA.
            assert!(p * (b.smem_bytes + CTA_RESERVED_SMEM) <= SM_SHARED_MEMORY, "{g}");
            if p > 1 {
                shared += 1;
                assert!(regs.consumer >= sm90_consumer_regs_needed(tile, roles.rows_per_consumer));
                assert!(b.ab_stages >= 4, "{g}: {} stages", b.ab_stages);
            }
            // The launch facts carry the count the runtime sizes the grid with.
            let key = KernelDescBuilder::new(*g).target(Target::Sm90a).build().unwrap().key();
            assert_eq!(launch_facts(&KernelId::Gemm(key)).unwrap().ctas_per_sm, p, "{g}");
        }
    }
    assert!(shared > 0, "some small tile shares its SM");
    // Two consumers (N 256) keep a whole SM, whatever the tile.
    for tile in [16, 32, 64, 128] {
        let wide = GemmTactic::new_sm90(GemmKind::Gemm1, tile, 256).unwrap();
        assert_eq!(plan_gemm(Target::Sm90a, &wide).unwrap().ctas_per_sm, 1, "T{tile}");
    }
    // The largest one-consumer tiles need the whole register file.
    let big = GemmTactic::new_sm90(GemmKind::Gemm2, 128, 128).unwrap();
    assert_eq!(plan_gemm(Target::Sm90a, &big).unwrap().ctas_per_sm, 1);
    let small = GemmTactic::new_sm90(GemmKind::Gemm1, 16, 128).unwrap();
    assert_eq!(plan_gemm(Target::Sm90a, &small).unwrap().ctas_per_sm, 3);
}

#[test]
fn value_bits_use_every_bit_of_a_word_once_and_round_trip() {
    let mut all: Vec<u32> = VALUE_BITS.iter().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..32).collect::<Vec<u32>>());
    for (i, &bits) in VALUE_BITS.iter().enumerate() {
        for code in 0u8..16 {
            let w = place_code(0, bits, code);
            assert_eq!(code_at(w, bits), code);
            assert_eq!(w.count_ones(), code.count_ones(), "value {i} code {code}");
            // The other values of the word read zero.
            for (_, &other) in VALUE_BITS.iter().enumerate().filter(|&(o, _)| o != i) {
                assert_eq!(code_at(w, other), 0);
            }
        }
    }
}
