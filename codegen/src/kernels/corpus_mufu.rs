//! The MUFU sweep (sm_90a): at each index i of its grid-stride loop the kernel forms the
//! f32 bit pattern `base + i·step` from the index (no loads, so ptxas cannot fold or reorder
//! anything) and stores, as one 16-byte word, what each approximate instruction of
//! `abi::mufu_sweep::MufuOp::ALL` returns for it; gpu-check compares every word with the
//! simulator's model.

use moegen_dsl::abi::mufu_sweep::{MufuOp, SWEEP_THREADS, WORDS_PER_INPUT};
use moegen_dsl::abi::{CorpusKernel, KernelId, params};

use super::sync::grid_stride;
use crate::ptx::ops::{Access, Alu, FloatOp, Memory};
use crate::ptx::{KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

// One `st.global.v4.b32` holds an input's results.
const _: () = assert!(WORDS_PER_INPUT == 4);

/// The PTX operation of a sweep op.
fn float_op(op: MufuOp) -> FloatOp {
    match op {
        MufuOp::Ex2ApproxFtz => FloatOp::Ex2ApproxFtz,
        MufuOp::Ex2Approx => FloatOp::Ex2Approx,
        MufuOp::RcpApproxFtz => FloatOp::RcpApproxFtz,
        MufuOp::RcpApprox => FloatOp::RcpApprox,
    }
}

/// Builds the kernel.
pub fn build() -> KernelBuilder {
    let id = KernelId::Corpus(CorpusKernel::Mufu);
    let mut b = KernelBuilder::new(id.name());
    b.declare(params(&id));
    let out = b.ld_arg_u64(0);
    let base = b.ld_arg_u32(1);
    let step = b.ld_arg_u32(2);
    let count = b.ld_arg_u32(3);
    grid_stride(&mut b, count, SWEEP_THREADS, "input", &mut |b, i| {
        let bits = b.mad_u32(i, step, base);
        let x = b.mov_b32(RegClass::F32, bits);
        let words: Vec<Reg> = MufuOp::ALL
            .iter()
            .map(|&op| {
                let r = b.op(RegClass::F32, Alu::Float(float_op(op), Ty::F32), vec![x.into()]);
                b.mov_b32(RegClass::B32, r)
            })
            .collect();
        let at = b.index_addr(out, i, (4 * WORDS_PER_INPUT) as u32);
        b.emit(
            Memory::St(Access::vector(Space::Global, VecWidth::V4, Ty::B32)),
            vec![Operand::addr(at), Operand::regs(&words)],
        );
    });
    b
}
