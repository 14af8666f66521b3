//! The deterministic finalize: `out[t, :] = bf16(Σ_slots scratch[t·k + s, :])`, summed in
//! f32 in slot order over the local routes, one rounding at the end (the reference's
//! `FinalizeMode::Deterministic`).

use super::local_route::local_route;
use super::sync::grid_stride;
use moegen_dsl::abi::launch::FINALIZE_THREADS;
use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::abi::{SimtFamily, SimtTarget};

use crate::ptx::{Cmp, KernelBuilder, Operand, RegClass, Ty};

const THREADS: u32 = FINALIZE_THREADS;

/// One thread per (token, column pair), grid-stride.
pub fn build(target: SimtTarget) -> KernelBuilder {
    let mut b = super::moe_sort::simt_builder(SimtFamily::FinalizeReduce, target);
    // Launched programmatically (its blocks are placed while GEMM2 ends): GEMM2's scratch
    // rows are read only after it has completed.
    b.pdl_wait();
    let scratch = b.ld_buffer(Buffer::FinalizeScratch);
    let e2p = b.ld_buffer(Buffer::ExpandedIdxToPermutedIdx);
    let out = b.ld_buffer(Buffer::Output);
    let tokens = b.ld_scalar(Scalar::Tokens);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let k = b.ld_scalar(Scalar::TopK);
    let pairs = b.shr_u32(hidden, 1u32);
    let total = b.mul_u32(tokens, pairs);
    grid_stride(&mut b, total, THREADS, "pair", &mut |b, i| {
        let t = b.div_u32(i, pairs);
        let p = b.rem_u32(i, pairs);
        let lo = b.mov_f32(0f32);
        let hi = b.mov_f32(0f32);
        let s = b.mov_u32(0u32);
        let slots = b.new_label("slot");
        let slots_done = b.new_label("slots_done");
        b.label(&slots);
        let sd = b.setp_u32(Cmp::Ge, s, k);
        b.bra_if(sd, &slots_done);
        let next = b.new_label("next_slot");
        let route = local_route(b, e2p, t, k, s, &next).route;
        let elem = b.mad_u32(route, pairs, p);
        let ea = b.index_addr(scratch, elem, 4);
        let w = b.ld_global(Ty::B32, RegClass::B32, ea);
        let wl = b.shl_b32(w, 16u32);
        let wh = b.and_b32(w, Operand::Hex(0xFFFF_0000));
        let fl = b.mov_b32(RegClass::F32, wl);
        let fh = b.mov_b32(RegClass::F32, wh);
        b.accumulate_f32(lo, fl);
        b.accumulate_f32(hi, fh);
        b.label(&next);
        b.inc_u32(s, 1u32);
        b.bra(&slots);
        b.label(&slots_done);
        let packed = b.cvt_bf16x2(hi, lo);
        let oa = b.index_addr(out, i, 4);
        b.st_global(Ty::B32, oa, packed);
    });
    b.ret();
    b
}
