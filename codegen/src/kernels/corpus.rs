//! The differential corpus: small sm_90a kernels that exercise every non-tcgen05 feature the
//! simulator models, so that an H100/H200 and moegen-sim can be compared byte for byte
//! (`gpu-check`). They are generated and checked like every other kernel.

use super::sync::{elect, mbar_init, mbar_wait};
use moegen_dsl::abi::{CorpusKernel, KernelId, params};

use crate::ptx::{KernelBuilder, Operand, Reg, RegClass};

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
    let tid = b.sreg("%tid.x");
    let pa = b.ld_param_u64("a");
    let pb = b.ld_param_u64("b");
    let pu = b.ld_param_u64("u");
    let out = b.ld_param_u64("out");
    let aa = b.index_addr(pa, tid, 4);
    let a = b.ld_global("f32", RegClass::F32, aa);
    let ba = b.index_addr(pb, tid, 4);
    let bb = b.ld_global("f32", RegClass::F32, ba);
    let ua = b.index_addr(pu, tid, 4);
    let u = b.ld_global("u32", RegClass::B32, ua);
    let f = |b: &mut KernelBuilder, op: &str, args: Vec<Operand>| b.op(RegClass::F32, op, args);
    let bits = |b: &mut KernelBuilder, x: Reg| b.op(RegClass::B32, "mov.b32", vec![x.into()]);
    let mut res: Vec<Reg> = Vec::new();
    for op in ["add.rn.f32", "mul.rn.f32", "div.rn.f32", "max.NaN.f32", "min.f32"] {
        let r = f(&mut b, op, vec![a.into(), bb.into()]);
        res.push(bits(&mut b, r));
    }
    let r = f(&mut b, "fma.rn.f32", vec![a.into(), bb.into(), a.into()]);
    res.push(bits(&mut b, r));
    let r = f(&mut b, "cvt.rni.f32.f32", vec![a.into()]);
    res.push(bits(&mut b, r));
    res.push(b.op(RegClass::B32, "cvt.rzi.s32.f32", vec![a.into()]));
    let e = b.op(RegClass::B16, "cvt.rn.satfinite.e4m3x2.f32", vec![a.into(), bb.into()]);
    res.push(b.op(RegClass::B32, "cvt.u32.u16", vec![e.into()]));
    let lo = b.op(RegClass::B16, "cvt.u16.u32", vec![u.into()]);
    res.push(b.op(RegClass::B32, "cvt.rn.f16x2.e4m3x2", vec![lo.into()]));
    res.push(b.op(RegClass::B32, "cvt.rn.bf16x2.f32", vec![a.into(), bb.into()]));
    let ab = bits(&mut b, a);
    res.push(b.op(RegClass::B32, "bfi.b32", vec![u.into(), ab.into(), imm(5), imm(7)]));
    let sh = b.and_b32(u, 31u32);
    res.push(b.shr_u32(ab, sh));
    let lt = b.setp("lt.f32", a, bb);
    let nan = b.setp("nan.f32", a, bb);
    let x = b.selp_u32(1u32, 0u32, lt);
    let y = b.selp_u32(2u32, 0u32, nan);
    res.push(b.or_b32(x, y));
    let w = b.mul_wide_u32(u, u);
    let base = b.mul_u32(tid, 64u32);
    let dst = b.index_addr(out, base, 1);
    for (i, r) in res.iter().enumerate() {
        b.ins("st.global.u32", vec![Operand::Reg(dst).at(4 * i as i64), (*r).into()]);
    }
    b.ins("st.global.u64", vec![Operand::Reg(dst).at(4 * res.len() as i64), w.into()]);
    b.ins("ret", vec![]);
    b
}

