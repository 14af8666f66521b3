//! The warp-specialized, persistent SM100 GEMM kernels of the MoE layer.
//!
//! Roles (warps): 0–3 epilogue (thread t owns accumulator row t, TMEM lane quarter = warp);
//! GEMM1 4–7 gather A and SFA rows with cp.async through permuted → expanded → token;
//! one MMA warp (also allocates TMEM); one TMA producer (B and SFB, and for GEMM2 A and SFA);
//! 2-CTA GEMM1 adds a relay warp that forwards the peer CTA's gather completion to the leader.
//! There is no scheduler warp: the static schedule (cluster c takes work units c, c + #clusters,
//! …, N-fastest, stopping at the first routing tile ≥ num_non_exiting_tiles) is a pure function
//! each role evaluates from the same inputs.
//! Pipelines: A/B/SF ring of `ab_stages` (full/empty mbarriers), accumulator ring of
//! `acc_stages` (acc_full/acc_empty), scale factors double-buffered in TMEM.

use moegen_dsl::abi::{KernelId, params};
use moegen_dsl::{FinalizeMode, GemmKind, KernelDesc, SwigluInput};

use super::epilogue_math::{quantize16, round_bf16, swiglu};
use super::gemm_layout::*;
use super::sync::*;
use crate::ptx::ops::memory::ld;
use crate::ptx::ops::{Access, Bulk, CacheOp, CpShape, Fence, LdRepeat, LdShape, Mbarrier};
use crate::ptx::ops::{Memory, MmaKind, Tcgen05};
use crate::ptx::{
    BuildError, Cmp, CtaGroup, Guard, KernelBuilder, Label, Operand, Reg, RegClass, SReg, Space,
    Ty, VecWidth,
};

/// Runtime values every role needs.
struct Common {
    tid: Reg,
    warp: Reg,
    lane: Reg,
    m_rank: Reg,
    n_rank: Reg,
    leader_rank: Reg,
    cluster_id: Reg,
    clusters: Reg,
    smem: Reg,
    tmem: Reg,
    k_tiles: Reg,
    units_n: Reg,
    total_units: Reg,
    live_tiles: Reg,
    tile_expert: Reg,
    tile_limit: Reg,
}

/// One work unit inside the schedule loop.
struct Unit {
    n: Reg,
    expert: Reg,
    mn_limit: Reg,
    row0: Reg,
}

fn imm(v: u32) -> Operand {
    Operand::Imm(i64::from(v))
}

/// Emits the static schedule loop around `body`.
fn schedule(
    b: &mut KernelBuilder,
    l: &GemmLayout,
    c: &Common,
    body: &mut dyn FnMut(&mut KernelBuilder, &Unit),
) {
    let top = b.new_label("unit");
    let done = b.new_label("units_done");
    let u = b.mov_u32(c.cluster_id);
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, u, c.total_units);
    b.bra_if(end, &done);
    let m = b.div_u32(u, c.units_n);
    let dead = b.setp_u32(Cmp::Ge, m, c.live_tiles);
    b.bra_if(dead, &done);
    let nt = b.rem_u32(u, c.units_n);
    let n = b.mad_u32(nt, l.cn, c.n_rank);
    let ea = b.index_addr(c.tile_expert, m, 4);
    let expert = b.ld_global(Ty::U32, RegClass::B32, ea);
    let la = b.index_addr(c.tile_limit, m, 4);
    let mn_limit = b.ld_global(Ty::U32, RegClass::B32, la);
    let rows = b.mul_u32(m, l.tile);
    let row0 = b.mad_u32(c.m_rank, 128u32, rows);
    body(b, &Unit { n, expert, mn_limit, row0 });
    b.inc_u32(u, c.clusters);
    b.bra(&top);
    b.label(&done);
}

/// A runtime loop `for ch in 0..count` with a compile-time count.
fn chunk_loop(b: &mut KernelBuilder, count: u32, body: &mut dyn FnMut(&mut KernelBuilder, Reg)) {
    let top = b.new_label("chunk");
    let ch = b.mov_u32(0u32);
    b.label(&top);
    body(b, ch);
    b.inc_u32(ch, 1u32);
    let more = b.setp_u32(Cmp::Lt, ch, count);
    b.bra_if(more, &top);
}

/// A runtime K-stage loop `for kk in 0..k_tiles`.
fn k_loop(b: &mut KernelBuilder, c: &Common, body: &mut dyn FnMut(&mut KernelBuilder, Reg)) {
    let top = b.new_label("k");
    let done = b.new_label("k_done");
    let kk = b.mov_u32(0u32);
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, kk, c.k_tiles);
    b.bra_if(end, &done);
    body(b, kk);
    b.inc_u32(kk, 1u32);
    b.bra(&top);
    b.label(&done);
}

fn bar_at(b: &mut KernelBuilder, base: Reg, off: u32, index: Reg) -> Reg {
    let o = b.mad_u32(index, 8u32, off);
    b.add_u32(base, o)
}

