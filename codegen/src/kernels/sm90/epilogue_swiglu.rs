//! GEMM1's epilogue. A consumer's two m64 blocks are an up block of W1 and its gate block
//! (the 64-row interleave), so element e of both accumulators is the same (h column, token):
//! `u = α1·up`, `g = α1·gate` (`mul.rn`), optionally rounded to bf16, `h = swiglu(u, g)` with
//! the IEEE-only sequence of `epilogue_math` (Exact) or its sigmoid by MUFU `ex2`/`rcp`
//! (Fast: `fast::activation_fast`, A16 and A8 only), then
//!
//! - A16: `bf16_rn(h)`;
//! - A4: NVFP4 quantization of each 16 h columns of a token with the device
//!   `fc2_input_scale`, stored as the exact bf16 of e2m1 · scale. The 16 columns 16w..16w+16
//!   of a token are warp w's eight lanes with the same lane % 4 (two values each), so the
//!   block's |max| is three `shfl.bfly` steps (4, 8, 16) of `max.NaN`, after which every lane
//!   computes the same scale as `quantize16`.
//!
//! Values go to the consumer's staging tile [T tokens][64 columns] bf16 (16-byte chunks
//! XOR-swizzled by token % 8, so the 2-byte stores of a warp hit distinct banks), then the
//! warpgroup copies valid token rows out with 16-byte stores: 128 contiguous bytes per row
//! of h `[permuted rows, I]`. In an expert's partial last N block, a consumer whose 64 h
//! columns lie past I computed on stale weight tiles and stores nothing.

use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::{ActivationFormat, EpilogueRecipe, SwigluInput};

use super::Sm90;
use super::accum::{Element, elements};
use super::columns::{ColumnLoads, ColumnParams, ColumnReader, column_params, store_columns};
use super::epilogue_a8::{A8Params, a8_params, a8_unit};
use super::layout::Sm90Layout;
use super::mainloop::Consumer;
use super::prologue::{Common, ends_partial};
use crate::kernels::epilogue_math::{
    ActivationRegs, BlockScale, activation, activation_fast, e2m1_code_sw, e2m1_times,
    load_activation_params, nvfp4_block_scale, pre_activation, round_bf16,
};
use crate::kernels::skeleton::Unit;
use crate::ptx::instrs::Shfl;
use crate::ptx::ops::memory::st;
use crate::ptx::ops::{Access, Bar, Cvt, Memory, ShflMode, Sync};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, Rnd, Space, Ty, VecWidth};

/// Bytes of one staged token row: 64 h columns.
const ROW_BYTES: u32 = 128;

/// Per-consumer values the epilogue reads every unit.
pub(super) struct SwigluParams {
    pub(super) alpha: Reg,
    out: Reg,
    /// bytes per h row: I · 2.
    out_row_bytes: Reg,
    /// fc2_input_scale (A4).
    pub(super) g: Option<Reg>,
    /// The four staging addresses of (v0, v1) at n8 block 0.
    pub(super) slots: [[Reg; 2]; 2],
    /// This thread's copy-out chunk: staging offset of (token t/8, chunk t%8) and the
    /// global column byte offset within the block.
    copy_src: Reg,
    copy_col: Reg,
    copy_tok: Reg,
    /// I / 64, the h column blocks that exist, where the unit's last N block may be
    /// partial (its consumers past them store nothing).
    h_blocks: Option<Reg>,
    /// The A8 factors' buffers.
    pub(super) a8: Option<A8Params>,
    /// I.
    pub(super) inter: Reg,
    /// The activation's parameters, f32 [L, 4] (activations that read them).
    pub(super) act_params: Option<Reg>,
    /// GEMM1's bias, f32 [L, 2I] (kernels with a bias).
    pub(super) bias: Option<Reg>,
    /// The consumer's column table (A8 scales).
    pub columns: Option<ColumnParams>,
}

/// What one unit's elements need beside their accumulators.
struct UnitEpilogue {
    alpha1: Reg,
    act: Option<ActivationRegs>,
    /// Per row offset v1: the (up, gate) bias of this thread's h column.
    bias: Option<[[Reg; 2]; 2]>,
}

