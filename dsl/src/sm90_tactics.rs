//! The Hopper (sm_90a) corner of the tactic space: the weight rows per CTA, what a GEMM's N
//! dimension must be a multiple of, and the 33 tactics.

use crate::tactic::{GemmKind, GemmTactic, MoeTactic, Schedule, TileSize};

/// N values of the Hopper GEMMs: weight rows per CTA (64 per wgmma M).
pub const SM90_MMA_N: [u32; 3] = [64, 128, 256];

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

/// The Hopper tactic space: T ∈ {16, 32, 64, 128} tokens per routing tile (the wgmma N);
/// GEMM1 N ∈ {128, 256} weight rows per CTA (and N 128 ping-pong at T 128); GEMM2 N ∈ {64,
/// 128, 256}; at T 16 and 32 also GEMM1 N 128 paired with N 256 (the live tiles choose,
/// [`SM90_GEMM1_PAIRED_TILES`]). 4 · 2 · 3 + 3 + 2 · 3 = 33 tactics, in a fixed order (tile,
/// GEMM1 N and schedule, GEMM2 N; the pairs after the tile's single-width tactics).
pub fn sm90_tactics() -> Vec<MoeTactic> {
    let mut out = Vec::with_capacity(33);
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
        if !SM90_GEMM1_PAIRED_TILES.contains(&tile) {
            continue;
        }
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
    }
    out
}
