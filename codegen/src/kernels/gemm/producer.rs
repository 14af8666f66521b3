//! The TMA producer: per K stage, B and SFB (expert = the L coordinate), and for GEMM2 also A
//! and SFA, which the N-rank-0 CTA of a cluster-N pair multicasts to both.

use moegen_dsl::GemmKind;

use super::Gemm;
use super::schedule::{Common, k_loop, schedule};
use crate::kernels::pipeline::Signal;
use crate::ptx::ops::Bulk;
use crate::ptx::{Cmp, CtaGroup, KernelBuilder, Label, Operand, Reg};

/// One TMA tile load: a `dims`-D box at `coords` of `map` into `dst`, completing on `bar`.
struct TmaLoad {
    dims: u8,
    dst: Reg,
    map: Reg,
    coords: Vec<Operand>,
    bar: Reg,
    multicast: Option<Reg>,
}

fn tma_load(b: &mut KernelBuilder, g: &Gemm, t: TmaLoad) {
    let op = Bulk::TensorLoad {
        dims: t.dims,
        multicast: t.multicast.is_some(),
        cta_group: (g.l.cm == 2).then_some(CtaGroup::Two),
    };
    let mut ops =
        vec![Operand::addr(t.dst), Operand::tensor(t.map, t.coords), Operand::addr(t.bar)];
    ops.extend(t.multicast.map(Operand::from));
    b.emit(op, ops);
}

pub(super) fn producer_role(b: &mut KernelBuilder, g: &Gemm, c: &Common, end: &Label) {
    let (l, ab) = (&g.l, &g.rings.ab);
    let one = b.elect();
    b.bra_unless(one, end);
    let (map_a, map_sfa) = if l.kind == GemmKind::Gemm2 {
        (Some(b.param_generic_addr("tmap_a")), Some(b.param_generic_addr("tmap_sfa")))
    } else {
        (None, None)
    };
    let map_b = b.param_generic_addr("tmap_b");
    let map_sfb = b.param_generic_addr("tmap_sfb");
    let cur = ab.cursor(b);
    let is_leader = b.setp_u32(Cmp::Eq, c.m_rank, 0u32);
    let a_issuer = b.setp_u32(Cmp::Eq, c.n_rank, 0u32);
    let mask_a = ab.full_multicast.map(|m| m.emit(b, c.m_rank, c.n_rank));
    schedule(b, g, c, &mut |b, u| {
        k_loop(b, c, &mut |b, kk| {
            ab.acquire(b, c.smem, cur);
            let bytes = l.budget.tma_tx_bytes_per_stage;
            let full = ab.commit(b, c.smem, cur, Signal::ExpectTx { bytes, only: Some(is_leader) });
            // 2-CTA: both CTAs' bytes complete on the leader's barrier (its shared::cluster
            // address; CUTLASS gets the same address by clearing the peer bit 24).
            let bar = if l.cm == 2 { ab.full_in(b, full, c.leader_rank) } else { full };
            let st = g.smem.stage_base(b, c.smem, cur.index);
            let kc = b.shl_b32(kk, 8u32);
            let kq = b.shl_b32(kk, 2u32);
            if let (Some(ma), Some(msfa)) = (map_a, map_sfa) {
                let skip = b.new_label("skip_a");
                if l.cn == 2 {
                    b.bra_unless(a_issuer, &skip);
                }
                let rb = b.shr_u32(u.row0, 7u32);
                let coords = vec![kc.into(), u.row0.into()];
                let a = TmaLoad { dims: 2, dst: st, map: ma, coords, bar, multicast: mask_a };
                tma_load(b, g, a);
                let sfa = b.add_u32(st, g.smem.sfa);
                let coords = vec![0u32.into(), kq.into(), rb.into()];
                let sfa = TmaLoad { dims: 3, dst: sfa, map: msfa, coords, bar, multicast: mask_a };
                tma_load(b, g, sfa);
                b.label(&skip);
            }
            let dst_b = b.add_u32(st, g.smem.b);
            let nrow = b.mul_u32(u.n, l.n);
            let nrow = b.mad_u32(c.m_rank, l.n / l.cm, nrow);
            let coords = vec![kc.into(), nrow.into(), u.expert.into()];
            tma_load(
                b,
                g,
                TmaLoad { dims: 3, dst: dst_b, map: map_b, coords, bar, multicast: None },
            );
            let dst_sfb = b.add_u32(st, g.smem.sfb);
            let nblk = b.mul_u32(u.n, l.sfb_row_blocks());
            let coords = vec![0u32.into(), kq.into(), nblk.into(), u.expert.into()];
            let sfb = TmaLoad { dims: 4, dst: dst_sfb, map: map_sfb, coords, bar, multicast: None };
            tma_load(b, g, sfb);
            ab.advance(b, cur);
        });
    });
}
