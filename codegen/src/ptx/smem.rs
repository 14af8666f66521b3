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