fn stage_base(b: &mut KernelBuilder, l: &GemmLayout, c: &Common, s: Reg) -> Reg {
    let o = b.mad_u32(s, l.budget.stage_bytes, OFF_STAGES);
    b.add_u32(c.smem, o)
}

fn b16_imm(b: &mut KernelBuilder, v: u32) -> Reg {
    b.mov_b16(v)
}

/// Builds the kernel for a GEMM description.
pub fn build(desc: &KernelDesc) -> (KernelBuilder, GemmLayout) {
    let l = GemmLayout::new(desc);
    let mut b = KernelBuilder::new(l.name());
    b.declare(params(&KernelId::Gemm(l.key)));
    let c = prologue(&mut b, &l);
    let end = Label::named("role_end");

    // Dispatch on warp role.
    let epi = b.setp_u32(Cmp::Lt, c.warp, 4u32);
    let l_epi = b.new_label("epilogue");
    b.bra_if(epi, &l_epi);
    let is_mma = b.setp_u32(Cmp::Eq, c.warp, l.mma_warp);
    let l_mma = b.new_label("mma");
    b.bra_if(is_mma, &l_mma);
    let is_tma = b.setp_u32(Cmp::Eq, c.warp, l.tma_warp);
    let l_tma = b.new_label("producer");
    b.bra_if(is_tma, &l_tma);
    if let Some(rw) = l.relay_warp {
        let is_relay = b.setp_u32(Cmp::Eq, c.warp, rw);
        let l_relay = b.new_label("relay");
        b.bra_if(is_relay, &l_relay);
        emit_gather_dispatch(&mut b, &l, &c, &end);
        b.label(&l_relay);
        relay_role(&mut b, &l, &c, &end);
    } else {
        emit_gather_dispatch(&mut b, &l, &c, &end);
    }
    b.label(&l_epi);
    match l.kind {
        GemmKind::Gemm1 => epilogue_gemm1(&mut b, &l, &c),
        GemmKind::Gemm2 => epilogue_gemm2(&mut b, &l, &c),
    }
    b.bra(&end);
    b.label(&l_mma);
    mma_role(&mut b, &l, &c, &end);
    b.bra(&end);
    b.label(&l_tma);
    producer_role(&mut b, &l, &c, &end);
    b.bra(&end);

    // Teardown: every role rejoins here; TMEM is freed once the whole cluster is done.
    b.label(&end);
    b.bar_sync(0u32);
    if l.cm * l.cn > 1 {
        b.cluster_sync();
    }
    let not_mma = b.setp_u32(Cmp::Ne, c.warp, l.mma_warp);
    let exit = b.new_label("exit");
    b.bra_if(not_mma, &exit);
    b.tcgen05_fence_after();
    b.emit(Tcgen05::Dealloc(l.cta_group()), vec![c.tmem.into(), imm(l.budget.tmem_alloc_columns)]);
    b.label(&exit);
    b.ret();
    (b, l)
}

fn emit_gather_dispatch(b: &mut KernelBuilder, l: &GemmLayout, c: &Common, end: &Label) {
    if l.kind == GemmKind::Gemm1 {
        let lo = b.setp_u32(Cmp::Ge, c.warp, l.gather_warp);
        let hi = b.setp_u32(Cmp::Lt, c.warp, l.gather_warp + 4);
        let both = b.and_pred(lo, hi);
        let l_g = b.new_label("gather");
        b.bra_if(both, &l_g);
        b.bra(end);
        b.label(&l_g);
        gather_role(b, l, c);
    }
    b.bra(end);
}