/// Loads parameters and places this thread's staging slots.
pub(super) fn swiglu_params(
    b: &mut KernelBuilder,
    g: &Sm90,
    c: &Common,
    k: &Consumer,
) -> SwigluParams {
    let l = &g.l;
    let alpha = b.ld_buffer(Buffer::Alpha1);
    let out = b.ld_buffer(Buffer::Gemm1OutputBf16);
    let inter = b.ld_scalar(Scalar::Intermediate);
    let out_row_bytes = b.shl_b32(inter, 1u32);
    let h_blocks = ends_partial(l).then(|| b.shr_u32(inter, 6u32));
    let gs = match l.key.activations {
        ActivationFormat::Nvfp4 => {
            let p = b.ld_buffer(Buffer::Fc2InputScale);
            Some(b.ld_global(Ty::F32, RegClass::F32, p))
        }
        // (No Hopper description takes MXFP8.)
        ActivationFormat::Bf16 | ActivationFormat::Fp8 | ActivationFormat::Mxfp8 => None,
    };
    let a8 = a8_params(b, g);
    let columns = column_params(b, g, c.smem, k, c.target);
    let act_params = l.key.activation.has_params().then(|| b.ld_buffer(Buffer::ActivationParams));
    let bias = l.key.bias.then(|| b.ld_buffer(Buffer::Gemm1Bias));
    let base = b.mad_u32(k.ci, g.smem.staging_stride, g.smem.staging.offset);
    let stg = b.add_u32(c.smem, base);
    let quad = b.shr_u32(k.lane, 2u32);
    let chunk0 = b.shl_b32(k.cw, 1u32);
    let slots = [0u32, 1].map(|v0| {
        [0u32, 1].map(|v1| {
            let tok = b.add_u32(k.col0, v0);
            let chunk = b.add_u32(chunk0, v1);
            let sw = b.xor_b32(chunk, tok);
            let at = b.mad_u32(tok, ROW_BYTES, stg);
            let at = b.mad_u32(sw, 16u32, at);
            b.mad_u32(quad, 2u32, at)
        })
    });
    let copy_tok = b.shr_u32(k.t, 3u32);
    let ch = b.and_b32(k.t, 7u32);
    let tsw = b.and_b32(copy_tok, 7u32);
    let sw = b.xor_b32(ch, tsw);
    let src = b.mad_u32(copy_tok, ROW_BYTES, stg);
    let copy_src = b.mad_u32(sw, 16u32, src);
    let copy_col = b.shl_b32(ch, 4u32);
    SwigluParams {
        alpha,
        out,
        out_row_bytes,
        g: gs,
        slots,
        copy_src,
        copy_col,
        copy_tok,
        h_blocks,
        a8,
        inter,
        act_params,
        bias,
        columns,
    }
}

/// Loads the unit's α1, activation parameters and this thread's biases. A thread's h column
/// is (h block)·64 + r0 + 8·v1; in an expert's partial last N block it may lie past I, where
/// the consumer stores nothing, so the bias index is clamped to the expert's row.
fn unit_epilogue(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    p: &SwigluParams,
    u: &Unit,
) -> UnitEpilogue {
    let al_addr = b.index_addr(p.alpha, u.expert, 4);
    let alpha1 = b.ld_global(Ty::F32, RegClass::F32, al_addr);
    let act = p.act_params.map(|base| load_activation_params(b, base, u.expert));
    let bias = p.bias.map(|base| {
        let ub = b.mul_u32(u.n, g.l.parts);
        let ub = b.add_u32(ub, k.part);
        let col0 = b.shl_b32(ub, 6u32);
        let col0 = b.add_u32(col0, k.r0);
        let last = b.sub_u32(p.inter, 1u32);
        let two_i = b.shl_b32(p.inter, 1u32);
        let expert_row = b.mul_u32(u.expert, two_i);
        [0u32, 8].map(|dv| {
            let col = b.add_u32(col0, dv);
            let col = b.min_u32(col, last);
            let up = b.add_u32(expert_row, col);
            let gate = b.add_u32(up, p.inter);
            [up, gate].map(|i| {
                let a = b.index_addr(base, i, 4);
                b.ld_global(Ty::F32, RegClass::F32, a)
            })
        })
    });
    UnitEpilogue { alpha1, act, bias }
}

