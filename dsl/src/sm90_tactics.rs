//! The Hopper (sm_90a) corner of the tactic space: the weight rows per CTA, what a GEMM's N
//! dimension must be a multiple of, the K splits, and the 43 tactics.

use crate::tactic::{GemmKind, GemmTactic, MoeTactic, Schedule, TileSize};

/// N values of the Hopper GEMMs: weight rows per CTA (64 per wgmma M).
pub const SM90_MMA_N: [u32; 3] = [64, 128, 256];

/// CTAs a Hopper cluster may split each unit's K over ([`GemmTactic::with_split_k`]).
pub const SM90_SPLIT_K: [u32; 2] = [2, 4];

/// The K stages `[begin, end)` that rank `rank` of a cluster of `split` CTAs accumulates when
/// a unit has `k_tiles` stages: as even as whole stages allow, the longer ranges last. The
/// kernels compute it so, and the CPU reference splits its sums at the same stages (the
/// ranks' fp32 partial sums are then added in rank order). Needs `split · k_tiles` < 2^32
/// (the kernels multiply in u32).
pub const fn sm90_split_k_range(k_tiles: u32, split: u32, rank: u32) -> (u32, u32) {
    (rank * k_tiles / split, (rank + 1) * k_tiles / split)
}

/// Whether a K of `k_dim` elements in stages of `k_stage` gives each of `split` CTAs at least
/// one stage (the last stage may be partial): a rank without one would add nothing of its
/// unit. The launch checks it with the kernel's own stage, the layer's candidate check with
/// the longest (A8's 128), as [`GemmTactic::fits_k`].
pub const fn sm90_split_k_fits(k_dim: u64, k_stage: u32, split: u32) -> bool {
    k_dim.div_ceil(k_stage as u64) >= split as u64
}

/// What a Hopper GEMM's N dimension must be a multiple of for every N of [`SM90_MMA_N`] to
/// apply: GEMM2's 64-row weight tile (one wgmma M), GEMM1's 128 rows of one consumer (an up
/// block and its gate block). The last N block of an expert may be partial, a whole number
/// of these: its producer copies only the tiles that exist and its epilogues store nothing
/// past the dimension (docs/hopper.md, "Schedule").
pub const fn sm90_n_granule(kind: GemmKind) -> u32 {
    match kind {
        GemmKind::Gemm1 => 128,
        GemmKind::Gemm2 => 64,
    }
}

/// The GEMM1 widths and schedules of the Hopper tactic space: N 128 and N 256 cooperative
/// at every tile; N 128 ping-pong at T 128 only, where GEMM1's epilogue is a third of the
/// consumers' time and both consumers of an N 256 CTA run it at once (docs/perf.md).
fn sm90_gemm1_widths(tile: TileSize) -> Vec<(u32, Schedule)> {
    let mut w = vec![(128, Schedule::Cooperative), (256, Schedule::Cooperative)];
    if tile == TileSize::T128 {
        w.push((128, Schedule::PingPong));
    }
    w
}

/// Routing tiles at which a Hopper tactic may pair GEMM1 N 128 with N 256 chosen on the
/// device ([`MoeTactic::with_gemm1_wide`]): the small ones, where a dozen live tiles make
/// whole waves of one width and a partial wave of the other (docs/hopper.md, "GEMM1's
/// width from the live tiles").
pub const SM90_GEMM1_PAIRED_TILES: [TileSize; 2] = [TileSize::T16, TileSize::T32];

/// Routing tiles at which Hopper tactics split K ([`SM90_SPLIT_K`]): at a few tokens a
/// layer has fewer units than the GPU has CTA slots, and each unit's K, dequantized in series
/// by one consumer warpgroup, sets the time (docs/hopper.md, "Split K").
pub const SM90_SPLIT_K_TILES: [TileSize; 1] = [TileSize::T16];

