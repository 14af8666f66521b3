//! Where a GEMM kernel's data lives in shared memory, placed by arenas from the resource
//! budget: the reserved block (`reserved_bytes`) holds the rings' mbarriers, each sized by
//! its ring's depth, and the TMEM address slot; then `ab_stages` stages of A, B, SFA and SFB
//! tiles; then the epilogue staging. Anything that does not fit is an error.

use moegen_dsl::GemmKind;
use moegen_dsl::resources::{CTA_ROWS, GEMM2_EPILOGUE_BUFFERS, GEMM2_EPILOGUE_SUBTILE_COLS};

use super::layout::GemmLayout;
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
pub struct GemmSmem {
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
    /// Epilogue staging (the first buffer).
    pub epilogue: Region,
    /// Bytes from one epilogue staging buffer to the next.
    pub epilogue_buffer_bytes: u32,
    leaves: Vec<Region>,
}

/// Epilogue staging: buffers, bytes each kernel thread-row needs per buffer, alignment.
fn epilogue_shape(l: &GemmLayout) -> (u32, u32, u32, &'static str) {
    match l.kind {
        // One FP4 row of N/2 values per accumulator row, TMA-stored per warp.
        GemmKind::Gemm1 => (1, CTA_ROWS * (l.n / 4), TMA_ALIGN, "FP4 output staging"),
        // One 32-column bf16 piece per row and buffer, bulk-copied per row.
        GemmKind::Gemm2 => (
            GEMM2_EPILOGUE_BUFFERS,
            CTA_ROWS * GEMM2_EPILOGUE_SUBTILE_COLS * 2,
            BULK_ALIGN,
            "bf16 reduce staging",
        ),
    }
}

impl GemmSmem {
    /// Places every region of `l` within its budget.
    pub fn plan(l: &GemmLayout) -> Result<Self, SmemError> {
        let bu = &l.budget;
        let mut reserved = Arena::new("the reserved block", 0, bu.reserved_bytes);
        let mut barriers = |name, count: u32| {
            reserved.alloc(name, None, count.saturating_mul(MBARRIER_BYTES), MBARRIER_BYTES)
        };
        let bars = RingBarriers {
            ab_full: barriers("A/B full barriers", bu.ab_stages)?,
            ab_empty: barriers("A/B empty barriers", bu.ab_stages)?,
            relay_full: match l.relay_warp {
                Some(_) => Some(barriers("gather relay barriers", bu.ab_stages)?),
                None => None,
            },
            acc_full: barriers("accumulator full barriers", bu.acc_stages)?,
            acc_empty: barriers("accumulator empty barriers", bu.acc_stages)?,
        };
        let tmem_slot = reserved.alloc("TMEM address slot", None, 4, BULK_ALIGN)?;

        let mut all = Arena::new("the requested dynamic shared memory", 0, bu.smem_bytes);
        all.alloc("reserved block", None, bu.reserved_bytes, SWIZZLED_TILE_ALIGN)?;
        let mut leaves: Vec<Region> = reserved.regions().to_vec();
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

        let (buffers, needed, align, name) = epilogue_shape(l);
        let size = bu.epilogue_bytes / buffers;
        if size < needed {
            return Err(SmemError::TooSmall { region: name, size, needed });
        }
        let mut staging = Vec::with_capacity(buffers as usize);
        for i in 0..buffers {
            staging.push(all.alloc(name, Some(i), size, align)?);
        }
        let (epilogue, epilogue_buffer_bytes) = match staging.as_slice() {
            [one] => (*one, 0),
            [first, second, ..] => (*first, second.offset - first.offset),
            [] => return Err(SmemError::Empty { region: name }),
        };
        leaves.extend(staging);
        Ok(GemmSmem {
            bars,
            tmem_slot,
            stage_bytes: bu.stage_bytes,
            stages,
            a: a.offset - stages.offset,
            b: b.offset - stages.offset,
            sfa: sfa.offset - stages.offset,
            sfb: sfb.offset - stages.offset,
            epilogue,
            epilogue_buffer_bytes,
            leaves,
        })
    }

    /// Every region that holds data (barriers, slot, each stage's tiles, staging buffers),
    /// in address order.
    pub fn leaves(&self) -> &[Region] {
        &self.leaves
    }

    /// The address of stage `s` (its A tile).
    pub fn stage_base(&self, b: &mut KernelBuilder, smem: Reg, s: Reg) -> Reg {
        let o = b.mad_u32(s, self.stage_bytes, self.stages.offset);
        b.add_u32(smem, o)
    }
}
