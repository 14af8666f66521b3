//! Hopper's A4 activation step: bf16 `[tokens, H]` → NVFP4 (the global scale read from
//! device memory, as `quantize_nvfp4`) → bf16 again, each value stored as the exact bf16 of
//! e2m1 · scale. The GEMMs then multiply these bf16 values, so the layer reproduces the
//! Blackwell pipeline's NVFP4 activations; the global scale stays in α1.

use moegen_dsl::abi::launch::QUANTIZE_THREADS;
use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::abi::{SimtFamily, SimtTarget};

use super::epilogue_math::{BlockScale, abs_max, e2m1_code_sw, e2m1_times, nvfp4_block_scale};
use super::quantize::load_bf16_block;
use super::sync::grid_stride;
use crate::ptx::ops::{Access, Memory};
use crate::ptx::{KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

const THREADS: u32 = QUANTIZE_THREADS;

/// One thread per 16-element block, grid-stride: the block's scale exactly as
/// `quantize16`, each value's E2M1 code by comparisons (`e2m1_code_sw`, as the sm_90a
/// quantizer), then code · scale in f32 (exact) packed to bf16 pairs (exact).
pub fn build(target: SimtTarget) -> KernelBuilder {
    let mut b = super::moe_sort::simt_builder(SimtFamily::QdqNvfp4, target);
    let x = b.ld_buffer(Buffer::ActivationsBf16);
    let out = b.ld_buffer(Buffer::ActivationsDequantized);
    let gp = b.ld_buffer(Buffer::ActivationGlobalScale);
    let g = b.ld_global(Ty::F32, RegClass::F32, gp);
    let tokens = b.ld_scalar(Scalar::Tokens);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let per_row = b.shr_u32(hidden, 4u32);
    let total = b.mul_u32(tokens, per_row);
    grid_stride(&mut b, total, THREADS, "block", &mut |b, i| {
        let vals = load_bf16_block(b, x, i);
        let amax = abs_max(b, &vals);
        let BlockScale { sfd, q, .. } = nvfp4_block_scale(b, amax, g);
        let deq: Vec<Reg> = vals
            .iter()
            .map(|&v| {
                let scaled = b.mul_f32(v, q);
                let code = e2m1_code_sw(b, scaled);
                e2m1_times(b, code, sfd)
            })
            .collect();
        let words: Vec<Reg> = deq
            .chunks_exact(2)
            .filter_map(|p| match *p {
                [even, odd] => Some(b.cvt_bf16x2(odd, even)),
                _ => None,
            })
            .collect();
        let dst = b.index_addr(out, i, 32);
        for (half, quad) in (0i64..).zip(words.chunks(4)) {
            b.emit(
                Memory::St(Access::vector(Space::Global, VecWidth::V4, Ty::B32)),
                vec![Operand::Reg(dst).at(16 * half), Operand::regs(quad)],
            );
        }
    });
    // Launched programmatically: it read only the layer's inputs, so it ran beside the
    // routing sort; it exits only once the sort has, so the GEMM that waits on it also waits
    // on the sort (docs/kernels.md, "Programmatic launches").
    b.pdl_wait();
    b.ret();
    b
}
