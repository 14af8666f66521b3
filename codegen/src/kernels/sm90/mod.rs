//! The Hopper (sm_90a) GEMM kernels of the MoE layer: swap-AB `D^T = W · X^T` with the
//! FP4 weights dequantized in registers (the wgmma A operand) and the routing tile's bf16
//! activations in shared memory (the B operand, N = T tokens). One file per role:
//!
//! - `schedule`: set-up, barrier initialization, the static persistent schedule, K loops;
//! - `producer`: warpgroup 0 — weight bulk copies, GEMM2's activation TMA, GEMM1's
//!   `cp.async` gather;
//! - `dequant` and `mainloop`: the consumer warpgroups' FP4 → bf16 fragments and wgmmas;
//! - `accum`: the accumulator fragment layout the epilogues read;
//! - `epilogue_swiglu` (GEMM1: α1, SwiGLU, bf16 or NVFP4-requantized h; `epilogue_relu2`
//!   for the ungated ReLU², two h blocks per consumer) and
//!   `epilogue_finalize` (GEMM2: α2 · router weight, bulk reduce-add or scratch rows);
//! - `columns`: the per-token-column values the epilogues read, loaded before the K loop;
//! - `pingpong`: the order between consumers that take alternate units;
//! - `split_k`: the hand-off of partial accumulators to rank 0 when a cluster splits K;
//! - [`layout`], [`smem`], [`rings`]: shapes and register split, shared-memory regions,
//!   the stage ring.
//!
//! docs/hopper.md describes the design.

mod accum;
mod columns;
mod dequant;
mod dequant_fp8;
mod epilogue_a8;
mod epilogue_finalize;
mod epilogue_relu2;
mod epilogue_swiglu;
pub mod layout;
mod mainloop;
mod pingpong;
mod producer;
mod prologue;
pub mod rings;
pub mod smem;
mod split_k;

pub use dequant::{dequant_step, mxfp4_pair_scales, nvfp4_row_scales, splat};
pub use mainloop::{DESC_HI_SW128, DESC_LO_LBO, act_desc, issue_step, wait_groups};

use moegen_dsl::abi::roles::Sm90Roles;
use moegen_dsl::abi::{KernelId, params};
use moegen_dsl::{GemmKind, KernelDesc};

use self::layout::Sm90Layout;
use self::mainloop::Consumer;
use self::pingpong::Turn;
use self::prologue::{Common, prologue};
use self::rings::Rings;
use self::smem::Sm90Smem;
use crate::kernels::skeleton::{Needs, TileScheduler};
use crate::ptx::instrs::SetMaxNReg;
use crate::ptx::{BuildError, Cmp, KernelBuilder, Label, Reg, RegClass};

/// What every role reads: the layout, where things live, and the stage ring.
struct Sm90 {
    l: Sm90Layout,
    smem: Sm90Smem,
    rings: Rings,
}

/// Builds the kernel for an sm_90a GEMM description.
pub fn build(desc: &KernelDesc) -> (KernelBuilder, Sm90Layout) {
    build_layout(Sm90Layout::new(desc))
}

/// Builds the kernel for a layout; a shared-memory layout that does not fit its budget is
/// recorded as an error (rendering fails with it) and no body is emitted.
pub fn build_layout(l: Sm90Layout) -> (KernelBuilder, Sm90Layout) {
    let mut b = KernelBuilder::new(l.name());
    b.declare(params(&KernelId::Gemm(l.key)));
    // setmaxnreg needs the launch register count fixed by a directive.
    b.directives.push(format!(".maxnreg {}", l.regs.launch));
    let smem = match Sm90Smem::plan(&l) {
        Ok(s) => s,
        Err(source) => {
            b.error(BuildError::Smem { kernel: l.name(), source });
            return (b, l);
        }
    };
    let rings = rings::stage_ring(&l, &smem);
    let g = Sm90 { l, smem, rings };
    let c = prologue(&mut b, &g);
    let end = Label::named("role_end");

    // The ABI's roles: warpgroup 0 produces, warpgroups 1..=consumers consume.
    let wg = b.shr_u32(c.tid, Sm90Layout::warpgroup_threads().trailing_zeros());
    let is_producer = b.setp_u32(Cmp::Eq, wg, Sm90Roles::PRODUCER_WARPGROUP);
    let l_consumer = b.new_label("consumer");
    b.bra_unless(is_producer, &l_consumer);
    b.push(SetMaxNReg { inc: false, count: g.l.regs.producer });
    producer::producer_role(&mut b, &g, &c, &end);
    b.label(&l_consumer);
    b.push(SetMaxNReg { inc: true, count: g.l.regs.consumer });
    consumer_role(&mut b, &g, &c, wg);
    b.label(&end);
    if g.l.split_k > 1 {
        // No CTA leaves while another may still arrive on its barriers or store into it.
        b.cluster_sync();
    }
    b.ret();
    (b, g.l)
}

