//! Shared memory as values: named regions with an alignment, placed one after another by an
//! arena that refuses to grow past its limit. A kernel's layout is what its arenas return,
//! so no offset is written by hand and an overflow is an error, never an overlap.

use std::fmt;

/// A named, aligned byte range of the dynamic shared array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// What it holds.
    pub name: &'static str,
    /// Which one, for per-stage regions.
    pub index: Option<u32>,
    /// Byte offset from the start of the dynamic shared array.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
    /// Alignment its users need (a power of two).
    pub align: u32,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u32 {
        self.offset + self.size
    }
    /// Whether the two regions share a byte.
    pub fn overlaps(&self, other: &Region) -> bool {
        self.size > 0 && other.size > 0 && self.offset < other.end() && other.offset < self.end()
    }
    /// Whether the offset honours the alignment.
    pub fn is_aligned(&self) -> bool {
        self.align.is_power_of_two() && self.offset.is_multiple_of(self.align)
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)?;
        if let Some(i) = self.index {
            write!(f, "[{i}]")?;
        }
        write!(f, " @{}+{} (align {})", self.offset, self.size, self.align)
    }
}

/// A layout that does not fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SmemError {
    /// A region would end past the arena's limit.
    #[error(
        "shared memory: {region} ({size} B, {align}-B aligned) would end at byte {end}, past the {limit} B of {arena}"
    )]
    Overflow {
        /// The region that does not fit.
        region: &'static str,
        /// Its size.
        size: u32,
        /// Its alignment.
        align: u32,
        /// Where it would end.
        end: u32,
        /// The arena's limit.
        limit: u32,
        /// Which arena.
        arena: &'static str,
    },
    /// An alignment that is not a power of two.
    #[error("shared memory: alignment {align} of {region} is not a power of two")]
    Alignment {
        /// The region.
        region: &'static str,
        /// The alignment asked for.
        align: u32,
    },
    /// A region smaller than what its users address.
    #[error("shared memory: {region} has {size} B; its users need {needed} B")]
    TooSmall {
        /// The region.
        region: &'static str,
        /// Its size from the budget.
        size: u32,
        /// What the code addresses.
        needed: u32,
    },
    /// A group of regions with no member (a budget with zero stages or buffers).
    #[error("shared memory: no {region}")]
    Empty {
        /// The group.
        region: &'static str,
    },
    /// Per-stage regions that do not repeat with the stride the kernel addresses them by.
    #[error("shared memory: {region}[{stage}] is at byte {offset}, not at {expected}")]
    Stride {
        /// The region.
        region: &'static str,
        /// Stage.
        stage: u32,
        /// Where it was placed.
        offset: u32,
        /// Where `stage · stride` puts it.
        expected: u32,
    },
}

/// Places regions in order within `[base, base + limit)`.
#[derive(Clone, Debug)]
pub struct Arena {
    name: &'static str,
    base: u32,
    limit: u32,
    cursor: u32,
    regions: Vec<Region>,
}

impl Arena {
    /// An empty arena of `limit` bytes starting at byte `base` of the shared array.
    pub fn new(name: &'static str, base: u32, limit: u32) -> Self {
        Arena { name, base, limit, cursor: base, regions: Vec::new() }
    }

    /// The next `size` bytes at the next multiple of `align`.
    pub fn alloc(
        &mut self,
        name: &'static str,
        index: Option<u32>,
        size: u32,
        align: u32,
    ) -> Result<Region, SmemError> {
        if !align.is_power_of_two() {
            return Err(SmemError::Alignment { region: name, align });
        }
        let offset = u64::from(self.cursor).next_multiple_of(u64::from(align));
        let end = offset + u64::from(size);
        let limit = u64::from(self.base) + u64::from(self.limit);
        let (Ok(offset), true) = (u32::try_from(offset), end <= limit) else {
            return Err(SmemError::Overflow {
                region: name,
                size,
                align,
                end: u32::try_from(end).unwrap_or(u32::MAX),
                limit: self.limit,
                arena: self.name,
            });
        };
        let r = Region { name, index, offset, size, align };
        self.cursor = r.end();
        self.regions.push(r);
        Ok(r)
    }

    /// The regions placed so far, in order.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// One past the last byte placed.
    pub fn end(&self) -> u32 {
        self.cursor
    }
}

/// 128B-swizzled tiles that TMA writes and the tensor cores read: the swizzle pattern
/// repeats every 8 rows of 128 bytes, and the descriptors' base offset is 0.
pub const SWIZZLED_TILE_ALIGN: u32 = 1024;
/// Unswizzled TMA destinations and sources (scale-factor atoms, the FP4 output tile).
pub const TMA_ALIGN: u32 = 128;
/// Non-tensor bulk copies and the `tcgen05.alloc` address slot.
pub const BULK_ALIGN: u32 = 16;

/// One region every stage of a ring holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagePart {
    /// What it holds.
    pub name: &'static str,
    /// Bytes.
    pub size: u32,
    /// Alignment its users need.
    pub align: u32,
}

/// Whether the arena's cursor ends at the last stage's last part or a whole stride after
/// the last stage's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingEnd {
    /// At the last part (what follows may start inside the last stride).
    Tight,
    /// After the last stage's whole stride (what follows starts where the budget, which
    /// counts whole strides, puts it).
    Padded,
}

/// A ring of stages that the kernel addresses as stage 0 + s · `stride`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageRing {
    /// Every stage.
    pub region: Region,
    /// Bytes from one stage to the next.
    pub stride: u32,
    /// Each part's offset within a stage, in the order the parts were given.
    pub parts: Vec<u32>,
    /// Every part of every stage, in address order.
    pub leaves: Vec<Region>,
}

impl Arena {
    /// Places `stages` stages of `parts`, each stage `stride` bytes after the previous (a
    /// stage shorter than the stride is padded; one whose parts land elsewhere, by
    /// alignment or size, is an error, since the kernel computes each stage's address).
    pub fn stage_ring(
        &mut self,
        stages: u32,
        stride: u32,
        parts: &[StagePart],
        end: RingEnd,
    ) -> Result<StageRing, SmemError> {
        let mut first: Vec<Region> = Vec::with_capacity(parts.len());
        let mut leaves = Vec::new();
        for s in 0..stages {
            if let Some(f) = first.first() {
                let start = f.offset.saturating_add(s.saturating_mul(stride));
                let gap = start.saturating_sub(self.end());
                self.alloc("stage padding", Some(s), gap, 1)?;
            }
            for (i, p) in parts.iter().enumerate() {
                let r = self.alloc(p.name, Some(s), p.size, p.align)?;
                let expected = match first.get(i) {
                    Some(f) => f.offset.saturating_add(s.saturating_mul(stride)),
                    None => {
                        first.push(r);
                        r.offset
                    }
                };
                if r.offset != expected {
                    let offset = r.offset;
                    return Err(SmemError::Stride { region: p.name, stage: s, offset, expected });
                }
                leaves.push(r);
            }
        }
        let Some(&start) = first.first() else {
            return Err(SmemError::Empty { region: "stage ring" });
        };
        let size = match end {
            RingEnd::Tight => self.end() - start.offset,
            RingEnd::Padded => {
                let size = stages.saturating_mul(stride);
                let gap = start.offset.saturating_add(size).saturating_sub(self.end());
                self.alloc("stage padding", Some(stages), gap, 1)?;
                size
            }
        };
        let region = Region {
            name: "stage ring",
            index: None,
            offset: start.offset,
            size,
            align: start.align,
        };
        let parts = first.iter().map(|r| r.offset - start.offset).collect();
        Ok(StageRing { region, stride, parts, leaves })
    }
}
