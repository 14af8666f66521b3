//! The Hopper (sm_90a) corner of the tactic space: the weight rows per CTA, what a GEMM's N
//! dimension must be a multiple of, and the 24 tactics.

use crate::tactic::{GemmKind, GemmTactic, MoeTactic, TileSize};

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

/// The Hopper tactic space: T ∈ {16, 32, 64, 128} tokens per routing tile (the wgmma N);
/// GEMM1 N ∈ {128, 256} weight rows per CTA; GEMM2 N ∈ {64, 128, 256}. 4 · 2 · 3 = 24
/// tactics, in a fixed order (tile, GEMM1 N, GEMM2 N).
pub fn sm90_tactics() -> Vec<MoeTactic> {
    let mut out = Vec::with_capacity(24);
    for tile in TileSize::SM90 {
        for n1 in [128, 256] {
            for n2 in SM90_MMA_N {
                let g1 = GemmTactic::new_sm90(GemmKind::Gemm1, tile.rows(), n1);
                let g2 = GemmTactic::new_sm90(GemmKind::Gemm2, tile.rows(), n2);
                if let (Ok(g1), Ok(g2)) = (g1, g2)
                    && let Ok(t) = MoeTactic::new(tile, g1, g2)
                {
                    out.push(t);
                }
            }
        }
    }
    out
}
