//! GEMM2's epilogue (the MoE finalize): thread t scales its accumulator row by
//! α2[expert] · router weight and, per 32 columns, rounds to bf16 into one of two staging
//! buffers and bulk-reduce-adds 64 bytes into the token's output row (the deterministic
//! variant bulk-copies into the route's row of a `[N·k, H]` scratch instead).

use moegen_dsl::FinalizeMode;
use moegen_dsl::resources::GEMM2_EPILOGUE_SUBTILE_COLS;

use super::Gemm;
use super::epilogue::{acc_acquire, acc_release, as_f32, tmem_load};
use super::schedule::{Common, chunk_loop, schedule};
use crate::ptx::ops::memory::ld;
use crate::ptx::ops::{Access, Bulk, LdRepeat, Memory, Tcgen05};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, RegClass, Space, Ty, VecWidth};

/// Bytes of one thread's staged piece: 32 bf16 columns.
const PIECE_BYTES: u32 = GEMM2_EPILOGUE_SUBTILE_COLS * 2;

pub(super) fn epilogue_finalize(b: &mut KernelBuilder, g: &Gemm, c: &Common) {
    let l = &g.l;
    let alpha = b.ld_param_u64("alpha");
    let weights = b.ld_param_u64("router_weights");
    let out = b.ld_param_u64("out");
    let p2e = b.ld_param_u64("permuted_idx_to_expanded_idx");
    let top_k = b.ld_param_u32("top_k");
    let hidden = b.ld_param_u32("hidden");
    let row_bytes = b.shl_b32(hidden, 1u32);
    let cur = g.rings.acc.cursor(b);
    let chunk = b.mov_u32(0u32);
    let staging = b.add_u32(c.smem, g.smem.epilogue.offset);
    let my_slot = b.shl_b32(c.tid, PIECE_BYTES.trailing_zeros());
    let staging = b.add_u32(staging, my_slot);
    let buf_bytes = g.smem.epilogue_buffer_bytes;
    schedule(b, g, c, &mut |b, u| {
        let taddr = acc_acquire(b, g, c, cur);
        let row = b.add_u32(u.row0, c.tid);
        let valid = b.setp_u32(Cmp::Lt, row, u.mn_limit);
        let ea = b.index_addr(p2e, row, 4);
        let expanded = b.mov_u32(0u32);
        b.emit_if(
            Guard::when(valid),
            ld(Space::Global, Ty::U32),
            vec![expanded.into(), Operand::addr(ea)],
        );
        let w_addr = b.index_addr(weights, expanded, 4);
        let w = b.reg(RegClass::F32);
        b.assign_f32(w, 0f32);
        b.emit_if(
            Guard::when(valid),
            ld(Space::Global, Ty::F32),
            vec![w.into(), Operand::addr(w_addr)],
        );
        let al_addr = b.index_addr(alpha, u.expert, 4);
        let al = b.ld_global(Ty::F32, RegClass::F32, al_addr);
        let scale = b.mul_f32(al, w);
        let dst_row = match l.finalize {
            FinalizeMode::BulkReduceAdd => {
                let token = b.div_u32(expanded, top_k);
                b.mul_wide_u32(token, row_bytes)
            }
            FinalizeMode::Deterministic => b.mul_wide_u32(expanded, row_bytes),
        };
        let dst_row = b.add_u64(out, dst_row);
        let col0 = b.mul_u32(u.n, l.n * 2);
        let col0 = b.cvt_u64_u32(col0);
        let dst_row = b.add_u64(dst_row, col0);
        chunk_loop(b, l.n / GEMM2_EPILOGUE_SUBTILE_COLS, &mut |b, ch| {
            let col = b.shl_b32(ch, GEMM2_EPILOGUE_SUBTILE_COLS.trailing_zeros());
            let at = b.add_u32(taddr, col);
            let v = tmem_load::<32>(b, at, 0, LdRepeat::X32);
            b.emit(Tcgen05::WaitLd, vec![]);
            let v = as_f32(b, v);
            // Staging buffer `chunk & 1`: wait until the bulk op that last read it is done.
            let which = b.and_b32(chunk, 1u32);
            let src = b.mad_u32(which, buf_bytes, staging);
            b.emit(Bulk::WaitGroup { read: true }, vec![1u32.into()]);
            let mut words = Vec::with_capacity(16);
            for pair in v.chunks_exact(2) {
                if let &[even, odd] = pair {
                    let lo = b.mul_f32(even, scale);
                    let hi = b.mul_f32(odd, scale);
                    words.push(b.cvt_bf16x2(hi, lo));
                }
            }
            for (q, quad) in (0i64..).zip(words.chunks(4)) {
                b.emit(
                    Memory::St(Access::vector(Space::Shared, VecWidth::V4, Ty::B32)),
                    vec![Operand::Reg(src).at(16 * q), Operand::regs(quad)],
                );
            }
            b.fence_proxy_async();
            let op = match l.finalize {
                FinalizeMode::BulkReduceAdd => Bulk::ReduceAdd { ty: Ty::Bf16 },
                FinalizeMode::Deterministic => Bulk::Store,
            };
            let byte_off = b.shl_b32(ch, PIECE_BYTES.trailing_zeros());
            let byte_off = b.cvt_u64_u32(byte_off);
            let dst = b.add_u64(dst_row, byte_off);
            b.emit_if(
                Guard::when(valid),
                op,
                vec![Operand::addr(dst), Operand::addr(src), PIECE_BYTES.into()],
            );
            b.emit(Bulk::CommitGroup, vec![]);
            b.inc_u32(chunk, 1u32);
        });
        acc_release(b, g, c, cur);
    });
    b.emit(Bulk::WaitGroup { read: false }, vec![0u32.into()]);
}