/// The Hopper tactic space: T ∈ {16, 32, 64, 128} tokens per routing tile (the wgmma N);
/// GEMM1 N ∈ {128, 256} weight rows per CTA (and N 128 ping-pong at T 128); GEMM2 N ∈ {64,
/// 128, 256}; at T 16 and 32 also GEMM1 N 128 paired with N 256 (the live tiles choose,
/// [`SM90_GEMM1_PAIRED_TILES`]); at T 16 also GEMM1 N 128 with GEMM2 N 64 with K split
/// over 1, 2 or 4 CTAs in each GEMM (not both 1), and with GEMM2 N 128 both split alike
/// ([`SM90_SPLIT_K_TILES`]). 4 · 2 · 3 + 3 + 2 · 3 + 8 + 2 = 43 tactics, in a fixed order
/// (tile, GEMM1 N and schedule, GEMM2 N; the pairs, then the splits, after the tile's
/// single-width tactics).
pub fn sm90_tactics() -> Vec<MoeTactic> {
    let mut out = Vec::with_capacity(43);
    for tile in TileSize::SM90 {
        for (n1, schedule) in sm90_gemm1_widths(tile) {
            for n2 in SM90_MMA_N {
                let g1 = GemmTactic::new_sm90_scheduled(GemmKind::Gemm1, tile.rows(), n1, schedule);
                let g2 = GemmTactic::new_sm90(GemmKind::Gemm2, tile.rows(), n2);
                if let (Ok(g1), Ok(g2)) = (g1, g2)
                    && let Ok(t) = MoeTactic::new(tile, g1, g2)
                {
                    out.push(t);
                }
            }
        }
        if SM90_GEMM1_PAIRED_TILES.contains(&tile) {
            out.extend(paired(tile));
        }
        if SM90_SPLIT_K_TILES.contains(&tile) {
            out.extend(split(tile));
        }
    }
    out
}

/// The tile's GEMM1 N 128 paired with N 256, with each GEMM2 N.
fn paired(tile: TileSize) -> Vec<MoeTactic> {
    let mut out = Vec::new();
    for n2 in SM90_MMA_N {
        let g1 = GemmTactic::new_sm90(GemmKind::Gemm1, tile.rows(), 128);
        let wide = GemmTactic::new_sm90(GemmKind::Gemm1, tile.rows(), 256);
        let g2 = GemmTactic::new_sm90(GemmKind::Gemm2, tile.rows(), n2);
        if let (Ok(g1), Ok(wide), Ok(g2)) = (g1, wide, g2)
            && let Ok(t) = MoeTactic::new(tile, g1, g2).and_then(|t| t.with_gemm1_wide(wide))
        {
            out.push(t);
        }
    }
    out
}

/// The tile's split-K tactics: GEMM1 N 128 and GEMM2 N 64, each unsplit or split over each
/// of [`SM90_SPLIT_K`] (a GEMM's best split follows its own unit count: at one DeepSeek token
/// GEMM1 has 32 units and GEMM2 112), and GEMM1 N 128 with GEMM2 N 128, both split alike.
fn split(tile: TileSize) -> Vec<MoeTactic> {
    let splits = [1].into_iter().chain(SM90_SPLIT_K);
    let mut pairs: Vec<(u32, u32, u32)> = Vec::new();
    for s1 in splits.clone() {
        for s2 in splits.clone() {
            if (s1, s2) != (1, 1) {
                pairs.push((s1, 64, s2));
            }
        }
    }
    pairs.extend(SM90_SPLIT_K.map(|s| (s, 128, s)));
    let mut out = Vec::new();
    for (s1, n2, s2) in pairs {
        let g1 = GemmTactic::new_sm90(GemmKind::Gemm1, tile.rows(), 128)
            .and_then(|g| g.with_split_k(s1));
        let g2 =
            GemmTactic::new_sm90(GemmKind::Gemm2, tile.rows(), n2).and_then(|g| g.with_split_k(s2));
        if let (Ok(g1), Ok(g2)) = (g1, g2)
            && let Ok(t) = MoeTactic::new(tile, g1, g2)
        {
            out.push(t);
        }
    }
    out
}
