//! The differential corpus: small sm_90a kernels that exercise every non-tcgen05 feature the
//! simulator models, so that an H100/H200 and moegen-sim can be compared byte for byte
//! (`gpu-check`). They are generated and checked like every other kernel. Their arguments are
//! read by position, as the harness binds them (`abi::signature::CORPUS_*` gives the order;
//! a read of the wrong type is a build error).

use super::sync::{mbar_init, mbar_wait};
use moegen_dsl::abi::{CorpusKernel, KernelId, params};

use crate::ptx::instrs::{
    BulkStore, BulkWait, Bytes, CpAsync, CpAsyncArrive, MbarArrive, MbarExpectTx, Shfl, TmaLoad,
    TmaStore,
};
use crate::ptx::ops::memory::{ld, st};
use crate::ptx::ops::{
    Access, Alu, AtomOp, Bar, Bulk, CacheOp, Cvt, Fence, FloatOp, Memory, ReduxOp, ShflMode, Sync,
    VoteMode,
};
use crate::ptx::types::{Scope, Sem};
use crate::ptx::{
    Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, Rnd, SReg, Space, Ty, VecWidth,
};

/// `mbarrier.arrive{.expect_tx}.shared::cta.b64` on a local barrier (no ordering
/// qualifiers).
fn arrive(bar: Reg, expect_tx: Option<u32>) -> MbarArrive {
    MbarArrive { bar, remote: false, order: None, expect_tx: expect_tx.map(Bytes::from) }
}

/// A 2-D tensor tile load at `(c0, c1)` completing on a CTA-local barrier.
fn tensor_load_2d(
    dst: Reg,
    map: Reg,
    coords: [Operand; 2],
    bar: Reg,
    mask: Option<Reg>,
) -> TmaLoad {
    TmaLoad { dst, map, coords: coords.to_vec(), bar, multicast: mask, cta_group: None }
}

fn corpus_builder(which: CorpusKernel) -> KernelBuilder {
    let id = KernelId::Corpus(which);
    let mut b = KernelBuilder::new(id.name());
    b.declare(params(&id));
    b
}

fn imm(v: u32) -> Operand {
    Operand::Imm(i64::from(v))
}

/// ALU and conversions: 16 results per thread from `a`, `b` (f32) and `u` (u32).
pub fn build_alu() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Alu);
    let tid = b.sreg(SReg::TidX);
    let pa = b.ld_arg_u64(0);
    let pb = b.ld_arg_u64(1);
    let pu = b.ld_arg_u64(2);
    let out = b.ld_arg_u64(3);
    let aa = b.index_addr(pa, tid, 4);
    let a = b.ld_global(Ty::F32, RegClass::F32, aa);
    let ba = b.index_addr(pb, tid, 4);
    let bb = b.ld_global(Ty::F32, RegClass::F32, ba);
    let ua = b.index_addr(pu, tid, 4);
    let u = b.ld_global(Ty::U32, RegClass::B32, ua);
    let mut res: Vec<Reg> = Vec::new();
    for op in [
        FloatOp::Add(Rnd::Rn),
        FloatOp::Mul(Rnd::Rn),
        FloatOp::Div(Rnd::Rn),
        FloatOp::Max { nan: true },
        FloatOp::Min { nan: false },
    ] {
        let r = b.op(RegClass::F32, Alu::Float(op, Ty::F32), vec![a.into(), bb.into()]);
        res.push(b.mov_b32(RegClass::B32, r));
    }
    let r = b.fma_f32(a, bb, a);
    res.push(b.mov_b32(RegClass::B32, r));
    let r = b.cvt(RegClass::F32, Cvt::round(Rnd::Rni, Ty::F32, Ty::F32), vec![a.into()]);
    res.push(b.mov_b32(RegClass::B32, r));
    res.push(b.cvt(RegClass::B32, Cvt::round(Rnd::Rzi, Ty::S32, Ty::F32), vec![a.into()]));
    let e4m3 = Cvt::satfinite(Rnd::Rn, Ty::E4m3x2, Ty::F32);
    let e = b.cvt(RegClass::B16, e4m3, vec![a.into(), bb.into()]);
    res.push(b.cvt_u32_u16(e));
    let lo = b.cvt_u16_u32(u);
    let halves = Cvt::round(Rnd::Rn, Ty::F16x2, Ty::E4m3x2);
    res.push(b.cvt(RegClass::B32, halves, vec![lo.into()]));
    res.push(b.cvt_bf16x2(a, bb));
    let ab = b.mov_b32(RegClass::B32, a);
    res.push(b.bfi_b32(u, ab, 5, 7));
    let sh = b.and_b32(u, 31u32);
    res.push(b.shr_u32(ab, sh));
    let lt = b.setp_f32(Cmp::Lt, a, bb);
    let nan = b.setp_f32(Cmp::Nan, a, bb);
    let x = b.selp_u32(1u32, 0u32, lt);
    let y = b.selp_u32(2u32, 0u32, nan);
    res.push(b.or_b32(x, y));
    let w = b.mul_wide_u32(u, u);
    let base = b.mul_u32(tid, 64u32);
    let dst = b.index_addr(out, base, 1);
    for (i, r) in res.iter().enumerate() {
        b.emit(st(Space::Global, Ty::U32), vec![Operand::Reg(dst).at(4 * i as i64), (*r).into()]);
    }
    let end = Operand::Reg(dst).at(4 * res.len() as i64);
    b.emit(st(Space::Global, Ty::U64), vec![end, w.into()]);
    b.ret();
    b
}

