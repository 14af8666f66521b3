//! The differential corpus's wgmma kernel (sm_90a, one warpgroup): one 64 × 64 NVFP4 weight
//! tile in the Hopper fragment layout (`abi::sm90_weights`) is dequantized exactly as the
//! GEMM consumers do (`sm90::dequant_step`) and multiplied by a 32-token bf16 tile copied
//! into shared memory with the 128B swizzle, by four `wgmma.m64n32k16` through the GMMA
//! descriptor the GEMMs use (advanced 32 bytes per K16 step), the first with scale-d false
//! over accumulators preset to NaN. Each thread dumps its raw accumulator registers and its
//! sixteen A registers, so one run on an H200 shows (a) the A fragment layout the weight
//! layout assumes, (b) the accumulator layout the epilogues assume, (c) the descriptor
//! encoding and swizzle, and (d) that `mul.rn.bf16x2` keeps the bf16 subnormals the
//! dequantization passes through.
//!
//! Its parameters and launch facts are the ABI's (`CorpusKernel::Wgmma`,
//! `abi::signature::CORPUS_WGMMA`); it is part of the corpus group of the default set.

use moegen_dsl::abi::{CorpusKernel, KernelId, params};

use crate::kernels::sm90::{
    act_desc, dequant_step, issue_step, nvfp4_row_scales, splat, wait_groups,
};
use crate::ptx::ops::memory::st;
use crate::ptx::ops::{Access, Memory};
use crate::ptx::{
    Accumulate, Cmp, KernelBuilder, Operand, Reg, RegClass, SReg, Space, Ty, VecWidth,
};
use moegen_dsl::abi::WeightFormat;

/// Threads: one warpgroup.
pub const THREADS: u32 = 128;
/// Tokens: the wgmma N.
pub const TOKENS: u32 = 32;
/// Dynamic shared memory: the 32 × 128-byte activation tile.
pub const SMEM_BYTES: u32 = TOKENS * 128;
/// Bytes of `w`: the fragment tile, then its scale tile.
pub const W_BYTES: usize = 2048 + 256;
/// f32 accumulators per thread.
pub const ACC_PER_THREAD: usize = TOKENS as usize / 2;
/// A registers per thread (four per K16 step).
pub const A_PER_THREAD: usize = 16;

/// Builds the kernel.
pub fn build() -> KernelBuilder {
    let id = KernelId::Corpus(CorpusKernel::Wgmma);
    let mut b = KernelBuilder::new(id.name());
    b.declare(params(&id));
    let t = b.sreg(SReg::TidX);
    let smem = b.smem_addr(0);
    let w = b.ld_arg_u64(0);
    let x = b.ld_arg_u64(1);
    // The activation tile, 128B-swizzled: chunk j of row r at chunk j ^ (r % 8).
    for half in 0..2u32 {
        let c = b.add_u32(t, half * THREADS);
        let row = b.shr_u32(c, 3u32);
        let ch = b.and_b32(c, 7u32);
        let src = b.index_addr(x, c, 16);
        let v = b.regs(RegClass::B32, 4);
        b.emit(
            Memory::Ld(Access::vector(Space::Global, VecWidth::V4, Ty::B32)),
            vec![Operand::regs(&v), Operand::addr(src)],
        );
        let swz = b.and_b32(row, 7u32);
        let sw = b.xor_b32(ch, swz);
        let dst = b.mad_u32(row, 128u32, smem);
        let dst = b.mad_u32(sw, 16u32, dst);
        b.emit(
            Memory::St(Access::vector(Space::Shared, VecWidth::V4, Ty::B32)),
            vec![Operand::addr(dst), Operand::regs(&v)],
        );
    }
    // Generic-proxy writes, read by the wgmmas through the async proxy.
    b.fence_proxy_async();
    b.bar_sync(0u32);
    // This thread's fragment words and the scale words of rows r0 and r0 + 8.
    let words: Vec<Reg> = (0..4u32)
        .map(|j| {
            let i = b.add_u32(t, j * THREADS);
            let a = b.index_addr(w, i, 4);
            b.ld_global(Ty::U32, RegClass::B32, a)
        })
        .collect();
    let warp = b.shr_u32(t, 5u32);
    let lane = b.and_b32(t, 31u32);
    let quad = b.shr_u32(lane, 2u32);
    let r0 = b.mad_u32(warp, 16u32, quad);
    let scales: Vec<[Reg; 4]> = [0u32, 8]
        .iter()
        .map(|&dr| {
            let row = b.add_u32(r0, dr);
            let i = b.mad_u32(row, 4u32, 2048u32);
            let a = b.index_addr(w, i, 1);
            let s = b.ld_global(Ty::U32, RegClass::B32, a);
            nvfp4_row_scales(&mut b, s)
        })
        .collect();
    let acc = b.regs(RegClass::F32, TOKENS / 2);
    for &r in &acc {
        b.assign_f32(r, f32::NAN);
    }
    // False on every thread, but not a constant ptxas could fold.
    let wg = b.shr_u32(t, 7u32);
    let never = b.setp_u32(Cmp::Ne, wg, 0u32);
    let a_out = b.ld_arg_u64(3);
    let a_row = b.mul_u32(t, (A_PER_THREAD * 4) as u32);
    let a_row = b.cvt_u64_u32(a_row);
    let a_row = b.add_u64(a_out, a_row);
    let accs = [acc.clone()];
    for (j, &word) in words.iter().enumerate() {
        let j = j as u32;
        let s_lo = splat(&mut b, scales[0][j as usize]);
        let s_hi = splat(&mut b, scales[1][j as usize]);
        let frag = dequant_step(&mut b, WeightFormat::Nvfp4, word, s_lo, s_hi);
        for (k, &r) in frag.iter().enumerate() {
            b.emit(
                st(Space::Global, Ty::B32),
                vec![Operand::Reg(a_row).at(i64::from(16 * j) + 4 * k as i64), r.into()],
            );
        }
        let desc = act_desc(&mut b, smem, j);
        let scale_d = if j == 0 { Accumulate::When(never) } else { Accumulate::Always };
        issue_step(&mut b, TOKENS, &accs, &[frag], desc, scale_d);
    }
    wait_groups(&mut b, 0);
    let out = b.ld_arg_u64(2);
    let o_row = b.mul_u32(t, (ACC_PER_THREAD * 4) as u32);
    let o_row = b.cvt_u64_u32(o_row);
    let o_row = b.add_u64(out, o_row);
    for (e, &r) in acc.iter().enumerate() {
        b.emit(st(Space::Global, Ty::F32), vec![Operand::Reg(o_row).at(4 * e as i64), r.into()]);
    }
    b.ret();
    b
}
