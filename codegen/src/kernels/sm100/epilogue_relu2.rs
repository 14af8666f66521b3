//! GEMM1's epilogue for an ungated activation (ReLU²): W1 has I rows in h column order, so
//! each 64-column step of the accumulator (one `tcgen05.ld.32x32b.x64`) is 64 columns of h,
//! not half of an (up, gate) pair. Per element `x = α1·acc` (`fma.rn` with the bias),
//! optionally bf16, `h = max(x, 0) ·rn max(x, 0)` (both recipes: no sigmoid), then the
//! block quantization of the kernel's recipe (α1 never folded) or MXFP8's, as the gated
//! epilogue.
//!
//! A tile holds N h columns, twice the gated tile's N/2, while the staging rows and the
//! output TMA box stay N/2 wide (the resource model's budget): the epilogue stores the
//! tile in two halves, each as soon as its steps are staged. `walk` already visits the
//! steps half by half (the overlapped buffers' order), so a half's staging offsets are
//! known when building; the second half waits until the first half's store has read the
//! staging rows.

use moegen_dsl::abi::{Buffer, Scalar, TensorMap};
use moegen_dsl::{EpilogueRecipe, SwigluInput};

use super::Sm100;
use super::epilogue::{STEP_COLS, acc_acquire, acc_release, tmem_load, walk};
use super::epilogue_swiglu::load_f32x64;
use super::h_output::{HOutputBuffers, HValues};
use super::prologue::Common;
use super::smem::gemm1_row_bytes;
use crate::kernels::epilogue_math::{
    BlockQuant, activation, activation_fast, pre_activation, round_bf16, unfolded_block_quant,
};
use crate::kernels::skeleton::Needs;
use crate::ptx::instrs::{BulkWait, TmaStore};
use crate::ptx::ops::{Bulk, LdRepeat, Memory, Tcgen05};
use crate::ptx::{Guard, KernelBuilder, Operand, Reg, RegClass, Ty};

