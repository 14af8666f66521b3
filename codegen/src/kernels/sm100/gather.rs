//! GEMM1's A operand: the gather warps copy token rows (permuted → expanded → token) and
//! their scale factors with cp.async, and in 2-CTA mode the relay warp forwards the peer
//! CTA's gather completion to the leader, whose MMA reads both CTAs' shared memory.

use moegen_dsl::Sm100Operands;

use super::Sm100;
use super::prologue::Common;
use crate::kernels::pipeline::RemoteAt;
use crate::kernels::skeleton::{Needs, TokenRow, token_of_row};
use crate::ptx::instrs::CpAsync;
use crate::ptx::ops::{Alu, CacheOp, IntOp};
use crate::ptx::{BuildError, Cmp, KernelBuilder, Label, Reg, RegClass, Ty};
use moegen_dsl::abi::{Buffer, Scalar};

/// Rows of the 128-row A tile each gather thread copies a 16-byte chunk of per K stage: a
/// K stage of a row is 128 bytes, eight chunks, so eight threads share a row and a warp
/// instruction reads four whole 128-byte lines.
const ROWS_PER_THREAD: u32 = 8;
/// Rows between one thread's rows (the 128 threads cover 16 rows per pass).
const ROW_STEP: u32 = 16;

/// `d += by` on a 64-bit register.
fn add_u64_in_place(b: &mut KernelBuilder, d: Reg, by: u32) {
    b.emit_to(d, Alu::Int(IntOp::Add, Ty::U64), vec![d.into(), by.into()]);
}

