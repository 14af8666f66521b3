//! Where a Hopper GEMM kernel's data lives in shared memory, placed by arenas from the
//! resource budget: the reserved block holds the stage ring's full and empty mbarriers;
//! then `ab_stages` stages of [activation tile (T rows × 128 B, 128B-swizzled, 1024-aligned
//! for the wgmma descriptor) | FP4 fragment tiles | scale tiles], each stage `stage_bytes`
//! after the previous; then one epilogue staging buffer per consumer warpgroup, then one
//! column table per consumer (where the kernel has one).

use super::layout::Sm90Layout;
use crate::kernels::pipeline::MBARRIER_BYTES;
use crate::kernels::skeleton::stage_base;
use crate::ptx::smem::{
    Arena, BULK_ALIGN, Region, RingEnd, SWIZZLED_TILE_ALIGN, SmemError, StagePart,
};
use crate::ptx::{KernelBuilder, Reg};

/// The shared-memory layout of one Hopper GEMM kernel.
#[derive(Clone, Debug)]
pub struct Sm90Smem {
    /// Full barriers, one per stage.
    pub full: Region,
    /// Empty barriers, one per stage.
    pub empty: Region,
    /// Ping-pong: one turn barrier per consumer (`pingpong::Turn`).
    pub turns: Option<Region>,
    /// Bytes from one stage to the next.
    pub stage_bytes: u32,
    /// The stage ring (every stage).
    pub stages: Region,
    /// The fragment tiles within a stage.
    pub values: u32,
    /// The scale tiles within a stage.
    pub scales: u32,
    /// Consumer 0's epilogue staging.
    pub staging: Region,
    /// Bytes from one consumer's staging to the next.
    pub staging_stride: u32,
    /// Consumer 0's column table (`Sm90Layout::column_table_bytes`; `None` when the kernel
    /// has none), the next consumer's `columns_stride` bytes on.
    pub columns: Option<Region>,
    /// Bytes from one consumer's column table to the next.
    pub columns_stride: u32,
    /// Split K: the hand-off's barriers and the slots where the other ranks' partial
    /// accumulators land in rank 0 (`split_k`).
    pub split: Option<SplitSmem>,
    leaves: Vec<Region>,
}

/// The shared memory of a split-K hand-off (`split_k`): rank 0's full barrier, which the
/// other ranks' consumer threads arrive on once their partial accumulators are stored, each
/// other rank's empty barrier, which rank 0's consumer threads arrive on once they have read
/// it, and the slots, one per rank besides 0 (`Sm90Layout::split_slot_bytes`), rank r's at
/// `slots + (r − 1) · slot_bytes`. Every CTA has the same layout.
#[derive(Clone, Copy, Debug)]
pub struct SplitSmem {
    /// The partials-stored barrier (used in rank 0).
    pub full: Region,
    /// The slot-read barrier (used in ranks 1..).
    pub empty: Region,
    /// The slots.
    pub slots: Region,
}

impl Sm90Smem {
    /// Places every region of `l` within its budget.
    pub fn plan(l: &Sm90Layout) -> Result<Self, SmemError> {
        let bu = &l.budget;
        let mut reserved = Arena::new("the reserved block", 0, bu.reserved_bytes);
        let bars = |arena: &mut Arena, name| {
            arena.alloc(name, None, bu.ab_stages.saturating_mul(MBARRIER_BYTES), MBARRIER_BYTES)
        };
        let full = bars(&mut reserved, "stage full barriers")?;
        let empty = bars(&mut reserved, "stage empty barriers")?;
        let turns = if l.pingpong {
            let bytes = l.consumers * MBARRIER_BYTES;
            Some(reserved.alloc("consumer turn barriers", None, bytes, MBARRIER_BYTES)?)
        } else {
            None
        };
        let split_bars = if l.split_k > 1 {
            let full =
                reserved.alloc("split-K full barrier", None, MBARRIER_BYTES, MBARRIER_BYTES)?;
            let empty =
                reserved.alloc("split-K empty barrier", None, MBARRIER_BYTES, MBARRIER_BYTES)?;
            Some((full, empty))
        } else {
            None
        };

        let mut all = Arena::new("the requested dynamic shared memory", 0, bu.smem_bytes);
        all.alloc("reserved block", None, bu.reserved_bytes, SWIZZLED_TILE_ALIGN)?;
        let mut leaves: Vec<Region> = reserved.regions().to_vec();
        let parts = [
            StagePart { name: "activation tile", size: l.act_bytes(), align: SWIZZLED_TILE_ALIGN },
            StagePart { name: "fragment tiles", size: l.value_bytes(), align: BULK_ALIGN },
            StagePart { name: "scale tiles", size: l.scale_bytes(), align: BULK_ALIGN },
        ];
        // Padded: the staging starts where the budget, counting whole stages, put it.
        let ring = all.stage_ring(bu.ab_stages, bu.stage_bytes, &parts, RingEnd::Padded)?;
        leaves.extend_from_slice(&ring.leaves);
        let &[act, values, scales] = ring.parts.as_slice() else {
            return Err(SmemError::Empty { region: "stage ring" });
        };
        let stages = ring.region;

        let size = l.staging_bytes();
        let table = l.column_table_bytes();
        let slots_bytes = (l.split_k - 1) * l.split_slot_bytes();
        let needed = (size + table) * l.consumers + slots_bytes;
        if bu.epilogue_bytes < needed {
            return Err(SmemError::TooSmall {
                region: "epilogue staging",
                size: bu.epilogue_bytes,
                needed,
            });
        }
        let mut staging = Vec::with_capacity(l.consumers as usize);
        for c in 0..l.consumers {
            staging.push(all.alloc("epilogue staging", Some(c), size, BULK_ALIGN)?);
        }
        let (staging, staging_stride) = match staging.as_slice() {
            [one] => (*one, 0),
            [first, second, ..] => (*first, second.offset - first.offset),
            [] => return Err(SmemError::Empty { region: "epilogue staging" }),
        };
        let mut tables = Vec::new();
        if table > 0 {
            for c in 0..l.consumers {
                tables.push(all.alloc("epilogue column table", Some(c), table, 16)?);
            }
        }
        let (columns, columns_stride) = match tables.as_slice() {
            [] => (None, 0),
            [one] => (Some(*one), 0),
            [first, second, ..] => (Some(*first), second.offset - first.offset),
        };
        let split = match split_bars {
            Some((full, empty)) => {
                let slots = all.alloc("split-K partial slots", None, slots_bytes, 16)?;
                Some(SplitSmem { full, empty, slots })
            }
            None => None,
        };
        leaves.extend(all.regions().iter().filter(|r| {
            r.name == "epilogue staging"
                || r.name == "epilogue column table"
                || r.name == "split-K partial slots"
        }));
        Ok(Sm90Smem {
            full,
            empty,
            turns,
            stage_bytes: ring.stride,
            stages,
            values: values - act,
            scales: scales - act,
            staging,
            staging_stride,
            columns,
            columns_stride,
            split,
            leaves,
        })
    }

    /// Every region that holds data (barriers, each stage's tiles, staging buffers), in
    /// address order.
    pub fn leaves(&self) -> &[Region] {
        &self.leaves
    }

    /// The address of stage `s` (its activation tile).
    pub fn stage_base(&self, b: &mut KernelBuilder, smem: Reg, s: Reg) -> Reg {
        stage_base(b, smem, &self.stages, self.stage_bytes, s)
    }
}