/// A two-stage cp.async → mbarrier pipeline: warp 0 copies 8 chunks of 512 bytes (odd lanes
/// with an 8-byte src-size, so the rest is zero-filled), warps 1–2 consume and xor-reduce.
pub fn build_pipeline() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Pipeline);
    let tid = b.sreg(SReg::TidX);
    let warp = b.shr_u32(tid, 5u32);
    let lane = b.and_b32(tid, 31u32);
    let smem = b.smem_addr(0);
    // Barriers: full[0..2] at 0, 8; empty[0..2] at 16, 24; stages at 1024 and 1536.
    let not0 = b.setp_u32(Cmp::Ne, tid, 0u32);
    let after = b.new_label("after_init");
    b.bra_if(not0, &after);
    for s in 0..2u32 {
        let f = b.add_u32(smem, 8 * s);
        mbar_init(&mut b, f, 32);
        let e = b.add_u32(smem, 16 + 8 * s);
        mbar_init(&mut b, e, 64);
    }
    b.label(&after);
    b.bar_sync(0u32);
    let src = b.ld_arg_u64(0);
    let out = b.ld_arg_u64(1);
    let s = b.mov_u32(0u32);
    let ph = b.mov_u32(0u32);
    let is_prod = b.setp_u32(Cmp::Eq, warp, 0u32);
    let cons = b.new_label("consumer");
    b.bra_unless(is_prod, &cons);
    let odd = b.and_b32(lane, 1u32);
    let is_odd = b.setp_u32(Cmp::Eq, odd, 1u32);
    let size = b.selp_u32(8u32, 16u32, is_odd);
    for chunk in 0..8u32 {
        let e = b.mad_u32(s, 8u32, 16u32);
        let e = b.add_u32(smem, e);
        let par = b.xor_b32(ph, 1u32);
        mbar_wait(&mut b, e, par);
        let st = b.mad_u32(s, 512u32, 1024u32);
        let st = b.add_u32(smem, st);
        let dst = b.mad_u32(lane, 16u32, st);
        let off = b.mad_u32(lane, 16u32, chunk * 512);
        let g = b.index_addr(src, off, 1);
        b.push(CpAsync {
            cache: CacheOp::Cg,
            dst,
            dst_offset: 0,
            src: g,
            src_offset: 0,
            bytes: 16,
            src_bytes: size,
        });
        let f = b.shl_b32(s, 3u32);
        let f = b.add_u32(smem, f);
        b.push(CpAsyncArrive { bar: f, noinc: true });
        super::sync::ring_advance(&mut b, s, ph, 2);
    }
    let end = b.new_label("end");
    b.bra(&end);
    b.label(&cons);
    let c = b.sub_u32(tid, 32u32);
    let acc = b.mov_u32(0u32);
    for _ in 0..8u32 {
        let f = b.shl_b32(s, 3u32);
        let f = b.add_u32(smem, f);
        mbar_wait(&mut b, f, ph);
        let st = b.mad_u32(s, 512u32, 1024u32);
        let st = b.add_u32(smem, st);
        let a = b.mad_u32(c, 8u32, st);
        let w0 = b.reg(RegClass::B32);
        let w1 = b.reg(RegClass::B32);
        b.emit(
            Memory::Ld(Access::vector(Space::Shared, VecWidth::V2, Ty::B32)),
            vec![Operand::Vector(vec![w0.into(), w1.into()]), Operand::addr(a)],
        );
        b.xor_assign_b32(acc, w0);
        b.inc_u32(acc, w1);
        let e = b.mad_u32(s, 8u32, 16u32);
        let e = b.add_u32(smem, e);
        b.push(arrive(e, None));
        super::sync::ring_advance(&mut b, s, ph, 2);
    }
    let dst = b.index_addr(out, c, 4);
    b.st_global(Ty::U32, dst, acc);
    b.label(&end);
    b.ret();
    b
}