fn prologue(b: &mut KernelBuilder, l: &GemmLayout) -> Common {
    let tid = b.sreg(SReg::TidX);
    let warp = b.shr_u32(tid, 5u32);
    let lane = b.and_b32(tid, 31u32);
    let rank = b.sreg(SReg::ClusterCtarank);
    let m_rank = b.rem_u32(rank, l.cm);
    let n_rank = b.div_u32(rank, l.cm);
    let leader_rank = b.sub_u32(rank, m_rank);
    let cluster_id = b.sreg(SReg::ClusteridX);
    let clusters = b.sreg(SReg::NclusteridX);
    let smem = b.smem_addr(0);

    let not0 = b.setp_u32(Cmp::Ne, tid, 0u32);
    let after_init = b.new_label("after_init");
    b.bra_if(not0, &after_init);
    b.comment("barrier counts: see GemmLayout::{full,empty,acc_empty}_count");
    for s in 0..l.budget.ab_stages {
        let f = b.add_u32(smem, OFF_FULL + 8 * s);
        mbar_init(b, f, l.full_count());
        let e = b.add_u32(smem, OFF_EMPTY + 8 * s);
        mbar_init(b, e, l.empty_count());
        if l.relay_warp.is_some() {
            let g = b.add_u32(smem, OFF_GATHER_FULL + 8 * s);
            mbar_init(b, g, 128);
        }
    }
    for a in 0..l.budget.acc_stages {
        let f = b.add_u32(smem, OFF_ACC_FULL + 8 * a);
        mbar_init(b, f, 1);
        let e = b.add_u32(smem, OFF_ACC_EMPTY + 8 * a);
        mbar_init(b, e, l.acc_empty_count());
    }
    b.emit(Fence::MbarrierInit, vec![]);
    b.label(&after_init);

    let not_mma = b.setp_u32(Cmp::Ne, warp, l.mma_warp);
    let after_alloc = b.new_label("after_alloc");
    b.bra_if(not_mma, &after_alloc);
    let slot = b.add_u32(smem, OFF_TMEM_SLOT);
    b.emit(
        Tcgen05::Alloc(l.cta_group()),
        vec![Operand::addr(slot), imm(l.budget.tmem_alloc_columns)],
    );
    b.emit(Tcgen05::RelinquishAllocPermit(l.cta_group()), vec![]);
    b.label(&after_alloc);
    b.tcgen05_fence_before();
    b.bar_sync(0u32);
    if l.cm * l.cn > 1 {
        b.cluster_sync();
    }
    b.tcgen05_fence_after();
    let slot = b.add_u32(smem, OFF_TMEM_SLOT);
    let tmem = b.ld_shared(Ty::B32, RegClass::B32, slot);

    // PDL: let the next kernel's prologue start, then wait for the previous kernel's output.
    b.pdl_handoff();

    let k_dim = b.ld_param_u32(match l.kind {
        GemmKind::Gemm1 => "hidden",
        GemmKind::Gemm2 => "intermediate",
    });
    let k_tiles = b.shr_u32(k_dim, 8u32);
    let n_dim = match l.kind {
        GemmKind::Gemm1 => {
            let i = b.ld_param_u32("intermediate");
            b.shl_b32(i, 1u32)
        }
        GemmKind::Gemm2 => b.ld_param_u32("hidden"),
    };
    let n_pad = b.add_u32(n_dim, l.n - 1);
    let n_tiles = b.div_u32(n_pad, l.n);
    let units_n = b.div_u32(n_tiles, l.cn);
    let max_tiles = b.ld_param_u32("max_tiles");
    let total_units = b.mul_u32(max_tiles, units_n);
    let live_ptr = b.ld_param_u64("num_non_exiting_tiles");
    let live_raw = b.ld_global(Ty::U32, RegClass::B32, live_ptr);
    let live_tiles = b.min_u32(live_raw, max_tiles);
    let tile_expert = b.ld_param_u64("tile_idx_to_expert_idx");
    let tile_limit = b.ld_param_u64("tile_idx_to_mn_limit");
    Common {
        tid,
        warp,
        lane,
        m_rank,
        n_rank,
        leader_rank,
        cluster_id,
        clusters,
        smem,
        tmem,
        k_tiles,
        units_n,
        total_units,
        live_tiles,
        tile_expert,
        tile_limit,
    }
}

/// One TMA tile load: `dims`-D box at `coords` of `map` into `dst`, completing on `bar`.
struct TmaLoad {
    dims: u8,
    dst: Reg,
    map: Reg,
    coords: Vec<Operand>,
    bar: Reg,
    multicast: Option<Reg>,
}

fn tma_load(b: &mut KernelBuilder, l: &GemmLayout, t: TmaLoad) {
    let op = Bulk::TensorLoad {
        dims: t.dims,
        multicast: t.multicast.is_some(),
        cta_group: (l.cm == 2).then_some(CtaGroup::Two),
    };
    let mut ops =
        vec![Operand::addr(t.dst), Operand::tensor(t.map, t.coords), Operand::addr(t.bar)];
    if let Some(mask) = t.multicast {
        ops.push(mask.into());
    }
    b.emit(op, ops);
}

