//! What an SM100 GEMM kernel is made of: its identity (the [`GemmKey`], read from there and
//! never copied), tile sizes, warp roles, TMEM columns and descriptor constants, all derived
//! from the description and its resource budget.

use crate::ptx::CtaGroup;
use moegen_dsl::abi::{GemmKey, gemm_roles};
use moegen_dsl::resources::SF_TMEM_BUFFERS;
use moegen_dsl::{GemmKind, KernelBudget, KernelDesc};

/// Everything an SM100 GEMM builder needs, derived once. The kernel's options (format,
/// SwiGLU input, recipe, finalize mode) are read from `key`; the geometry below is the
/// key's in the integer form the builders compute with.
#[derive(Clone, Debug)]
pub struct Sm100Layout {
    /// The kernel's identity.
    pub key: GemmKey,
    /// GEMM1 or GEMM2 (`key.gemm`).
    pub kind: GemmKind,
    /// Routing tile rows (MMA M, `key.tile`).
    pub tile: u32,
    /// MMA N (`key.mma_n`).
    pub n: u32,
    /// Cluster M (CTA-group size, `key.cta_group()`).
    pub cm: u32,
    /// Cluster N (`key.cluster_n`).
    pub cn: u32,
    /// Budget from the resource model.
    pub budget: KernelBudget,
    /// Warps: epilogue 0..4 always.
    pub warps: u32,
    /// First gather warp (GEMM1).
    pub gather_warp: u32,
    /// MMA warp.
    pub mma_warp: u32,
    /// TMA producer warp.
    pub tma_warp: u32,
    /// Relay warp (2-CTA GEMM1), if any.
    pub relay_warp: Option<u32>,
}

impl Sm100Layout {
    /// Derives the layout of a validated description.
    pub fn new(desc: &KernelDesc) -> Self {
        let key = desc.key();
        let roles = gemm_roles(&key);
        Self {
            key,
            kind: key.gemm,
            tile: key.tile.rows(),
            n: key.mma_n,
            cm: key.cta_group(),
            cn: key.cluster_n,
            budget: *desc.budget(),
            warps: roles.warps,
            gather_warp: roles.gather_warp.unwrap_or(roles.mma_warp),
            mma_warp: roles.mma_warp,
            tma_warp: roles.tma_warp,
            relay_warp: roles.relay_warp,
        }
    }

    /// Whether the two accumulator buffers share columns (MMA N = 256): one ring slot, the
    /// MMA alternates buffers per tile, the epilogue reads the shared columns first and
    /// releases the slot after them.
    pub fn acc_overlapped(&self) -> bool {
        self.budget.acc_overlap_columns > 0
    }
    /// Output columns per row of a tile: N/2 (GEMM1, after SwiGLU) or N (GEMM2).
    pub fn out_cols(&self) -> u32 {
        match self.kind {
            GemmKind::Gemm1 => self.n / 2,
            GemmKind::Gemm2 => self.n,
        }
    }
    /// TMEM columns of one scale-factor buffer (SFA then SFB).
    pub fn sf_cols_per_buffer(&self) -> u32 {
        self.budget.tmem_sf_columns / SF_TMEM_BUFFERS
    }
    /// SFB TMEM columns per MMA (4 per 128 rows of B).
    pub fn sfb_cols_per_mma(&self) -> u32 {
        4 * self.n.div_ceil(128)
    }
    /// 128-row SFB blocks per stage.
    pub fn sfb_row_blocks(&self) -> u32 {
        self.n.div_ceil(128)
    }
    /// The block-scaled instruction descriptor: E2M1 × E2M1 (1 in bits 7-9 and 10-12),
    /// UE4M3 scales (bit 23 = 0), K-major, N >> 3 in bits 17-22, M >> 4 in bits 24-28,
    /// scale-factor ids 0 (bits 4-5, 29-30), as sm100-ptx.md §2.3.
    pub fn idesc(&self) -> u32 {
        (1 << 7) | (1 << 10) | ((self.n >> 3) << 17) | ((self.tile >> 4) << 24)
    }
    /// The CTA group of the MMA (the pair for 2-CTA tactics).
    pub fn cta_group(&self) -> CtaGroup {
        CtaGroup::of_size(self.cm)
    }
    /// Kernel entry name.
    pub fn name(&self) -> String {
        self.key.name()
    }
}
