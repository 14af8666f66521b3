//! The warp-specialized, persistent SM100 GEMM kernels of the MoE layer, one file per role:
//!
//! - `schedule`: set-up, barrier initialization, the static schedule and K loops;
//! - `producer`: TMA loads of B/SFB (and GEMM2's A/SFA);
//! - `gather`: GEMM1's cp.async gather of A/SFA and the 2-CTA relay;
//! - `mma`: scale factors into TMEM, block-scaled MMAs, commits;
//! - `epilogue`, `epilogue_swiglu` (`epilogue_relu2` for the ungated ReLU²),
//!   `epilogue_finalize`: GEMM1's activation + NVFP4
//!   quantization, GEMM2's scaled bf16 reduce-add;
//! - [`layout`] (roles, tile sizes, descriptors), [`smem`] (shared-memory regions) and
//!   [`rings`] (the pipelines between the roles).

mod epilogue;
mod epilogue_finalize;
mod epilogue_relu2;
mod epilogue_swiglu;
mod gather;
mod h_output;
pub mod layout;
mod mma;
mod producer;
mod prologue;
pub mod rings;
pub mod smem;
mod step_inputs;

use moegen_dsl::GemmKind;
use moegen_dsl::KernelDesc;
use moegen_dsl::abi::roles::{GATHER_WARPS, gemm_roles};
use moegen_dsl::abi::{KernelId, params};

use self::layout::Sm100Layout;
use self::prologue::prologue;
use self::rings::Rings;
use self::smem::Sm100Smem;
use crate::kernels::skeleton::{Routes, WarpSpan};
use crate::ptx::instrs::Tcgen05Dealloc;
use crate::ptx::{BuildError, Cmp, KernelBuilder, Label};

/// The warp roles of an SM100 GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Epilogue,
    Mma,
    Tma,
    Relay,
    Gather,
}

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
    if moegen_dsl::Sm100Operands::of(l.key.format, l.key.activations).is_none() {
        let kernel = l.name();
        b.error(BuildError::Inconsistent {
            kernel,
            what: "operand formats SM100 does not multiply",
        });
        return (b, l);
    }
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

    // Each warp to its role's body (the ABI's role table); the bodies' order is the
    // emitted code's, independent of the tests'.
    let r = gemm_roles(&l.key);
    let mut roles = vec![
        (Role::Epilogue, "epilogue", WarpSpan { first: 0, count: r.epilogue_warps }),
        (Role::Mma, "mma", WarpSpan::one(r.mma_warp)),
        (Role::Tma, "producer", WarpSpan::one(r.tma_warp)),
    ];
    roles.extend(r.relay_warp.map(|w| (Role::Relay, "relay", WarpSpan::one(w))));
    let gather = r.gather_warp.map(|first| WarpSpan { first, count: GATHER_WARPS });
    roles.extend(gather.map(|span| (Role::Gather, "gather", span)));
    let routes = Routes::dispatch(&mut b, c.warp, &roles, &end);
    if routes.enter(&mut b, Role::Gather) {
        gather::gather_role(&mut b, &g, &c);
        b.bra(&end);
    }
    if routes.enter(&mut b, Role::Relay) {
        gather::relay_role(&mut b, &g, &c, &end);
    }
    routes.enter(&mut b, Role::Epilogue);
    match l.kind {
        GemmKind::Gemm1 if !l.key.activation.gated() => {
            epilogue_relu2::epilogue_relu2(&mut b, &g, &c)
        }
        GemmKind::Gemm1 => epilogue_swiglu::epilogue_swiglu(&mut b, &g, &c),
        GemmKind::Gemm2 => epilogue_finalize::epilogue_finalize(&mut b, &g, &c),
    }
    b.bra(&end);
    routes.enter(&mut b, Role::Mma);
    mma::mma_role(&mut b, &g, &c, &end);
    b.bra(&end);
    routes.enter(&mut b, Role::Tma);
    producer::producer_role(&mut b, &g, &c);
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
