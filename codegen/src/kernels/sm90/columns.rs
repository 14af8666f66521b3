//! The consumers' column tables: the per-token-column values an epilogue multiplies whole
//! accumulator columns by (GEMM2's router weight and route, A8's activation scale).
//!
//! Every thread needs the values of its 2·T/8 columns, and loading them after the K loop
//! put one dependent global round trip per n8 block in front of the epilogue's arithmetic
//! (ncu on the H200, 2026-12-03: a fifth of GEMM2's consumer samples and a tenth of A8
//! GEMM1's were those loads' `long_scoreboard` stalls). So thread t < T (of rank 0 in a
//! split-K cluster, the one rank with an epilogue) loads column t's
//! values before the unit's K loop, which hides their latency, keeps them in two or three
//! registers through it, and writes them to its consumer's table before the epilogue's
//! first barrier; the epilogue reads each column pair with one `ld.shared.v2`.
//!
//! Table layout (`Sm90Layout::column_table_bytes`): GEMM2 `[weight f32 × T | scale f32 × T]`
//! (A16 leaves the scales unused), GEMM1 A8 `[scale f32 × T]`. A column past the tile's
//! valid rows has weight 0 and route 0 (its values are never stored), as before. GEMM2's
//! route of column t stays in thread t's register: that thread issues token t's bulk store.

use moegen_dsl::GemmKind;
use moegen_dsl::abi::Buffer;

