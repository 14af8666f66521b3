//! What a Hopper GEMM kernel is made of, derived once from its description: the swap-AB
//! shape (T tokens = the wgmma N, N weight rows per CTA in m64 blocks), the warpgroup roles,
//! the register split between them, and the bytes one pipeline stage brings in.

use moegen_dsl::abi::GemmKey;
use moegen_dsl::abi::roles::{WARPGROUP_WARPS, sm90_roles};
use moegen_dsl::abi::sm90_residency::{Sm90Registers, sm90_registers};
use moegen_dsl::abi::sm90_weights::{TILE_BYTES, TILE_ROWS, a8, scale_tile_bytes};
use moegen_dsl::resources::{SM90_K_STAGE, sm90_column_table_bytes};
use moegen_dsl::{ActivationFormat, GemmKind, KernelBudget, KernelDesc, Schedule};

/// Bytes of one K stage of one token row of activations (64 bf16 or 128 E4M3: one 128-byte
/// swizzle row).
pub const ACT_ROW_BYTES: u32 = SM90_K_STAGE * 2;

/// Everything a Hopper GEMM builder needs. The kernel's options (weight format,
/// activations, SwiGLU input, finalize mode) are read from `key`; the geometry below is the
/// key's in the integer form the builders compute with.
#[derive(Clone, Debug)]
pub struct Sm90Layout {
    /// The kernel's identity.
    pub key: GemmKey,
    /// GEMM1 or GEMM2 (`key.gemm`).
    pub kind: GemmKind,
    /// Tokens per routing tile: the wgmma N (`key.tile`).
    pub tile: u32,
    /// Weight rows per CTA (`key.mma_n`).
    pub n: u32,
    /// Consumer warpgroups (warpgroups 1..=consumers).
    pub consumers: u32,
    /// Weight rows per consumer.
    pub rows_per_consumer: u32,
    /// m64 wgmma blocks per consumer (1 or 2).
    pub blocks: u32,
    /// Ping-pong: the consumers take alternate units, each whole (`key.schedule`).
    pub pingpong: bool,
    /// Consumers that split one unit's rows: `consumers` when cooperative, 1 in ping-pong.
    pub parts: u32,
    /// Budget from the resource model.
    pub budget: KernelBudget,
    /// Threads per CTA.
    pub threads: u32,
    /// CTAs per SM and the register split (`.maxnreg`, `setmaxnreg`) that follows.
    pub regs: Sm90Registers,
    /// FP8 activations (A8): E4M3 wgmmas over 128-K stages.
    pub a8: bool,
    /// K elements per stage (64, or 128 for A8).
    pub k_stage: u32,
    /// Bytes of one m64 × stage fragment tile.
    pub tile_bytes: u32,
    /// Bytes of one m64 × stage scale tile.
    pub scale_tile_bytes: u32,
    /// CTAs of the cluster that split each unit's K (`key.split_k`; 1: none).
    pub split_k: u32,
}

impl Sm90Layout {
    /// Derives the layout of a validated sm_90a description.
    pub fn new(desc: &KernelDesc) -> Self {
        let key = desc.key();
        let roles = sm90_roles(&key);
        Self {
            key,
            kind: key.gemm,
            tile: key.tile.rows(),
            n: key.mma_n,
            consumers: roles.consumers,
            rows_per_consumer: roles.rows_per_consumer,
            blocks: roles.rows_per_consumer / TILE_ROWS as u32,
            pingpong: key.schedule == Schedule::PingPong,
            parts: key.mma_n / roles.rows_per_consumer,
            budget: *desc.budget(),
            threads: roles.warps * 32,
            regs: sm90_registers(&roles, desc.budget().ctas_per_sm),
            a8: key.activations == ActivationFormat::Fp8,
            k_stage: key.activations.sm90_k_stage(),
            tile_bytes: if key.activations == ActivationFormat::Fp8 {
                a8::TILE_BYTES as u32
            } else {
                TILE_BYTES as u32
            },
            scale_tile_bytes: if key.activations == ActivationFormat::Fp8 {
                a8::SCALE_TILE_BYTES as u32
            } else {
                scale_tile_bytes(key.format) as u32
            },
            split_k: key.split_k,
        }
    }

    /// GEMM1 with an ungated activation (ReLU²): W1 has I rows in h column order, so a
    /// consumer's m64 blocks are consecutive h column blocks, not an (up, gate) pair.
    pub fn ungated(&self) -> bool {
        self.kind == GemmKind::Gemm1 && !self.key.activation.gated()
    }

    /// Kernel entry name.
    pub fn name(&self) -> String {
        self.key.name()
    }

    /// Threads of one warpgroup.
    pub const fn warpgroup_threads() -> u32 {
        WARPGROUP_WARPS * 32
    }

    /// FP4 value bytes of one stage (N/64 fragment tiles).
    pub fn value_bytes(&self) -> u32 {
        self.n / TILE_ROWS as u32 * self.tile_bytes
    }
    /// Scale bytes of one stage (N/64 scale tiles).
    pub fn scale_bytes(&self) -> u32 {
        self.n / TILE_ROWS as u32 * self.scale_tile_bytes
    }
    /// Activation bytes of one stage (T rows × 128 B).
    pub fn act_bytes(&self) -> u32 {
        self.tile * ACT_ROW_BYTES
    }
    /// Bytes the stage's bulk copies and TMA deliver on its full barrier: the weights, and
    /// for GEMM2 the activation tile (GEMM1 gathers its activations with cp.async, which
    /// arrives separately). Not the budget's padded stage size: an mbarrier waits for
    /// exactly the bytes announced.
    pub fn tx_bytes(&self) -> u32 {
        let w = self.value_bytes() + self.scale_bytes();
        match self.kind {
            GemmKind::Gemm1 => w,
            GemmKind::Gemm2 => w + self.act_bytes(),
        }
    }
    /// Bytes of one consumer's column table (`resources::sm90_column_table_bytes`).
    pub fn column_table_bytes(&self) -> u32 {
        sm90_column_table_bytes(self.kind, self.key.activations, self.tile)
    }
    /// fp32 accumulator registers of one consumer thread (`tile / 2` per m64 block).
    pub fn acc_regs(&self) -> u32 {
        self.blocks * self.tile / 2
    }
    /// Bytes of one rank's slot of partial accumulators in rank 0's shared memory: every
    /// consumer's threads' accumulators (T × N fp32).
    pub fn split_slot_bytes(&self) -> u32 {
        self.consumers * Self::warpgroup_threads() * self.acc_regs() * 4
    }

    /// Epilogue staging bytes of one consumer: its output columns (64 h columns for GEMM1,
    /// its weight rows for GEMM2) for every token of the tile, bf16.
    pub fn staging_bytes(&self) -> u32 {
        let cols = match self.kind {
            GemmKind::Gemm1 => self.rows_per_consumer / 2,
            GemmKind::Gemm2 => self.rows_per_consumer,
        };
        self.tile * cols * 2
    }
}
