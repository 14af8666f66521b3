//! The TMA producer: per K stage, B and SFB (expert = the L coordinate), and for GEMM2 also A
//! and SFA, which the N-rank-0 CTA of a cluster-N pair multicasts to both. In a 2-CTA pair
//! each CTA loads half of the stage's SFB and multicasts it to both (each needs all N rows'
//! scales): its own 128-row block at N = 256, two of the four K atoms at N = 128 (NVFP4; an
//! MXFP8 stage's single atom per row block is loaded by each CTA for itself at N = 128).

use moegen_dsl::GemmKind;
use moegen_dsl::abi::TensorMap;

use super::Sm100;
use super::prologue::Common;
use crate::kernels::pipeline::{CtaMask, Tx};
use crate::kernels::skeleton::Needs;
use crate::ptx::instrs;
use crate::ptx::{Cmp, CtaGroup, Guard, KernelBuilder, Operand, Reg};

/// One TMA tile load: the box at `coords` of `map` into `dst`, completing on `bar`.
struct TmaLoad {
    dst: Reg,
    map: Reg,
    coords: Vec<Operand>,
    bar: Reg,
    multicast: Option<Reg>,
}

fn tma_load(b: &mut KernelBuilder, g: &Sm100, one: Reg, t: TmaLoad) {
    b.push_if(
        Guard::when(one),
        instrs::TmaLoad {
            dst: t.dst,
            map: t.map,
            coords: t.coords,
            bar: t.bar,
            multicast: t.multicast,
            cta_group: (g.l.cm == 2).then_some(CtaGroup::Two),
        },
    );
}

pub(super) fn producer_role(b: &mut KernelBuilder, g: &Sm100, c: &Common) {
    let l = &g.l;
    // The whole warp runs the loop and one elected lane issues the copies and the arrival:
    // the loop's state stays warp-uniform, so ptxas keeps it in uniform registers (no
    // R2UR of each copy's operands per K block: 38–53 SASS per K block instead of 43–61).
    let one = b.elect();
    let (map_a, map_sfa) = if l.kind == GemmKind::Gemm2 {
        (
            Some(b.tensor_map_addr(TensorMap::Gemm1OutputLoad)),
            Some(b.tensor_map_addr(TensorMap::Gemm1OutputScales)),
        )
    } else {
        (None, None)
    };
    let (mb, msfb) = match l.kind {
        GemmKind::Gemm1 => (TensorMap::W1, TensorMap::W1Scales),
        GemmKind::Gemm2 => (TensorMap::W2, TensorMap::W2Scales),
    };
    let map_b = b.tensor_map_addr(mb);
    let map_sfb = b.tensor_map_addr(msfb);
    // The descriptors reach the TMA unit's cache while the first barrier waits run.
    for m in [map_a, map_sfa, Some(map_b), Some(map_sfb)].into_iter().flatten() {
        b.prefetch_tensormap(m);
    }
    let ab = g.rings.ab.producer(b, &g.rings.parties.tma, c.smem);
    let is_leader = b.setp_u32(Cmp::Eq, c.target.m_rank, 0u32);
    let is_leader = b.and_pred(is_leader, one);
    let a_issuer = b.setp_u32(Cmp::Eq, c.target.n_rank, 0u32);
    let mask_a = g.rings.ab.full_multicast.map(|m| m.emit(b, c.target.m_rank, c.target.n_rank));
    // This CTA's half of SFB in a pair: its row block (N = 256) or K atoms 2m, 2m+1 (N = 128),
    // landing at the same offset in both CTAs. A stage of one atom per row block (MXFP8) at
    // N ≤ 128 has nothing to split: each CTA of the pair loads it for itself.
    let halves_by_block = l.sfb_row_blocks() > 1;
    let sfb_split = (l.cm == 2 && (halves_by_block || l.sf_atoms() > 1))
        .then(|| CtaMask::Pair.emit(b, c.target.m_rank, c.target.n_rank));
    let sfb_half_bytes = l.budget.sfb_stage_bytes / 2;
    let sfb_dst_off = match sfb_split {
        Some(_) => b.mad_u32(c.target.m_rank, sfb_half_bytes, g.smem.sfb),
        None => b.mov_u32(g.smem.sfb),
    };
    let ready = b.reg(crate::ptx::RegClass::Pred);
    ab.try_acquire(b, ready);
    c.sched.units(b, Needs::EXPERT, &mut |b, u| {
        // Per tile: the coordinates that do not change along K.
        let rb = b.shr_u32(u.row0, 7u32);
        let nrow = b.mul_u32(u.n, l.n);
        let nrow = b.mad_u32(c.target.m_rank, l.n / l.cm, nrow);
        let nblk = b.mul_u32(u.n, l.sfb_row_blocks());
        let (nblk, atom0) = match sfb_split {
            Some(_) if halves_by_block => (b.add_u32(nblk, c.target.m_rank), b.mov_u32(0u32)),
            Some(_) => (nblk, b.shl_b32(c.target.m_rank, 1u32)),
            None => (nblk, b.mov_u32(0u32)),
        };
        // Element and scale-atom coordinates of K stage kk.
        let k_shift = l.operands.k_stage().trailing_zeros();
        let atom_shift = l.sf_atoms().trailing_zeros();
        c.sched.k_loop(b, &mut |b, kk| {
            let kc = b.shl_b32(kk, k_shift);
            let kq = if atom_shift == 0 { kk } else { b.shl_b32(kk, atom_shift) };
            ab.acquire_unless(b, ready);
            let bytes = l.budget.tma_tx_bytes_per_stage;
            let full = ab.commit(b, Tx { bytes: bytes.into(), only: Some(is_leader) });
            // 2-CTA: both CTAs' bytes complete on the leader's barrier (its shared::cluster
            // address; CUTLASS gets the same address by clearing the peer bit 24).
            let bar = if l.cm == 2 { ab.full_in(b, full, c.target.leader_rank) } else { full };
            let st = g.smem.stage_base(b, c.smem, ab.cursor().index);
            if let (Some(ma), Some(msfa)) = (map_a, map_sfa) {
                let skip = b.new_label("skip_a");
                if l.cn == 2 {
                    b.bra_unless(a_issuer, &skip);
                }
                let coords = vec![kc.into(), u.row0.into()];
                let a = TmaLoad { dst: st, map: ma, coords, bar, multicast: mask_a };
                tma_load(b, g, one, a);
                let sfa = b.add_u32(st, g.smem.sfa);
                let coords = vec![0u32.into(), kq.into(), rb.into()];
                let sfa = TmaLoad { dst: sfa, map: msfa, coords, bar, multicast: mask_a };
                tma_load(b, g, one, sfa);
                b.label(&skip);
            }
            let dst_b = b.add_u32(st, g.smem.b);
            let coords = vec![kc.into(), nrow.into(), u.expert.into()];
            tma_load(b, g, one, TmaLoad { dst: dst_b, map: map_b, coords, bar, multicast: None });
            let dst_sfb = b.add_u32(st, sfb_dst_off);
            let katom =
                if sfb_split.is_some() && !halves_by_block { b.add_u32(kq, atom0) } else { kq };
            let coords = vec![0u32.into(), katom.into(), nblk.into(), u.expert.into()];
            let sfb = TmaLoad { dst: dst_sfb, map: map_sfb, coords, bar, multicast: sfb_split };
            tma_load(b, g, one, sfb);
            ab.advance(b);
            ab.try_acquire(b, ready);
        });
    });
    // Tail: no commit (possibly multicast from a peer's MMA) may be in flight toward this
    // CTA when it exits.
    ab.drain(b);
}