fn producer_role(b: &mut KernelBuilder, l: &GemmLayout, c: &Common, end: &Label) {
    let one = b.elect();
    b.bra_unless(one, end);
    let (map_a, map_sfa) = if l.kind == GemmKind::Gemm2 {
        (Some(b.param_generic_addr("tmap_a")), Some(b.param_generic_addr("tmap_sfa")))
    } else {
        (None, None)
    };
    let map_b = b.param_generic_addr("tmap_b");
    let map_sfb = b.param_generic_addr("tmap_sfb");
    let s = b.mov_u32(0u32);
    let ph = b.mov_u32(0u32);
    let per_cta_tx = match l.kind {
        GemmKind::Gemm1 => l.budget.b_stage_bytes + l.budget.sfb_stage_bytes,
        GemmKind::Gemm2 => l.budget.stage_bytes,
    };
    let is_leader = b.setp_u32(Cmp::Eq, c.m_rank, 0u32);
    let a_issuer = b.setp_u32(Cmp::Eq, c.n_rank, 0u32);
    // A is multicast to the CTAs that share this CTA's rows: same m_rank, every n_rank.
    let mask_a = if l.cn == 2 {
        let m = b.shl_b32(1u32, c.m_rank);
        let m2 = b.shl_b32(m, l.cm);
        let both = b.or_b32(m, m2);
        Some(b.cvt_u16_u32(both))
    } else {
        None
    };
    schedule(b, l, c, &mut |b, u| {
        k_loop(b, c, &mut |b, kk| {
            let empty = bar_at(b, c.smem, OFF_EMPTY, s);
            let parity = b.xor_b32(ph, 1u32);
            mbar_wait(b, empty, parity);
            let full = bar_at(b, c.smem, OFF_FULL, s);
            b.emit_if(
                Guard::when(is_leader),
                Mbarrier::Arrive { expect_tx: true, order: None, space: Space::SharedCta },
                vec![Operand::Sink, Operand::addr(full), imm(per_cta_tx * l.cm)],
            );
            // 2-CTA: both CTAs' bytes complete on the leader's barrier (its shared::cluster
            // address; CUTLASS gets the same address by clearing the peer bit 24).
            let bar = if l.cm == 2 { map_to_rank(b, full, c.leader_rank) } else { full };
            let st = stage_base(b, l, c, s);
            let kc = b.shl_b32(kk, 8u32);
            let kq = b.shl_b32(kk, 2u32);
            if let (Some(ma), Some(msfa)) = (map_a, map_sfa) {
                let skip = b.new_label("skip_a");
                if l.cn == 2 {
                    b.bra_unless(a_issuer, &skip);
                }
                let rb = b.shr_u32(u.row0, 7u32);
                let coords = vec![kc.into(), u.row0.into()];
                tma_load(
                    b,
                    l,
                    TmaLoad { dims: 2, dst: st, map: ma, coords, bar, multicast: mask_a },
                );
                let sfa = b.add_u32(st, l.sfa_in_stage());
                let coords = vec![imm(0), kq.into(), rb.into()];
                tma_load(
                    b,
                    l,
                    TmaLoad { dims: 3, dst: sfa, map: msfa, coords, bar, multicast: mask_a },
                );
                b.label(&skip);
            }
            let dst_b = b.add_u32(st, l.b_in_stage());
            let nrow = b.mul_u32(u.n, l.n);
            let nrow = b.mad_u32(c.m_rank, l.n / l.cm, nrow);
            let coords = vec![kc.into(), nrow.into(), u.expert.into()];
            tma_load(
                b,
                l,
                TmaLoad { dims: 3, dst: dst_b, map: map_b, coords, bar, multicast: None },
            );
            let dst_sfb = b.add_u32(st, l.sfb_in_stage());
            let nblk = b.mul_u32(u.n, l.sfb_row_blocks());
            let coords = vec![imm(0), kq.into(), nblk.into(), u.expert.into()];
            tma_load(
                b,
                l,
                TmaLoad { dims: 4, dst: dst_sfb, map: map_sfb, coords, bar, multicast: None },
            );
            ring_advance(b, s, ph, l.budget.ab_stages);
        });
    });
}

