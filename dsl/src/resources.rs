//! The per-target resource model: shared-memory and TMEM budgets, and the pipeline depths
//! they allow for each GEMM tactic. docs/resource-model.md explains each term and how the
//! result differs from the CuTe-DSL reference.

use crate::abi::roles::sm90_roles_for;
use crate::abi::sm90_residency::{
    MAX_CTAS_PER_SM, sm90_consumer_regs_needed, sm90_registers, sm90_smem_per_cta,
};
use crate::options::{ActivationFormat, WeightFormat};
use crate::sm100_operands::{STAGE_ROW_BYTES, Sm100Operands};
use crate::tactic::{Arch, GemmKind, GemmTactic};
use crate::target::Target;

/// The granularity of H and I on SM100: one `kind::mxf4nvf4` MMA's K (64), two of
/// `kind::mxf8f6f4`'s (32). A K that is not a whole number of stages ends in a partial
/// stage whose missing K is neither loaded (TMA zero fill, cp.async zero fill) nor
/// multiplied (its MMAs are not issued).
pub const MMA_K: u32 = 64;
/// Rows each CTA's MMA covers.
pub const CTA_ROWS: u32 = 128;
/// Shared memory kept for mbarriers (≤ 16 A/B stages' full and empty barriers, 16 gather
/// relay barriers, two accumulator barrier pairs: 416 B) and the TMEM address slot. It sits
/// after the stage ring and the epilogue staging, so no 1024-byte alignment pads it.
pub const RESERVED_SMEM: u32 = 512;
/// The Hopper kernels' reserved block (their stage ring's barriers), first in shared memory:
/// the stages after it hold 1024-aligned swizzled tiles, so it occupies a whole 1024 bytes.
pub const SM90_RESERVED_SMEM: u32 = 1024;
/// Most AB stages a kernel uses; the reserved block is sized for this many barrier pairs.
pub const MAX_AB_STAGES: u32 = 16;
/// The fewest stages a Hopper GEMM keeps when it shares its SM with other CTAs.
pub const SM90_SHARED_STAGES: u32 = 4;
/// Most accumulator stages: a third buffer would not overlap anything more.
pub const MAX_ACC_STAGES: u32 = 2;
/// Scale-factor TMEM column sets: double-buffered so a `tcgen05.cp` for stage k+1 never
/// overwrites columns an MMA of stage k may still read (the reference reuses one set).
pub const SF_TMEM_BUFFERS: u32 = 2;
/// GEMM2 epilogue staging: bytes left between the eight groups of rows that share a
/// shared-memory bank offset (16 B each, so that the 8 threads of a 128-bit store phase
/// write 8 different 16-byte bank groups; docs/kernels.md).
pub const GEMM2_STAGING_GAP: u32 = 16;
/// Rows of a GEMM2 staging bank group: rows r and r' share one when r ≡ r' (mod 8).
pub const GEMM2_STAGING_GROUPS: u32 = 8;
/// Columns of one epilogue step (one `tcgen05.ld.32x32b.x64`).
pub const EPILOGUE_STEP_COLS: u32 = 64;

/// Budget of one kernel for one tactic on one target; every byte figure is per CTA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KernelBudget {
    /// A tile per stage (128 rows × 128 B).
    pub a_stage_bytes: u32,
    /// B tile per stage (this CTA's N / CTA-group rows × 128 B).
    pub b_stage_bytes: u32,
    /// SFA per stage (128 rows × 16 scales).
    pub sfa_stage_bytes: u32,
    /// SFB per stage (all N rows, padded to 128, × 16 scales; 2-CTA pairs each hold all).
    pub sfb_stage_bytes: u32,
    /// Sum of the four above.
    pub stage_bytes: u32,
    /// Pipeline depth of the A/B/SF ring.
    pub ab_stages: u32,
    /// Epilogue staging in shared memory.
    pub epilogue_bytes: u32,
    /// Barriers, scheduler ring, TMEM slot.
    pub reserved_bytes: u32,
    /// Dynamic shared memory the kernel requests.
    pub smem_bytes: u32,
    /// Bytes the TMA producer's `expect_tx` announces per stage on the (leader's) barrier.
    pub tma_tx_bytes_per_stage: u32,
    /// Accumulator buffers in TMEM.
    pub acc_stages: u32,
    /// Columns the two accumulator buffers share (0: disjoint). At MMA N = 256 two buffers
    /// of 256 columns overlap in `2·256 − (512 − SF columns)` columns; the epilogue reads
    /// the shared columns first and releases the buffer early (docs/kernels.md).
    pub acc_overlap_columns: u32,
    /// TMEM columns used by accumulators (`acc_stages · N − acc_overlap_columns`).
    pub tmem_acc_columns: u32,
    /// TMEM columns used by scale factors (all buffers).
    pub tmem_sf_columns: u32,
    /// TMEM columns allocated (a power of two ≥ 32).
    pub tmem_alloc_columns: u32,
    /// CTAs of the kernel resident on one SM (SM100: 1; Hopper: `abi::sm90_residency`).
    pub ctas_per_sm: u32,
}

