//! Warp collectives with operands: `shfl.sync` and `elect.sync`.

use super::{Check, OperandError, TypedInstr};
use crate::ptx::operand::Operand;
use crate::ptx::ops::{Op, ShflMode, Sync};
use crate::ptx::reg::{Reg, RegClass};

/// `shfl.sync.mode.b32 d{|p}, src, lane, clamp, members`.
#[derive(Clone, Debug, PartialEq)]
pub struct Shfl {
    /// Which lane is read.
    pub mode: ShflMode,
    /// The value read (32 bits: `.b32` or `.f32`).
    pub dst: Reg,
    /// Whether the source lane was in range (`.pred`), if wanted.
    pub in_range: Option<Reg>,
    /// The value offered (32 bits).
    pub src: Reg,
    /// Lane, offset or xor mask: a `.b32` register or an immediate.
    pub lane: Operand,
    /// Clamp and segment mask: a `.b32` register or an immediate.
    pub clamp: Operand,
    /// The participating lanes: a `.b32` register or an immediate.
    pub members: Operand,
}

impl TypedInstr for Shfl {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("shfl.sync");
        const WORD: &[RegClass] = &[RegClass::B32, RegClass::F32];
        let d = c.reg("dst", self.dst, WORD)?;
        let dst = match self.in_range {
            Some(p) => {
                c.reg("in_range", p, &[RegClass::Pred])?;
                Operand::PredOut { value: Some(self.dst), pred: p }
            }
            None => d,
        };
        let ops = vec![
            dst,
            c.reg("src", self.src, WORD)?,
            c.value32("lane", self.lane)?,
            c.value32("clamp", self.clamp)?,
            c.value32("members", self.members)?,
        ];
        Ok((Sync::Shfl(self.mode).into(), ops))
    }
}

/// `elect.sync d|p, members`: `p` true on one lane of `members` (the converged warp when
/// all 32), `d` that lane's index if wanted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elect {
    /// The elected lane's predicate (`.pred`).
    pub pred: Reg,
    /// The elected lane's index (`.b32`), if wanted.
    pub lane: Option<Reg>,
    /// The participating lanes.
    pub members: u32,
}

impl TypedInstr for Elect {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("elect.sync");
        c.reg("pred", self.pred, &[RegClass::Pred])?;
        if let Some(l) = self.lane {
            c.reg("lane", l, &[RegClass::B32])?;
        }
        let ops = vec![
            Operand::PredOut { value: self.lane, pred: self.pred },
            Operand::Hex(self.members),
        ];
        Ok((Sync::Elect.into(), ops))
    }
}