fn gather_role(b: &mut KernelBuilder, l: &GemmLayout, c: &Common) {
    let g = b.sub_u32(c.tid, l.gather_warp * 32);
    let x = b.ld_param_u64("x");
    let x_sf = b.ld_param_u64("x_sf");
    let p2e = b.ld_param_u64("permuted_idx_to_expanded_idx");
    let top_k = b.ld_param_u32("top_k");
    let hidden = b.ld_param_u32("hidden");
    let row_bytes = b.shr_u32(hidden, 1u32);
    let sf_bytes = b.shr_u32(hidden, 4u32);
    let s = b.mov_u32(0u32);
    let ph = b.mov_u32(0u32);
    let is_peer = b.setp_u32(Cmp::Ne, c.m_rank, 0u32);
    // This thread's place in the 128B-swizzled A tile and in the SFA atoms.
    let a_row = b.shl_b32(g, 7u32);
    let xor = b.and_b32(g, 7u32);
    let g32 = b.and_b32(g, 31u32);
    let gq = b.shr_u32(g, 5u32);
    let sf_row = b.shl_b32(g32, 4u32);
    let sf_row = b.mad_u32(gq, 4u32, sf_row);
    schedule(b, l, c, &mut |b, u| {
        let row = b.add_u32(u.row0, g);
        let valid = b.setp_u32(Cmp::Lt, row, u.mn_limit);
        let exp_addr = b.index_addr(p2e, row, 4);
        let expanded = b.mov_u32(0u32);
        b.emit_if(
            Guard::when(valid),
            ld(Space::Global, Ty::U32),
            vec![expanded.into(), Operand::addr(exp_addr)],
        );
        let token = b.div_u32(expanded, top_k);
        let src_row = b.mul_wide_u32(token, row_bytes);
        let src_row = b.add_u64(x, src_row);
        let src_sf = b.mul_wide_u32(token, sf_bytes);
        let src_sf = b.add_u64(x_sf, src_sf);
        let n16 = b.selp_u32(16u32, 0u32, valid);
        let n4 = b.selp_u32(4u32, 0u32, valid);
        k_loop(b, c, &mut |b, kk| {
            let empty = bar_at(b, c.smem, OFF_EMPTY, s);
            let parity = b.xor_b32(ph, 1u32);
            mbar_wait(b, empty, parity);
            let st = stage_base(b, l, c, s);
            let a_dst = b.add_u32(st, a_row);
            let koff = b.shl_b32(kk, 7u32);
            let src = b.cvt_u64_u32(koff);
            let src = b.add_u64(src_row, src);
            for ch in 0..8u32 {
                let sw = b.xor_b32(xor, ch);
                let dst = b.mad_u32(sw, 16u32, a_dst);
                b.emit(
                    Memory::CpAsync(CacheOp::Cg),
                    vec![
                        Operand::addr(dst),
                        Operand::Reg(src).at(i64::from(ch * 16)),
                        imm(16),
                        n16.into(),
                    ],
                );
            }
            let sfa = b.add_u32(st, l.sfa_in_stage());
            let sfa = b.add_u32(sfa, sf_row);
            let sk = b.shl_b32(kk, 4u32);
            let ssrc = b.cvt_u64_u32(sk);
            let ssrc = b.add_u64(src_sf, ssrc);
            for kb in 0..4u32 {
                let dst = b.add_u32(sfa, kb * 512);
                b.emit(
                    Memory::CpAsync(CacheOp::Ca),
                    vec![
                        Operand::addr(dst),
                        Operand::Reg(ssrc).at(i64::from(kb * 4)),
                        imm(4),
                        n4.into(),
                    ],
                );
            }
            // The leader's gather completes straight on its full barrier; the peer's on a
            // local barrier that the relay warp forwards.
            let full = bar_at(b, c.smem, OFF_FULL, s);
            let local = bar_at(b, c.smem, OFF_GATHER_FULL, s);
            let target =
                if l.relay_warp.is_some() { b.selp_u32(local, full, is_peer) } else { full };
            b.emit(
                Memory::CpAsyncArrive { noinc: true, space: Space::SharedCta },
                vec![Operand::addr(target)],
            );
            ring_advance(b, s, ph, l.budget.ab_stages);
        });
    });
}

fn relay_role(b: &mut KernelBuilder, l: &GemmLayout, c: &Common, end: &Label) {
    let peer = b.setp_u32(Cmp::Ne, c.m_rank, 0u32);
    b.bra_unless(peer, end);
    let one = b.elect();
    b.bra_unless(one, end);
    let s = b.mov_u32(0u32);
    let ph = b.mov_u32(0u32);
    schedule(b, l, c, &mut |b, _u| {
        k_loop(b, c, &mut |b, _kk| {
            let local = bar_at(b, c.smem, OFF_GATHER_FULL, s);
            mbar_wait(b, local, ph);
            // Make the gathered bytes visible to the tensor cores' async proxy before the
            // leader's MMA reads them.
            b.fence_proxy_async();
            let full = bar_at(b, c.smem, OFF_FULL, s);
            mbar_arrive_cluster(b, full, c.leader_rank);
            ring_advance(b, s, ph, l.budget.ab_stages);
        });
    });
    b.bra(end);
}

fn smem_desc(b: &mut KernelBuilder, addr: Reg, step: u32, hi: Reg) -> Reg {
    let lo = b.shr_u32(addr, 4u32);
    let lo = b.and_b32(lo, 0x3FFFu32);
    let lo = b.or_b32(lo, 0x1_0000u32);
    let lo = if step > 0 { b.add_u32(lo, step) } else { lo };
    b.pack_b64(lo, hi)
}