/// A tactic the target cannot hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// Fewer than two AB stages fit.
    #[error(
        "{tactic}: only {stages} A/B stage(s) of {stage_bytes} B fit in {budget} B of shared memory; at least 2 are needed"
    )]
    TooFewStages {
        /// Tactic name.
        tactic: String,
        /// Stages that fit.
        stages: u32,
        /// Bytes per stage.
        stage_bytes: u32,
        /// Bytes available for stages.
        budget: u32,
    },
    /// Not even one accumulator fits in TMEM.
    #[error("{tactic}: {needed} TMEM columns needed, {available} available")]
    TmemExhausted {
        /// Tactic name.
        tactic: String,
        /// Columns needed.
        needed: u32,
        /// Columns available.
        available: u32,
    },
    /// Cluster larger than the target allows.
    #[error("{tactic}: cluster of {ctas} CTAs exceeds the target's {max}")]
    ClusterTooLarge {
        /// Tactic name.
        tactic: String,
        /// CTAs in the cluster.
        ctas: u32,
        /// The limit.
        max: u32,
    },
    /// A pair of operand formats the target's MMA does not multiply.
    #[error("{target} has no GEMM for {format:?} weights with {activations:?} activations")]
    Operands {
        /// The weight format.
        format: WeightFormat,
        /// The activation format.
        activations: ActivationFormat,
        /// The target.
        target: Target,
    },
    /// A tactic shaped for another GPU generation than the target.
    #[error("{tactic} is not a tactic for {target}")]
    WrongArch {
        /// Tactic name.
        tactic: String,
        /// The target.
        target: Target,
    },
    /// A requested pipeline depth the budget cannot hold.
    #[error(
        "{tactic}: {what} {requested} is outside 1..={max} (2..= for A/B stages) for this target"
    )]
    DepthOutOfRange {
        /// Tactic name.
        tactic: String,
        /// Which depth.
        what: &'static str,
        /// Requested value.
        requested: u32,
        /// Largest that fits.
        max: u32,
    },
}

fn epilogue_bytes(tactic: &GemmTactic, operands: Sm100Operands) -> u32 {
    let [_, n] = tactic.mma_tiler();
    match tactic.kind() {
        // SwiGLU halves N; the output tile (128 rows × N/2 values, FP4 or FP8) is staged once
        // for its TMA store, which is drained before the next tile's epilogue writes.
        GemmKind::Gemm1 => CTA_ROWS * (n / 2) * operands.activation_bits() / 8,
        // Each thread stages its whole bf16 row for one bulk reduce-add per row and tile (the
        // reference's scheme), the eight bank groups of rows separated by a 16-byte gap.
        GemmKind::Gemm2 => CTA_ROWS * n * 2 + (GEMM2_STAGING_GROUPS - 1) * GEMM2_STAGING_GAP,
    }
}

/// K elements per pipeline stage of the Hopper GEMMs: 64 bf16 activations = one 128-byte
/// swizzle row, and one 64-wide weight fragment tile.
pub const SM90_K_STAGE: u32 = 64;

/// Plans one GEMM kernel: the deepest A/B pipeline and accumulator buffering that fit.
pub fn plan_gemm(target: Target, tactic: &GemmTactic) -> Result<KernelBudget, ResourceError> {
    plan_gemm_for(target, tactic, ActivationFormat::default())
}

/// [`plan_gemm`] for kernels over `activations` (NVFP4 weights; [`plan_gemm_with`] for
/// any): Hopper's FP8 (A8) kernels take 128 K per stage (one 128-byte row of E4M3
/// activations), so their weight tiles are twice as large.
pub fn plan_gemm_for(
    target: Target,
    tactic: &GemmTactic,
    activations: ActivationFormat,
) -> Result<KernelBudget, ResourceError> {
    plan_gemm_with(target, tactic, WeightFormat::Nvfp4, activations)
}

