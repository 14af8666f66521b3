//! Tensor-memory addresses: a base register (lane in the high half, column in the low half,
//! as `tcgen05.alloc` returns it) plus a column offset known at generation time.

use super::{Check, OperandError};
use crate::ptx::operand::Operand;
use crate::ptx::reg::{Reg, RegClass};

/// Columns of tensor memory: an offset at or past this would carry into the lane field.
pub const TMEM_COLUMNS: u32 = 512;

/// `base + col`, printed `[base+col]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TmemAddr {
    base: Reg,
    col: u32,
}

impl TmemAddr {
    /// Column 0 of `base`.
    pub fn new(base: Reg) -> Self {
        TmemAddr { base, col: 0 }
    }

    /// The address `cols` columns further.
    pub fn col(self, cols: u32) -> Self {
        TmemAddr { base: self.base, col: self.col.saturating_add(cols) }
    }

    /// The base register.
    pub fn base(self) -> Reg {
        self.base
    }

    /// The column offset from the base.
    pub fn offset(self) -> u32 {
        self.col
    }

    /// `[base+col]`, if the base is a 32-bit register and the offset stays in the columns.
    pub(crate) fn operand(self, c: &Check, field: &'static str) -> Result<Operand, OperandError> {
        let base = c.reg(field, self.base, &[RegClass::B32])?;
        if self.col >= TMEM_COLUMNS {
            return Err(c.range(field, i64::from(self.col), "a column offset below 512"));
        }
        Ok(base.at(i64::from(self.col)))
    }
}
