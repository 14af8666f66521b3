//! The TMA and bulk-copy instructions: tensor tiles and contiguous bytes in (completing on
//! an mbarrier) and out (tracked by bulk groups), reductions, and the group waits.

use super::{Check, OperandError, TypedInstr};
use crate::ptx::operand::Operand;
use crate::ptx::ops::{Bulk, Op};
use crate::ptx::reg::{Reg, RegClass};
use crate::ptx::types::{CtaGroup, Ty};

/// `[map, {coords…}]`, for 1 to 5 coordinates; the count is the tensor's rank.
fn tensor(c: &Check, map: Reg, coords: Vec<Operand>) -> Result<(u8, Operand), OperandError> {
    let dims = match u8::try_from(coords.len()) {
        Ok(d @ 1..=5) => d,
        _ => return Err(c.range("coords", coords.len() as i64, "1 to 5 coordinates")),
    };
    c.reg("map", map, &[RegClass::B64])?;
    let coords = coords.into_iter().map(|x| c.value32("coords", x)).collect::<Result<_, _>>()?;
    Ok((dims, Operand::tensor(map, coords)))
}

/// A byte count: fixed when the kernel is generated, or computed on the device (a `.b32`
/// register: e.g. the tiles a partial Hopper N block really has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    /// Known at generation time.
    Fixed(u32),
    /// In a `.b32` register; the kernel keeps it a positive multiple of 16 where a bulk copy
    /// needs that (the simulator checks every value).
    Reg(Reg),
}

impl From<u32> for Bytes {
    fn from(v: u32) -> Self {
        Bytes::Fixed(v)
    }
}

impl From<Reg> for Bytes {
    fn from(r: Reg) -> Self {
        Bytes::Reg(r)
    }
}

impl Bytes {
    /// The operand: the immediate, or the register if it is a `.b32` one.
    pub(super) fn operand(self, c: &Check, field: &'static str) -> Result<Operand, OperandError> {
        match self {
            Bytes::Fixed(v) => Ok(Operand::from(v)),
            Bytes::Reg(r) => c.reg(field, r, &[RegClass::B32]),
        }
    }
}

/// A bulk size: a positive multiple of 16 bytes (checked here when fixed).
fn bulk_bytes(c: &Check, bytes: Bytes) -> Result<Operand, OperandError> {
    match bytes {
        Bytes::Fixed(b) if b == 0 || !b.is_multiple_of(16) => {
            Err(c.range("bytes", i64::from(b), "a positive multiple of 16"))
        }
        _ => bytes.operand(c, "bytes"),
    }
}

/// `cp.async.bulk.tensor.Nd…complete_tx::bytes [dst], [map, {coords}], [bar]{, mask}`: a
/// tile of the tensor map at `coords` into shared memory, its bytes completing on `bar`.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaLoad {
    /// Destination (shared-window address).
    pub dst: Reg,
    /// The tensor map (generic address).
    pub map: Reg,
    /// The tile's coordinates, innermost first: their number is the rank.
    pub coords: Vec<Operand>,
    /// The mbarrier receiving the bytes.
    pub bar: Reg,
    /// The 16-bit mask of the CTAs receiving the tile, if multicast.
    pub multicast: Option<Reg>,
    /// `.cta_group::N`, for loads feeding a 2-CTA MMA (the barrier may be the leader's).
    pub cta_group: Option<CtaGroup>,
}

impl TypedInstr for TmaLoad {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("cp.async.bulk.tensor (load)");
        let dst = c.shared("dst", self.dst)?;
        let (dims, src) = tensor(&c, self.map, self.coords)?;
        let mut ops = vec![dst, src, c.shared("bar", self.bar)?];
        if let Some(m) = self.multicast {
            ops.push(c.reg("multicast", m, &[RegClass::B16])?);
        }
        let op = Bulk::TensorLoad {
            dims,
            multicast: self.multicast.is_some(),
            cta_group: self.cta_group,
        };
        Ok((op.into(), ops))
    }
}

/// `cp.async.bulk…complete_tx::bytes [dst], [src], bytes, [bar]`: contiguous bytes from
/// global into shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkLoad {
    /// Destination (shared-window address).
    pub dst: Reg,
    /// Source (global address).
    pub src: Reg,
    /// Bytes: a positive multiple of 16.
    pub bytes: Bytes,
    /// The mbarrier receiving the bytes.
    pub bar: Reg,
}

impl TypedInstr for BulkLoad {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("cp.async.bulk (load)");
        let ops = vec![
            c.shared("dst", self.dst)?,
            c.global("src", self.src)?,
            bulk_bytes(&c, self.bytes)?,
            c.shared("bar", self.bar)?,
        ];
        Ok((Bulk::Load.into(), ops))
    }
}

/// `cp.async.bulk.tensor.Nd.global.shared::cta… [map, {coords}], [src]`: a tile from shared
/// memory into the tensor, tracked by bulk groups.
#[derive(Clone, Debug, PartialEq)]
pub struct TmaStore {
    /// The tensor map (generic address).
    pub map: Reg,
    /// The tile's coordinates, innermost first: their number is the rank.
    pub coords: Vec<Operand>,
    /// Source (shared-window address).
    pub src: Reg,
}

impl TypedInstr for TmaStore {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("cp.async.bulk.tensor (store)");
        let (dims, dst) = tensor(&c, self.map, self.coords)?;
        let ops = vec![dst, c.shared("src", self.src)?];
        Ok((Bulk::TensorStore { dims }.into(), ops))
    }
}

/// Contiguous bytes from shared into global memory, tracked by bulk groups: copied
/// (`cp.async.bulk`) or added element-wise (`cp.reduce.async.bulk….add`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkStore {
    /// Destination (global address).
    pub dst: Reg,
    /// Source (shared-window address).
    pub src: Reg,
    /// Bytes: a positive multiple of 16.
    pub bytes: Bytes,
    /// The element type added into the destination, or `None` to copy.
    pub reduce_add: Option<Ty>,
}

impl TypedInstr for BulkStore {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        let c = Check("cp.async.bulk (store)");
        let ops = vec![
            c.global("dst", self.dst)?,
            c.shared("src", self.src)?,
            bulk_bytes(&c, self.bytes)?,
        ];
        let op = match self.reduce_add {
            Some(ty) => Bulk::ReduceAdd { ty },
            None => Bulk::Store,
        };
        Ok((op.into(), ops))
    }
}

/// `cp.async.bulk.wait_group{.read} pending`: until at most `pending` bulk groups are
/// outstanding (with `read`, only until their sources have been read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkWait {
    /// Groups that may stay outstanding.
    pub pending: u32,
    /// Wait only for the sources' reads.
    pub read: bool,
}

impl TypedInstr for BulkWait {
    fn lower(self) -> Result<(Op, Vec<Operand>), OperandError> {
        Ok((Bulk::WaitGroup { read: self.read }.into(), vec![Operand::from(self.pending)]))
    }
}
