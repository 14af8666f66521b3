//! What both epilogues share: taking an accumulator buffer from the MMA warp, walking its
//! columns in 64-column steps (overlapping buffers: the shared columns first), reading them
//! from TMEM, and handing the buffer back, early where the buffers overlap.

use super::Sm100;
use super::prologue::Common;
use crate::kernels::pipeline::{Consumer, Remote, RemoteAt};
use crate::ptx::instrs::Tcgen05Ld;
use crate::ptx::ops::{LdRepeat, LdShape};
use crate::ptx::{KernelBuilder, Reg, RegClass, TmemAddr};

/// An accumulator buffer taken by this thread's warp.
pub(super) struct AccTile {
    /// TMEM address of column 0 of this warp's lane quarter of the buffer.
    pub taddr: Reg,
    /// Which buffer (0 or 1).
    pub buffer: Reg,
}

/// Waits for the cursor's accumulator buffer and returns this warp's address of it (lane
/// field = 32·warp: thread t of the epilogue owns row t).
pub(super) fn acc_acquire(
    b: &mut KernelBuilder,
    g: &Sm100,
    c: &Common,
    acc: &Consumer<'_, Remote>,
) -> AccTile {
    acc.wait(b);
    let cur = acc.cursor();
    b.tcgen05_fence_after();
    let lane_field = b.shl_b32(c.warp, 21u32);
    let base = b.add_u32(c.target.tmem, lane_field);
    // Overlapping buffers share one ring slot and alternate with its phase.
    let buffer = if g.l.acc_overlapped() { cur.phase } else { cur.index };
    let taddr = b.mad_u32(buffer, g.l.budget.acc_buffer_stride(), base);
    AccTile { taddr, buffer }
}

/// Hands the accumulator buffer back to the MMA warp (of the leader CTA): one elected
/// arrival per warp, after this warp's TMEM loads have completed (`tcgen05.wait::ld`) and
/// `tcgen05.fence::before_thread_sync` has ordered them before the arrival. The arrival
/// needs no memory ordering: TMEM is ordered by the tcgen05 fences on both sides of the
/// barrier, and no generic-proxy data passes (docs/kernels.md). A 1-CTA kernel arrives on
/// its own barrier; a pair on the leader's, at the arrive's default `.release.cta` (as
/// CUTLASS's `ClusterBarrier::arrive(cta_id)`): ptxas keeps that arrive where it is
/// written, where it sank a `.relaxed.cluster` one past the next subtile's loads, and a
/// `.release.cluster` one costs a GPU-scope memory barrier.
pub(super) fn acc_release(
    b: &mut KernelBuilder,
    g: &Sm100,
    c: &Common,
    acc: &Consumer<'_, Remote>,
) {
    b.tcgen05_fence_before();
    b.bar_warp_sync();
    let one = b.elect();
    let skip = b.new_label("skip_release");
    b.bra_unless(one, &skip);
    let rank = (g.l.cm == 2).then_some(c.target.leader_rank);
    let sig = RemoteAt { rank };
    acc.release(b, sig);
    b.label(&skip);
}

/// Accumulator columns of one epilogue step.
pub(super) const STEP_COLS: u32 = 64;

/// One step of a tile: its index (columns `index · step width`), fixed at build time, or
/// chosen at run time by the accumulator buffer.
#[derive(Clone, Copy)]
pub(super) enum Step {
    /// Known when building.
    Fixed(u32),
    /// In a register.
    Runtime(Reg),
}

impl Step {
    /// `base + index · scale`.
    pub fn offset(self, b: &mut KernelBuilder, base: Reg, scale: u32) -> Reg {
        match self {
            Step::Fixed(0) => base,
            Step::Fixed(s) => b.add_u32(base, s * scale),
            Step::Runtime(s) => b.mad_u32(s, scale, base),
        }
    }
    /// Whether the step's first column, `first + index · width`, lies below `dim`: the
    /// steps of a tile's last N block past the dimension (its zero-filled B rows) store
    /// nothing and read no bias.
    pub fn within(self, b: &mut KernelBuilder, first: Reg, width: u32, dim: Reg) -> Reg {
        let col = self.offset(b, first, width);
        b.setp_u32(crate::ptx::Cmp::Lt, col, dim)
    }
    /// `base + index · scale` on a 64-bit address.
    pub fn offset_u64(self, b: &mut KernelBuilder, base: Reg, scale: u32) -> Reg {
        match self {
            Step::Fixed(0) => base,
            Step::Fixed(s) => b.add_u64(base, s * scale),
            Step::Runtime(s) => {
                let o = b.mul_wide_u32(s, scale);
                b.add_u64(base, o)
            }
        }
    }
}

/// The `steps` steps of a tile in the order the epilogue walks them, and after how many the
/// buffer may be released. Overlapping buffers (buffer 0 at column 0, buffer 1 at column
/// `stride`) share buffer 0's upper half and buffer 1's lower half: those go first, then
/// the release, then the other half.
pub(super) fn walk(
    b: &mut KernelBuilder,
    g: &Sm100,
    tile: &AccTile,
    steps: u32,
) -> (Vec<Step>, usize) {
    if !g.l.acc_overlapped() {
        return ((0..steps).map(Step::Fixed).collect(), steps as usize);
    }
    let half = steps.div_ceil(2);
    // Buffer 0 walks steps half.., then 0..half; buffer 1 the other way round.
    let first = b.xor_b32(tile.buffer, 1u32);
    let first = b.mul_u32(first, half);
    let second = b.mul_u32(tile.buffer, half);
    let order = (0..steps)
        .map(|p| {
            let base = if p < half { first } else { second };
            Step::Runtime(if p % half == 0 { base } else { b.add_u32(base, p % half) })
        })
        .collect();
    (order, half as usize)
}

/// `N` accumulator columns of this thread's row from `addr + col` (`rep` must give `N`),
/// into f32 registers.
pub(super) fn tmem_load<const N: usize>(
    b: &mut KernelBuilder,
    addr: Reg,
    col: u32,
    rep: LdRepeat,
) -> [Reg; N] {
    let regs: [Reg; N] = std::array::from_fn(|_| b.reg(RegClass::F32));
    let src = TmemAddr::new(addr).col(col);
    b.push(Tcgen05Ld { shape: LdShape::Lanes32x32b, repeat: rep, dst: regs.to_vec(), src });
    regs
}