/// TMA: four 2-D UINT8 tile loads (swizzle none, 32B, 64B, 128B; boxes of 16/32/64/128 × 8
/// bytes at caller-given coordinates, out-of-bounds zero-filled) dumped raw, then a tile
/// store of the 128B-swizzled box to `tmap_store` at other coordinates. (On an H200, an inner
/// coordinate that is not a multiple of 16 bytes, or a negative store coordinate, is an
/// illegal instruction; the simulator reports both.)
pub fn build_tma() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Tma);
    let tid = b.sreg(SReg::TidX);
    let smem = b.smem_addr(0);
    let bar = b.add_u32(smem, 0u32);
    let one = b.elect();
    let skip = b.new_label("skip_issue");
    b.bra_unless(one, &skip);
    mbar_init(&mut b, bar, 1);
    b.emit(Fence::MbarrierInit, vec![]);
    let total: u32 = (0..4).map(|i| (16u32 << i) * 8).sum();
    b.push(arrive(bar, Some(total)));
    let c0 = b.ld_arg_u32(5);
    let c1 = b.ld_arg_u32(6);
    for i in 0..4u32 {
        let map = b.arg_tensor_map_addr(i as usize);
        let dst = b.add_u32(smem, 1024 * (i + 1));
        b.push(tensor_load_2d(dst, map, [c0.into(), c1.into()], bar, None));
    }
    b.label(&skip);
    b.bar_sync(0u32);
    mbar_wait(&mut b, bar, 0u32);
    let out = b.ld_arg_u64(9);
    for k in 0..32u32 {
        // Thread t copies word t + 32k of the 4 KiB of boxes.
        let w = b.add_u32(tid, 32 * k);
        let s = b.mad_u32(w, 4u32, 1024u32);
        let s = b.add_u32(smem, s);
        let v = b.ld_shared(Ty::B32, RegClass::B32, s);
        let g = b.index_addr(out, w, 4);
        b.st_global(Ty::B32, g, v);
    }
    let skip2 = b.new_label("skip_store");
    b.bra_unless(one, &skip2);
    let map = b.arg_tensor_map_addr(4);
    let c0 = b.ld_arg_u32(7);
    let c1 = b.ld_arg_u32(8);
    let src = b.add_u32(smem, 4096u32);
    b.fence_proxy_async();
    b.push(TmaStore { map, coords: vec![c0.into(), c1.into()], src });
    b.emit(Bulk::CommitGroup, vec![]);
    b.push(BulkWait { pending: 0, read: false });
    b.label(&skip2);
    b.ret();
    b
}