/// `bar.sync id, 128`: the consumer warpgroup's own barrier.
pub(super) fn consumer_barrier(b: &mut KernelBuilder, k: &Consumer) {
    let id = b.add_u32(k.ci, 1u32);
    b.emit(Sync::Bar(Bar::Sync), vec![id.into(), Sm90Layout::warpgroup_threads().into()]);
}

/// h of one accumulator element pair at row offset `v1`.
fn h_value(
    b: &mut KernelBuilder,
    l: &Sm90Layout,
    ep: &UnitEpilogue,
    v1: u32,
    up: Reg,
    gate: Reg,
) -> Reg {
    let bias = ep.bias.map(|rows| rows[v1 as usize]);
    let mut u = pre_activation(b, ep.alpha1, up, bias.map(|r| r[0]));
    let mut gg = pre_activation(b, ep.alpha1, gate, bias.map(|r| r[1]));
    if l.key.swiglu_input == SwigluInput::Bf16 {
        u = round_bf16(b, u);
        gg = round_bf16(b, gg);
    }
    match l.key.recipe {
        EpilogueRecipe::Exact => activation(b, l.key.activation, ep.act.as_ref(), u, gg),
        EpilogueRecipe::Fast => activation_fast(b, l.key.activation, ep.act.as_ref(), u, gg),
    }
}

/// `cvt.rn.bf16.f32` into a b16 register.
fn to_bf16(b: &mut KernelBuilder, x: Reg) -> Reg {
    b.cvt(RegClass::B16, Cvt::round(Rnd::Rn, Ty::Bf16, Ty::F32), vec![x.into()])
}

/// The NVFP4 requantization of the (r0, r0+8) pair of one token, exact in bf16.
fn requantize_pair(b: &mut KernelBuilder, gs: Reg, h: [Reg; 2]) -> [Reg; 2] {
    let a0 = b.abs_f32(h[0]);
    let a1 = b.abs_f32(h[1]);
    let zero = b.mov_f32(0f32);
    let m = b.max_nan_f32(zero, a0);
    let mut m = b.max_nan_f32(m, a1);
    for lanes in [4u32, 8, 16] {
        let other = b.reg(RegClass::F32);
        b.push(Shfl {
            mode: ShflMode::Bfly,
            dst: other,
            in_range: None,
            src: m,
            lane: lanes.into(),
            clamp: 31u32.into(),
            members: Operand::Hex(u32::MAX),
        });
        m = b.max_nan_f32(m, other);
    }
    let BlockScale { sfd, q, .. } = nvfp4_block_scale(b, m, gs);
    h.map(|v| {
        let scaled = b.mul_f32(v, q);
        let code = e2m1_code_sw(b, scaled);
        e2m1_times(b, code, sfd)
    })
}

/// Stores the h values of one token's element pair `es` (rows r0 and r0 + 8 of an n8
/// block) into the staging tile: bf16, after A4's NVFP4 requantization of the pair.
pub(super) fn stage_token_pair(
    b: &mut KernelBuilder,
    l: &Sm90Layout,
    p: &SwigluParams,
    es: &[Element],
    h: Vec<Reg>,
) {
    let vals = match (l.key.activations, p.g, <[Reg; 2]>::try_from(h.as_slice())) {
        (ActivationFormat::Nvfp4, Some(gs), Ok(hv)) => requantize_pair(b, gs, hv).to_vec(),
        _ => h,
    };
    for (e, v) in es.iter().zip(vals) {
        let hb = to_bf16(b, v);
        let at = p.slots[e.v0 as usize][e.v1 as usize];
        b.emit(
            st(Space::Shared, Ty::B16),
            vec![Operand::Reg(at).at(i64::from(e.i * 8 * ROW_BYTES)), hb.into()],
        );
    }
}