fn mma_role(b: &mut KernelBuilder, l: &GemmLayout, c: &Common, end: &Label) {
    if l.cm == 2 {
        let peer = b.setp_u32(Cmp::Ne, c.m_rank, 0u32);
        b.bra_if(peer, end);
    }
    let one = b.elect();
    b.bra_unless(one, end);
    let cg = l.cta_group();
    let idesc = b.mov_u32(Operand::Hex(l.idesc()));
    // Shared-memory descriptor high words: A/B K-major SW128 (SBO 1024 B, version bit 46,
    // swizzle 2); scale atoms no swizzle (SBO 128 B).
    let hi_ab = b.mov_u32(Operand::Hex(0x4000_4040));
    let hi_sf = b.mov_u32(Operand::Hex(0x0000_4008));
    let s = b.mov_u32(0u32);
    let ph = b.mov_u32(0u32);
    let a = b.mov_u32(0u32);
    let aph = b.mov_u32(0u32);
    let sfbuf = b.mov_u32(0u32);
    let acc_cols = l.budget.tmem_acc_columns;
    let sf_per_buf = l.sf_cols_per_buffer();
    let cluster = l.cm * l.cn;
    let empty_mask = if cluster > 1 { Some(b16_imm(b, (1 << cluster) - 1)) } else { None };
    let acc_mask = if l.cm == 2 {
        let shift = b_n_rank_shift(b, c);
        let m = b.shl_b32(3u32, shift);
        Some(b.cvt_u16_u32(m))
    } else {
        None
    };
    schedule(b, l, c, &mut |b, _u| {
        let acc_empty = bar_at(b, c.smem, OFF_ACC_EMPTY, a);
        let parity = b.xor_b32(aph, 1u32);
        mbar_wait(b, acc_empty, parity);
        b.tcgen05_fence_after();
        let d = b.mad_u32(a, l.n, c.tmem);
        let accumulate = b.mov_u32(0u32);
        k_loop(b, c, &mut |b, _kk| {
            let full = bar_at(b, c.smem, OFF_FULL, s);
            mbar_wait(b, full, ph);
            b.tcgen05_fence_after();
            if l.kind == GemmKind::Gemm1 {
                b.fence_proxy_async();
            }
            let st = stage_base(b, l, c, s);
            let sf_t = b.mad_u32(sfbuf, sf_per_buf, acc_cols);
            let sfa_t = b.add_u32(c.tmem, sf_t);
            let sfb_t = b.add_u32(sfa_t, 16u32);
            let sfa_s = b.add_u32(st, l.sfa_in_stage());
            let sfb_s = b.add_u32(st, l.sfb_in_stage());
            for kb in 0..4u32 {
                let dsc = smem_desc(b, sfa_s, 32 * kb, hi_sf);
                b.emit(
                    Tcgen05::Cp(cg, CpShape::Rows32x128bWarpx4),
                    vec![Operand::Reg(sfa_t).at(i64::from(4 * kb)), dsc.into()],
                );
                for rb in 0..l.sfb_row_blocks() {
                    let dsc = smem_desc(b, sfb_s, 32 * kb + 128 * rb, hi_sf);
                    let col = l.sfb_cols_per_mma() * kb + 4 * rb;
                    b.emit(
                        Tcgen05::Cp(cg, CpShape::Rows32x128bWarpx4),
                        vec![Operand::Reg(sfb_t).at(i64::from(col)), dsc.into()],
                    );
                }
            }
            let b_s = b.add_u32(st, l.b_in_stage());
            let acc_p = b.setp_u32(Cmp::Ne, accumulate, 0u32);
            for j in 0..4u32 {
                let ad = smem_desc(b, st, 2 * j, hi_ab);
                let bd = smem_desc(b, b_s, 2 * j, hi_ab);
                let enable: Operand = if j == 0 { acc_p.into() } else { imm(1) };
                b.emit(
                    Tcgen05::Mma(cg, MmaKind::Mxf4Nvf4Block16),
                    vec![
                        Operand::addr(d),
                        ad.into(),
                        bd.into(),
                        idesc.into(),
                        Operand::Reg(sfa_t).at(i64::from(4 * j)),
                        Operand::Reg(sfb_t).at(i64::from(l.sfb_cols_per_mma() * j)),
                        enable,
                    ],
                );
            }
            b.assign_u32(accumulate, 1u32);
            let empty = bar_at(b, c.smem, OFF_EMPTY, s);
            commit(b, cg, empty, empty_mask);
            b.xor_assign_b32(sfbuf, 1u32);
            ring_advance(b, s, ph, l.budget.ab_stages);
        });
        let acc_full = bar_at(b, c.smem, OFF_ACC_FULL, a);
        commit(b, cg, acc_full, acc_mask);
        ring_advance(b, a, aph, l.budget.acc_stages);
    });
    b.bra(end);
}

/// 2·n_rank: the bit position of this CTA pair in the cluster mask.
fn b_n_rank_shift(b: &mut KernelBuilder, c: &Common) -> Reg {
    b.shl_b32(c.n_rank, 1u32)
}

fn commit(b: &mut KernelBuilder, cg: CtaGroup, bar: Reg, mask: Option<Reg>) {
    match mask {
        None => b.emit(Tcgen05::Commit { group: cg, multicast: false }, vec![Operand::addr(bar)]),
        Some(m) => b.emit(
            Tcgen05::Commit { group: cg, multicast: true },
            vec![Operand::addr(bar), m.into()],
        ),
    }
}

/// Waits for an accumulator buffer and returns this thread's TMEM address of its column 0.
fn acc_acquire(b: &mut KernelBuilder, l: &GemmLayout, c: &Common, a: Reg, aph: Reg) -> Reg {
    let full = bar_at(b, c.smem, OFF_ACC_FULL, a);
    mbar_wait(b, full, aph);
    b.tcgen05_fence_after();
    let lane_field = b.shl_b32(c.warp, 21u32);
    let base = b.add_u32(c.tmem, lane_field);
    b.mad_u32(a, l.n, base)
}