use super::Sm90;
use super::mainloop::Consumer;
use crate::kernels::skeleton::Unit;
use crate::ptx::ops::memory::{ld, st};
use crate::ptx::ops::{Access, Memory};
use crate::ptx::{Cmp, Guard, KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

/// What a kernel's column loads read, loaded once per consumer.
#[derive(Clone, Copy, Debug)]
pub(super) struct ColumnParams {
    /// This consumer's table in shared memory.
    table: Reg,
    /// GEMM2: the router weights and `permuted_idx_to_expanded_idx`.
    routes: Option<(Reg, Reg)>,
    /// A8: f32 2^e per permuted row.
    scales: Option<Reg>,
    /// Thread t < T owns column t; with split K only on rank 0, the one rank that runs the
    /// epilogue (the others' loads would be thrown away).
    owner: Reg,
}

/// Where each array sits in the table, in bytes.
#[derive(Clone, Copy, Debug)]
struct Offsets {
    weight: u32,
    scale: u32,
}

fn offsets(g: &Sm90) -> Offsets {
    let t = g.l.tile;
    match g.l.kind {
        GemmKind::Gemm2 => Offsets { weight: 0, scale: 4 * t },
        GemmKind::Gemm1 => Offsets { weight: 0, scale: 0 },
    }
}

/// The column parameters of a kernel, if it has a column table; `rank` is the CTA's rank in
/// a split-K cluster.
pub(super) fn column_params(
    b: &mut KernelBuilder,
    g: &Sm90,
    smem: Reg,
    k: &Consumer,
    rank: Option<Reg>,
) -> Option<ColumnParams> {
    let region = g.smem.columns?;
    let base = b.mad_u32(k.ci, g.smem.columns_stride, region.offset);
    let table = b.add_u32(smem, base);
    let routes = (g.l.kind == GemmKind::Gemm2).then(|| {
        (b.ld_buffer(Buffer::RouterWeights), b.ld_buffer(Buffer::PermutedIdxToExpandedIdx))
    });
    let scales = g.l.a8.then(|| {
        b.ld_buffer(match g.l.kind {
            GemmKind::Gemm1 => Buffer::ActivationRowScales,
            GemmKind::Gemm2 => Buffer::Gemm1OutputRowScales,
        })
    });
    let column = b.setp_u32(Cmp::Lt, k.t, g.l.tile);
    let owner = match rank {
        Some(rank) => {
            let leader = b.setp_u32(Cmp::Eq, rank, 0u32);
            b.and_pred(column, leader)
        }
        None => column,
    };
    Some(ColumnParams { table, routes, scales, owner })
}

/// Column t's values, in registers through the K loop.
#[derive(Clone, Copy, Debug)]
pub(super) struct ColumnLoads {
    /// Router weight and route (GEMM2).
    routes: Option<(Reg, Reg)>,
    /// Activation scale (A8).
    scale: Option<Reg>,
}

impl ColumnLoads {
    /// This thread's route (token t's, for its bulk store), 0 past the valid rows and on
    /// ranks 1.. of a split (which store nothing).
    pub fn route(&self) -> Option<Reg> {
        self.routes.map(|(_, r)| r)
    }
}

/// Before the K loop: thread t < T loads column t's values (row0 + t of the permuted rows).
pub(super) fn load_columns(
    b: &mut KernelBuilder,
    k: &Consumer,
    p: &ColumnParams,
    u: &Unit,
) -> ColumnLoads {
    let prow = b.add_u32(u.row0, k.t);
    let routes = p.routes.map(|(weights, p2e)| {
        let in_tile = b.setp_u32(Cmp::Lt, prow, u.mn_limit);
        let valid = b.and_pred(in_tile, p.owner);
        let route = b.mov_u32(0u32);
        let ra = b.index_addr(p2e, prow, 4);
        b.emit_if(
            Guard::when(valid),
            ld(Space::Global, Ty::U32),
            vec![route.into(), Operand::addr(ra)],
        );
        let w = b.reg(RegClass::F32);
        b.assign_f32(w, 0f32);
        let wa = b.index_addr(weights, route, 4);
        b.emit_if(
            Guard::when(valid),
            ld(Space::Global, Ty::F32),
            vec![w.into(), Operand::addr(wa)],
        );
        (w, route)
    });
    // Every row of a routing tile is inside the scale buffer (it holds whole tiles).
    let scale = p.scales.map(|scales| {
        let s = b.reg(RegClass::F32);
        b.assign_f32(s, 1f32);
        let sa = b.index_addr(scales, prow, 4);
        b.emit_if(
            Guard::when(p.owner),
            ld(Space::Global, Ty::F32),
            vec![s.into(), Operand::addr(sa)],
        );
        s
    });
    ColumnLoads { routes, scale }
}

/// After the K loop, before the epilogue's first consumer barrier (which publishes them):
/// thread t < T writes column t's values. The previous unit's epilogue read its table
/// before its second barrier, which every thread of the consumer has passed.
pub(super) fn store_columns(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    p: &ColumnParams,
    c: &ColumnLoads,
) {
    let o = offsets(g);
    let at = b.mad_u32(k.t, 4u32, p.table);
    let put = |b: &mut KernelBuilder, ty: Ty, off: u32, v: Reg| {
        b.emit_if(
            Guard::when(p.owner),
            st(Space::Shared, ty),
            vec![Operand::Reg(at).at(i64::from(off)), v.into()],
        );
    };
    if let Some((w, _)) = c.routes {
        put(b, Ty::F32, o.weight, w);
    }
    if let Some(s) = c.scale {
        put(b, Ty::F32, o.scale, s);
    }
}

/// The table's values of one n8 block's column pair (col0 + 8i, col0 + 8i + 1) of this
/// thread, after the barrier that published them.
#[derive(Clone, Copy, Debug)]
pub(super) struct ColumnReader {
    /// This thread's column col0 in the table.
    at: Reg,
    offsets: Offsets,
}

impl ColumnReader {
    /// Places this thread's reads.
    pub fn new(b: &mut KernelBuilder, g: &Sm90, k: &Consumer, p: &ColumnParams) -> Self {
        let at = b.mad_u32(k.col0, 4u32, p.table);
        ColumnReader { at, offsets: offsets(g) }
    }
    fn pair(&self, b: &mut KernelBuilder, off: u32, i: u32) -> [Reg; 2] {
        let v = b.regs(RegClass::F32, 2);
        b.emit(
            Memory::Ld(Access::vector(Space::Shared, VecWidth::V2, Ty::F32)),
            vec![Operand::regs(&v), Operand::Reg(self.at).at(i64::from(off + 32 * i))],
        );
        [v[0], v[1]]
    }
    /// Router weights of n8 block `i`'s two columns (GEMM2).
    pub fn weights(&self, b: &mut KernelBuilder, i: u32) -> [Reg; 2] {
        self.pair(b, self.offsets.weight, i)
    }
    /// Activation scales of n8 block `i`'s two columns (A8).
    pub fn scales(&self, b: &mut KernelBuilder, i: u32) -> [Reg; 2] {
        self.pair(b, self.offsets.scale, i)
    }
}
