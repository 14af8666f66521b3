//! Tensor memory of one CTA: 128 lanes × 512 columns of 32 bits, allocated in power-of-two
//! column ranges (PTX ISA §9.7.16.7). Addresses are lane << 16 | column.

use crate::error::TmemError;

/// One CTA's TMEM.
#[derive(Clone, Debug)]
pub(super) struct Tmem {
    pub data: Vec<u32>,
    /// Allocated (start, columns).
    pub allocs: Vec<(u32, u32)>,
}

pub(super) const LANES: u32 = 128;
pub(super) const COLUMNS: u32 = 512;

impl Tmem {
    pub fn new() -> Self {
        Self { data: vec![0; (LANES * COLUMNS) as usize], allocs: Vec::new() }
    }

    /// Allocates `n` columns (a power of two in 32..=512) at the lowest aligned free start.
    pub fn alloc(&mut self, n: u32) -> Result<u32, TmemError> {
        if !(32..=COLUMNS).contains(&n) || !n.is_power_of_two() {
            return Err(TmemError::AllocSize { columns: n });
        }
        let mut start = 0;
        while start + n <= COLUMNS {
            if self.allocs.iter().all(|&(s, c)| start + n <= s || s + c <= start) {
                self.allocs.push((start, n));
                return Ok(start);
            }
            start += n;
        }
        Err(TmemError::Exhausted { columns: n })
    }

    pub fn dealloc(&mut self, start: u32, n: u32) -> Result<(), TmemError> {
        let i = self
            .allocs
            .iter()
            .position(|&a| a == (start, n))
            .ok_or(TmemError::NotAllocated { start, columns: n })?;
        self.allocs.remove(i);
        Ok(())
    }

    fn check(&self, lane: u32, col: u32) -> Result<usize, TmemError> {
        if lane >= LANES || !self.allocs.iter().any(|&(s, c)| col >= s && col < s + c) {
            return Err(TmemError::OutsideAllocation { lane, column: col });
        }
        Ok((lane * COLUMNS + col) as usize)
    }

    /// Columns `col..col + n` lie in one allocation.
    pub fn check_columns(&self, col: u32, n: u32) -> Result<(), TmemError> {
        let end = u64::from(col) + u64::from(n);
        if self.allocs.iter().any(|&(s, c)| col >= s && end <= u64::from(s + c)) {
            return Ok(());
        }
        Err(TmemError::ColumnsSplit { start: col, end })
    }

    pub fn read(&self, lane: u32, col: u32) -> Result<u32, TmemError> {
        Ok(self.data[self.check(lane, col)?])
    }

    pub fn write(&mut self, lane: u32, col: u32, v: u32) -> Result<(), TmemError> {
        let i = self.check(lane, col)?;
        self.data[i] = v;
        Ok(())
    }
}
