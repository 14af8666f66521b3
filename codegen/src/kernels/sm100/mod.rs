//! The warp-specialized, persistent SM100 GEMM kernels of the MoE layer, one file per role:
//!
//! - `schedule`: set-up, barrier initialization, the static schedule and K loops;
//! - `producer`: TMA loads of B/SFB (and GEMM2's A/SFA);
//! - `gather`: GEMM1's cp.async gather of A/SFA and the 2-CTA relay;
//! - `mma`: scale factors into TMEM, block-scaled MMAs, commits;
//! - `epilogue`, `epilogue_swiglu`, `epilogue_finalize`: GEMM1's SwiGLU + NVFP4
//!   quantization, GEMM2's scaled bf16 reduce-add;
//! - [`layout`] (roles, tile sizes, descriptors), [`smem`] (shared-memory regions) and
//!   [`rings`] (the pipelines between the roles).

mod epilogue;
mod epilogue_finalize;
mod epilogue_swiglu;
mod gather;
pub mod layout;
mod mma;
mod producer;
mod prologue;
pub mod rings;
pub mod smem;

use moegen_dsl::GemmKind;
use moegen_dsl::KernelDesc;
use moegen_dsl::abi::{KernelId, params};

use self::layout::Sm100Layout;
use self::prologue::{Common, prologue};
use self::rings::Rings;
use self::smem::Sm100Smem;
use crate::ptx::instrs::Tcgen05Dealloc;
use crate::ptx::{BuildError, Cmp, KernelBuilder, Label};

/// What every role reads: the layout, where things live, and the rings between roles.
struct Sm100 {
    l: Sm100Layout,
    smem: Sm100Smem,
    rings: Rings,
}

impl Sm100 {
    fn tmem_slot(&self) -> u32 {
        self.smem.tmem_slot.offset
    }
}

/// Builds the kernel for a GEMM description.
pub fn build(desc: &KernelDesc) -> (KernelBuilder, Sm100Layout) {
    build_layout(Sm100Layout::new(desc))
}

/// Builds the kernel for a layout; a shared-memory layout that does not fit its budget is
/// recorded as an error (rendering fails with it) and no body is emitted.
pub fn build_layout(l: Sm100Layout) -> (KernelBuilder, Sm100Layout) {
    let mut b = KernelBuilder::new(l.name());
    b.declare(params(&KernelId::Gemm(l.key)));
    let smem = match Sm100Smem::plan(&l) {
        Ok(s) => s,
        Err(source) => {
            b.error(BuildError::Smem { kernel: l.name(), source });
            return (b, l);
        }
    };
    let rings = Rings::new(&l, &smem.bars);
    let g = Sm100 { l, smem, rings };
    let (l, c) = (&g.l, prologue(&mut b, &g));
    let end = Label::named("role_end");

    // Dispatch on warp role.
    let epi = b.setp_u32(Cmp::Lt, c.warp, 4u32);
    let l_epi = b.new_label("epilogue");
    b.bra_if(epi, &l_epi);
    let is_mma = b.setp_u32(Cmp::Eq, c.warp, l.mma_warp);
    let l_mma = b.new_label("mma");
    b.bra_if(is_mma, &l_mma);
    let is_tma = b.setp_u32(Cmp::Eq, c.warp, l.tma_warp);
    let l_tma = b.new_label("producer");
    b.bra_if(is_tma, &l_tma);
    if let Some(rw) = l.relay_warp {
        let is_relay = b.setp_u32(Cmp::Eq, c.warp, rw);
        let l_relay = b.new_label("relay");
        b.bra_if(is_relay, &l_relay);
        emit_gather_dispatch(&mut b, &g, &c, &end);
        b.label(&l_relay);
        gather::relay_role(&mut b, &g, &c, &end);
    } else {
        emit_gather_dispatch(&mut b, &g, &c, &end);
    }
    b.label(&l_epi);
    match l.kind {
        GemmKind::Gemm1 => epilogue_swiglu::epilogue_swiglu(&mut b, &g, &c),
        GemmKind::Gemm2 => epilogue_finalize::epilogue_finalize(&mut b, &g, &c),
    }
    b.bra(&end);
    b.label(&l_mma);
    mma::mma_role(&mut b, &g, &c, &end);
    b.bra(&end);
    b.label(&l_tma);
    producer::producer_role(&mut b, &g, &c, &end);
    b.bra(&end);

    // Teardown: every role rejoins here; TMEM is freed once the whole cluster is done.
    b.label(&end);
    b.bar_sync(0u32);
    if l.cm * l.cn > 1 {
        b.cluster_sync_relaxed();
    }
    let not_mma = b.setp_u32(Cmp::Ne, c.warp, l.mma_warp);
    let exit = b.new_label("exit");
    b.bra_if(not_mma, &exit);
    b.tcgen05_fence_after();
    let columns = l.budget.tmem_alloc_columns;
    b.push(Tcgen05Dealloc { group: l.cta_group(), tmem: c.target.tmem, columns });
    b.label(&exit);
    b.ret();
    (b, g.l)
}

fn emit_gather_dispatch(b: &mut KernelBuilder, g: &Sm100, c: &Common, end: &Label) {
    let l = &g.l;
    if l.kind == GemmKind::Gemm1 {
        let lo = b.setp_u32(Cmp::Ge, c.warp, l.gather_warp);
        let hi = b.setp_u32(Cmp::Lt, c.warp, l.gather_warp + 4);
        let both = b.and_pred(lo, hi);
        let l_g = b.new_label("gather");
        b.bra_if(both, &l_g);
        b.bra(end);
        b.label(&l_g);
        gather::gather_role(b, g, c);
    }
    b.bra(end);
}