/// [`plan_gemm_for`] for weights in `format`: Hopper's bf16-activation kernels stream one
/// scale byte per block of the format (16 values for NVFP4, 32 for MXFP4), which sets the
/// bytes a stage's full barrier waits for. The stage count does not depend on it (the
/// stages are padded to 1 KiB, which absorbs the difference in every shipped tactic).
pub fn plan_gemm_with(
    target: Target,
    tactic: &GemmTactic,
    format: WeightFormat,
    activations: ActivationFormat,
) -> Result<KernelBudget, ResourceError> {
    if target.arch() != tactic.arch() {
        return Err(ResourceError::WrongArch { tactic: tactic.to_string(), target });
    }
    match target.arch() {
        Arch::Sm100 => match Sm100Operands::of(format, activations) {
            Some(operands) => plan_sm100(target, tactic, operands),
            None => Err(ResourceError::Operands { format, activations, target }),
        },
        Arch::Sm90 if activations == ActivationFormat::Mxfp8 => {
            Err(ResourceError::Operands { format, activations, target })
        }
        Arch::Sm90 => plan_sm90(target, tactic, format, activations),
    }
}

/// Bytes of one Hopper consumer's column table: per token column of the routing tile, the
/// values its epilogue multiplies every element of that column by, loaded from global
/// memory by the column's own thread while the K loop runs (one load each, instead of every
/// thread loading its columns' values after the K loop and waiting for them). GEMM2: the
/// router weight and the A8 activation scale (A16 kernels leave that word unused), 8 bytes;
/// GEMM1: the A8 activation scale, 4 bytes; GEMM1 A16 needs none.
pub fn sm90_column_table_bytes(kind: GemmKind, activations: ActivationFormat, tile: u32) -> u32 {
    match (kind, activations) {
        (GemmKind::Gemm2, _) => tile * 8,
        (GemmKind::Gemm1, ActivationFormat::Fp8) => tile * 4,
        (GemmKind::Gemm1, _) => 0,
    }
}

/// Bytes a Hopper split-K CTA sets aside for the other ranks' partial accumulators: one
/// slot of T × N fp32 per rank besides rank 0 (every CTA of the cluster has the same layout;
/// only rank 0's slots are written). 0 without a split.
pub fn sm90_split_k_bytes(tactic: &GemmTactic) -> u32 {
    let [t, n] = tactic.mma_tiler();
    (tactic.split_k() - 1) * t * n * 4
}

