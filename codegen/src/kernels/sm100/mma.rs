//! The MMA issuer (one elected thread of the leader CTA): per K stage, the scale factors into
//! a double-buffered set of TMEM columns (`tcgen05.cp`), four block-scaled MMAs (K = 64
//! NVFP4, K = 32 MXFP8 × MXFP4), and a commit that empties the stage; per work unit, a
//! commit that fills the accumulator.
//!
//! The shared-memory descriptors of stage 0 are built once; a stage's are those plus the
//! stage's offset in 16-byte units (shared-window addresses stay below 2^18, so the 14-bit
//! address field never carries into the next field), and the K steps within a stage are
//! immediate additions. The next stage's full barrier is peeked before this stage's MMAs
//! are issued, so its latency overlaps them.

use moegen_dsl::GemmKind;
use moegen_dsl::sm100_operands::MMAS_PER_STAGE;

use super::Sm100;
use super::prologue::Common;
use crate::kernels::pipeline::CommitAt;
use crate::kernels::skeleton::Needs;
use crate::ptx::instrs::{Tcgen05Cp, Tcgen05Mma};
use crate::ptx::ops::{Alu, CpShape, IntOp};
use crate::ptx::{
    Accumulate, Cmp, Guard, KernelBuilder, Label, Operand, Reg, RegClass, TmemAddr, Ty,
};

/// High word of the A/B descriptors: K-major SW128 (SBO 1024 B, version bit 46, swizzle 2).
const HI_AB: u32 = 0x4000_4040;
/// High word of the scale-factor descriptors: no swizzle, SBO 128 B, version bit 46.
const HI_SF: u32 = 0x0000_4008;

/// TMEM columns of one scale atom of SFA (128 rows × 4 scale bytes, 32-bit columns).
const SFA_COLS_PER_ATOM: u32 = 4;

/// One K stage's scale factors in a TMEM column set: SFA's atoms first, then SFB's (4
/// columns per 128 rows of B per atom).
struct ScaleCols {
    set: TmemAddr,
    atoms: u32,
    sfb_per_atom: u32,
}

impl ScaleCols {
    /// SFA of scale atom `atom`.
    fn sfa(&self, atom: u32) -> TmemAddr {
        self.set.col(SFA_COLS_PER_ATOM * atom)
    }
    /// SFB of scale atom `atom`, 128-row block `rows`.
    fn sfb(&self, atom: u32, rows: u32) -> TmemAddr {
        self.set.col(self.atoms * SFA_COLS_PER_ATOM + self.sfb_per_atom * atom + 4 * rows)
    }
    /// The atom MMA `j` of the stage reads: its own (NVFP4), or the stage's one (MXFP8).
    fn atom_of(&self, j: u32) -> u32 {
        j * self.atoms / MMAS_PER_STAGE
    }
}

/// A shared-memory matrix descriptor for `addr`: the address field (bits 0–13, in 16-byte
/// units) and the leading-byte offset 1 (bit 16) in the low word, `hi` in the high word.
fn smem_desc(b: &mut KernelBuilder, addr: Reg, hi: Reg) -> Reg {
    let lo = b.shr_u32(addr, 4u32);
    let lo = b.and_b32(lo, 0x3FFFu32);
    let lo = b.or_b32(lo, 0x1_0000u32);
    b.pack_b64(lo, hi)
}

/// `desc + units` (16-byte units along the address field).
fn desc_plus(b: &mut KernelBuilder, desc: Reg, units: impl Into<Operand>) -> Reg {
    b.op(RegClass::B64, Alu::Int(IntOp::Add, Ty::U64), vec![desc.into(), units.into()])
}