/// A two-stage cp.async → mbarrier pipeline: warp 0 copies 8 chunks of 512 bytes (odd lanes
/// with an 8-byte src-size, so the rest is zero-filled), warps 1–2 consume and xor-reduce.
pub fn build_pipeline() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Pipeline);
    let tid = b.sreg("%tid.x");
    let warp = b.shr_u32(tid, 5u32);
    let lane = b.and_b32(tid, 31u32);
    let smem = b.smem_addr(0);
    // Barriers: full[0..2] at 0, 8; empty[0..2] at 16, 24; stages at 1024 and 1536.
    let not0 = b.setp("ne.u32", tid, 0u32);
    let after = b.new_label("after_init");
    b.bra_if(not0, false, &after);
    for s in 0..2u32 {
        let f = b.add_u32(smem, 8 * s);
        mbar_init(&mut b, f, 32);
        let e = b.add_u32(smem, 16 + 8 * s);
        mbar_init(&mut b, e, 64);
    }
    b.label(&after);
    b.ins("bar.sync", vec![imm(0)]);
    let src = b.ld_param_u64("src");
    let out = b.ld_param_u64("out");
    let s = b.mov_u32(0u32);
    let ph = b.mov_u32(0u32);
    let is_prod = b.setp("eq.u32", warp, 0u32);
    let cons = b.new_label("consumer");
    b.bra_if(is_prod, true, &cons);
    let odd = b.and_b32(lane, 1u32);
    let is_odd = b.setp("eq.u32", odd, 1u32);
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
        b.ins(
            "cp.async.cg.shared.global",
            vec![Operand::Reg(dst).at(0), Operand::Reg(g).at(0), imm(16), size.into()],
        );
        let f = b.shl_b32(s, 3u32);
        let f = b.add_u32(smem, f);
        b.ins("cp.async.mbarrier.arrive.noinc.shared::cta.b64", vec![Operand::Reg(f).at(0)]);
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
        b.ins(
            "ld.shared.v2.b32",
            vec![Operand::Vector(vec![w0.into(), w1.into()]), Operand::Reg(a).at(0)],
        );
        b.ins("xor.b32", vec![acc.into(), acc.into(), w0.into()]);
        b.ins("add.u32", vec![acc.into(), acc.into(), w1.into()]);
        let e = b.mad_u32(s, 8u32, 16u32);
        let e = b.add_u32(smem, e);
        b.ins("mbarrier.arrive.shared::cta.b64", vec![Operand::Sink, Operand::Reg(e).at(0)]);
        super::sync::ring_advance(&mut b, s, ph, 2);
    }
    let dst = b.index_addr(out, c, 4);
    b.ins("st.global.u32", vec![Operand::Reg(dst).at(0), acc.into()]);
    b.label(&end);
    b.ins("ret", vec![]);
    b
}

