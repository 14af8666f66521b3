//! GEMM1's epilogue: per 16 h columns, the up and gate accumulator columns, α1, optional
//! bf16 rounding, SwiGLU, NVFP4 quantization with the device `fc2_input_scale`; 8 bytes per
//! thread into the warp's staging rows and one scale byte straight into the 128x4 layout;
//! each warp then TMA-stores its 32 × N/2 FP4 tile.

use moegen_dsl::SwigluInput;

use super::Gemm;
use super::epilogue::{acc_acquire, acc_release, as_f32, tmem_load};
use super::schedule::{Common, chunk_loop, schedule};
use crate::kernels::epilogue_math::{quantize16, round_bf16, swiglu};
use crate::ptx::ops::{Access, Bulk, LdRepeat, Memory, Tcgen05};
use crate::ptx::{Guard, KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

pub(super) fn epilogue_swiglu(b: &mut KernelBuilder, g: &Gemm, c: &Common) {
    let l = &g.l;
    let alpha = b.ld_param_u64("alpha");
    let gsp = b.ld_param_u64("out_global_scale");
    let gs = b.ld_global(Ty::F32, RegClass::F32, gsp);
    let out_sf = b.ld_param_u64("out_sf");
    let map_out = b.param_generic_addr("tmap_out");
    let inter = b.ld_param_u32("intermediate");
    let atoms_per_rowblock = b.shr_u32(inter, 6u32);
    let cur = g.rings.acc.cursor(b);
    // One staging row per thread: N/2 FP4 values of h.
    let row_stride = l.n / 4;
    let staging = b.add_u32(c.smem, g.smem.epilogue.offset);
    let my_row = b.mul_u32(c.tid, row_stride);
    let my_row = b.add_u32(staging, my_row);
    let warp_rows = b.mul_u32(c.warp, 32 * row_stride);
    let warp_stage = b.add_u32(staging, warp_rows);
    let lane_sf = b.shl_b32(c.lane, 4u32);
    let lane_sf = b.mad_u32(c.warp, 4u32, lane_sf);
    let one = b.elect();
    schedule(b, g, c, &mut |b, u| {
        // The staging rows are free once this warp's previous TMA store has read them.
        b.emit_if(Guard::when(one), Bulk::WaitGroup { read: true }, vec![0u32.into()]);
        b.bar_warp_sync();
        let taddr = acc_acquire(b, g, c, cur);
        let al_addr = b.index_addr(alpha, u.expert, 4);
        let al = b.ld_global(Ty::F32, RegClass::F32, al_addr);
        let row = b.add_u32(u.row0, c.tid);
        let rowblock = b.shr_u32(row, 7u32);
        let atom_row = b.mul_u32(rowblock, atoms_per_rowblock);
        // Piece c covers h columns 16c..16c+16 of this tile: up at accumulator column
        // (c/4)·128 + (c%4)·16, gate 64 columns further (the 64-row up/gate interleave).
        chunk_loop(b, l.n / 32, &mut |b, ch| {
            let pair = b.shr_u32(ch, 2u32);
            let within = b.and_b32(ch, 3u32);
            let col = b.shl_b32(pair, 7u32);
            let col = b.mad_u32(within, 16u32, col);
            let at = b.add_u32(taddr, col);
            let up = tmem_load::<16>(b, at, 0, LdRepeat::X16);
            let gate = tmem_load::<16>(b, at, 64, LdRepeat::X16);
            b.emit(Tcgen05::WaitLd, vec![]);
            let up = as_f32(b, up);
            let gate = as_f32(b, gate);
            let h: [Reg; 16] = std::array::from_fn(|i| {
                let mut uu = b.mul_f32(al, up[i]);
                let mut gg = b.mul_f32(al, gate[i]);
                if l.swiglu_input == SwigluInput::Bf16 {
                    uu = round_bf16(b, uu);
                    gg = round_bf16(b, gg);
                }
                swiglu(b, uu, gg)
            });
            let ([w0, w1], code) = quantize16(b, &h, gs);
            let soff = b.mad_u32(ch, 8u32, my_row);
            b.emit(
                Memory::St(Access::vector(Space::Shared, VecWidth::V2, Ty::B32)),
                vec![Operand::addr(soff), Operand::regs(&[w0, w1])],
            );
            // Scale column hb of the 128x4 layout over permuted rows.
            let hb = b.mad_u32(u.n, l.n / 32, ch);
            let atom = b.shr_u32(hb, 2u32);
            let atom = b.add_u32(atom_row, atom);
            let within = b.and_b32(hb, 3u32);
            let off = b.mad_u32(atom, 512u32, lane_sf);
            let off = b.add_u32(off, within);
            let dst = b.index_addr(out_sf, off, 1);
            let byte = b.cvt_u16_u32(code);
            b.st_global(Ty::U8, dst, byte);
        });
        acc_release(b, g, c, cur);
        b.fence_proxy_async();
        b.bar_warp_sync();
        let skip = b.new_label("skip_store");
        b.bra_unless(one, &skip);
        let col = b.mul_u32(u.n, l.n / 2);
        let wrow = b.mad_u32(c.warp, 32u32, u.row0);
        b.emit(
            Bulk::TensorStore { dims: 2 },
            vec![
                Operand::tensor(map_out, vec![col.into(), wrow.into()]),
                Operand::addr(warp_stage),
            ],
        );
        b.emit(Bulk::CommitGroup, vec![]);
        b.label(&skip);
    });
    b.emit_if(Guard::when(one), Bulk::WaitGroup { read: false }, vec![0u32.into()]);
}
