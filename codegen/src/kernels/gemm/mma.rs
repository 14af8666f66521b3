//! The MMA issuer (one elected thread of the leader CTA): per K stage, the scale factors into
//! a double-buffered set of TMEM columns (`tcgen05.cp`), four block-scaled MMAs of K = 64,
//! and a commit that empties the stage; per work unit, a commit that fills the accumulator.

use moegen_dsl::GemmKind;

use super::Gemm;
use super::schedule::{Common, k_loop, schedule};
use crate::kernels::pipeline::Signal;
use crate::ptx::ops::{CpShape, MmaKind, Tcgen05};
use crate::ptx::{Cmp, KernelBuilder, Label, Operand, Reg};

/// A shared-memory matrix descriptor: the address field (bits 0–13, in 16-byte units) and
/// the leading-byte offset 1 (bit 16) in the low word, `step` 16-byte units further along K,
/// with the high word `hi` (stride, version, swizzle).
fn smem_desc(b: &mut KernelBuilder, addr: Reg, step: u32, hi: Reg) -> Reg {
    let lo = b.shr_u32(addr, 4u32);
    let lo = b.and_b32(lo, 0x3FFFu32);
    let lo = b.or_b32(lo, 0x1_0000u32);
    let lo = if step > 0 { b.add_u32(lo, step) } else { lo };
    b.pack_b64(lo, hi)
}

pub(super) fn mma_role(b: &mut KernelBuilder, g: &Gemm, c: &Common, end: &Label) {
    let (l, ab, acc) = (&g.l, &g.rings.ab, &g.rings.acc);
    if l.cm == 2 {
        let peer = b.setp_u32(Cmp::Ne, c.m_rank, 0u32);
        b.bra_if(peer, end);
    }
    let one = b.elect();
    b.bra_unless(one, end);
    let group = l.cta_group();
    let idesc = b.mov_u32(Operand::Hex(l.idesc()));
    // Shared-memory descriptor high words: A/B K-major SW128 (SBO 1024 B, version bit 46,
    // swizzle 2); scale atoms no swizzle (SBO 128 B).
    let hi_ab = b.mov_u32(Operand::Hex(0x4000_4040));
    let hi_sf = b.mov_u32(Operand::Hex(0x0000_4008));
    let stage = ab.cursor(b);
    let accum = acc.cursor(b);
    let sfbuf = b.mov_u32(0u32);
    let acc_cols = l.budget.tmem_acc_columns;
    let sf_per_buf = l.sf_cols_per_buffer();
    let empty_mask = ab.empty_multicast.map(|m| m.emit(b, c.m_rank, c.n_rank));
    let acc_mask = acc.full_multicast.map(|m| m.emit(b, c.m_rank, c.n_rank));
    schedule(b, g, c, &mut |b, _u| {
        acc.acquire(b, c.smem, accum);
        b.tcgen05_fence_after();
        let d = b.mad_u32(accum.index, l.n, c.tmem);
        let accumulate = b.mov_u32(0u32);
        k_loop(b, c, &mut |b, _kk| {
            ab.wait(b, c.smem, stage);
            b.tcgen05_fence_after();
            if l.kind == GemmKind::Gemm1 {
                // The gathered A tile was written by cp.async, a generic-proxy write.
                b.fence_proxy_async();
            }
            let st = g.smem.stage_base(b, c.smem, stage.index);
            let sf_t = b.mad_u32(sfbuf, sf_per_buf, acc_cols);
            let sfa_t = b.add_u32(c.tmem, sf_t);
            let sfb_t = b.add_u32(sfa_t, 16u32);
            let sfa_s = b.add_u32(st, g.smem.sfa);
            let sfb_s = b.add_u32(st, g.smem.sfb);
            let cp = Tcgen05::Cp(group, CpShape::Rows32x128bWarpx4);
            for kb in 0..4u32 {
                let dsc = smem_desc(b, sfa_s, 32 * kb, hi_sf);
                b.emit(cp, vec![Operand::Reg(sfa_t).at(i64::from(4 * kb)), dsc.into()]);
                for rb in 0..l.sfb_row_blocks() {
                    let dsc = smem_desc(b, sfb_s, 32 * kb + 128 * rb, hi_sf);
                    let col = l.sfb_cols_per_mma() * kb + 4 * rb;
                    b.emit(cp, vec![Operand::Reg(sfb_t).at(i64::from(col)), dsc.into()]);
                }
            }
            let b_s = b.add_u32(st, g.smem.b);
            let acc_p = b.setp_u32(Cmp::Ne, accumulate, 0u32);
            for j in 0..4u32 {
                let ad = smem_desc(b, st, 2 * j, hi_ab);
                let bd = smem_desc(b, b_s, 2 * j, hi_ab);
                let enable: Operand = if j == 0 { acc_p.into() } else { 1u32.into() };
                b.emit(
                    Tcgen05::Mma(group, MmaKind::Mxf4Nvf4Block16),
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
            ab.release(b, c.smem, stage, Signal::Commit { group, mask: empty_mask });
            b.xor_assign_b32(sfbuf, 1u32);
            ab.advance(b, stage);
        });
        acc.commit(b, c.smem, accum, Signal::Commit { group, mask: acc_mask });
        acc.advance(b, accum);
    });
    b.bra(end);
}
