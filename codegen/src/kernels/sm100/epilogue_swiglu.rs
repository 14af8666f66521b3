//! GEMM1's epilogue: per 64 h columns (one 128-column (up, gate) block of the accumulator,
//! two `tcgen05.ld.32x32b.x64`; with a clamp or a bias four `.x32`, read as the element loop
//! reaches them: `step_inputs.rs`), the activation and NVFP4 quantization with the device
//! `fc2_input_scale` (or MXFP8's) by the kernel's recipe (Fast: `ex2`/`rcp.approx.ftz`, α
//! folded into plain SwiGLU's block factors; Exact: IEEE operations only), branch-free; 32
//! bytes of codes per thread into the warp's staging rows and one 32-bit store of four scale
//! bytes straight into the 128x4 layout; each warp then TMA-stores its 32 × N/2 FP4 tile.

use moegen_dsl::abi::{Buffer, GemmKey, Scalar, TensorMap};
use moegen_dsl::{Activation, EpilogueRecipe, SwigluInput};

use super::Sm100;
use super::epilogue::{STEP_COLS, acc_acquire, acc_release, tmem_load, walk};
use super::h_output::{HOutputBuffers, HValues};
use super::prologue::Common;
use super::smem::gemm1_row_bytes;
use super::step_inputs::StepInputs;
use crate::kernels::epilogue_math::{
    ActivationRegs, BlockQuant, activation, activation_fast, fast_factors, load_activation_params,
    pre_activation, round_bf16, swiglu_fast, swiglu_fast_x2, unfolded_block_quant,
};
use crate::kernels::skeleton::Needs;
use crate::ptx::instrs::{BulkWait, TmaStore};
use crate::ptx::ops::{Access, Bulk, LdRepeat, Memory, Tcgen05};
use crate::ptx::{Guard, KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

/// Accumulator columns of one (up, gate) block: 64 up then 64 gate (the W1 interleave).
const PAIR_COLS: u32 = 2 * STEP_COLS;

/// 64 consecutive f32 from `at` (16 `ld.global.v4`).
pub(super) fn load_f32x64(b: &mut KernelBuilder, at: Reg) -> [Reg; 64] {
    let mut out = Vec::with_capacity(64);
    for q in 0..16i64 {
        let v = b.regs(RegClass::F32, 4);
        b.emit(
            Memory::Ld(Access::vector(Space::Global, VecWidth::V4, Ty::F32)),
            vec![Operand::regs(&v), Operand::Reg(at).at(16 * q)],
        );
        out.extend(v);
    }
    std::array::from_fn(|i| out[i])
}

/// What an element of the unfolded epilogue (no Fast factors folded) needs.
struct Element<'a> {
    key: &'a GemmKey,
    alpha1: Reg,
    act: Option<&'a ActivationRegs>,
}

/// One value of h from its (up, gate) accumulators and biases: α1 (and the bias), the
/// key's bf16 rounding, then its activation by its recipe.
fn element(
    b: &mut KernelBuilder,
    e: &Element,
    up: Reg,
    gate: Reg,
    bias: Option<(Reg, Reg)>,
) -> Reg {
    let mut uu = pre_activation(b, e.alpha1, up, bias.map(|x| x.0));
    let mut gg = pre_activation(b, e.alpha1, gate, bias.map(|x| x.1));
    if e.key.swiglu_input == SwigluInput::Bf16 {
        uu = round_bf16(b, uu);
        gg = round_bf16(b, gg);
    }
    match e.key.recipe {
        EpilogueRecipe::Exact => activation(b, e.key.activation, e.act, uu, gg),
        EpilogueRecipe::Fast => activation_fast(b, e.key.activation, e.act, uu, gg),
    }
}