/// Hands the accumulator buffer back to the MMA warp (of the leader CTA).
fn acc_release(b: &mut KernelBuilder, l: &GemmLayout, c: &Common, a: Reg, aph: Reg) {
    b.tcgen05_fence_before();
    b.bar_warp_sync();
    let one = b.elect();
    let skip = b.new_label("skip_release");
    b.bra_unless(one, &skip);
    let empty = bar_at(b, c.smem, OFF_ACC_EMPTY, a);
    mbar_arrive_cluster(b, empty, c.leader_rank);
    b.label(&skip);
    ring_advance(b, a, aph, l.budget.acc_stages);
}

/// `N` accumulator columns of this thread's row from `addr + col` (`rep` must give `N`).
fn tmem_load<const N: usize>(
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

fn as_f32<const N: usize>(b: &mut KernelBuilder, regs: [Reg; N]) -> [Reg; N] {
    regs.map(|r| b.mov_b32(RegClass::F32, r))
}

fn epilogue_gemm2(b: &mut KernelBuilder, l: &GemmLayout, c: &Common) {
    let alpha = b.ld_param_u64("alpha");
    let weights = b.ld_param_u64("router_weights");
    let out = b.ld_param_u64("out");
    let p2e = b.ld_param_u64("permuted_idx_to_expanded_idx");
    let top_k = b.ld_param_u32("top_k");
    let hidden = b.ld_param_u32("hidden");
    let row_bytes = b.shl_b32(hidden, 1u32);
    let a = b.mov_u32(0u32);
    let aph = b.mov_u32(0u32);
    let chunk = b.mov_u32(0u32);
    let staging = b.add_u32(c.smem, l.epilogue_off());
    let my_slot = b.shl_b32(c.tid, 6u32);
    let staging = b.add_u32(staging, my_slot);
    let buf_bytes = 128 * 64;
    schedule(b, l, c, &mut |b, u| {
        let taddr = acc_acquire(b, l, c, a, aph);
        let row = b.add_u32(u.row0, c.tid);
        let valid = b.setp_u32(Cmp::Lt, row, u.mn_limit);
        let ea = b.index_addr(p2e, row, 4);
        let expanded = b.mov_u32(0u32);
        b.emit_if(
            Guard::when(valid),
            ld(Space::Global, Ty::U32),
            vec![expanded.into(), Operand::addr(ea)],
        );
        let w_addr = b.index_addr(weights, expanded, 4);
        let w = b.reg(RegClass::F32);
        b.assign_f32(w, 0f32);
        b.emit_if(
            Guard::when(valid),
            ld(Space::Global, Ty::F32),
            vec![w.into(), Operand::addr(w_addr)],
        );
        let al_addr = b.index_addr(alpha, u.expert, 4);
        let al = b.ld_global(Ty::F32, RegClass::F32, al_addr);
        let scale = b.mul_f32(al, w);
        let dst_row = match l.finalize {
            FinalizeMode::BulkReduceAdd => {
                let token = b.div_u32(expanded, top_k);
                b.mul_wide_u32(token, row_bytes)
            }
            FinalizeMode::Deterministic => b.mul_wide_u32(expanded, row_bytes),
        };
        let dst_row = b.add_u64(out, dst_row);
        let col0 = b.mul_u32(u.n, l.n * 2);
        let col0 = b.cvt_u64_u32(col0);
        let dst_row = b.add_u64(dst_row, col0);
        // One 32-column piece per iteration (a runtime loop keeps the SASS small).
        chunk_loop(b, l.n / 32, &mut |b, ch| {
            let col = b.shl_b32(ch, 5u32);
            let at = b.add_u32(taddr, col);
            let v = tmem_load::<32>(b, at, 0, LdRepeat::X32);
            b.emit(Tcgen05::WaitLd, vec![]);
            let v = as_f32(b, v);
            // Staging buffer `chunk & 1`: wait until the bulk op that last read it is done.
            let which = b.and_b32(chunk, 1u32);
            let src = b.mad_u32(which, buf_bytes, staging);
            b.emit(Bulk::WaitGroup { read: true }, vec![imm(1)]);
            let mut words = Vec::with_capacity(16);
            for pair in v.chunks_exact(2) {
                if let &[even, odd] = pair {
                    let lo = b.mul_f32(even, scale);
                    let hi = b.mul_f32(odd, scale);
                    words.push(b.cvt_bf16x2(hi, lo));
                }
            }
            for (q, quad) in (0i64..).zip(words.chunks(4)) {
                b.emit(
                    Memory::St(Access::vector(Space::Shared, VecWidth::V4, Ty::B32)),
                    vec![Operand::Reg(src).at(16 * q), Operand::regs(quad)],
                );
            }
            b.fence_proxy_async();
            let op = match l.finalize {
                FinalizeMode::BulkReduceAdd => Bulk::ReduceAdd { ty: Ty::Bf16 },
                FinalizeMode::Deterministic => Bulk::Store,
            };
            let byte_off = b.shl_b32(ch, 6u32);
            let byte_off = b.cvt_u64_u32(byte_off);
            let dst = b.add_u64(dst_row, byte_off);
            b.emit_if(
                Guard::when(valid),
                op,
                vec![Operand::addr(dst), Operand::addr(src), imm(64)],
            );
            b.emit(Bulk::CommitGroup, vec![]);
            b.inc_u32(chunk, 1u32);
        });
        acc_release(b, l, c, a, aph);
    });
    b.emit(Bulk::WaitGroup { read: false }, vec![imm(0)]);
}

fn epilogue_gemm1(b: &mut KernelBuilder, l: &GemmLayout, c: &Common) {
    let alpha = b.ld_param_u64("alpha");
    let gsp = b.ld_param_u64("out_global_scale");
    let gs = b.ld_global(Ty::F32, RegClass::F32, gsp);
    let out_sf = b.ld_param_u64("out_sf");
    let map_out = b.param_generic_addr("tmap_out");
    let inter = b.ld_param_u32("intermediate");
    let atoms_per_rowblock = b.shr_u32(inter, 6u32);
    let a = b.mov_u32(0u32);
    let aph = b.mov_u32(0u32);
    let row_stride = l.n / 4;
    let staging = b.add_u32(c.smem, l.epilogue_off());
    let my_row = b.mul_u32(c.tid, row_stride);
    let my_row = b.add_u32(staging, my_row);
    let warp_rows = b.mul_u32(c.warp, 32 * row_stride);
    let warp_stage = b.add_u32(staging, warp_rows);
    let lane_sf = b.shl_b32(c.lane, 4u32);
    let lane_sf = b.mad_u32(c.warp, 4u32, lane_sf);
    let one = b.elect();
    schedule(b, l, c, &mut |b, u| {
        // The staging rows are free once this warp's previous TMA store has read them.
        b.emit_if(Guard::when(one), Bulk::WaitGroup { read: true }, vec![imm(0)]);
        b.bar_warp_sync();
        let taddr = acc_acquire(b, l, c, a, aph);
        let al_addr = b.index_addr(alpha, u.expert, 4);
        let al = b.ld_global(Ty::F32, RegClass::F32, al_addr);
        let row = b.add_u32(u.row0, c.tid);
        let rowblock = b.shr_u32(row, 7u32);
        let atom_row = b.mul_u32(rowblock, atoms_per_rowblock);
        // Piece c covers h columns 16c..16c+16 of this tile: up at accumulator column
        // (c/4)·128 + (c%4)·16, gate 64 columns further (the 64-row up/gate interleave).
        chunk_loop(b, l.n / 32, &mut |b, ch| {
            let pair = b.shr_u32(ch, 2u32);
            let within = b.and_b32(ch, 3u32);
            let col = b.shl_b32(pair, 7u32);
            let col = b.mad_u32(within, 16u32, col);
            let at = b.add_u32(taddr, col);
            let up = tmem_load::<16>(b, at, 0, LdRepeat::X16);
            let gate = tmem_load::<16>(b, at, 64, LdRepeat::X16);
            b.emit(Tcgen05::WaitLd, vec![]);
            let up = as_f32(b, up);
            let gate = as_f32(b, gate);
            let h: [Reg; 16] = std::array::from_fn(|i| {
                let mut uu = b.mul_f32(al, up[i]);
                let mut gg = b.mul_f32(al, gate[i]);
                if l.swiglu_input == SwigluInput::Bf16 {
                    uu = round_bf16(b, uu);
                    gg = round_bf16(b, gg);
                }
                swiglu(b, uu, gg)
            });
            let ([w0, w1], code) = quantize16(b, &h, gs);
            let soff = b.mad_u32(ch, 8u32, my_row);
            b.emit(
                Memory::St(Access::vector(Space::Shared, VecWidth::V2, Ty::B32)),
                vec![Operand::addr(soff), Operand::Vector(vec![w0.into(), w1.into()])],
            );
            // Scale column hb of the 128x4 layout over permuted rows.
            let hb = b.mad_u32(u.n, l.n / 32, ch);
            let atom = b.shr_u32(hb, 2u32);
            let atom = b.add_u32(atom_row, atom);
            let within = b.and_b32(hb, 3u32);
            let off = b.mad_u32(atom, 512u32, lane_sf);
            let off = b.add_u32(off, within);
            let dst = b.index_addr(out_sf, off, 1);
            let byte = b.cvt_u16_u32(code);
            b.st_global(Ty::U8, dst, byte);
        });
        acc_release(b, l, c, a, aph);
        b.fence_proxy_async();
        b.bar_warp_sync();
        let skip = b.new_label("skip_store");
        b.bra_unless(one, &skip);
        let col = b.mul_u32(u.n, l.n / 2);
        let wrow = b.mad_u32(c.warp, 32u32, u.row0);
        b.emit(
            Bulk::TensorStore { dims: 2 },
            vec![
                Operand::TensorRef(Box::new(map_out.into()), vec![col.into(), wrow.into()]),
                Operand::addr(warp_stage),
            ],
        );
        b.emit(Bulk::CommitGroup, vec![]);
        b.label(&skip);
    });
    b.emit_if(Guard::when(one), Bulk::WaitGroup { read: false }, vec![imm(0)]);
}