/// Hopper (swap-AB): per stage, the routing tile's bf16 activations (T × 64 × 2 B), the
/// CTA's FP4 weight rows in fragment order (N × 64 / 2 B) and one scale byte per block of
/// the format (A8: per K32 step); accumulators live in the consumer warpgroups' registers.
fn plan_sm90(
    target: Target,
    tactic: &GemmTactic,
    format: WeightFormat,
    activations: ActivationFormat,
) -> Result<KernelBudget, ResourceError> {
    let k_stage = activations.sm90_k_stage();
    let limits = target.limits();
    let name = tactic.to_string();
    let [t, n] = tactic.mma_tiler();
    // One 128-byte activation row per token, whatever the element size.
    let a = t * SM90_K_STAGE * 2;
    let b = n * k_stage / 2;
    // Scale bytes per row and stage: four for NVFP4 (one per K16 step) and A8 (one per K32
    // step), two for MXFP4 with bf16 activations (one per 32-block,
    // `abi::sm90_weights::scale_position`).
    let sfb = match activations {
        ActivationFormat::Fp8 => n * SM90_K_STAGE / 16,
        _ => n * SM90_K_STAGE / format.block(),
    };
    // Padded so every stage's 128B-swizzled activation tile starts on a 1024-byte boundary.
    let stage_bytes = (a + b + sfb).next_multiple_of(1024);
    // One-consumer kernels (N ≤ 128) run the most CTAs per SM whose consumers keep the
    // registers they need and whose rings keep SM90_SHARED_STAGES stages; two-consumer
    // kernels (N 256) keep a whole SM, with the deepest ring. So the tuner chooses the
    // residency with the N width: in the first cut (N 256 shared too) DeepSeek-slice layers
    // were 12 % and 8 % faster at 128 and 1024 tokens but 32 % slower at 16, gpt-oss 15–30 %
    // faster throughout (docs/perf.md, 2026-12-02).
    // Ping-pong is a two-consumer kernel too: each consumer holds a whole unit's rows.
    let roles = sm90_roles_for(n, tactic.schedule());
    // GEMM1 stages its bf16 h tile (T × rows/2 per consumer) for coalesced stores; GEMM2 its
    // bf16 output tile (T × rows) for the per-token bulk reduce-add; each consumer has its
    // column table.
    let rows = roles.consumers * roles.rows_per_consumer;
    let columns = roles.consumers * sm90_column_table_bytes(tactic.kind(), activations, t);
    // A split's rank 0 receives the other ranks' fp32 accumulators (T × N each) before its
    // epilogue (`sm90_split_k_bytes`).
    let epilogue = columns
        + sm90_split_k_bytes(tactic)
        + match tactic.kind() {
            GemmKind::Gemm1 => t * (rows / 2) * 2,
            GemmKind::Gemm2 => t * rows * 2,
        };
    let need = if roles.consumers > 1 {
        u32::MAX
    } else {
        sm90_consumer_regs_needed(t, roles.rows_per_consumer)
    };
    let stages_at = |p: u32| {
        let budget = sm90_smem_per_cta(p, limits.max_dynamic_smem)
            .saturating_sub(SM90_RESERVED_SMEM + epilogue);
        (budget, (budget / stage_bytes).min(MAX_AB_STAGES))
    };
    let ctas_per_sm = (2..=MAX_CTAS_PER_SM)
        .rev()
        .find(|&p| {
            sm90_registers(&roles, p).consumer >= need && stages_at(p).1 >= SM90_SHARED_STAGES
        })
        .unwrap_or(1);
    let (budget, ab_stages) = stages_at(ctas_per_sm);
    if ab_stages < 2 {
        return Err(ResourceError::TooFewStages {
            tactic: name,
            stages: ab_stages,
            stage_bytes,
            budget,
        });
    }
    // The bytes a stage's full barrier waits for: exactly what arrives, never the padded
    // stage size. GEMM1 gathers its activations with cp.async (they arrive separately);
    // everything else comes by bulk copy/TMA.
    let tx = match tactic.kind() {
        GemmKind::Gemm1 => b + sfb,
        GemmKind::Gemm2 => a + b + sfb,
    };
    Ok(KernelBudget {
        a_stage_bytes: a,
        b_stage_bytes: b,
        sfa_stage_bytes: 0,
        sfb_stage_bytes: sfb,
        stage_bytes,
        ab_stages,
        epilogue_bytes: epilogue,
        reserved_bytes: SM90_RESERVED_SMEM,
        smem_bytes: SM90_RESERVED_SMEM + epilogue + ab_stages * stage_bytes,
        tma_tx_bytes_per_stage: tx,
        acc_stages: 1,
        acc_overlap_columns: 0,
        tmem_acc_columns: 0,
        tmem_sf_columns: 0,
        tmem_alloc_columns: 0,
        ctas_per_sm,
    })
}