pub(super) fn epilogue_swiglu(b: &mut KernelBuilder, g: &Sm100, c: &Common) {
    let l = &g.l;
    let alpha = b.ld_buffer(Buffer::Alpha1);
    let out = HOutputBuffers::load(b, g);
    let map_out = b.tensor_map_addr(TensorMap::Gemm1OutputStore);
    let inter = b.ld_scalar(Scalar::Intermediate);
    let atoms_per_rowblock = out.atoms_per_rowblock(b, inter);
    // Plain SwiGLU folds α1 into the Fast recipe's NVFP4 block factors; a clamp or a bias
    // needs the true pre-activations, so α1 stays in the element loop, as it does for MXFP8
    // (a power-of-two scale cannot take α).
    let folded = l.key.activation == Activation::Swiglu && !l.key.bias && out.gs.is_some();
    let act_params = l.key.activation.has_params().then(|| b.ld_buffer(Buffer::ActivationParams));
    let bias = l.key.bias.then(|| b.ld_buffer(Buffer::Gemm1Bias));
    let acc = g.rings.acc.consumer(b, &g.rings.parties.epilogue, c.smem);
    // One staging row per thread: N/2 values of h.
    let row_stride = gemm1_row_bytes(l);
    let staging = b.add_u32(c.smem, g.smem.epilogue.offset);
    let my_row = b.mad_u32(c.tid, row_stride, staging);
    let warp_stage = b.mad_u32(c.warp, 32 * row_stride, staging);
    // This thread's word of each 512-byte scale atom: lane·16 + quarter·4.
    let lane_sf = b.shl_b32(c.lane, 4u32);
    let lane_sf = b.mad_u32(c.warp, 4u32, lane_sf);
    let out = out.finish(atoms_per_rowblock, lane_sf);
    let one = b.elect();
    b.emit_if(
        Guard::when(one),
        crate::ptx::ops::Memory::PrefetchTensormap,
        vec![Operand::addr(map_out)],
    );
    // (up, gate) blocks per tile: one 64-column step of h each.
    let steps = l.n / PAIR_COLS;
    // A clamp or a bias keeps more values live per element: such steps read their inputs
    // as the element loop reaches them (`StepInputs`).
    let heavy = l.key.bias || l.key.activation.has_params();
    c.sched.units(b, Needs::EXPERT, &mut |b, u| {
        // The staging rows are free once this warp's previous TMA store has read them.
        b.push_if(Guard::when(one), BulkWait { pending: 0, read: true });
        b.bar_warp_sync();
        let al_addr = b.index_addr(alpha, u.expert, 4);
        let al = b.ld_global(Ty::F32, RegClass::F32, al_addr);
        let fast = (folded && l.key.recipe == EpilogueRecipe::Fast)
            .then_some(out.gs)
            .flatten()
            .map(|gs| fast_factors(b, al, gs, l.key.swiglu_input));
        // f32 inputs: the element pairs run as `.f32x2` (FMUL2/FADD2).
        let pairs = fast.filter(|f| f.input == SwigluInput::F32).map(|f| {
            let one = b.mov_f32(1f32);
            (b.pack_b64(f.exp_scale, f.exp_scale), b.pack_b64(one, one))
        });
        let act = act_params.map(|base| load_activation_params(b, base, u.expert));
        // This unit's bias rows: the expert's up values from h column n·N/2, its gate
        // values I further.
        let bias_rows = bias.map(|base| {
            let two_i = b.shl_b32(inter, 1u32);
            let row = b.mul_u32(u.expert, two_i);
            let col = b.mad_u32(u.n, l.n / 2, row);
            let up = b.index_addr(base, col, 4);
            let gate_col = b.add_u32(col, inter);
            let gate = b.index_addr(base, gate_col, 4);
            [up, gate]
        });
        // The tile's first h column; its steps past I (a last N block of 2I not a multiple
        // of N) hold zeros and store nothing: the TMA store clips their codes.
        let col = b.mul_u32(u.n, l.n / 2);
        let el = Element { key: &l.key, alpha1: al, act: act.as_ref() };
        let tile_sf = out.tile_scales(b, u.row0, c.tid, u.n, steps);
        let tile = acc_acquire(b, g, c, &acc);
        let (order, release_after) = walk(b, g, &tile, steps);
        for (p, step) in order.into_iter().enumerate() {
            // Step s of this tile: accumulator columns s·128.., h columns s·64.., scale atom
            // s of the tile's N block, staging bytes s·32.
            let at = step.offset(b, tile.taddr, PAIR_COLS);
            let in_n = step.within(b, col, STEP_COLS, inter);
            let mut staged = |b: &mut KernelBuilder, bytes| step.offset(b, my_row, bytes);
            let how = |b: &mut KernelBuilder, gs: Reg| match (&fast, l.key.recipe) {
                (Some(f), _) => BlockQuant::Fast { q: f.q, k: f.k },
                (None, EpilogueRecipe::Fast) => unfolded_block_quant(b, gs),
                (None, EpilogueRecipe::Exact) => BlockQuant::Exact { g: gs },
            };
            // The step's values into the staging row and scales: NVFP4 computes all 64 first
            // unless `nvfp4_by_block` (then, as MXFP8 always, block by block as they are
            // quantized, 32 live).
            let mut store = |b: &mut KernelBuilder,
                             h_at: &mut dyn FnMut(&mut KernelBuilder, usize) -> Reg,
                             nvfp4_by_block: bool| match out.gs {
                Some(gs) if !nvfp4_by_block => {
                    let h: [Reg; 64] = std::array::from_fn(|i| h_at(b, i));
                    let how = how(b, gs);
                    let vals = HValues::Ready(&h);
                    out.store_step(b, vals, Some(how), &mut staged, &tile_sf, step, in_n);
                }
                gs => {
                    let how = gs.map(|gs| how(b, gs));
                    let vals = HValues::Lazy(h_at);
                    out.store_step(b, vals, how, &mut staged, &tile_sf, step, in_n);
                }
            };
            if heavy {
                // The step's bias rows (the same for every row: broadcast loads); a step past
                // I reads the first step's instead.
                let bias_at = bias_rows.map(|rows| {
                    rows.map(|r| {
                        let at = step.offset_u64(b, r, STEP_COLS * 4);
                        b.selp_b64(at, r, in_n)
                    })
                });
                let release = |b: &mut KernelBuilder| acc_release(b, g, c, &acc);
                let frees = (p + 1 == release_after).then_some(&release as &dyn Fn(&mut _));
                let mut inputs = StepInputs::new(b, at, bias_at, frees);
                let mut h_at = |b: &mut KernelBuilder, i: usize| {
                    let (up, gate) = inputs.acc(b, i);
                    let bias = inputs.bias(b, i);
                    element(b, &el, up, gate, bias)
                };
                // Block by block, except NVFP4 with the Exact recipe: there ptxas (13.5)
                // held two such kernels at 96 registers and spilled 8 bytes, while all 64
                // values first assemble at 120–151 with none
                // (tests/tests/sm100_heavy_epilogues_assemble.rs). With Fast, block by block
                // takes the gpt-oss NVFP4 GEMM1s from 136–168 registers to 100–162.
                store(b, &mut h_at, l.key.recipe != EpilogueRecipe::Exact);
                inputs.finish(b);
                continue;
            }
            let up = tmem_load::<64>(b, at, 0, LdRepeat::X64);
            let gate = tmem_load::<64>(b, at, STEP_COLS, LdRepeat::X64);
            b.emit(Tcgen05::WaitLd, vec![]);
            if p + 1 == release_after {
                acc_release(b, g, c, &acc);
            }
            let paired: Option<Vec<Reg>> = pairs.map(|(exp_scale2, one2)| {
                (0..64)
                    .step_by(2)
                    .flat_map(|i| {
                        let (u, g) = ([up[i], up[i + 1]], [gate[i], gate[i + 1]]);
                        swiglu_fast_x2(b, exp_scale2, one2, u, g)
                    })
                    .collect()
            });
            let mut h_at = |b: &mut KernelBuilder, i: usize| match (&paired, &fast) {
                (Some(p), _) => p[i],
                (None, Some(f)) => swiglu_fast(b, f, up[i], gate[i]),
                (None, None) => element(b, &el, up[i], gate[i], None),
            };
            store(b, &mut h_at, false);
        }
        acc.advance(b);
        b.fence_proxy_async();
        b.bar_warp_sync();
        let skip = b.new_label("skip_store");
        b.bra_unless(one, &skip);
        let wrow = b.mad_u32(c.warp, 32u32, u.row0);
        b.push(TmaStore { map: map_out, coords: vec![col.into(), wrow.into()], src: warp_stage });
        b.emit(Bulk::CommitGroup, vec![]);
        b.label(&skip);
    });
    b.push_if(Guard::when(one), BulkWait { pending: 0, read: false });
}