pub(super) fn mma_role(b: &mut KernelBuilder, g: &Sm100, c: &Common, end: &Label) {
    let l = &g.l;
    if l.cm == 2 {
        let peer = b.setp_u32(Cmp::Ne, c.target.m_rank, 0u32);
        b.bra_if(peer, end);
    }
    let one = b.elect();
    b.bra_unless(one, end);
    let group = l.cta_group();
    // One descriptor for every MMA (NVFP4), or one per MMA of a stage (MXFP8's SF ids).
    let idescs: Vec<Reg> = if (0..MMAS_PER_STAGE).all(|j| l.idesc(j) == l.idesc(0)) {
        vec![b.mov_u32(Operand::Hex(l.idesc(0)))]
    } else {
        (0..MMAS_PER_STAGE).map(|j| b.mov_u32(Operand::Hex(l.idesc(j)))).collect()
    };
    // Stage 0's descriptors (each high word written once: the mutation tests flip it).
    let hi_ab = b.mov_u32(Operand::Hex(HI_AB));
    let hi_sf = b.mov_u32(Operand::Hex(HI_SF));
    let st0 = b.add_u32(c.smem, g.smem.stages.offset);
    let at = |b: &mut KernelBuilder, off: u32| b.add_u32(st0, off);
    let a_addr = at(b, g.smem.a);
    let a0 = smem_desc(b, a_addr, hi_ab);
    let b_addr = at(b, g.smem.b);
    let b0 = smem_desc(b, b_addr, hi_ab);
    let sfa_addr = at(b, g.smem.sfa);
    let sfa0 = smem_desc(b, sfa_addr, hi_sf);
    let sfb_addr = at(b, g.smem.sfb);
    let sfb0 = smem_desc(b, sfb_addr, hi_sf);
    let stage_units = g.smem.stage_bytes / 16;
    let ab = g.rings.ab.consumer(b, &g.rings.parties.mma_ab, c.smem);
    let acc = g.rings.acc.producer(b, &g.rings.parties.mma_acc, c.smem);
    let (stage, accum) = (ab.cursor(), acc.cursor());
    // The two scale-factor column sets: this K stage's, and the other's (their sum swaps).
    let sf0 = b.add_u32(c.target.tmem, l.budget.tmem_acc_columns);
    let sf_swap =
        b.mad_u32(c.target.tmem, 2u32, 2 * l.budget.tmem_acc_columns + l.sf_cols_per_buffer());
    let sfa_t = b.mov_u32(sf0);
    let empty_mask =
        g.rings.ab.empty_multicast.map(|m| m.emit(b, c.target.m_rank, c.target.n_rank));
    let acc_mask = g.rings.acc.full_multicast.map(|m| m.emit(b, c.target.m_rank, c.target.n_rank));
    let ready = b.reg(RegClass::Pred);
    ab.try_wait(b, ready);
    c.sched.units(b, Needs::NONE, &mut |b, _u| {
        acc.acquire(b);
        b.tcgen05_fence_after();
        // Overlapping buffers share one ring slot: the buffer alternates with the phase.
        let buffer = if l.acc_overlapped() { accum.phase } else { accum.index };
        let d = b.mad_u32(buffer, l.budget.acc_buffer_stride(), c.target.tmem);
        c.sched.k_loop_split(b, &mut |b, kk, tail| {
            let acc_p = b.setp_u32(Cmp::Ne, kk, 0u32);
            let off = b.op(
                RegClass::B64,
                Alu::Int(IntOp::MulWide, Ty::U32),
                vec![stage.index.into(), stage_units.into()],
            );
            let a = desc_plus(b, a0, off);
            let bd = desc_plus(b, b0, off);
            let sfa = desc_plus(b, sfa0, off);
            let sfb = desc_plus(b, sfb0, off);
            ab.wait_unless(b, ready);
            b.tcgen05_fence_after();
            if l.kind == GemmKind::Gemm1 {
                // The gathered A tile and SFA were written by cp.async (generic proxy); the
                // tensor cores read them through the async proxy.
                b.fence_proxy_async();
            }
            let atoms = l.sf_atoms();
            let cols =
                ScaleCols { set: TmemAddr::new(sfa_t), atoms, sfb_per_atom: l.sfb_cols_per_atom() };
            let shape = CpShape::Rows32x128bWarpx4;
            // Atoms are 512 bytes (32 descriptor units); SFB's 128-row blocks follow each
            // other, `atoms` atoms each.
            for kb in 0..atoms {
                let src_desc = if kb == 0 { sfa } else { desc_plus(b, sfa, 32 * kb) };
                b.push(Tcgen05Cp { group, shape, dst: cols.sfa(kb), src_desc });
                for rb in 0..l.sfb_row_blocks() {
                    let step = 32 * (kb + atoms * rb);
                    let src_desc = if step == 0 { sfb } else { desc_plus(b, sfb, step) };
                    b.push(Tcgen05Cp { group, shape, dst: cols.sfb(kb, rb), src_desc });
                }
            }
            let mma_k = l.operands.mma_k();
            for j in 0..MMAS_PER_STAGE {
                let (a_desc, b_desc) = if j == 0 {
                    (a, bd)
                } else {
                    (desc_plus(b, a, 2 * j), desc_plus(b, bd, 2 * j))
                };
                // A partial last stage (K a multiple of 64, not of the stage) issues the MMAs
                // of its K only: the zero-filled rest never meets the accumulator.
                let guard = match tail {
                    Some(rem) if j > 0 => Some(Guard::when(b.setp_u32(Cmp::Gt, rem, mma_k * j))),
                    _ => None,
                };
                let atom = cols.atom_of(j);
                let mma = Tcgen05Mma {
                    group,
                    kind: l.mma_kind(),
                    d_tmem: TmemAddr::new(d),
                    a_desc,
                    b_desc,
                    idesc: idescs[(j as usize).min(idescs.len() - 1)],
                    scale_a_tmem: cols.sfa(atom),
                    scale_b_tmem: cols.sfb(atom, 0),
                    enable_input_d: if j == 0 {
                        Accumulate::When(acc_p)
                    } else {
                        Accumulate::Always
                    },
                };
                match guard {
                    Some(g) => b.push_if(g, mma),
                    None => b.push(mma),
                }
            }
            ab.release(b, CommitAt { group, mask: empty_mask });
            b.emit(Alu::Int(IntOp::Sub, Ty::U32), vec![sfa_t.into(), sf_swap.into(), sfa_t.into()]);
            ab.advance(b);
            ab.try_wait(b, ready);
        });
        acc.commit(b, CommitAt { group, mask: acc_mask });
        acc.advance(b);
    });
    // Tail: no arrival (remote, from the peer's epilogue) may be in flight toward this CTA
    // when it exits.
    acc.drain(b);
    b.bra(end);
}
