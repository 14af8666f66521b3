//! Addressing a stage of a ring placed by [`Arena::stage_ring`](crate::ptx::smem::Arena).

use crate::ptx::smem::Region;
use crate::ptx::{KernelBuilder, Reg};

/// The shared-window address of stage `s` of `ring` (stride `stride`), from the dynamic
/// array's address `smem`.
pub fn stage_base(b: &mut KernelBuilder, smem: Reg, ring: &Region, stride: u32, s: Reg) -> Reg {
    let o = b.mad_u32(s, stride, ring.offset);
    b.add_u32(smem, o)
}