/// A consumer warpgroup: the K loop of each unit into its accumulators, then the epilogue.
/// Cooperative: every consumer takes its part of every unit. Ping-pong: consumer ci takes
/// every other unit of the CTA's, starting ci units in, and walks the ring over the other's
/// stages (`pingpong`).
fn consumer_role(b: &mut KernelBuilder, g: &Sm90, c: &Common, wg: Reg) {
    let l = &g.l;
    let ci = b.sub_u32(wg, 1u32);
    let part = if l.pingpong { b.mov_u32(0u32) } else { ci };
    let t = b.and_b32(c.tid, 127u32);
    let cw = b.and_b32(c.warp, 3u32);
    let quad = b.shr_u32(c.lane, 2u32);
    let r0 = b.mad_u32(cw, 16u32, quad);
    let pair = b.and_b32(c.lane, 3u32);
    let col0 = b.shl_b32(pair, 1u32);
    let elected = b.elect();
    let turn = g.smem.turns.map(|r| Turn::new(b, c.smem, r, ci, elected));
    let k = Consumer { ci, part, t, lane: c.lane, cw, r0, col0, elected, turn };
    let acc: Vec<Vec<Reg>> = (0..l.blocks).map(|_| b.regs(RegClass::F32, l.tile / 2)).collect();
    let ring = &g.rings.stage;
    let cur = ring.waiter(b, c.smem);
    let rel = ring.consumer(b, &g.rings.consumer, c.smem);
    let sched = match k.turn {
        None => c.sched,
        Some(_) => {
            // The other consumer's unit comes first for consumer 1 (and between any two of
            // either's): its k_tiles stages are skipped, never waited for.
            let skip = b.mul_u32(ci, c.sched.k_tiles);
            cur.skip(b, skip);
            rel.skip(b, skip);
            let first = b.mad_u32(ci, c.sched.stride, c.sched.first);
            let stride = b.shl_b32(c.sched.stride, 1u32);
            TileScheduler { first, stride, ..c.sched }
        }
    };
    let (cur, rel) = (&cur, &rel);
    let handoff = match (c.target, g.smem.split) {
        (Some(rank), Some(s)) => Some(split_k::Handoff::new(b, g, c.smem, &k, rank, &s)),
        _ => None,
    };
    // With split K, ranks 1.. hand their partials to rank 0 and skip the epilogue
    // (`split_k`): the label after it, and the accumulators the epilogue reads.
    let exchange = |b: &mut KernelBuilder, acc: &[Vec<Reg>]| match &handoff {
        Some(h) => {
            let skip = b.new_label("epilogue_done");
            let sums = h.exchange(b, acc, &skip);
            (sums, Some(skip))
        }
        None => (acc.to_vec(), None),
    };
    let skipped = |b: &mut KernelBuilder, skip: Option<Label>| {
        if let Some(l) = skip {
            b.label(&l);
        }
    };
    let k_loop = |b: &mut KernelBuilder, acc: &[Vec<Reg>]| {
        if let Some(t) = &k.turn {
            t.wait(b);
        }
        mainloop::mainloop(b, g, c, &k, acc, cur, rel);
    };
    let skip_other = |b: &mut KernelBuilder| {
        if k.turn.is_some() {
            cur.skip(b, c.sched.k_tiles);
            rel.skip(b, c.sched.k_tiles);
        }
    };
    match l.kind {
        GemmKind::Gemm1 => {
            let p = epilogue_swiglu::swiglu_params(b, g, c, &k);
            sched.units(b, Needs::ALL, &mut |b, u| {
                let loads = p.columns.as_ref().map(|cp| columns::load_columns(b, &k, cp, u));
                k_loop(b, &acc);
                let (sums, skip) = exchange(b, &acc);
                if l.ungated() {
                    epilogue_relu2::epilogue_relu2(b, g, &k, &p, u, &sums, loads.as_ref());
                } else {
                    epilogue_swiglu::epilogue_swiglu(b, g, &k, &p, u, &sums, loads.as_ref());
                }
                skipped(b, skip);
                skip_other(b);
            });
        }
        GemmKind::Gemm2 => {
            let p = epilogue_finalize::finalize_params(b, g, c, &k);
            sched.units(b, Needs::ALL, &mut |b, u| {
                let loads = p.columns.as_ref().map(|cp| columns::load_columns(b, &k, cp, u));
                k_loop(b, &acc);
                let (sums, skip) = exchange(b, &acc);
                epilogue_finalize::epilogue_finalize(b, g, &k, &p, u, &sums, loads.as_ref());
                skipped(b, skip);
                skip_other(b);
            });
            epilogue_finalize::finalize_drain(b, &p);
        }
    }
}
