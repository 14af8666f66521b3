//! Set-up shared by every role (barrier initialization, the PDL hand-off, problem sizes)
//! and the loops every role runs: the static persistent schedule and the K-stage loop.
//!
//! As on SM100 there is no scheduler warp: CTA c takes work units c, c + #CTAs, …, a unit
//! being one routing tile × one N block (N fastest), and stops at the first routing tile
//! ≥ `num_non_exiting_tiles`, read on the device (graph-safe). Each role evaluates this pure
//! function itself.

use moegen_dsl::GemmKind;
use moegen_dsl::abi::{Buffer, Scalar};
use moegen_dsl::resources::SM90_K_STAGE;

use super::Sm90;
use crate::ptx::ops::Fence;
use crate::ptx::{Cmp, KernelBuilder, Reg, RegClass, SReg, Ty};

/// Runtime values every role needs.
pub(super) struct Common {
    pub tid: Reg,
    pub warp: Reg,
    pub lane: Reg,
    pub smem: Reg,
    pub k_tiles: Reg,
    pub units_n: Reg,
    pub total_units: Reg,
    pub live_tiles: Reg,
    pub tile_expert: Reg,
    pub tile_limit: Reg,
    pub cta: Reg,
    pub ctas: Reg,
}

/// One work unit inside the schedule loop.
pub(super) struct Unit {
    /// N block of this CTA (in units of N weight rows).
    pub n: Reg,
    /// Expert of the routing tile.
    pub expert: Reg,
    /// Permuted rows below this bound are valid.
    pub mn_limit: Reg,
    /// First permuted row of the routing tile.
    pub row0: Reg,
}

/// Barrier initialization and the values every role reads.
pub(super) fn prologue(b: &mut KernelBuilder, g: &Sm90) -> Common {
    let l = &g.l;
    let tid = b.sreg(SReg::TidX);
    let warp = b.shr_u32(tid, 5u32);
    let lane = b.and_b32(tid, 31u32);
    let cta = b.sreg(SReg::CtaidX);
    let ctas = b.sreg(SReg::NctaidX);
    let smem = b.smem_addr(0);

    let not0 = b.setp_u32(Cmp::Ne, tid, 0u32);
    let after_init = b.new_label("after_init");
    b.bra_if(not0, &after_init);
    g.ring.init(b, smem);
    b.emit(Fence::MbarrierInit, vec![]);
    b.label(&after_init);
    b.bar_sync(0u32);

    // PDL: let the next kernel's prologue start, then wait for the previous kernel's output.
    b.pdl_handoff();

    let k_dim = b.ld_scalar(match l.kind {
        GemmKind::Gemm1 => Scalar::Hidden,
        GemmKind::Gemm2 => Scalar::Intermediate,
    });
    let k_tiles = b.shr_u32(k_dim, SM90_K_STAGE.trailing_zeros());
    let n_dim = match l.kind {
        GemmKind::Gemm1 => {
            let i = b.ld_scalar(Scalar::Intermediate);
            b.shl_b32(i, 1u32)
        }
        GemmKind::Gemm2 => b.ld_scalar(Scalar::Hidden),
    };
    // N divides the dimension (the tactic's applicability guard): whole blocks only.
    let units_n = b.div_u32(n_dim, l.n);
    let max_tiles = b.ld_scalar(Scalar::MaxTiles);
    let total_units = b.mul_u32(max_tiles, units_n);
    let live_ptr = b.ld_buffer(Buffer::NumNonExitingTiles);
    let live_raw = b.ld_global(Ty::U32, RegClass::B32, live_ptr);
    let live_tiles = b.min_u32(live_raw, max_tiles);
    let tile_expert = b.ld_buffer(Buffer::TileIdxToExpertIdx);
    let tile_limit = b.ld_buffer(Buffer::TileIdxToMnLimit);
    Common {
        tid,
        warp,
        lane,
        smem,
        k_tiles,
        units_n,
        total_units,
        live_tiles,
        tile_expert,
        tile_limit,
        cta,
        ctas,
    }
}

/// Emits the static schedule loop around `body`.
pub(super) fn schedule(
    b: &mut KernelBuilder,
    g: &Sm90,
    c: &Common,
    body: &mut dyn FnMut(&mut KernelBuilder, &Unit),
) {
    let top = b.new_label("unit");
    let done = b.new_label("units_done");
    let u = b.mov_u32(c.cta);
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, u, c.total_units);
    b.bra_if(end, &done);
    let m = b.div_u32(u, c.units_n);
    let dead = b.setp_u32(Cmp::Ge, m, c.live_tiles);
    b.bra_if(dead, &done);
    let n = b.rem_u32(u, c.units_n);
    let ea = b.index_addr(c.tile_expert, m, 4);
    let expert = b.ld_global(Ty::U32, RegClass::B32, ea);
    let la = b.index_addr(c.tile_limit, m, 4);
    let mn_limit = b.ld_global(Ty::U32, RegClass::B32, la);
    let row0 = b.mul_u32(m, g.l.tile);
    body(b, &Unit { n, expert, mn_limit, row0 });
    b.inc_u32(u, c.ctas);
    b.bra(&top);
    b.label(&done);
}

/// A runtime K-stage loop `for kk in 0..k_tiles`.
pub(super) fn k_loop(
    b: &mut KernelBuilder,
    c: &Common,
    body: &mut dyn FnMut(&mut KernelBuilder, Reg),
) {
    let top = b.new_label("k");
    let done = b.new_label("k_done");
    let kk = b.mov_u32(0u32);
    b.label(&top);
    let end = b.setp_u32(Cmp::Ge, kk, c.k_tiles);
    b.bra_if(end, &done);
    body(b, kk);
    b.inc_u32(kk, 1u32);
    b.bra(&top);
    b.label(&done);
}
