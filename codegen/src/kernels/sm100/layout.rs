//! What an SM100 GEMM kernel is made of: its identity (the [`GemmKey`], read from there and
//! never copied), tile sizes, warp roles, TMEM columns and descriptor constants, all derived
//! from the description and its resource budget.

use crate::ptx::CtaGroup;
use crate::ptx::ops::MmaKind;
use moegen_dsl::abi::{GemmKey, gemm_roles};
use moegen_dsl::resources::SF_TMEM_BUFFERS;
use moegen_dsl::{GemmKind, KernelBudget, KernelDesc, Sm100Operands};

/// Everything an SM100 GEMM builder needs, derived once. The kernel's options (format,
/// SwiGLU input, recipe, finalize mode) are read from `key`; the geometry below is the
/// key's in the integer form the builders compute with.
#[derive(Clone, Debug)]
pub struct Sm100Layout {
    /// The kernel's identity.
    pub key: GemmKey,
    /// GEMM1 or GEMM2 (`key.gemm`).
    pub kind: GemmKind,
    /// The operand formats (`key.format` × `key.activations`).
    pub operands: Sm100Operands,
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
            // A validated description names a pair SM100 multiplies; `build_layout` refuses
            // a layout whose key does not (this field then holds NVFP4, never emitted).
            operands: Sm100Operands::of(key.format, key.activations)
                .unwrap_or(Sm100Operands::Nvfp4),
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
    /// SFB TMEM columns per scale atom of a stage (4 per 128 rows of B).
    pub fn sfb_cols_per_atom(&self) -> u32 {
        4 * self.n.div_ceil(128)
    }
    /// Scale atoms per 128 rows and stage: 4 (NVFP4, one per MMA) or 1 (MXFP8, whose four
    /// MMAs pick their byte of each scale word by the descriptor's SF ids).
    pub fn sf_atoms(&self) -> u32 {
        self.operands.scale_atoms_per_stage()
    }
    /// The MMA kind of the operand formats.
    pub fn mma_kind(&self) -> MmaKind {
        match self.operands {
            Sm100Operands::Nvfp4 => MmaKind::Mxf4Nvf4Block16,
            Sm100Operands::Mxfp8Mxfp4 => MmaKind::Mxf8f6f4Block32,
        }
    }
    /// 128-row SFB blocks per stage.
    pub fn sfb_row_blocks(&self) -> u32 {
        self.n.div_ceil(128)
    }
    /// The block-scaled instruction descriptor of MMA `j` of a stage: K-major, N >> 3 in
    /// bits 17-22, M >> 7 in bits 27-28 (sm100-ptx.md §2.3). NVFP4: E2M1 × E2M1 (1 in bits
    /// 7-9 and 10-12), UE4M3 scales (bit 23 = 0), scale-factor ids 0. MXFP8: E4M3 (0) ×
    /// E2M1 (5 in bits 10-12), UE8M0 scales (bit 23), SFB id (bits 4-5) and SFA id (bits
    /// 29-30) both `j`: MMA j's K block is byte j of the stage's scale words.
    pub fn idesc(&self, j: u32) -> u32 {
        let shape = ((self.n >> 3) << 17) | ((self.tile >> 7) << 27);
        match self.operands {
            Sm100Operands::Nvfp4 => shape | (1 << 7) | (1 << 10),
            Sm100Operands::Mxfp8Mxfp4 => shape | (5 << 10) | (1 << 23) | (j << 4) | (j << 29),
        }
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
