//! Activation quantization: bf16 `[tokens, H]` → NVFP4 with linear per-token scales, the
//! global scale read from device memory (so a CUDA graph can change it).

use super::epilogue_math::quantize16_with;
use super::sync::grid_stride;
use moegen_dsl::abi::launch::QUANTIZE_THREADS;
use moegen_dsl::abi::{SimtFamily, SimtTarget};

use crate::ptx::{KernelBuilder, Operand, RegClass};

const THREADS: u32 = QUANTIZE_THREADS;

/// One thread per 16-element block, grid-stride.
pub fn build(target: SimtTarget) -> KernelBuilder {
    let mut b = super::moe_sort::simt_builder(SimtFamily::QuantizeNvfp4, target);
    let x = b.ld_param_u64("x");
    let out = b.ld_param_u64("out");
    let out_sf = b.ld_param_u64("out_sf");
    let gp = b.ld_param_u64("global_scale");
    let g = b.ld_global("f32", RegClass::F32, gp);
    let tokens = b.ld_param_u32("tokens");
    let hidden = b.ld_param_u32("hidden");
    let per_row = b.shr_u32(hidden, 4u32);
    let total = b.mul_u32(tokens, per_row);
    grid_stride(&mut b, total, THREADS, "block", &mut |b, i| {
        let src = b.index_addr(x, i, 32);
        let mut vals = Vec::with_capacity(16);
        for half in 0..2 {
            let w: Vec<_> = (0..4).map(|_| b.reg(RegClass::B32)).collect();
            b.ins(
                "ld.global.v4.b32",
                vec![
                    Operand::Vector(w.iter().map(|&r| r.into()).collect()),
                    Operand::Reg(src).at(16 * half),
                ],
            );
            for word in w {
                // bf16 → f32 is exact: the bf16 bits are the top half of the f32.
                let lo = b.shl_b32(word, 16u32);
                let hi = b.and_b32(word, Operand::Hex(0xFFFF_0000));
                vals.push(b.op(RegClass::F32, "mov.b32", vec![lo.into()]));
                vals.push(b.op(RegClass::F32, "mov.b32", vec![hi.into()]));
            }
        }
        let (w0, w1, code) = quantize16_with(b, &vals, g, target.has_e2m1_cvt());
        let dst = b.index_addr(out, i, 8);
        b.ins(
            "st.global.v2.b32",
            vec![Operand::Reg(dst).at(0), Operand::Vector(vec![w0.into(), w1.into()])],
        );
        let sdst = b.index_addr(out_sf, i, 1);
        let byte = b.op(RegClass::B16, "cvt.u16.u32", vec![code.into()]);
        b.ins("st.global.u8", vec![Operand::Reg(sdst).at(0), byte.into()]);
    });
    b.ins("ret", vec![]);
    b
}
