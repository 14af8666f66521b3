//! The production reference's per-role costs (FlashInfer 0.7.2.post1's CuTe-DSL NVFP4 MoE
//! kernels, SASS read role by role: ../shared/anchors.md §A2), as the analytic model takes
//! them. §A2 gives the MMA issuer and TMA producer per K block for four kernels, the gather
//! per thread per K block and the GEMM1 epilogue per output element; everything else below
//! is an assumption, named as such, and documented in docs/perf.md.

use moegen_dsl::{GemmKind, TileSize};

use super::model::{GemmCosts, Overlap};

/// §A2: MMA issuer SASS per K block (G1 t128n128, G1 t256n256, G2 t128n128, G2 t256n256).
pub const MMA_PER_K_BLOCK: [f64; 4] = [83.0, 107.0, 67.0, 82.0];
/// §A2: TMA producer SASS per K block, same order.
pub const PRODUCER_PER_K_BLOCK: [f64; 4] = [35.0, 39.0, 44.0, 48.0];
/// §A2: GEMM1 gather SASS per thread per K block (8 threads per 128-byte row).
pub const GATHER_PER_K_BLOCK: f64 = 142.0;
/// §A2: GEMM1 epilogue SASS per output element (~12, branch-free).
pub const GEMM1_EPILOGUE_PER_ELEMENT: f64 = 12.0;
/// Assumption (not in §A2): the GEMM2 epilogue per output element: one LDTM.x64 per 64,
/// FMUL2 and F2FP per 2, one STS.128 per 8, plus address arithmetic, ≈ 1.5.
pub const GEMM2_EPILOGUE_PER_ELEMENT: f64 = 1.5;
/// Assumption: per-tile epilogue overhead outside the element loop (accumulator wait and
/// release, index/scale reads from shared memory, store issue), per thread.
pub const EPILOGUE_PER_TILE: f64 = 60.0;
/// Assumption: the 2-CTA relay per K block (a wait, a proxy fence and a remote arrival).
pub const RELAY_PER_K_BLOCK: f64 = 12.0;
/// §A2: the reference walks the N = 256 accumulators' subtiles in alternating order and
/// releases after the first; modelled as the next mainloop starting after a quarter of the
/// epilogue (one of four subtiles).
pub const EARLY_RELEASE_FRACTION: f64 = 0.25;

/// The reference kernel's costs for a GEMM of `kind` with tile `tile` and MMA N `n`. §A2
/// measured t128/n128 and t256/n256; t128/n256 takes t128/n128's MMA and producer figures
/// and t256/n128 takes t256/n256's (the per-K-block issue depends on the CTA group more than
/// on N). The reference's GEMM2 issues one bulk reduce per row per tile, lane-serialised:
/// 32 lane iterations per warp, charged like moegen's.
pub fn reference_costs(kind: GemmKind, tile: TileSize, n: u32, bulk_lane_slots: f64) -> GemmCosts {
    let i = match (kind, tile) {
        (GemmKind::Gemm1, TileSize::T256) => 1,
        (GemmKind::Gemm1, _) => 0,
        (GemmKind::Gemm2, TileSize::T256) => 3,
        (GemmKind::Gemm2, _) => 2,
    };
    let two_cta = tile == TileSize::T256;
    let (per_element, bulk) = match kind {
        GemmKind::Gemm1 => (GEMM1_EPILOGUE_PER_ELEMENT, 1.0),
        GemmKind::Gemm2 => (GEMM2_EPILOGUE_PER_ELEMENT, 32.0 * bulk_lane_slots),
    };
    GemmCosts {
        mma_per_k_block: MMA_PER_K_BLOCK[i],
        producer_per_k_block: PRODUCER_PER_K_BLOCK[i],
        gather_per_k_block: if kind == GemmKind::Gemm1 { GATHER_PER_K_BLOCK } else { 0.0 },
        relay_per_k_block: if kind == GemmKind::Gemm1 && two_cta { RELAY_PER_K_BLOCK } else { 0.0 },
        epilogue_per_element: per_element,
        epilogue_per_tile: EPILOGUE_PER_TILE + bulk,
        // §A2: branch-free, 2 CALLs per kernel outside the element loop.
        epilogue_serialized: false,
        // §A: two accumulator stages at N = 128; at N = 256 two overlapped accumulators.
        overlap: if n == 256 {
            Overlap::EarlyRelease(EARLY_RELEASE_FRACTION)
        } else {
            Overlap::Full
        },
    }
}

/// The figures §A2 measured for one reference kernel (SASS per executing warp).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct MeasuredRoles {
    /// MMA issuer per K block.
    pub mma_per_k_block: f64,
    /// TMA producer per K block.
    pub producer_per_k_block: f64,
    /// Gather per thread per K block (GEMM1).
    pub gather_per_k_block: Option<f64>,
    /// Epilogue per output element (GEMM1).
    pub epilogue_per_element: Option<f64>,
}

/// §A2's figures for the reference kernel with this GEMM, tile and N, where §A2 has them
/// (t128/n128 and t256/n256).
pub fn measured_roles(kind: GemmKind, tile: TileSize, n: u32) -> Option<MeasuredRoles> {
    let i = match (kind, tile, n) {
        (GemmKind::Gemm1, TileSize::T128, 128) => 0,
        (GemmKind::Gemm1, TileSize::T256, 256) => 1,
        (GemmKind::Gemm2, TileSize::T128, 128) => 2,
        (GemmKind::Gemm2, TileSize::T256, 256) => 3,
        _ => return None,
    };
    let gemm1 = kind == GemmKind::Gemm1;
    Some(MeasuredRoles {
        mma_per_k_block: MMA_PER_K_BLOCK[i],
        producer_per_k_block: PRODUCER_PER_K_BLOCK[i],
        gather_per_k_block: gemm1.then_some(GATHER_PER_K_BLOCK),
        epilogue_per_element: gemm1.then_some(GEMM1_EPILOGUE_PER_ELEMENT),
    })
}