/// A cluster of two CTAs: rank 0 multicasts one UINT16 box (1 KiB) to both; each waits on its
/// own barrier; rank 1 then arrives remotely on rank 0's second barrier, which rank 0 waits
/// for; every thread bulk-reduce-adds a 32-byte bf16 row of its CTA's copy into `out`
/// (both CTAs add into the same rows), and counts itself with red/atom.
pub fn build_cluster() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Cluster);
    // PDL instructions are accepted without a programmatic launch (no-ops then).
    b.pdl_handoff();
    let tid = b.sreg(SReg::TidX);
    let rank = b.sreg(SReg::ClusterCtarank);
    let smem = b.smem_addr(0);
    let bar = b.add_u32(smem, 0u32);
    let bar2 = b.add_u32(smem, 8u32);
    let one = b.elect();
    let skip = b.new_label("skip_init");
    b.bra_unless(one, &skip);
    mbar_init(&mut b, bar, 1);
    mbar_init(&mut b, bar2, 1);
    b.emit(Fence::MbarrierInit, vec![]);
    // Rank 0 announces its bytes with arrive.expect_tx, rank 1 with expect_tx then arrive.
    let r0 = b.setp_u32(Cmp::Eq, rank, 0u32);
    b.push_if(Guard::when(r0), arrive(bar, Some(1024)));
    let order = (Sem::Relaxed, Scope::Cta);
    b.push_if(Guard::unless(r0), MbarExpectTx { bar, bytes: 1024, order });
    b.push_if(Guard::unless(r0), arrive(bar, None));
    b.label(&skip);
    b.cluster_sync();
    let is0 = b.setp_u32(Cmp::Eq, rank, 0u32);
    let issue = b.and_pred(is0, one);
    let skip_issue = b.new_label("skip_issue");
    b.bra_unless(issue, &skip_issue);
    let map = b.arg_tensor_map_addr(0);
    let dst = b.add_u32(smem, 1024u32);
    let mask = b.mov_b16(3);
    b.push(tensor_load_2d(dst, map, [imm(0), imm(0)], bar, Some(mask)));
    b.label(&skip_issue);
    mbar_wait(&mut b, bar, 0u32);
    let is1 = b.setp_u32(Cmp::Eq, rank, 1u32);
    let relay = b.and_pred(is1, one);
    let skip_relay = b.new_label("skip_relay");
    b.bra_unless(relay, &skip_relay);
    let zero = b.mov_u32(0u32);
    super::sync::mbar_arrive_cluster(&mut b, bar2, zero);
    b.label(&skip_relay);
    let skip_wait = b.new_label("skip_wait2");
    b.bra_unless(is0, &skip_wait);
    mbar_wait(&mut b, bar2, 0u32);
    b.label(&skip_wait);
    let out = b.ld_arg_u64(1);
    let src = b.mad_u32(tid, 32u32, 1024u32);
    let src = b.add_u32(smem, src);
    let g = b.mul_wide_u32(tid, 32u32);
    let g = b.add_u64(out, g);
    b.push(BulkStore { dst: g, src, bytes: 32.into(), reduce_add: Some(Ty::Bf16) });
    let copy_out = b.ld_arg_u64(3);
    let row = b.mad_u32(rank, 32u32, tid);
    let cg = b.mul_wide_u32(row, 32u32);
    let cg = b.add_u64(copy_out, cg);
    b.push(BulkStore { dst: cg, src, bytes: 32.into(), reduce_add: None });
    b.emit(Bulk::CommitGroup, vec![]);
    b.push(BulkWait { pending: 0, read: false });
    let counters = b.ld_arg_u64(2);
    b.emit(Memory::Red(Space::Global, AtomOp::Add, Ty::U32), vec![Operand::addr(counters), imm(1)]);
    let gid = b.mad_u32(rank, 32u32, tid);
    let max = Memory::Atom(Space::Global, AtomOp::Max, Ty::U32);
    b.emit(max, vec![Operand::Sink, Operand::Reg(counters).at(4), gid.into()]);
    b.cluster_sync();
    b.ret();
    b
}