/// Thread g of the gather warps copies, per K stage, 16-byte chunk g % 8 of A rows
/// g / 8 + 16·j (j < 8) into the 128B-swizzled tile (the chunk's swizzled place depends on
/// the row mod 8, which is the same for all eight rows), with the L2 fetching whole lines,
/// and row g's scale bytes of the stage into the SFA atoms (NVFP4: 16 into four; MXFP8: 4
/// into one); rows ≥ mn_limit copy nothing (zero fill).
pub(super) fn gather_role(b: &mut KernelBuilder, g: &Sm100, c: &Common) {
    let l = &g.l;
    let parties = &g.rings.parties;
    let gt = b.sub_u32(c.tid, l.gather_warp * 32);
    let x = b.ld_buffer(Buffer::Activations);
    let x_sf = b.ld_buffer(Buffer::ActivationScales);
    let p2e = b.ld_buffer(Buffer::PermutedIdxToExpandedIdx);
    let top_k = b.ld_scalar(Scalar::TopK);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let ops = l.operands;
    // A token's row: H codes of `activation_bits`; its scales: H/16 bytes (NVFP4) or one
    // per 32 of H padded to whole stages (MXFP8, Kp(H)/32: every stage's word is whole and
    // 4-byte aligned).
    let row_bytes = match ops.activation_bits() {
        4 => b.shr_u32(hidden, 1u32),
        _ => hidden,
    };
    let sf_bytes = match ops {
        Sm100Operands::Nvfp4 => b.shr_u32(hidden, 4u32),
        Sm100Operands::Mxfp8Mxfp4 => {
            let stages = b.add_u32(hidden, ops.k_stage() - 1);
            let stages = b.shr_u32(stages, ops.k_stage().trailing_zeros());
            b.shl_b32(stages, 2u32)
        }
    };
    // Declared on the A/B ring for every GEMM1; on the relay ring where there is one.
    let Some(own) = parties.gather else {
        let kernel = b.name.clone();
        return b.error(BuildError::Inconsistent { kernel, what: "gather role without a party" });
    };
    let ab = g.rings.ab.producer(b, &own, c.smem);
    let relay = match (&g.rings.relay, &parties.relay_gather) {
        (Some(r), Some(p)) => Some(r.producer_on(b, p, c.smem, ab.cursor())),
        _ => None,
    };
    let is_peer = b.setp_u32(Cmp::Ne, c.target.m_rank, 0u32);
    // This thread's chunk and first row, and their place in the 128B-swizzled tile.
    let chunk = b.and_b32(gt, 7u32);
    let r0 = b.shr_u32(gt, 3u32);
    let r0_mod8 = b.and_b32(r0, 7u32);
    let swz = b.xor_b32(chunk, r0_mod8);
    let swz = b.shl_b32(swz, 4u32);
    let a_off = b.mad_u32(r0, 128u32, swz);
    let chunk_at = b.shl_b32(chunk, 4u32);
    let chunk_bytes = b.cvt_u64_u32(chunk_at);
    // Row gt's scale bytes: lane gt % 32, quarter gt / 32 of each 512-byte atom.
    let g32 = b.and_b32(gt, 31u32);
    let gq = b.shr_u32(gt, 5u32);
    let sf_row = b.shl_b32(g32, 4u32);
    let sf_row = b.mad_u32(gq, 4u32, sf_row);
    let sf_row = b.add_u32(sf_row, g.smem.sfa);
    let src: Vec<Reg> = (0..ROWS_PER_THREAD).map(|_| b.reg(RegClass::B64)).collect();
    let size: Vec<Reg> = (0..ROWS_PER_THREAD).map(|_| b.reg(RegClass::B32)).collect();
    let (src_sf, size_sf) = (b.reg(RegClass::B64), b.reg(RegClass::B32));
    let ready = b.reg(RegClass::Pred);
    ab.try_acquire(b, ready);
    c.sched.units(b, Needs::LIMIT, &mut |b, u| {
        let first = b.add_u32(u.row0, r0);
        for j in 0..ROWS_PER_THREAD {
            let row = b.add_u32(first, ROW_STEP * j);
            let TokenRow { token, valid } = token_of_row(b, p2e, top_k, row, u.mn_limit);
            let n = b.selp_u32(16u32, 0u32, valid);
            let off = b.mul_wide_u32(token, row_bytes);
            let base = b.add_u64(x, off);
            b.emit_to(
                src[j as usize],
                Alu::Int(IntOp::Add, Ty::U64),
                vec![base.into(), chunk_bytes.into()],
            );
            b.emit_to(size[j as usize], Alu::Mov(Ty::U32), vec![n.into()]);
        }
        let row = b.add_u32(u.row0, gt);
        let TokenRow { token, valid } = token_of_row(b, p2e, top_k, row, u.mn_limit);
        let n = b.selp_u32(4u32, 0u32, valid);
        let off = b.mul_wide_u32(token, sf_bytes);
        b.emit_to(src_sf, Alu::Int(IntOp::Add, Ty::U64), vec![x_sf.into(), off.into()]);
        b.emit_to(size_sf, Alu::Mov(Ty::U32), vec![n.into()]);
        c.sched.k_loop_split(b, &mut |b, _kk, tail| {
            ab.acquire_unless(b, ready);
            let st = g.smem.stage_base(b, c.smem, ab.cursor().index);
            let a_dst = b.add_u32(st, a_off);
            // A partial last stage (`rem` of its K elements exist): chunks and scale
            // atoms past the row's end copy nothing (zero fill) instead of the next row,
            // and name the row's first chunk of the stage or its first scale word, so no
            // address past the row (past the buffer, for the last token) is ever issued.
            let in_k = tail.map(|rem| {
                let rem_bytes = match ops.activation_bits() {
                    4 => b.shr_u32(rem, 1u32),
                    _ => rem,
                };
                b.setp_u32(Cmp::Lt, chunk_at, rem_bytes)
            });
            // How far back to the stage's first chunk: 0 for a chunk inside K.
            let back = in_k.map(|p| {
                let back = b.selp_u32(0u32, chunk_at, p);
                b.cvt_u64_u32(back)
            });
            for j in 0..ROWS_PER_THREAD {
                let (s, n) = (src[j as usize], size[j as usize]);
                let (from, n) = match (in_k, back) {
                    (Some(p), Some(back)) => {
                        let first = b.op(
                            RegClass::B64,
                            Alu::Int(IntOp::Sub, Ty::U64),
                            vec![s.into(), back.into()],
                        );
                        (first, b.selp_u32(n, 0u32, p))
                    }
                    _ => (s, n),
                };
                b.push(CpAsync {
                    cache: CacheOp::CgPrefetch128,
                    dst: a_dst,
                    dst_offset: ROW_STEP * 128 * j,
                    src: from,
                    src_offset: 0,
                    bytes: 16,
                    src_bytes: n,
                });
                add_u64_in_place(b, s, 128);
            }
            let sfa = b.add_u32(st, sf_row);
            // Each K block takes the row's next `stage_scale_bytes` scale bytes, so one
            // 128-byte L2 line serves eight or more K blocks: the hint fetches it whole on the
            // first. Atom kb holds K from kb · k_stage / atoms on.
            let atoms = ops.scale_atoms_per_stage();
            let k_per_atom = ops.k_stage() / atoms;
            for kb in 0..atoms {
                let (from, offset, n) = match tail {
                    Some(rem) if kb > 0 => {
                        let atom_in = b.setp_u32(Cmp::Gt, rem, k_per_atom * kb);
                        let at = b.add_u64(src_sf, kb * 4);
                        let from = b.selp_b64(at, src_sf, atom_in);
                        (from, 0, b.selp_u32(size_sf, 0u32, atom_in))
                    }
                    _ => (src_sf, kb * 4, size_sf),
                };
                b.push(CpAsync {
                    cache: CacheOp::CaPrefetch128,
                    dst: sfa,
                    dst_offset: kb * 512,
                    src: from,
                    src_offset: offset,
                    bytes: 4,
                    src_bytes: n,
                });
            }
            add_u64_in_place(b, src_sf, ops.stage_scale_bytes());
            // The leader's gather completes straight on its full barrier; the peer's on the
            // relay ring, which the relay warp forwards.
            match &relay {
                Some(relay) => ab.commit_or(b, relay, is_peer, ()),
                None => {
                    ab.commit(b, ());
                }
            }
            ab.advance(b);
            ab.try_acquire(b, ready);
        });
    });
}

/// 2-CTA GEMM1, the peer CTA: waits for its gather on the relay ring and arrives for it on
/// the leader's A/B full barrier. Its cursor walks both rings in lockstep.
pub(super) fn relay_role(b: &mut KernelBuilder, g: &Sm100, c: &Common, end: &Label) {
    let (Some(relay), Some(party)) = (&g.rings.relay, &g.rings.parties.relay) else { return };
    let peer = b.setp_u32(Cmp::Ne, c.target.m_rank, 0u32);
    b.bra_unless(peer, end);
    let one = b.elect();
    b.bra_unless(one, end);
    let relay = relay.waiter(b, c.smem);
    let ab = g.rings.ab.producer_on(b, party, c.smem, relay.cursor());
    c.sched.units(b, Needs::NONE, &mut |b, _u| {
        c.sched.k_loop(b, &mut |b, _kk| {
            relay.wait(b);
            // The gathered bytes (cp.async: generic proxy, this CTA's shared memory, complete
            // as the wait observed) become visible to the async proxy, which the leader's MMA
            // reads them through; then the arrival at the default .release.cta (no memory
            // barrier in SASS; docs/kernels.md explains why not .release.cluster).
            b.fence_proxy_async();
            ab.commit(b, RemoteAt { rank: Some(c.target.leader_rank) });
            relay.advance(b);
        });
    });
    b.bra(end);
}