fn plan_sm100(
    target: Target,
    tactic: &GemmTactic,
    operands: Sm100Operands,
) -> Result<KernelBudget, ResourceError> {
    let limits = target.limits();
    let name = tactic.to_string();
    if tactic.cluster_ctas() > limits.max_cluster_ctas {
        return Err(ResourceError::ClusterTooLarge {
            tactic: name,
            ctas: tactic.cluster_ctas(),
            max: limits.max_cluster_ctas,
        });
    }
    let group = tactic.cta_group().size();
    let [_, n] = tactic.mma_tiler();
    let a = CTA_ROWS * STAGE_ROW_BYTES;
    let b = n / group * STAGE_ROW_BYTES;
    let sfa = CTA_ROWS * operands.stage_scale_bytes();
    let sfb = n.div_ceil(CTA_ROWS) * CTA_ROWS * operands.stage_scale_bytes();
    // Padded so every stage's 128B-swizzled tiles start on a 1024-byte boundary (NVFP4's
    // 2 KiB scale parts keep it whole already; MXFP8's 512-byte atoms do not).
    let stage_bytes = (a + b + sfa + sfb).next_multiple_of(1024);
    let epilogue = epilogue_bytes(tactic, operands);
    let budget = limits.max_dynamic_smem - RESERVED_SMEM - epilogue;
    let ab_stages = (budget / stage_bytes).min(MAX_AB_STAGES);
    if ab_stages < 2 {
        return Err(ResourceError::TooFewStages {
            tactic: name,
            stages: ab_stages,
            stage_bytes,
            budget,
        });
    }
    // GEMM1 gathers A and SFA with cp.async; only B and SFB arrive by TMA. In 2-CTA mode the
    // leader's barrier counts the bytes landing in both CTAs. B counts its global (packed)
    // bytes: the TMA pads MXFP4 codes on the way in.
    let b_tx = n / group * operands.weight_row_global_bytes();
    let tx_per_cta = match tactic.kind() {
        GemmKind::Gemm1 => b_tx + sfb,
        GemmKind::Gemm2 => a + b_tx + sfa + sfb,
    };
    // A 32-bit column holds 4 scale bytes of one row per lane; 128 rows take 4 columns (lane
    // r%32, column r/32), so each 512-byte atom of a stage takes 4 columns: NVFP4 one atom
    // per MMA (SFA 16 columns a stage), MXFP8 one atom for the stage's four MMAs (4), and as
    // many per 128 B-rows for SFB (sm100-ptx.md §4.4).
    let sf_cols_per_stage = operands.scale_atoms_per_stage() * 4 * (1 + n.div_ceil(CTA_ROWS));
    let tmem_sf_columns = SF_TMEM_BUFFERS * sf_cols_per_stage;
    let acc_room = limits.tmem_columns.saturating_sub(tmem_sf_columns);
    if acc_room < n {
        return Err(ResourceError::TmemExhausted {
            tactic: name,
            needed: n + tmem_sf_columns,
            available: limits.tmem_columns,
        });
    }
    // Two accumulators always: disjoint when they fit, else overlapping in the columns they
    // cannot both have (N = 256: 2·256 − 416 = 96), released early by the epilogue.
    let acc_stages = MAX_ACC_STAGES;
    let acc_overlap_columns = (acc_stages * n).saturating_sub(acc_room);
    let tmem_acc_columns = acc_stages * n - acc_overlap_columns;
    let tmem_alloc_columns = (tmem_acc_columns + tmem_sf_columns).next_power_of_two().max(32);
    Ok(KernelBudget {
        a_stage_bytes: a,
        b_stage_bytes: b,
        sfa_stage_bytes: sfa,
        sfb_stage_bytes: sfb,
        stage_bytes,
        ab_stages,
        epilogue_bytes: epilogue,
        reserved_bytes: RESERVED_SMEM,
        smem_bytes: RESERVED_SMEM + epilogue + ab_stages * stage_bytes,
        tma_tx_bytes_per_stage: tx_per_cta * group,
        acc_stages,
        acc_overlap_columns,
        tmem_acc_columns,
        tmem_sf_columns,
        tmem_alloc_columns,
        ctas_per_sm: 1,
    })
}

impl KernelBudget {
    /// Slots of the accumulator ring: one per buffer, except for overlapping buffers, which
    /// share one slot (the MMA alternates buffers per tile and waits for the early release).
    pub fn acc_ring_slots(&self) -> u32 {
        if self.acc_overlap_columns > 0 { 1 } else { self.acc_stages }
    }
    /// TMEM column of accumulator buffer 1 (buffer 0 starts at column 0).
    pub fn acc_buffer_stride(&self) -> u32 {
        if self.acc_stages < 2 { 0 } else { self.tmem_acc_columns - self.acc_n() }
    }
    /// Columns of one accumulator (MMA N).
    pub fn acc_n(&self) -> u32 {
        (self.tmem_acc_columns + self.acc_overlap_columns) / self.acc_stages.max(1)
    }

    /// The same budget with shallower pipelines (e.g. to test or to share an SM); depths
    /// deeper than the model allows are refused.
    pub fn with_depths(
        mut self,
        tactic: &GemmTactic,
        ab_stages: u32,
        acc_stages: u32,
    ) -> Result<Self, ResourceError> {
        if !(2..=self.ab_stages).contains(&ab_stages) {
            return Err(ResourceError::DepthOutOfRange {
                tactic: tactic.to_string(),
                what: "A/B stages",
                requested: ab_stages,
                max: self.ab_stages,
            });
        }
        if !(1..=self.acc_stages).contains(&acc_stages) {
            return Err(ResourceError::DepthOutOfRange {
                tactic: tactic.to_string(),
                what: "accumulator stages",
                requested: acc_stages,
                max: self.acc_stages,
            });
        }
        let n = (self.tmem_acc_columns + self.acc_overlap_columns) / self.acc_stages;
        self.ab_stages = ab_stages;
        if acc_stages < self.acc_stages {
            self.acc_overlap_columns = 0;
        }
        self.acc_stages = acc_stages;
        self.smem_bytes = self.reserved_bytes + self.epilogue_bytes + ab_stages * self.stage_bytes;
        self.tmem_acc_columns = acc_stages * n - self.acc_overlap_columns;
        if self.tmem_alloc_columns > 0 {
            self.tmem_alloc_columns =
                (self.tmem_acc_columns + self.tmem_sf_columns).next_power_of_two().max(32);
        }
        Ok(self)
    }
}
