//! `cp.async`: a small asynchronous copy from global into shared memory, zero-filling what
//! the source size leaves out.

use super::{Check, OperandError, TypedInstr};
use crate::ptx::operand::Operand;
use crate::ptx::ops::{CacheOp, Memory, Op};
use crate::ptx::reg::{Reg, RegClass};

/// `cp.async.{ca,cg}.shared.global [dst+off], [src+off], bytes, src-bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpAsync {
    /// Cache policy (`.cg` copies 16 bytes only).
    pub cache: CacheOp,
    /// Destination base (shared-window address).
    pub dst: Reg,
    /// Byte offset from `dst`.
    pub dst_offset: u32,
    /// Source base (global address).
    pub src: Reg,
    /// Byte offset from `src`.
    pub src_offset: u32,
    /// Bytes copied: 4, 8 or 16.
    pub bytes: u32,
    /// Bytes read from the source (the rest are zero-filled): a `.b32` register.
    pub src_bytes: Reg,
}

impl TypedInstr for CpAsync {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("cp.async");
        let sizes = match self.cache {
            CacheOp::Ca | CacheOp::CaPrefetch128 => &[4, 8, 16][..],
            CacheOp::Cg | CacheOp::CgPrefetch128 => &[16][..],
        };
        if !sizes.contains(&self.bytes) {
            let range = if sizes.len() == 1 { "16 with .cg" } else { "4, 8 or 16" };
            return Err(c.range("bytes", i64::from(self.bytes), range));
        }
        let ops = vec![
            c.reg("dst", self.dst, &[RegClass::B32])?.at(i64::from(self.dst_offset)),
            c.reg("src", self.src, &[RegClass::B64])?.at(i64::from(self.src_offset)),
            Operand::from(self.bytes),
            c.reg("src_bytes", self.src_bytes, &[RegClass::B32])?,
        ];
        Ok((Memory::CpAsync(self.cache).into(), ops))
    }
}