pub(super) fn epilogue_relu2(b: &mut KernelBuilder, g: &Sm100, c: &Common) {
    let l = &g.l;
    let alpha = b.ld_buffer(Buffer::Alpha1);
    let out = HOutputBuffers::load(b, g);
    let map_out = b.tensor_map_addr(TensorMap::Gemm1OutputStore);
    let inter = b.ld_scalar(Scalar::Intermediate);
    let atoms_per_rowblock = out.atoms_per_rowblock(b, inter);
    let bias = l.key.bias.then(|| b.ld_buffer(Buffer::Gemm1Bias));
    let acc = g.rings.acc.consumer(b, &g.rings.parties.epilogue, c.smem);
    // One staging row per thread: half a tile, N/2 values of h.
    let row_stride = gemm1_row_bytes(l);
    let staging = b.add_u32(c.smem, g.smem.epilogue.offset);
    let my_row = b.mad_u32(c.tid, row_stride, staging);
    let warp_stage = b.mad_u32(c.warp, 32 * row_stride, staging);
    // This thread's word of each 512-byte scale atom: lane·16 + quarter·4.
    let lane_sf = b.shl_b32(c.lane, 4u32);
    let lane_sf = b.mad_u32(c.warp, 4u32, lane_sf);
    let out = out.finish(atoms_per_rowblock, lane_sf);
    let one = b.elect();
    b.emit_if(Guard::when(one), Memory::PrefetchTensormap, vec![Operand::addr(map_out)]);
    // One 64-column step of h per 64 accumulator columns; two halves of N/2 columns.
    let steps = l.n / STEP_COLS;
    let half = steps.div_ceil(2) as usize;
    c.sched.units(b, Needs::EXPERT, &mut |b, u| {
        // The staging rows are free once this warp's previous TMA store has read them.
        b.push_if(Guard::when(one), BulkWait { pending: 0, read: true });
        b.bar_warp_sync();
        let al_addr = b.index_addr(alpha, u.expert, 4);
        let al = b.ld_global(Ty::F32, RegClass::F32, al_addr);
        // This unit's biases: the expert's I values from h column n·N (one per W1 row).
        let bias_row = bias.map(|base| {
            let row = b.mul_u32(u.expert, inter);
            let col = b.mad_u32(u.n, l.n, row);
            b.index_addr(base, col, 4)
        });
        let tile_sf = out.tile_scales(b, u.row0, c.tid, u.n, steps);
        let h_col0 = b.mul_u32(u.n, l.n);
        let wrow = b.mad_u32(c.warp, 32u32, u.row0);
        let tile = acc_acquire(b, g, c, &acc);
        let (order, release_after) = walk(b, g, &tile, steps);
        for (p, &step) in order.iter().enumerate() {
            if p == half {
                // The first half's TMA store has read the staging rows.
                b.push_if(Guard::when(one), BulkWait { pending: 0, read: true });
                b.bar_warp_sync();
            }
            // Step s of this tile: accumulator and h columns s·64.., scale atom s of the
            // tile's N block, staging bytes (position within its half)·32.
            let at = step.offset(b, tile.taddr, STEP_COLS);
            // Steps past I (a last N block of I not a multiple of N) hold zeros and store
            // nothing: the TMA store clips their codes, a half wholly past I is not stored.
            let in_n = step.within(b, h_col0, STEP_COLS, inter);
            let x = tmem_load::<64>(b, at, 0, LdRepeat::X64);
            b.emit(Tcgen05::WaitLd, vec![]);
            if p + 1 == release_after {
                acc_release(b, g, c, &acc);
            }
            // The step's 64 biases (the same for every row: broadcast loads).
            let biases = bias_row.map(|r| {
                let at = step.offset_u64(b, r, STEP_COLS * 4);
                let at = b.selp_b64(at, r, in_n);
                load_f32x64(b, at)
            });
            let mut h_at = |b: &mut KernelBuilder, i: usize| {
                let mut xx = pre_activation(b, al, x[i], biases.map(|bs| bs[i]));
                if l.key.swiglu_input == SwigluInput::Bf16 {
                    xx = round_bf16(b, xx);
                }
                // Ungated: the pre-activation is the activation's only operand.
                match l.key.recipe {
                    EpilogueRecipe::Exact => activation(b, l.key.activation, None, xx, xx),
                    EpilogueRecipe::Fast => activation_fast(b, l.key.activation, None, xx, xx),
                }
            };
            let slot = (p % half) as u32;
            let mut staged = |b: &mut KernelBuilder, bytes| b.add_u32(my_row, slot * bytes);
            match out.gs {
                Some(gs) => {
                    let h: [Reg; 64] = std::array::from_fn(|i| h_at(b, i));
                    let how = match l.key.recipe {
                        EpilogueRecipe::Fast => unfolded_block_quant(b, gs),
                        EpilogueRecipe::Exact => BlockQuant::Exact { g: gs },
                    };
                    let h = HValues::Ready(&h);
                    out.store_step(b, h, Some(how), &mut staged, &tile_sf, step, in_n);
                }
                None => {
                    let h = HValues::Lazy(&mut h_at);
                    out.store_step(b, h, None, &mut staged, &tile_sf, step, in_n);
                }
            }
            if (p + 1) % half == 0 || p + 1 == order.len() {
                // This half is staged: one TMA store of its N/2 columns, from h column
                // n·N + (its first step)·64.
                b.fence_proxy_async();
                b.bar_warp_sync();
                let skip = b.new_label("skip_store");
                let col = order[p - p % half].offset(b, h_col0, STEP_COLS);
                let half_in = b.setp_u32(crate::ptx::Cmp::Lt, col, inter);
                let issue = b.and_pred(one, half_in);
                b.bra_unless(issue, &skip);
                b.push(TmaStore {
                    map: map_out,
                    coords: vec![col.into(), wrow.into()],
                    src: warp_stage,
                });
                b.emit(Bulk::CommitGroup, vec![]);
                b.label(&skip);
            }
        }
        acc.advance(b);
    });
    b.push_if(Guard::when(one), BulkWait { pending: 0, read: false });
}