/// TMA: four 2-D UINT8 tile loads (swizzle none, 32B, 64B, 128B; boxes of 16/32/64/128 × 8
/// bytes at caller-given coordinates, out-of-bounds zero-filled) dumped raw, then a tile
/// store of the 128B-swizzled box to `tmap_store` at other coordinates. (On an H200, an inner
/// coordinate that is not a multiple of 16 bytes, or a negative store coordinate, is an
/// illegal instruction; the simulator reports both.)
pub fn build_tma() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Tma);
    let tid = b.sreg("%tid.x");
    let smem = b.smem_addr(0);
    let bar = b.add_u32(smem, 0u32);
    let one = elect(&mut b);
    let skip = b.new_label("skip_issue");
    b.bra_if(one, true, &skip);
    mbar_init(&mut b, bar, 1);
    b.ins("fence.mbarrier_init.release.cluster", vec![]);
    let total: u32 = (0..4).map(|i| (16u32 << i) * 8).sum();
    b.ins(
        "mbarrier.arrive.expect_tx.shared::cta.b64",
        vec![Operand::Sink, Operand::Reg(bar).at(0), imm(total)],
    );
    let c0 = b.ld_param_u32("c0");
    let c1 = b.ld_param_u32("c1");
    for i in 0..4u32 {
        let map = b.param_generic_addr(&format!("tmap{i}"));
        let dst = b.add_u32(smem, 1024 * (i + 1));
        b.ins(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
            vec![
                Operand::Reg(dst).at(0),
                Operand::TensorRef(Box::new(map.into()), vec![c0.into(), c1.into()]),
                Operand::Reg(bar).at(0),
            ],
        );
    }
    b.label(&skip);
    b.ins("bar.sync", vec![imm(0)]);
    mbar_wait(&mut b, bar, 0u32);
    let out = b.ld_param_u64("out");
    for k in 0..32u32 {
        // Thread t copies word t + 32k of the 4 KiB of boxes.
        let w = b.add_u32(tid, 32 * k);
        let s = b.mad_u32(w, 4u32, 1024u32);
        let s = b.add_u32(smem, s);
        let v = b.op(RegClass::B32, "ld.shared.b32", vec![Operand::Reg(s).at(0)]);
        let g = b.index_addr(out, w, 4);
        b.ins("st.global.b32", vec![Operand::Reg(g).at(0), v.into()]);
    }
    let skip2 = b.new_label("skip_store");
    b.bra_if(one, true, &skip2);
    let map = b.param_generic_addr("tmap_store");
    let c0 = b.ld_param_u32("s0");
    let c1 = b.ld_param_u32("s1");
    let src = b.add_u32(smem, 4096u32);
    b.ins("fence.proxy.async.shared::cta", vec![]);
    b.ins(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
        vec![
            Operand::TensorRef(Box::new(map.into()), vec![c0.into(), c1.into()]),
            Operand::Reg(src).at(0),
        ],
    );
    b.ins("cp.async.bulk.commit_group", vec![]);
    b.ins("cp.async.bulk.wait_group", vec![imm(0)]);
    b.label(&skip2);
    b.ins("ret", vec![]);
    b
}

