//! The consumer warpgroups' main loop: per K stage, wait for the stage, load the thread's
//! fragment words (one per K16 step and m64 block) and its rows' scale words, then per K16
//! step dequantize into fresh A registers and issue one `wgmma.m64nTk16` per m64 block, B
//! being the stage's activation tile advanced 32 bytes per step within its 128-byte
//! swizzle rows. Accumulation starts at zero: the tile's first wgmma (with split K, the first of this
//! CTA's stages) has scale-d false.
//!
//! Each K16 step is its own wgmma group. Before a step rewrites its A registers,
//! `wgmma.wait_group 3` retires the group that read them one stage earlier (the groups
//! still in flight are the three steps between), so dequantizing a step overlaps the
//! tensor cores working on the previous ones. The wait before step 3 also retires the
//! previous stage's last group, so that stage is handed back to the producer there; the
//! tile's last stage is handed back after the final `wait_group 0`.

use moegen_dsl::GemmKind;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::abi::sm90_weights::TILE_BYTES;

use super::Sm90;
use super::dequant::{dequant_step, mxfp4_pair_scales, nvfp4_row_scales, splat};
use super::dequant_fp8::dequant_step_fp8;
use super::pingpong::Turn;
use super::prologue::Common;
use crate::kernels::pipeline::{self, Local, Waiter};
use crate::ptx::instrs::{WgmmaMma, WgmmaMmaE4m3, WgmmaWait};
use crate::ptx::ops::memory::ld;
use crate::ptx::ops::{Access, Memory, Wgmma};
use crate::ptx::{Accumulate, KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

/// K16 steps per 64-wide K stage.
pub const STEPS: u32 = 4;
/// Bytes one K16 step advances a K-major bf16 operand (16 × 2 B).
const STEP_BYTES: u32 = 32;
/// Bytes between fragment words of consecutive K16 steps of one tile (128 threads × 4 B).
const STEP_WORDS_BYTES: u32 = 512;

/// High word of the sm_90 GMMA descriptor of a K-major, 128B-swizzled bf16 tile: stride
/// byte offset 1024 (8 rows of 128 B; bits 32–45 in 16-byte units), base offset 0 (the tile
/// is 1024-aligned), layout type 1 = 128B swizzle (bits 62–63).
pub const DESC_HI_SW128: u32 = (1 << 30) | (1024 >> 4);
/// Low-word constant: leading byte offset 1 (bits 16–29; unused by swizzled K-major tiles).
pub const DESC_LO_LBO: u32 = 1 << 16;

/// A consumer thread's fixed coordinates.
#[derive(Clone, Copy, Debug)]
pub(super) struct Consumer {
    /// Consumer index (warpgroup − 1): which staging tile, column table and named barrier
    /// are this consumer's.
    pub ci: Reg,
    /// Which part of a unit's rows this consumer computes: `ci` when the consumers split
    /// each unit, 0 in ping-pong (each consumer takes whole units).
    pub part: Reg,
    /// Thread within the warpgroup.
    pub t: Reg,
    /// Lane within the warp.
    pub lane: Reg,
    /// Warp within the warpgroup.
    pub cw: Reg,
    /// Row of the m64 block this thread's fragments and accumulators start at: 16·cw +
    /// lane/4 (the other is 8 below).
    pub r0: Reg,
    /// First accumulator column of this thread within each n8 block: 2·(lane % 4).
    pub col0: Reg,
    /// One lane of the warp (for the stage hand-back).
    pub elected: Reg,
    /// Ping-pong: this consumer's side of the turn barriers.
    pub turn: Option<Turn>,
}

/// The 64-bit descriptor of the activation tile at `tile`, `step` K16 steps in.
pub fn act_desc(b: &mut KernelBuilder, tile: Reg, step: u32) -> Reg {
    let lo = b.shr_u32(tile, 4u32);
    let lo = b.and_b32(lo, 0x3FFFu32);
    let lo = b.or_b32(lo, DESC_LO_LBO);
    let lo = if step > 0 { b.add_u32(lo, step * STEP_BYTES / 16) } else { lo };
    let hi = b.mov_u32(Operand::Hex(DESC_HI_SW128));
    b.pack_b64(lo, hi)
}

/// One K16 step for every m64 block: `wgmma.fence`, the wgmmas, `commit_group`.
pub fn issue_step(
    b: &mut KernelBuilder,
    n: u32,
    acc: &[Vec<Reg>],
    a: &[[Reg; 4]],
    desc: Reg,
    scale_d: Accumulate,
) {
    b.emit(Wgmma::Fence, vec![]);
    for (d, &a) in acc.iter().zip(a) {
        b.push(WgmmaMma {
            n,
            d: d.clone(),
            a,
            b_desc: desc,
            scale_d,
            negate_a: false,
            negate_b: false,
            transpose_b: false,
        });
    }
    b.emit(Wgmma::CommitGroup, vec![]);
}

/// [`issue_step`] for A8: one `wgmma.m64nTk32.e4m3` per m64 block.
pub fn issue_step_fp8(
    b: &mut KernelBuilder,
    n: u32,
    acc: &[Vec<Reg>],
    a: &[[Reg; 4]],
    desc: Reg,
    scale_d: Accumulate,
) {
    b.emit(Wgmma::Fence, vec![]);
    for (d, &a) in acc.iter().zip(a) {
        b.push(WgmmaMmaE4m3 { n, d: d.clone(), a, b_desc: desc, scale_d });
    }
    b.emit(Wgmma::CommitGroup, vec![]);
}

/// `wgmma.wait_group n`.
pub fn wait_groups(b: &mut KernelBuilder, n: u32) {
    b.push(WgmmaWait { pending: n });
}

/// The K loop of one work unit into `acc` (one register list per m64 block). `cur` waits
/// for the stages in turn, `rel` hands them back one stage behind; both advance. In
/// ping-pong the turn passes to the other consumer once the last stage has been waited for.
pub(super) fn mainloop(
    b: &mut KernelBuilder,
    g: &Sm90,
    c: &Common,
    k: &Consumer,
    acc: &[Vec<Reg>],
    cur: &Waiter<'_>,
    rel: &pipeline::Consumer<'_, Local>,
) {
    let l = &g.l;
    if l.a8 {
        return mainloop_fp8(b, g, c, k, acc, cur, rel);
    }
    let blocks = l.blocks;
    // This thread's fragment words and scale rows within the stage, for block 0.
    let first_tile = b.mul_u32(k.part, blocks);
    let v_off = b.mad_u32(first_tile, TILE_BYTES as u32, g.smem.values);
    let v_off = b.mad_u32(k.t, 4u32, v_off);
    let s_off = b.mad_u32(first_tile, l.scale_tile_bytes, g.smem.scales);
    // NVFP4: row r0's word (row r0 + 8's is 8 words on); MXFP4: the word of the row pair,
    // word t / 4 (`abi::sm90_weights::scale_position`).
    let s_off = match l.key.format {
        WeightFormat::Nvfp4 => b.mad_u32(k.r0, 4u32, s_off),
        WeightFormat::Mxfp4 => {
            let word = b.and_b32(k.t, Operand::Hex(!3));
            b.add_u32(s_off, word)
        }
    };
    c.sched.k_loop(b, &mut |b, kk| {
        cur.wait(b);
        if l.kind == GemmKind::Gemm1 {
            // The gathered activations were written by cp.async, a generic-proxy write;
            // the wgmmas read them through the async proxy.
            b.fence_proxy_async();
        }
        let st = g.smem.stage_base(b, c.smem, cur.cursor().index);
        let vt = b.add_u32(st, v_off);
        let sp = b.add_u32(st, s_off);
        let mut words = Vec::with_capacity(blocks as usize);
        let mut scales = Vec::with_capacity(blocks as usize);
        for blk in 0..blocks {
            let w: Vec<Reg> = (0..STEPS)
                .map(|j| {
                    let at = blk * TILE_BYTES as u32 + j * STEP_WORDS_BYTES;
                    let d = b.reg(RegClass::B32);
                    b.emit(
                        ld(Space::Shared, Ty::U32),
                        vec![d.into(), Operand::Reg(vt).at(i64::from(at))],
                    );
                    d
                })
                .collect();
            let load = |b: &mut KernelBuilder, at: u32| {
                let d = b.reg(RegClass::B32);
                b.emit(
                    ld(Space::Shared, Ty::U32),
                    vec![d.into(), Operand::Reg(sp).at(i64::from(at))],
                );
                d
            };
            let at = blk * l.scale_tile_bytes;
            let s: [[Reg; 4]; 2] = match l.key.format {
                WeightFormat::Nvfp4 => [0u32, 8].map(|dr| {
                    let w = load(b, at + dr * 4);
                    nvfp4_row_scales(b, w)
                }),
                WeightFormat::Mxfp4 => {
                    let w = load(b, at);
                    mxfp4_pair_scales(b, w)
                }
            };
            words.push(w);
            scales.push(s);
        }
        let first = c.sched.accumulates(b, kk);
        for j in 0..STEPS {
            wait_groups(b, 3);
            if j == STEPS - 1 {
                // The previous stage's last group has retired: hand that stage back (from
                // the tile's second stage on; predicated, since a branch here would make
                // ptxas serialize the wgmmas).
                let arrive = b.and_pred(first, k.elected);
                rel.release(b, Some(arrive));
                rel.advance_if(b, first);
            }
            let frags: Vec<[Reg; 4]> = (0..blocks as usize)
                .map(|blk| {
                    let s_lo = splat(b, scales[blk][0][j as usize]);
                    let s_hi = splat(b, scales[blk][1][j as usize]);
                    dequant_step(b, l.key.format, words[blk][j as usize], s_lo, s_hi)
                })
                .collect();
            let desc = act_desc(b, st, j);
            let scale_d = if j == 0 { Accumulate::When(first) } else { Accumulate::Always };
            issue_step(b, l.tile, acc, &frags, desc, scale_d);
        }
        cur.advance(b);
    });
    if let Some(t) = &k.turn {
        t.pass(b);
    }
    wait_groups(b, 0);
    rel.release(b, Some(k.elected));
    rel.advance(b);
}

/// [`mainloop`] for A8: per 128-K stage each thread loads its 16 fragment bytes of each
/// half (`ld.shared.v4`: steps 2h and 2h+1, rows r and r+8) and its rows' scale words; per
/// K32 step it expands them to E4M3 (`dequant_fp8`) and issues one `wgmma…k32.e4m3` per m64
/// block, B advancing 32 bytes (32 E4M3) per step in the same 128B-swizzled rows.
pub(super) fn mainloop_fp8(
    b: &mut KernelBuilder,
    g: &Sm90,
    c: &Common,
    k: &Consumer,
    acc: &[Vec<Reg>],
    cur: &Waiter<'_>,
    rel: &pipeline::Consumer<'_, Local>,
) {
    let l = &g.l;
    let blocks = l.blocks;
    let first_tile = b.mul_u32(k.part, blocks);
    let v_off = b.mad_u32(first_tile, l.tile_bytes, g.smem.values);
    let v_off = b.mad_u32(k.t, 16u32, v_off);
    let s_off = b.mad_u32(first_tile, l.scale_tile_bytes, g.smem.scales);
    let s_off = b.mad_u32(k.r0, 4u32, s_off);
    c.sched.k_loop(b, &mut |b, kk| {
        cur.wait(b);
        if l.kind == GemmKind::Gemm1 {
            b.fence_proxy_async();
        }
        let st = g.smem.stage_base(b, c.smem, cur.cursor().index);
        let vt = b.add_u32(st, v_off);
        let sp = b.add_u32(st, s_off);
        // words[blk][h]: (2h, r), (2h, r+8), (2h+1, r), (2h+1, r+8).
        let mut words: Vec<[Vec<Reg>; 2]> = Vec::with_capacity(blocks as usize);
        let mut scales: Vec<[Reg; 2]> = Vec::with_capacity(blocks as usize);
        for blk in 0..blocks {
            let halves = [0u32, 1].map(|h| {
                let w = b.regs(RegClass::B32, 4);
                let at = blk * l.tile_bytes + h * (l.tile_bytes / 2);
                b.emit(
                    Memory::Ld(Access::vector(Space::Shared, VecWidth::V4, Ty::B32)),
                    vec![Operand::regs(&w), Operand::Reg(vt).at(i64::from(at))],
                );
                w
            });
            let s = [0u32, 8].map(|dr| {
                let at = blk * l.scale_tile_bytes + dr * 4;
                let d = b.reg(RegClass::B32);
                b.emit(
                    ld(Space::Shared, Ty::U32),
                    vec![d.into(), Operand::Reg(sp).at(i64::from(at))],
                );
                d
            });
            words.push(halves);
            scales.push(s);
        }
        let first = c.sched.accumulates(b, kk);
        for j in 0..STEPS {
            wait_groups(b, 3);
            if j == STEPS - 1 {
                let arrive = b.and_pred(first, k.elected);
                rel.release(b, Some(arrive));
                rel.advance_if(b, first);
            }
            let (h, jj) = ((j / 2) as usize, (j % 2) as usize * 2);
            let frags: Vec<[Reg; 4]> = (0..blocks as usize)
                .map(|blk| {
                    let w = &words[blk][h];
                    dequant_step_fp8(b, [w[jj], w[jj + 1]], scales[blk], j)
                })
                .collect();
            let desc = act_desc(b, st, j);
            let scale_d = if j == 0 { Accumulate::When(first) } else { Accumulate::Always };
            issue_step_fp8(b, l.tile, acc, &frags, desc, scale_d);
        }
        cur.advance(b);
    });
    if let Some(t) = &k.turn {
        t.pass(b);
    }
    wait_groups(b, 0);
    rel.release(b, Some(k.elected));
    rel.advance(b);
}
