//! The A8 factors of both epilogues: element (weight row r, token column n) of the
//! accumulator is multiplied by `2^ρ[r] · 2^e[n]` — the row's weight factor (its largest
//! UE8M0 exponent − 6, `abi::sm90_weights::a8`) times the column's activation scale — before
//! α, exactly as the reference (`acc ·rn (ρ ·rn τ)`; both factors are powers of two, so the
//! product and the scaling are exact within f32's normal range).

use moegen_dsl::GemmKind;
use moegen_dsl::abi::sm90_weights::TILE_ROWS;
use moegen_dsl::abi::{Buffer, Scalar};

use super::Sm90;
use super::mainloop::Consumer;
use crate::kernels::skeleton::Unit;
use crate::ptx::ops::memory::ld;
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, Space, Ty};

/// The buffers the A8 row factors come from, loaded once (the column scales come through
/// the consumer's column table, `columns.rs`).
#[derive(Clone, Copy, Debug)]
pub(super) struct A8Params {
    /// f32 2^ρ per weight row of every expert.
    rows: Reg,
    /// Weight rows per expert (2I, ReLU²'s I, or H).
    rows_per_expert: Reg,
}

/// The parameters of a kernel, if it is an A8 kernel.
pub(super) fn a8_params(b: &mut KernelBuilder, g: &Sm90) -> Option<A8Params> {
    if !g.l.a8 {
        return None;
    }
    let rows = match g.l.kind {
        GemmKind::Gemm1 => Buffer::W1RowScales,
        GemmKind::Gemm2 => Buffer::W2RowScales,
    };
    let rows_per_expert = match g.l.kind {
        // ReLU²'s W1 has I rows.
        GemmKind::Gemm1 if g.l.ungated() => b.ld_scalar(Scalar::Intermediate),
        GemmKind::Gemm1 => {
            let i = b.ld_scalar(Scalar::Intermediate);
            b.shl_b32(i, 1u32)
        }
        GemmKind::Gemm2 => b.ld_scalar(Scalar::Hidden),
    };
    Some(A8Params { rows: b.ld_buffer(rows), rows_per_expert })
}

/// One unit's A8 row factors of this thread.
pub(super) struct A8Unit {
    /// `rho[blk][v1]`: 2^ρ of row r0 + 8·v1 of m64 block `blk`.
    rho: Vec<[Reg; 2]>,
}

impl A8Unit {
    /// `acc ·rn (2^ρ ·rn τ)` of an element of block `blk`, row offset `v1`.
    pub fn apply(&self, b: &mut KernelBuilder, acc: Reg, blk: usize, v1: u32, tau: Reg) -> Reg {
        let f = b.mul_f32(self.rho[blk][v1 as usize], tau);
        b.mul_f32(acc, f)
    }
}

/// Loads the unit's row factors (rows past the expert's, in a partial last N block, read
/// nothing: their results are not stored).
pub(super) fn a8_unit(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    u: &Unit,
    p: &A8Params,
) -> A8Unit {
    let l = &g.l;
    let e_base = b.mul_u32(u.expert, p.rows_per_expert);
    let n_base = b.mul_u32(u.n, l.n);
    let c_base = b.mul_u32(k.part, l.rows_per_consumer);
    let first = b.add_u32(n_base, c_base);
    let first = b.add_u32(first, k.r0);
    let rho: Vec<[Reg; 2]> = (0..l.blocks)
        .map(|blk| {
            [0u32, 8].map(|dr| {
                let row = b.add_u32(first, blk * TILE_ROWS as u32 + dr);
                let inside = b.setp_u32(Cmp::Lt, row, p.rows_per_expert);
                let at = b.add_u32(e_base, row);
                let addr = b.index_addr(p.rows, at, 4);
                let v = b.reg(RegClass::F32);
                b.assign_f32(v, 1f32);
                b.emit_if(
                    Guard::when(inside),
                    ld(Space::Global, Ty::F32),
                    vec![v.into(), Operand::addr(addr)],
                );
                v
            })
        })
        .collect();
    A8Unit { rho }
}