/// A cluster of two CTAs: rank 0 multicasts one UINT16 box (1 KiB) to both; each waits on its
/// own barrier; rank 1 then arrives remotely on rank 0's second barrier, which rank 0 waits
/// for; every thread bulk-reduce-adds a 32-byte bf16 row of its CTA's copy into `out`
/// (both CTAs add into the same rows), and counts itself with red/atom.
pub fn build_cluster() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Cluster);
    // PDL instructions are accepted without a programmatic launch (no-ops then).
    b.ins("griddepcontrol.launch_dependents", vec![]);
    b.ins("griddepcontrol.wait", vec![]);
    let tid = b.sreg("%tid.x");
    let rank = b.sreg("%cluster_ctarank");
    let smem = b.smem_addr(0);
    let bar = b.add_u32(smem, 0u32);
    let bar2 = b.add_u32(smem, 8u32);
    let one = elect(&mut b);
    let skip = b.new_label("skip_init");
    b.bra_if(one, true, &skip);
    mbar_init(&mut b, bar, 1);
    mbar_init(&mut b, bar2, 1);
    b.ins("fence.mbarrier_init.release.cluster", vec![]);
    // Rank 0 announces its bytes with arrive.expect_tx, rank 1 with expect_tx then arrive.
    let r0 = b.setp("eq.u32", rank, 0u32);
    let tx = vec![Operand::Sink, Operand::Reg(bar).at(0), imm(1024)];
    b.ins_if(r0, false, "mbarrier.arrive.expect_tx.shared::cta.b64", tx);
    b.ins_if(
        r0,
        true,
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64",
        vec![Operand::Reg(bar).at(0), imm(1024)],
    );
    b.ins_if(
        r0,
        true,
        "mbarrier.arrive.shared::cta.b64",
        vec![Operand::Sink, Operand::Reg(bar).at(0)],
    );
    b.label(&skip);
    b.ins("barrier.cluster.arrive.release.aligned", vec![]);
    b.ins("barrier.cluster.wait.acquire.aligned", vec![]);
    let is0 = b.setp("eq.u32", rank, 0u32);
    let issue = b.op(RegClass::Pred, "and.pred", vec![is0.into(), one.into()]);
    let skip_issue = b.new_label("skip_issue");
    b.bra_if(issue, true, &skip_issue);
    let map = b.param_generic_addr("tmap");
    let dst = b.add_u32(smem, 1024u32);
    let mask = b.op(RegClass::B16, "mov.b16", vec![imm(3)]);
    b.ins(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster",
        vec![Operand::Reg(dst).at(0), Operand::TensorRef(Box::new(map.into()), vec![imm(0), imm(0)]), Operand::Reg(bar).at(0), mask.into()],
    );
    b.label(&skip_issue);
    mbar_wait(&mut b, bar, 0u32);
    let is1 = b.setp("eq.u32", rank, 1u32);
    let relay = b.op(RegClass::Pred, "and.pred", vec![is1.into(), one.into()]);
    let skip_relay = b.new_label("skip_relay");
    b.bra_if(relay, true, &skip_relay);
    let zero = b.mov_u32(0u32);
    super::sync::mbar_arrive_cluster(&mut b, bar2, zero);
    b.label(&skip_relay);
    let skip_wait = b.new_label("skip_wait2");
    b.bra_if(is0, true, &skip_wait);
    mbar_wait(&mut b, bar2, 0u32);
    b.label(&skip_wait);
    let out = b.ld_param_u64("out");
    let src = b.mad_u32(tid, 32u32, 1024u32);
    let src = b.add_u32(smem, src);
    let g = b.mul_wide_u32(tid, 32u32);
    let g = b.add_u64(out, g);
    b.ins(
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16",
        vec![Operand::Reg(g).at(0), Operand::Reg(src).at(0), imm(32)],
    );
    let copy_out = b.ld_param_u64("copy_out");
    let row = b.mad_u32(rank, 32u32, tid);
    let cg = b.mul_wide_u32(row, 32u32);
    let cg = b.add_u64(copy_out, cg);
    b.ins(
        "cp.async.bulk.global.shared::cta.bulk_group",
        vec![Operand::Reg(cg).at(0), Operand::Reg(src).at(0), imm(32)],
    );
    b.ins("cp.async.bulk.commit_group", vec![]);
    b.ins("cp.async.bulk.wait_group", vec![imm(0)]);
    let counters = b.ld_param_u64("counters");
    b.ins("red.global.add.u32", vec![Operand::Reg(counters).at(0), imm(1)]);
    let gid = b.mad_u32(rank, 32u32, tid);
    b.ins("atom.global.max.u32", vec![Operand::Sink, Operand::Reg(counters).at(4), gid.into()]);
    b.ins("barrier.cluster.arrive.release.aligned", vec![]);
    b.ins("barrier.cluster.wait.acquire.aligned", vec![]);
    b.ins("ret", vec![]);
    b
}

