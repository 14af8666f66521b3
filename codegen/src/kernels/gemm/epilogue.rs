//! What both epilogues share: taking an accumulator buffer from the MMA warp, reading this
//! thread's row of it from TMEM, and handing it back.

use super::Gemm;
use super::schedule::Common;
use crate::kernels::pipeline::{Cursor, Signal};
use crate::ptx::ops::{LdRepeat, LdShape, Tcgen05};
use crate::ptx::{BuildError, KernelBuilder, Operand, Reg, RegClass};

/// Waits for the cursor's accumulator buffer and returns this thread's TMEM address of its
/// column 0 (lane field = 32·warp: thread t of the epilogue owns row t).
pub(super) fn acc_acquire(b: &mut KernelBuilder, g: &Gemm, c: &Common, cur: Cursor) -> Reg {
    g.rings.acc.wait(b, c.smem, cur);
    b.tcgen05_fence_after();
    let lane_field = b.shl_b32(c.warp, 21u32);
    let base = b.add_u32(c.tmem, lane_field);
    b.mad_u32(cur.index, g.l.n, base)
}

/// Hands the accumulator buffer back to the MMA warp (of the leader CTA): one elected
/// arrival per warp, after this warp's TMEM loads have completed.
pub(super) fn acc_release(b: &mut KernelBuilder, g: &Gemm, c: &Common, cur: Cursor) {
    let acc = &g.rings.acc;
    b.tcgen05_fence_before();
    b.bar_warp_sync();
    let one = b.elect();
    let skip = b.new_label("skip_release");
    b.bra_unless(one, &skip);
    acc.release(b, c.smem, cur, Signal::Remote { rank: c.leader_rank });
    b.label(&skip);
    acc.advance(b, cur);
}

/// `N` accumulator columns of this thread's row from `addr + col` (`rep` must give `N`).
pub(super) fn tmem_load<const N: usize>(
    b: &mut KernelBuilder,
    addr: Reg,
    col: u32,
    rep: LdRepeat,
) -> [Reg; N] {
    let regs: [Reg; N] = std::array::from_fn(|_| b.reg(RegClass::B32));
    if rep.count() as usize != N {
        let kernel = b.name.clone();
        b.error(BuildError::Inconsistent { kernel, what: "tcgen05.ld repeat count" });
    }
    b.emit(
        Tcgen05::Ld(LdShape::Lanes32x32b, rep),
        vec![Operand::regs(&regs), Operand::Reg(addr).at(i64::from(col))],
    );
    regs
}

/// The loaded words as f32 registers (a bit-for-bit move).
pub(super) fn as_f32<const N: usize>(b: &mut KernelBuilder, regs: [Reg; N]) -> [Reg; N] {
    regs.map(|r| b.mov_b32(RegClass::F32, r))
}
