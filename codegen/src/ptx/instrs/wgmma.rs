//! The Hopper warpgroup instructions with operands: the register-A bf16 wgmma, the group
//! wait and the register-budget move.

use super::{Accumulate, Check, OperandError, TypedInstr};
use crate::ptx::operand::Operand;
use crate::ptx::ops::{Op, Wgmma};
use crate::ptx::reg::{Reg, RegClass};

/// `wgmma.mma_async….m64nNk16.f32.bf16.bf16 {d…}, {a…}, b-desc, scale-d, ±1, ±1, trans-b`:
/// D (64 × n f32, n/2 registers per thread) ← A (four `.b32` registers of bf16 pairs per
/// thread) · B (by shared-memory descriptor) + D when `scale_d` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgmmaMma {
    /// N: 8 to 256 in steps of 8.
    pub n: u32,
    /// The accumulator (`.f32`, n/2 registers).
    pub d: Vec<Reg>,
    /// A's fragment (`.b32`).
    pub a: [Reg; 4],
    /// B's shared-memory descriptor (`.b64`).
    pub b_desc: Reg,
    /// Whether D is added to (false: overwritten).
    pub scale_d: Accumulate,
    /// A is negated.
    pub negate_a: bool,
    /// B is negated.
    pub negate_b: bool,
    /// B is read transposed (M-major instead of K-major).
    pub transpose_b: bool,
}

/// `wgmma.mma_async…m64nNk32.f32.e4m3.e4m3` with A (E4M3, four per register) from
/// registers and B from a descriptor: no negation or transpose operands.
#[derive(Clone, Debug, PartialEq)]
pub struct WgmmaMmaE4m3 {
    /// N: 8 to 256 in steps of 8.
    pub n: u32,
    /// The accumulator (`.f32`, n/2 registers).
    pub d: Vec<Reg>,
    /// A's fragment (`.b32`, four E4M3 each).
    pub a: [Reg; 4],
    /// B's shared-memory descriptor (`.b64`).
    pub b_desc: Reg,
    /// Whether D is added to (false: overwritten).
    pub scale_d: Accumulate,
}

impl TypedInstr for WgmmaMmaE4m3 {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("wgmma.mma_async (e4m3)");
        if !(8..=256).contains(&self.n) || !self.n.is_multiple_of(8) {
            return Err(c.range("n", i64::from(self.n), "8 to 256 in steps of 8"));
        }
        let ops = vec![
            c.regs("d", &self.d, self.n as usize / 2, &[RegClass::F32])?,
            c.regs("a", &self.a, 4, &[RegClass::B32])?,
            c.reg("b_desc", self.b_desc, &[RegClass::B64])?,
            c.accumulate("scale_d", self.scale_d)?,
            Operand::Imm(1),
            Operand::Imm(1),
        ];
        Ok((Wgmma::MmaE4m3RegA { n: self.n }.into(), ops))
    }
}

impl TypedInstr for WgmmaMma {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("wgmma.mma_async");
        if !(8..=256).contains(&self.n) || !self.n.is_multiple_of(8) {
            return Err(c.range("n", i64::from(self.n), "8 to 256 in steps of 8"));
        }
        let sign = |neg: bool| Operand::Imm(if neg { -1 } else { 1 });
        let ops = vec![
            c.regs("d", &self.d, self.n as usize / 2, &[RegClass::F32])?,
            c.regs("a", &self.a, 4, &[RegClass::B32])?,
            c.reg("b_desc", self.b_desc, &[RegClass::B64])?,
            c.accumulate("scale_d", self.scale_d)?,
            sign(self.negate_a),
            sign(self.negate_b),
            Operand::Imm(i64::from(self.transpose_b)),
        ];
        Ok((Wgmma::MmaBf16RegA { n: self.n }.into(), ops))
    }
}

/// `wgmma.wait_group.sync.aligned pending`: until at most `pending` groups are outstanding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgmmaWait {
    /// Groups that may stay outstanding.
    pub pending: u32,
}

impl TypedInstr for WgmmaWait {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        Ok((Wgmma::WaitGroup.into(), vec![Operand::from(self.pending)]))
    }
}

/// `setmaxnreg.{inc,dec}.sync.aligned.u32 count`: this warpgroup's per-thread register
/// budget grows to (or shrinks to) `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetMaxNReg {
    /// Grow (true) or shrink.
    pub inc: bool,
    /// The new budget: 24 to 256 in steps of 8.
    pub count: u32,
}

impl TypedInstr for SetMaxNReg {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("setmaxnreg");
        if !(24..=256).contains(&self.count) || !self.count.is_multiple_of(8) {
            return Err(c.range("count", i64::from(self.count), "24 to 256 in steps of 8"));
        }
        Ok((Wgmma::SetMaxNReg { inc: self.inc }.into(), vec![Operand::from(self.count)]))
    }
}