/// Warp-level data exchange and named barriers: shfl (bfly, up, down, idx, segmented idx),
/// vote (ballot, all, any), redux (add, max, min.s32, xor), and two barrier groups of two
/// warps plus a bar.arrive/bar.sync producer-consumer hand-off through shared memory.
pub fn build_warp() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Warp);
    let tid = b.sreg(SReg::TidX);
    let warp = b.shr_u32(tid, 5u32);
    let inp = b.ld_arg_u64(0);
    let ia = b.index_addr(inp, tid, 4);
    let x = b.ld_global(Ty::U32, RegClass::B32, ia);
    let v = b.mad_u32(tid, Operand::Hex(0x9E37_79B9), x);
    let mut res = Vec::new();
    // Every shuffle gets a predicate register, used as `d|p` only where `with_pred`.
    let shfl = |b: &mut KernelBuilder, mode: ShflMode, lane: u32, c: u32, with_pred: bool| {
        let d = b.reg(RegClass::B32);
        let p = b.reg(RegClass::Pred);
        b.push(Shfl {
            mode,
            dst: d,
            in_range: with_pred.then_some(p),
            src: v,
            lane: imm(lane),
            clamp: Operand::Hex(c),
            members: Operand::Imm(-1),
        });
        (d, p)
    };
    let (r, _) = shfl(&mut b, ShflMode::Bfly, 5, 31, false);
    res.push(r);
    let (r, p) = shfl(&mut b, ShflMode::Up, 3, 0, true);
    res.push(r);
    let pu = b.selp_u32(1u32, 0u32, p);
    res.push(pu);
    let (r, p) = shfl(&mut b, ShflMode::Down, 7, 31, true);
    res.push(r);
    let pd = b.selp_u32(1u32, 0u32, p);
    res.push(pd);
    let (r, _) = shfl(&mut b, ShflMode::Idx, 13, 31, false);
    res.push(r);
    let (r, _) = shfl(&mut b, ShflMode::Idx, 3, 0x181F, false);
    res.push(r);
    let odd = b.and_b32(v, 1u32);
    let podd = b.setp_u32(Cmp::Eq, odd, 1u32);
    let vote = |b: &mut KernelBuilder, class, mode| {
        b.op(class, Sync::Vote(mode), vec![podd.into(), Operand::Imm(-1)])
    };
    res.push(vote(&mut b, RegClass::B32, VoteMode::Ballot));
    let all = vote(&mut b, RegClass::Pred, VoteMode::All);
    let any = vote(&mut b, RegClass::Pred, VoteMode::Any);
    let a1 = b.selp_u32(1u32, 0u32, all);
    let a2 = b.selp_u32(2u32, 0u32, any);
    res.push(b.or_b32(a1, a2));
    for (op, ty) in [
        (ReduxOp::Add, Ty::U32),
        (ReduxOp::Max, Ty::U32),
        (ReduxOp::Min, Ty::S32),
        (ReduxOp::Xor, Ty::B32),
    ] {
        res.push(b.op(RegClass::B32, Sync::Redux(op, ty), vec![v.into(), Operand::Imm(-1)]));
    }
    // Two independent groups of two warps.
    let lo = b.setp_u32(Cmp::Lt, warp, 2u32);
    let id = b.selp_u32(1u32, 2u32, lo);
    b.emit(Sync::Bar(Bar::Sync), vec![id.into(), imm(64)]);
    // Hand-off: warp 0 writes shared memory and arrives; warp 1 waits and reads.
    let smem = b.smem_addr(0);
    let is_w0 = b.setp_u32(Cmp::Eq, warp, 0u32);
    let is_w1 = b.setp_u32(Cmp::Eq, warp, 1u32);
    let lane = b.and_b32(tid, 31u32);
    let slot = b.mad_u32(lane, 4u32, smem);
    let skip0 = b.new_label("skip_w0");
    b.bra_unless(is_w0, &skip0);
    b.st_shared(Ty::U32, slot, v);
    b.emit(Sync::Bar(Bar::Arrive), vec![imm(3), imm(64)]);
    b.label(&skip0);
    let got = b.mov_u32(0u32);
    let skip1 = b.new_label("skip_w1");
    b.bra_unless(is_w1, &skip1);
    b.emit(Sync::Bar(Bar::Sync), vec![imm(3), imm(64)]);
    let other = b.xor_b32(lane, 31u32);
    let oslot = b.mad_u32(other, 4u32, smem);
    b.emit_to(got, ld(Space::Shared, Ty::U32), vec![Operand::addr(oslot)]);
    b.label(&skip1);
    res.push(got);
    let out = b.ld_arg_u64(1);
    let base = b.mul_u32(tid, 64u32);
    let dst = b.index_addr(out, base, 1);
    for (i, r) in res.iter().enumerate() {
        b.emit(st(Space::Global, Ty::U32), vec![Operand::Reg(dst).at(4 * i as i64), (*r).into()]);
    }
    b.ret();
    b
}
