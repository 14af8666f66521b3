//! The expert-parallel all-to-all mode's row copies (docs/expert-parallel.md, mode (b)),
//! one 32-bit word (two bf16 columns) per thread, grid-stride over `slots · H/2` words:
//!
//! - `ep_gather_rows`: each send slot's activation row, `x[sent / k]`, zeros on padding;
//! - `ep_combine_unpack`: each returned row to its expanded index on the home rank, so the
//!   deterministic finalize sums a token's routes in slot order as the single layer does.
//!
//! An index outside `[0, num_routes)` (−1 on padding) is padding: nothing is read or written
//! out of bounds whatever the index buffer holds.

use moegen_dsl::abi::launch::EP_COPY_THREADS;
use moegen_dsl::abi::{Buffer, Scalar, SimtFamily, SimtTarget};

use super::moe_sort::simt_builder;
use super::sync::grid_stride;
use crate::ptx::{Cmp, KernelBuilder, RegClass, Ty};

const THREADS: u32 = EP_COPY_THREADS;

/// `ep_gather_rows`.
pub fn build_gather(target: SimtTarget) -> KernelBuilder {
    let mut b = simt_builder(SimtFamily::EpGatherRows, target);
    let sent = b.ld_buffer(Buffer::EpSentRoutes);
    let x = b.ld_buffer(Buffer::ActivationsBf16);
    let out = b.ld_buffer(Buffer::EpSendRows);
    let slots = b.ld_scalar(Scalar::Tokens);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let k = b.ld_scalar(Scalar::TopK);
    let routes = b.ld_scalar(Scalar::NumRoutes);
    let words = b.shr_u32(hidden, 1u32);
    let total = b.mul_u32(slots, words);
    grid_stride(&mut b, total, THREADS, "word", &mut |b, w| {
        let slot = b.div_u32(w, words);
        let col = b.rem_u32(w, words);
        let ra = b.index_addr(sent, slot, 4);
        let route = b.ld_global(Ty::U32, RegClass::B32, ra);
        // Unsigned: −1 is past every route.
        let real = b.setp_u32(Cmp::Lt, route, routes);
        let v = b.mov_u32(0u32);
        let write = b.new_label("write");
        b.bra_unless(real, &write);
        let token = b.div_u32(route, k);
        let src = b.mad_u32(token, words, col);
        let sa = b.index_addr(x, src, 4);
        let got = b.ld_global(Ty::B32, RegClass::B32, sa);
        b.assign_u32(v, got);
        b.label(&write);
        let oa = b.index_addr(out, w, 4);
        b.st_global(Ty::B32, oa, v);
    });
    b.ret();
    b
}

/// `ep_combine_unpack`.
pub fn build_unpack(target: SimtTarget) -> KernelBuilder {
    let mut b = simt_builder(SimtFamily::EpCombineUnpack, target);
    let sent = b.ld_buffer(Buffer::EpSentRoutes);
    let recv = b.ld_buffer(Buffer::EpCombineRecv);
    let out = b.ld_buffer(Buffer::FinalizeScratch);
    let slots = b.ld_scalar(Scalar::Tokens);
    let hidden = b.ld_scalar(Scalar::Hidden);
    let routes = b.ld_scalar(Scalar::NumRoutes);
    let words = b.shr_u32(hidden, 1u32);
    let total = b.mul_u32(slots, words);
    grid_stride(&mut b, total, THREADS, "word", &mut |b, w| {
        let slot = b.div_u32(w, words);
        let col = b.rem_u32(w, words);
        let ra = b.index_addr(sent, slot, 4);
        let route = b.ld_global(Ty::U32, RegClass::B32, ra);
        let real = b.setp_u32(Cmp::Lt, route, routes);
        let skip = b.new_label("padding");
        b.bra_unless(real, &skip);
        let ia = b.index_addr(recv, w, 4);
        let v = b.ld_global(Ty::B32, RegClass::B32, ia);
        let dst = b.mad_u32(route, words, col);
        let oa = b.index_addr(out, dst, 4);
        b.st_global(Ty::B32, oa, v);
        b.label(&skip);
    });
    b.ret();
    b
}
