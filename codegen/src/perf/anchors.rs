//! Figures of the production reference kernels (FlashInfer 0.7.2.post1 NVFP4 MoE, CuTe DSL
//! 4.8.1, ptxas 13.5 for sm_100a), from ../shared/anchors.md §A. They are measurements of
//! another project, kept here so that `gen tactics` and the tests can compare against them.

use moegen_dsl::{GemmKind, TileSize};

/// One row of anchors.md §A.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReferenceKernel {
    /// Which GEMM.
    pub kind: GemmKind,
    /// Routing tile size.
    pub tile: u32,
    /// MMA N.
    pub mma_n: u32,
    /// Threads per CTA.
    pub threads: u32,
    /// Dynamic shared memory in bytes.
    pub dyn_smem: u32,
    /// Registers per thread.
    pub registers: u32,
    /// Spill bytes.
    pub spill_bytes: u32,
    /// A/B pipeline stages.
    pub ab_stages: u32,
    /// Accumulator stages.
    pub acc_stages: u32,
    /// SASS instruction count.
    pub sass_instructions: u32,
}

/// Builds a row in the column order of anchors.md's table.
macro_rules! reference_row {
    ($kind:ident, $tile:expr, $n:expr, $threads:expr, $smem:expr, $regs:expr, $spill:expr,
     $ab:expr, $acc:expr, $sass:expr) => {
        ReferenceKernel {
            kind: GemmKind::$kind,
            tile: $tile,
            mma_n: $n,
            threads: $threads,
            dyn_smem: $smem,
            registers: $regs,
            spill_bytes: $spill,
            ab_stages: $ab,
            acc_stages: $acc,
            sass_instructions: $sass,
        }
    };
}

/// Every reference kernel (cluster N = 1; GEMM2's cluster-N-2 variants were not listed).
pub const REFERENCE_KERNELS: [ReferenceKernel; 8] = [
    reference_row!(Gemm1, 128, 128, 384, 230_400, 168, 0, 6, 2, 2272),
    reference_row!(Gemm1, 128, 256, 384, 230_400, 168, 0, 4, 1, 2224),
    reference_row!(Gemm1, 256, 128, 384, 230_400, 168, 0, 7, 2, 2712),
    reference_row!(Gemm1, 256, 256, 384, 232_448, 168, 8, 5, 1, 2656),
    reference_row!(Gemm2, 128, 128, 256, 222_208, 60, 0, 5, 2, 1288),
    reference_row!(Gemm2, 128, 256, 256, 181_248, 60, 0, 2, 1, 1240),
    reference_row!(Gemm2, 256, 128, 256, 209_920, 58, 0, 6, 2, 1480),
    reference_row!(Gemm2, 256, 256, 256, 226_304, 63, 0, 4, 1, 1456),
];

/// The reference kernel with the same GEMM, tile size and MMA N, if one was measured.
pub fn reference_kernel(
    kind: GemmKind,
    tile: TileSize,
    mma_n: u32,
) -> Option<&'static ReferenceKernel> {
    REFERENCE_KERNELS.iter().find(|r| r.kind == kind && r.tile == tile.rows() && r.mma_n == mma_n)
}
