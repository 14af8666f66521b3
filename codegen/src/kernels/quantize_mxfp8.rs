//! Activation quantization for the SM100 MXFP8 × MXFP4 GEMMs: bf16 `[tokens, H]` → E4M3
//! `[tokens, H]` and UE8M0 scales `[tokens, Kp(H)/32]` (linear, Kp(H) = H rounded up to
//! the GEMMs' 128-wide K stage), exactly `formats::quantize_mxfp8_block` per 32 values. The
//! scale bytes of blocks past H are written 0, so the whole scale buffer is defined and
//! every stage's 4-byte scale word can be copied whole (the gather reads them so).

use super::e4m3_scale::mxfp8_block;
use super::quantize::load_bf16_block;
use super::sync::grid_stride;
use moegen_dsl::abi::launch::QUANTIZE_THREADS;
use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::abi::{SimtFamily, SimtTarget};

use crate::ptx::ops::{Access, Memory};
use crate::ptx::{Cmp, KernelBuilder, Operand, Reg, Space, Ty, VecWidth};

const THREADS: u32 = QUANTIZE_THREADS;

/// One thread per 32-value block (and per padding block of the scale rows), grid-stride.
pub fn build(target: SimtTarget) -> KernelBuilder {
    let mut b = super::moe_sort::simt_builder(SimtFamily::QuantizeMxfp8, target);
    let x = b.ld_buffer(Buffer::ActivationsBf16);
    let out = b.ld_buffer(Buffer::Activations);
    let out_sf = b.ld_buffer(Buffer::ActivationScales);
    let tokens = b.ld_scalar(Scalar::Tokens);
    let hidden = b.ld_scalar(Scalar::Hidden);
    // Blocks per row: H/32 of data, Kp(H)/32 of scales.
    let blocks = b.shr_u32(hidden, 5u32);
    let padded = b.add_u32(hidden, 127u32);
    let padded = b.shr_u32(padded, 7u32);
    let scale_blocks = b.shl_b32(padded, 2u32);
    let total = b.mul_u32(tokens, scale_blocks);
    grid_stride(&mut b, total, THREADS, "block", &mut |b, i| {
        let token = b.div_u32(i, scale_blocks);
        let c = b.rem_u32(i, scale_blocks);
        let in_row = b.setp_u32(Cmp::Lt, c, blocks);
        let sdst = b.index_addr(out_sf, i, 1);
        let skip = b.new_label("padding");
        let stored = b.new_label("stored");
        b.bra_unless(in_row, &skip);
        // Data block j = token·H/32 + c: its 32 values as two 16-value halves.
        let j = b.mad_u32(token, blocks, c);
        let first = b.shl_b32(j, 1u32);
        let second = b.add_u32(first, 1u32);
        let mut vals = load_bf16_block(b, x, first);
        vals.extend(load_bf16_block(b, x, second));
        let Ok(vals) = <[Reg; 32]>::try_from(vals) else {
            let kernel = b.name.clone();
            let what = "a 32-value block loaded as other than 32 values";
            return b.error(crate::ptx::BuildError::Inconsistent { kernel, what });
        };
        let (words, code) = mxfp8_block(b, &vals);
        let dst = b.index_addr(out, j, 32);
        let st = Memory::St(Access::vector(Space::Global, VecWidth::V4, Ty::B32));
        b.emit(st, vec![Operand::addr(dst), Operand::regs(&words[..4])]);
        b.emit(st, vec![Operand::Reg(dst).at(16), Operand::regs(&words[4..])]);
        let byte = b.cvt_u16_u32(code);
        b.st_global(Ty::U8, sdst, byte);
        b.bra(&stored);
        b.label(&skip);
        let zero = b.mov_u32(0u32);
        let zero = b.cvt_u16_u32(zero);
        b.st_global(Ty::U8, sdst, zero);
        b.label(&stored);
    });
    // Launched programmatically: it read only the layer's inputs, so it ran beside the
    // routing sort; it exits only once the sort has, so the GEMM that waits on it also waits
    // on the sort (docs/kernels.md, "Programmatic launches").
    b.pdl_wait();
    b.ret();
    b
}
