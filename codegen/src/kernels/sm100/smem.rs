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
use crate::ptx::smem::{Arena, Region, SmemError};
use crate::ptx::{KernelBuilder, Reg};

/// 128B-swizzled tiles that TMA writes and the MMA reads: the swizzle pattern repeats every
/// 8 rows of 128 bytes, and the descriptors' base offset is 0.
pub const SWIZZLED_TILE_ALIGN: u32 = 1024;
/// Unswizzled TMA destinations and sources (scale-factor atoms, the FP4 output tile).
pub const TMA_ALIGN: u32 = 128;
/// Non-tensor bulk copies and the `tcgen05.alloc` address slot.
pub const BULK_ALIGN: u32 = 16;

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
        // One FP4 row of N/2 values per accumulator row, TMA-stored per warp.
        GemmKind::Gemm1 => (CTA_ROWS * (l.n / 4), TMA_ALIGN, "FP4 output staging"),
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
        let mut leaves: Vec<Region> = Vec::new();
        let tiles = [
            ("A tile", bu.a_stage_bytes, SWIZZLED_TILE_ALIGN),
            ("B tile", bu.b_stage_bytes, SWIZZLED_TILE_ALIGN),
            ("SFA atoms", bu.sfa_stage_bytes, TMA_ALIGN),
            ("SFB atoms", bu.sfb_stage_bytes, TMA_ALIGN),
        ];
        let mut first: Vec<Region> = Vec::with_capacity(tiles.len());
        for s in 0..bu.ab_stages {
            for (i, &(name, size, align)) in tiles.iter().enumerate() {
                let r = all.alloc(name, Some(s), size, align)?;
                // The kernel addresses stage s at stage 0's offset + s · stage_bytes.
                let expected = match first.get(i) {
                    Some(f) => f.offset.saturating_add(s.saturating_mul(bu.stage_bytes)),
                    None => {
                        first.push(r);
                        r.offset
                    }
                };
                if r.offset != expected {
                    let offset = r.offset;
                    return Err(SmemError::Stride { region: name, stage: s, offset, expected });
                }
                leaves.push(r);
            }
        }
        let [a, b, sfa, sfb] = match first.as_slice() {
            &[a, b, sfa, sfb] => [a, b, sfa, sfb],
            _ => return Err(SmemError::Empty { region: "stage ring" }),
        };
        let stages = Region {
            name: "stage ring",
            index: None,
            offset: a.offset,
            size: all.end() - a.offset,
            align: SWIZZLED_TILE_ALIGN,
        };

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
            stage_bytes: bu.stage_bytes,
            stages,
            a: a.offset - stages.offset,
            b: b.offset - stages.offset,
            sfa: sfa.offset - stages.offset,
            sfb: sfb.offset - stages.offset,
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
        let o = b.mad_u32(s, self.stage_bytes, self.stages.offset);
        b.add_u32(smem, o)
    }
}