/// Warp-level data exchange and named barriers: shfl (bfly, up, down, idx, segmented idx),
/// vote (ballot, all, any), redux (add, max, min.s32, xor), and two barrier groups of two
/// warps plus a bar.arrive/bar.sync producer-consumer hand-off through shared memory.
pub fn build_warp() -> KernelBuilder {
    let mut b = corpus_builder(CorpusKernel::Warp);
    let tid = b.sreg("%tid.x");
    let warp = b.shr_u32(tid, 5u32);
    let inp = b.ld_param_u64("input");
    let ia = b.index_addr(inp, tid, 4);
    let x = b.ld_global("u32", RegClass::B32, ia);
    let v = b.mad_u32(tid, Operand::Hex(0x9E37_79B9), x);
    let full = Operand::Imm(-1);
    let mut res = Vec::new();
    let shfl = |b: &mut KernelBuilder,
                mode: &str,
                lane: u32,
                c: u32,
                with_pred: bool|
     -> (Reg, Option<Reg>) {
        let d = b.reg(RegClass::B32);
        let p = b.reg(RegClass::Pred);
        let dst = if with_pred { Operand::Name(format!("{d}|{p}")) } else { d.into() };
        b.ins(
            &format!("shfl.sync.{mode}.b32"),
            vec![dst, v.into(), imm(lane), Operand::Hex(c), Operand::Imm(-1)],
        );
        (d, with_pred.then_some(p))
    };
    let (r, _) = shfl(&mut b, "bfly", 5, 31, false);
    res.push(r);
    let (r, p) = shfl(&mut b, "up", 3, 0, true);
    res.push(r);
    let pu = b.selp_u32(1u32, 0u32, p.unwrap_or(r));
    res.push(pu);
    let (r, p) = shfl(&mut b, "down", 7, 31, true);
    res.push(r);
    let pd = b.selp_u32(1u32, 0u32, p.unwrap_or(r));
    res.push(pd);
    let (r, _) = shfl(&mut b, "idx", 13, 31, false);
    res.push(r);
    let (r, _) = shfl(&mut b, "idx", 3, 0x181F, false);
    res.push(r);
    let odd = b.and_b32(v, 1u32);
    let podd = b.setp("eq.u32", odd, 1u32);
    res.push(b.op(RegClass::B32, "vote.sync.ballot.b32", vec![podd.into(), full.clone()]));
    let all = b.op(RegClass::Pred, "vote.sync.all.pred", vec![podd.into(), full.clone()]);
    let any = b.op(RegClass::Pred, "vote.sync.any.pred", vec![podd.into(), full.clone()]);
    let a1 = b.selp_u32(1u32, 0u32, all);
    let a2 = b.selp_u32(2u32, 0u32, any);
    res.push(b.or_b32(a1, a2));
    for op in
        ["redux.sync.add.u32", "redux.sync.max.u32", "redux.sync.min.s32", "redux.sync.xor.b32"]
    {
        res.push(b.op(RegClass::B32, op, vec![v.into(), full.clone()]));
    }
    // Two independent groups of two warps.
    let lo = b.setp("lt.u32", warp, 2u32);
    let id = b.selp_u32(1u32, 2u32, lo);
    b.ins("bar.sync", vec![id.into(), imm(64)]);
    // Hand-off: warp 0 writes shared memory and arrives; warp 1 waits and reads.
    let smem = b.smem_addr(0);
    let is_w0 = b.setp("eq.u32", warp, 0u32);
    let is_w1 = b.setp("eq.u32", warp, 1u32);
    let lane = b.and_b32(tid, 31u32);
    let slot = b.mad_u32(lane, 4u32, smem);
    let skip0 = b.new_label("skip_w0");
    b.bra_if(is_w0, true, &skip0);
    b.ins("st.shared.u32", vec![Operand::Reg(slot).at(0), v.into()]);
    b.ins("bar.arrive", vec![imm(3), imm(64)]);
    b.label(&skip0);
    let got = b.mov_u32(0u32);
    let skip1 = b.new_label("skip_w1");
    b.bra_if(is_w1, true, &skip1);
    b.ins("bar.sync", vec![imm(3), imm(64)]);
    let other = b.xor_b32(lane, 31u32);
    let oslot = b.mad_u32(other, 4u32, smem);
    b.ins("ld.shared.u32", vec![got.into(), Operand::Reg(oslot).at(0)]);
    b.label(&skip1);
    res.push(got);
    let out = b.ld_param_u64("out");
    let base = b.mul_u32(tid, 64u32);
    let dst = b.index_addr(out, base, 1);
    for (i, r) in res.iter().enumerate() {
        b.ins("st.global.u32", vec![Operand::Reg(dst).at(4 * i as i64), (*r).into()]);
    }
    b.ins("ret", vec![]);
    b
}
