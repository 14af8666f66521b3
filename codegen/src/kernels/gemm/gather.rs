//! GEMM1's A operand: the gather warps copy token rows (permuted → expanded → token) and
//! their scale factors with cp.async, and in 2-CTA mode the relay warp forwards the peer
//! CTA's gather completion to the leader, whose MMA reads both CTAs' shared memory.

use super::Gemm;
use super::schedule::{Common, k_loop, schedule};
use crate::kernels::pipeline::{Side, Signal};
use crate::ptx::ops::memory::ld;
use crate::ptx::ops::{CacheOp, Memory};
use crate::ptx::{Cmp, Guard, KernelBuilder, Label, Operand, Space, Ty};

/// Thread g of the gather warps copies A row g (8 × 16 B into the 128B-swizzled tile) and
/// its 16 scale bytes per K stage; rows ≥ mn_limit copy nothing (src-size 0, zero fill).
pub(super) fn gather_role(b: &mut KernelBuilder, g: &Gemm, c: &Common) {
    let (l, ab) = (&g.l, &g.rings.ab);
    let gt = b.sub_u32(c.tid, l.gather_warp * 32);
    let x = b.ld_param_u64("x");
    let x_sf = b.ld_param_u64("x_sf");
    let p2e = b.ld_param_u64("permuted_idx_to_expanded_idx");
    let top_k = b.ld_param_u32("top_k");
    let hidden = b.ld_param_u32("hidden");
    let row_bytes = b.shr_u32(hidden, 1u32);
    let sf_bytes = b.shr_u32(hidden, 4u32);
    let cur = ab.cursor(b);
    let is_peer = b.setp_u32(Cmp::Ne, c.m_rank, 0u32);
    // This thread's place in the 128B-swizzled A tile and in the SFA atoms.
    let a_row = b.shl_b32(gt, 7u32);
    let xor = b.and_b32(gt, 7u32);
    let g32 = b.and_b32(gt, 31u32);
    let gq = b.shr_u32(gt, 5u32);
    let sf_row = b.shl_b32(g32, 4u32);
    let sf_row = b.mad_u32(gq, 4u32, sf_row);
    schedule(b, g, c, &mut |b, u| {
        let row = b.add_u32(u.row0, gt);
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
            ab.acquire(b, c.smem, cur);
            let st = g.smem.stage_base(b, c.smem, cur.index);
            let a_dst = b.add_u32(st, a_row);
            let koff = b.shl_b32(kk, 7u32);
            let src = b.cvt_u64_u32(koff);
            let src = b.add_u64(src_row, src);
            for ch in 0..8u32 {
                let sw = b.xor_b32(xor, ch);
                let dst = b.mad_u32(sw, 16u32, a_dst);
                let from = Operand::Reg(src).at(i64::from(ch * 16));
                b.emit(
                    Memory::CpAsync(CacheOp::Cg),
                    vec![Operand::addr(dst), from, 16u32.into(), n16.into()],
                );
            }
            let sfa = b.add_u32(st, g.smem.sfa);
            let sfa = b.add_u32(sfa, sf_row);
            let sk = b.shl_b32(kk, 4u32);
            let ssrc = b.cvt_u64_u32(sk);
            let ssrc = b.add_u64(src_sf, ssrc);
            for kb in 0..4u32 {
                let dst = b.add_u32(sfa, kb * 512);
                let from = Operand::Reg(ssrc).at(i64::from(kb * 4));
                b.emit(
                    Memory::CpAsync(CacheOp::Ca),
                    vec![Operand::addr(dst), from, 4u32.into(), n4.into()],
                );
            }
            // The leader's gather completes straight on its full barrier; the peer's on the
            // relay ring, which the relay warp forwards.
            let full = ab.full_at(b, c.smem, cur);
            let target = match &g.rings.relay {
                Some(relay) => {
                    let local = relay.full_at(b, c.smem, cur);
                    b.selp_u32(local, full, is_peer)
                }
                None => full,
            };
            ab.signal(b, Side::Full, target, Signal::CpAsyncNoinc);
            ab.advance(b, cur);
        });
    });
}

/// 2-CTA GEMM1, the peer CTA: waits for its gather on the relay ring and arrives for it on
/// the leader's A/B full barrier. Its cursor walks both rings in lockstep.
pub(super) fn relay_role(b: &mut KernelBuilder, g: &Gemm, c: &Common, end: &Label) {
    let Some(relay) = &g.rings.relay else { return };
    let ab = &g.rings.ab;
    let peer = b.setp_u32(Cmp::Ne, c.m_rank, 0u32);
    b.bra_unless(peer, end);
    let one = b.elect();
    b.bra_unless(one, end);
    let cur = relay.cursor(b);
    schedule(b, g, c, &mut |b, _u| {
        k_loop(b, c, &mut |b, _kk| {
            relay.wait(b, c.smem, cur);
            // Make the gathered bytes visible to the tensor cores' async proxy before the
            // leader's MMA reads them.
            b.fence_proxy_async();
            ab.commit(b, c.smem, cur, Signal::Remote { rank: c.leader_rank });
            relay.advance(b, cur);
        });
    });
    b.bra(end);
}
