//! Where a GEMM kernel's data lives in shared memory, placed by arenas from the resource
//! budget: `ab_stages` stages of A, B, SFA and SFB tiles from byte 0 (the dynamic array is
//! declared 1024-byte aligned, as the 128B swizzle needs); then the epilogue staging; then the
//! reserved block (`reserved_bytes`) with the rings' mbarriers, each sized by its ring's
//! depth, and the TMEM address slot. The small block goes last so that no 1024-byte
//! alignment pads it. Anything that does not fit is an error.

use moegen_dsl::GemmKind;
use moegen_dsl::resources::{CTA_ROWS, GEMM2_STAGING_GAP, GEMM2_STAGING_GROUPS};

use super::layout::Sm100Layout;
use super::rings::RingBarriers;
use crate::kernels::pipeline::MBARRIER_BYTES;
use crate::kernels::skeleton::stage_base;
use crate::ptx::smem::{
    Arena, BULK_ALIGN, Region, RingEnd, SWIZZLED_TILE_ALIGN, SmemError, StagePart, TMA_ALIGN,
};
use crate::ptx::{KernelBuilder, Reg};

/// The shared-memory layout of one GEMM kernel.
#[derive(Clone, Debug)]
pub struct Sm100Smem {
    /// The rings' barriers.
    pub bars: RingBarriers,
    /// Where `tcgen05.alloc` writes the TMEM base address.
    pub tmem_slot: Region,
    /// Bytes from one stage to the next.
    pub stage_bytes: u32,
    /// The stage ring (every stage).
    pub stages: Region,
    /// A tile within a stage.
    pub a: u32,
    /// B tile within a stage.
    pub b: u32,
    /// SFA within a stage.
    pub sfa: u32,
    /// SFB within a stage.
    pub sfb: u32,
    /// Epilogue staging.
    pub epilogue: Region,
    leaves: Vec<Region>,
}

/// Bytes of one GEMM1 staging row: N/2 values of h, FP4 or FP8.
pub fn gemm1_row_bytes(l: &Sm100Layout) -> u32 {
    l.n / 2 * l.operands.activation_bits() / 8
}

/// Bytes of one GEMM2 staging row (N bf16 values).
pub fn gemm2_row_bytes(l: &Sm100Layout) -> u32 {
    l.n * 2
}

/// Bytes from one GEMM2 staging bank group to the next: its 16 rows and a 16-byte gap.
pub fn gemm2_group_bytes(l: &Sm100Layout) -> u32 {
    (CTA_ROWS / GEMM2_STAGING_GROUPS) * gemm2_row_bytes(l) + GEMM2_STAGING_GAP
}

/// Epilogue staging: bytes its users address, alignment, name.
fn epilogue_shape(l: &Sm100Layout) -> (u32, u32, &'static str) {
    match l.kind {
        // One row of N/2 FP4 or FP8 values per accumulator row, TMA-stored per warp.
        GemmKind::Gemm1 => (CTA_ROWS * gemm1_row_bytes(l), TMA_ALIGN, "h output staging"),
        // One bf16 row per accumulator row, bulk-reduced (or copied) row by row; row r in
        // bank group r % 8 at index r / 8.
        GemmKind::Gemm2 => (
            GEMM2_STAGING_GROUPS * gemm2_group_bytes(l) - GEMM2_STAGING_GAP,
            BULK_ALIGN,
            "bf16 row staging",
        ),
    }
}

impl Sm100Smem {
    /// Places every region of `l` within its budget.
    pub fn plan(l: &Sm100Layout) -> Result<Self, SmemError> {
        let bu = &l.budget;
        let mut all = Arena::new("the requested dynamic shared memory", 0, bu.smem_bytes);
        let tiles = [
            StagePart { name: "A tile", size: bu.a_stage_bytes, align: SWIZZLED_TILE_ALIGN },
            StagePart { name: "B tile", size: bu.b_stage_bytes, align: SWIZZLED_TILE_ALIGN },
            StagePart { name: "SFA atoms", size: bu.sfa_stage_bytes, align: TMA_ALIGN },
            StagePart { name: "SFB atoms", size: bu.sfb_stage_bytes, align: TMA_ALIGN },
        ];
        let ring = all.stage_ring(bu.ab_stages, bu.stage_bytes, &tiles, RingEnd::Tight)?;
        let mut leaves = ring.leaves;
        let &[a, b, sfa, sfb] = ring.parts.as_slice() else {
            return Err(SmemError::Empty { region: "stage ring" });
        };
        let stages = ring.region;

        let (needed, align, name) = epilogue_shape(l);
        if bu.epilogue_bytes < needed {
            return Err(SmemError::TooSmall { region: name, size: bu.epilogue_bytes, needed });
        }
        let epilogue = all.alloc(name, None, bu.epilogue_bytes, align)?;
        leaves.push(epilogue);

        let block = all.alloc("reserved block", None, bu.reserved_bytes, BULK_ALIGN)?;
        let mut reserved = Arena::new("the reserved block", block.offset, bu.reserved_bytes);
        let mut barriers = |name, count: u32| {
            reserved.alloc(name, None, count.saturating_mul(MBARRIER_BYTES), MBARRIER_BYTES)
        };
        let acc_slots = bu.acc_ring_slots();
        let bars = RingBarriers {
            ab_full: barriers("A/B full barriers", bu.ab_stages)?,
            ab_empty: barriers("A/B empty barriers", bu.ab_stages)?,
            relay_full: match l.relay_warp {
                Some(_) => Some(barriers("gather relay barriers", bu.ab_stages)?),
                None => None,
            },
            acc_full: barriers("accumulator full barriers", acc_slots)?,
            acc_empty: barriers("accumulator empty barriers", acc_slots)?,
        };
        let tmem_slot = reserved.alloc("TMEM address slot", None, 4, BULK_ALIGN)?;
        leaves.extend_from_slice(reserved.regions());
        Ok(Sm100Smem {
            bars,
            tmem_slot,
            stage_bytes: ring.stride,
            stages,
            a,
            b,
            sfa,
            sfb,
            epilogue,
            leaves,
        })
    }

    /// Every region that holds data (each stage's tiles, the staging, barriers, slot), in
    /// address order.
    pub fn leaves(&self) -> &[Region] {
        &self.leaves
    }

    /// The address of stage `s` (its A tile).
    pub fn stage_base(&self, b: &mut KernelBuilder, smem: Reg, s: Reg) -> Reg {
        stage_base(b, smem, &self.stages, self.stage_bytes, s)
    }
}