/// The epilogue of one unit: `acc` = [up, gate] of this consumer; `loads` its columns'
/// values (A8), loaded before the K loop.
pub(super) fn epilogue_swiglu(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    p: &SwigluParams,
    u: &Unit,
    acc: &[Vec<Reg>],
    loads: Option<&ColumnLoads>,
) {
    let l = &g.l;
    let (Some(up), Some(gate)) = (acc.first(), acc.get(1)) else {
        let kernel = b.name.clone();
        b.error(crate::ptx::BuildError::Inconsistent { kernel, what: "up/gate accumulators" });
        return;
    };
    let ep = unit_epilogue(b, g, k, p, u);
    let a8 = p.a8.as_ref().map(|a| a8_unit(b, g, k, u, a));
    let columns = p.columns.as_ref().zip(loads);
    if let Some((cp, loads)) = columns {
        store_columns(b, g, k, cp, loads);
    }
    if a8.is_some() && columns.is_none() {
        let kernel = b.name.clone();
        b.error(crate::ptx::BuildError::Inconsistent { kernel, what: "A8 column table" });
        return;
    }
    // The previous unit's copy-out has read the staging tile (and the column table).
    consumer_barrier(b, k);
    let reader = columns.map(|(cp, _)| ColumnReader::new(b, g, k, cp));
    let all: Vec<Element> = elements(l.tile).collect();
    for (i, pair) in (0u32..).zip(all.chunks_exact(4)) {
        let tau = reader.filter(|_| a8.is_some()).map(|r| r.scales(b, i));
        // Elements (v1, v0) of one n8 block: for each token (v0), rows r0 and r0 + 8.
        for v0 in 0..2u32 {
            let es: Vec<Element> = pair.iter().copied().filter(|e| e.v0 == v0).collect();
            let h: Vec<Reg> = es
                .iter()
                .map(|e| {
                    let (mut up, mut gate) = (up[e.index], gate[e.index]);
                    if let (Some(a), Some(t)) = (&a8, tau) {
                        // Block 0 holds the up rows, block 1 the gate rows.
                        up = a.apply(b, up, 0, e.v1, t[v0 as usize]);
                        gate = a.apply(b, gate, 1, e.v1, t[v0 as usize]);
                    }
                    h_value(b, l, &ep, e.v1, up, gate)
                })
                .collect();
            stage_token_pair(b, l, p, &es, h);
        }
    }
    consumer_barrier(b, k);
    let ub = b.mul_u32(u.n, l.parts);
    let ub = b.add_u32(ub, k.part);
    copy_out(b, l, p, u, ub);
}

/// Copies the staged 64 h columns of h column block `hb` out to `[permuted rows, I]`:
/// 128 threads, 8 per token row, T/16 rows each; valid token rows only, and nothing for a
/// block past I (an expert's partial last N block).
pub(super) fn copy_out(b: &mut KernelBuilder, l: &Sm90Layout, p: &SwigluParams, u: &Unit, hb: Reg) {
    let exists = p.h_blocks.map(|blocks| b.setp_u32(Cmp::Lt, hb, blocks));
    let col_bytes = b.shl_b32(hb, 7u32);
    let col_bytes = b.add_u32(col_bytes, p.copy_col);
    for it in 0..l.tile / 16 {
        let v = b.regs(RegClass::B32, 4);
        b.emit(
            Memory::Ld(Access::vector(Space::Shared, VecWidth::V4, Ty::B32)),
            vec![Operand::regs(&v), Operand::Reg(p.copy_src).at(i64::from(it * 16 * ROW_BYTES))],
        );
        let tok = b.add_u32(p.copy_tok, it * 16);
        let prow = b.add_u32(u.row0, tok);
        let mut valid = b.setp_u32(Cmp::Lt, prow, u.mn_limit);
        if let Some(e) = exists {
            valid = b.and_pred(valid, e);
        }
        let row_off = b.mul_wide_u32(prow, p.out_row_bytes);
        let dst = b.add_u64(p.out, row_off);
        let col = b.cvt_u64_u32(col_bytes);
        let dst = b.add_u64(dst, col);
        b.emit_if(
            Guard::when(valid),
            Memory::St(Access::vector(Space::Global, VecWidth::V4, Ty::B32)),
            vec![Operand::addr(dst), Operand::regs(&v)],
        );
    }
}
