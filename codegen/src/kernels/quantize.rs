//! Activation quantization: bf16 `[tokens, H]` → NVFP4 with linear per-token scales, the
//! global scale read from device memory (so a CUDA graph can change it).

use super::epilogue_math::quantize16_with;
use super::sync::grid_stride;
use moegen_dsl::abi::launch::QUANTIZE_THREADS;
use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::abi::{SimtFamily, SimtTarget};

use crate::ptx::ops::{Access, Memory};
use crate::ptx::{KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

const THREADS: u32 = QUANTIZE_THREADS;

/// Block `i`'s 16 bf16 values of `x` (two 16-byte loads), widened to f32 registers.
pub(super) fn load_bf16_block(b: &mut KernelBuilder, x: Reg, i: Reg) -> Vec<Reg> {
    let src = b.index_addr(x, i, 32);
    let mut vals = Vec::with_capacity(16);
    for half in 0..2 {
        let w = b.regs(RegClass::B32, 4);
        b.emit(
            Memory::Ld(Access::vector(Space::Global, VecWidth::V4, Ty::B32)),
            vec![Operand::regs(&w), Operand::Reg(src).at(16 * half)],
        );
        for word in w {
            // bf16 → f32 is exact: the bf16 bits are the top half of the f32.
            let lo = b.shl_b32(word, 16u32);
            let hi = b.and_b32(word, Operand::Hex(0xFFFF_0000));
            vals.push(b.mov_b32(RegClass::F32, lo));
            vals.push(b.mov_b32(RegClass::F32, hi));
        }
    }
    vals
}

/// One thread per 16-element block, grid-stride.
pub fn build(target: SimtTarget) -> KernelBuilder {
    let mut b = super::moe_sort::simt_builder(SimtFamily::QuantizeNvfp4, target);
    let x = b.ld_buffer(Buffer::ActivationsBf16);
    let out = b.ld_buffer(Buffer::Activations);
    let out_sf = b.ld_buffer(Buffer::ActivationScales);
    let gp = b.ld_buffer(Buffer::ActivationGlobalScale);
    let g = b.ld_global(Ty::F32, RegClass::F32, gp);
    let tokens = b.ld_scalar(Scalar::Tokens);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let per_row = b.shr_u32(hidden, 4u32);
    let total = b.mul_u32(tokens, per_row);
    grid_stride(&mut b, total, THREADS, "block", &mut |b, i| {
        let vals = load_bf16_block(b, x, i);
        let Ok(vals) = <[Reg; 16]>::try_from(vals) else { return };
        let ([w0, w1], code) = quantize16_with(b, &vals, g, target.has_e2m1_cvt());
        let dst = b.index_addr(out, i, 8);
        b.emit(
            Memory::St(Access::vector(Space::Global, VecWidth::V2, Ty::B32)),
            vec![Operand::addr(dst), Operand::regs(&[w0, w1])],
        );
        let sdst = b.index_addr(out_sf, i, 1);
        let byte = b.cvt_u16_u32(code);
        b.st_global(Ty::U8, sdst, byte);
    });
    // Launched programmatically: it read only the layer's inputs, so it ran beside the
    // routing sort; it exits only once the sort has, so the GEMM that waits on it also waits
    // on the sort (docs/kernels.md, "Programmatic launches").
    b.pdl_wait();
    b.ret();
    b
}
