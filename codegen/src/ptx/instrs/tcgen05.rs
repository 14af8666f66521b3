//! The tcgen05 instructions with operands: MMA, copies into tensor memory, loads out of it,
//! commits, allocation.

use super::{Accumulate, Check, OperandError, TmemAddr, TypedInstr};
use crate::ptx::operand::Operand;
use crate::ptx::ops::{CpShape, LdRepeat, LdShape, MmaKind, Op, Tcgen05};
use crate::ptx::reg::{Reg, RegClass};
use crate::ptx::types::CtaGroup;

/// `tcgen05.mma.kind.block_scale [d], a-desc, b-desc, idesc, [scale-a], [scale-b], enable-d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcgen05Mma {
    /// CTA group.
    pub group: CtaGroup,
    /// Operand formats and scaling.
    pub kind: MmaKind,
    /// The accumulator in tensor memory.
    pub d_tmem: TmemAddr,
    /// A's shared-memory descriptor (`.b64`).
    pub a_desc: Reg,
    /// B's shared-memory descriptor (`.b64`).
    pub b_desc: Reg,
    /// The instruction descriptor (`.b32`).
    pub idesc: Reg,
    /// A's scale factors in tensor memory.
    pub scale_a_tmem: TmemAddr,
    /// B's scale factors in tensor memory.
    pub scale_b_tmem: TmemAddr,
    /// Whether D is added to (false: overwritten).
    pub enable_input_d: Accumulate,
}

impl TypedInstr for Tcgen05Mma {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("tcgen05.mma");
        let ops = vec![
            self.d_tmem.operand(&c, "d_tmem")?,
            c.reg("a_desc", self.a_desc, &[RegClass::B64])?,
            c.reg("b_desc", self.b_desc, &[RegClass::B64])?,
            c.reg("idesc", self.idesc, &[RegClass::B32])?,
            self.scale_a_tmem.operand(&c, "scale_a_tmem")?,
            self.scale_b_tmem.operand(&c, "scale_b_tmem")?,
            c.accumulate("enable_input_d", self.enable_input_d)?,
        ];
        Ok((Tcgen05::Mma(self.group, self.kind).into(), ops))
    }
}

/// `tcgen05.cp.shape [dst], src-desc`: shared memory (by descriptor) into tensor memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcgen05Cp {
    /// CTA group.
    pub group: CtaGroup,
    /// Shape and multicast over warps.
    pub shape: CpShape,
    /// Where in tensor memory.
    pub dst: TmemAddr,
    /// The source's shared-memory descriptor (`.b64`).
    pub src_desc: Reg,
}

impl TypedInstr for Tcgen05Cp {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("tcgen05.cp");
        let ops =
            vec![self.dst.operand(&c, "dst")?, c.reg("src_desc", self.src_desc, &[RegClass::B64])?];
        Ok((Tcgen05::Cp(self.group, self.shape).into(), ops))
    }
}

/// `tcgen05.ld.shape.repeat {dst…}, [src]`: one 32-bit register per column repeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tcgen05Ld {
    /// Lane shape.
    pub shape: LdShape,
    /// Column repetitions: as many destinations.
    pub repeat: LdRepeat,
    /// The destinations (`.b32` or `.f32`).
    pub dst: Vec<Reg>,
    /// Where in tensor memory.
    pub src: TmemAddr,
}

impl TypedInstr for Tcgen05Ld {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("tcgen05.ld");
        let n = self.repeat.count() as usize;
        let ops = vec![
            c.regs("dst", &self.dst, n, &[RegClass::B32, RegClass::F32])?,
            self.src.operand(&c, "src")?,
        ];
        Ok((Tcgen05::Ld(self.shape, self.repeat).into(), ops))
    }
}

/// `tcgen05.commit…mbarrier::arrive::one{.multicast::cluster} [bar]{, mask}`: one arrival
/// on `bar` (in every CTA of `multicast`) when this thread's prior tcgen05 work completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcgen05Commit {
    /// CTA group of the tracked operations.
    pub group: CtaGroup,
    /// The mbarrier (shared-window address).
    pub bar: Reg,
    /// The 16-bit CTA mask to signal, if multicast.
    pub multicast: Option<Reg>,
}

impl TypedInstr for Tcgen05Commit {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("tcgen05.commit");
        let mut ops = vec![c.shared("bar", self.bar)?];
        if let Some(m) = self.multicast {
            ops.push(c.reg("multicast", m, &[RegClass::B16])?);
        }
        let op = Tcgen05::Commit { group: self.group, multicast: self.multicast.is_some() };
        Ok((op.into(), ops))
    }
}

/// Valid tensor-memory allocation sizes: a power of two from 32 to 512 columns.
fn alloc_columns(c: &Check, columns: u32) -> Result<Operand, OperandError> {
    if (32..=super::tmem::TMEM_COLUMNS).contains(&columns) && columns.is_power_of_two() {
        Ok(Operand::from(columns))
    } else {
        Err(c.range("columns", i64::from(columns), "a power of two from 32 to 512"))
    }
}

/// `tcgen05.alloc [slot], columns`: the allocated address is written to `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcgen05Alloc {
    /// CTA group.
    pub group: CtaGroup,
    /// The shared-memory word receiving the address.
    pub slot: Reg,
    /// Columns to allocate.
    pub columns: u32,
}

impl TypedInstr for Tcgen05Alloc {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("tcgen05.alloc");
        let ops = vec![c.shared("slot", self.slot)?, alloc_columns(&c, self.columns)?];
        Ok((Tcgen05::Alloc(self.group).into(), ops))
    }
}

/// `tcgen05.dealloc taddr, columns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcgen05Dealloc {
    /// CTA group.
    pub group: CtaGroup,
    /// The address `tcgen05.alloc` returned.
    pub tmem: Reg,
    /// Columns allocated.
    pub columns: u32,
}

impl TypedInstr for Tcgen05Dealloc {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("tcgen05.dealloc");
        let ops =
            vec![c.reg("tmem", self.tmem, &[RegClass::B32])?, alloc_columns(&c, self.columns)?];
        Ok((Tcgen05::Dealloc(self.group).into(), ops))
    }
}
