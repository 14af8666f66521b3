//! GEMM1's epilogue for an ungated activation (ReLU²). W1 has I rows in h column order, so
//! a consumer's two m64 blocks are two consecutive 64-column blocks of h (2·ub and 2·ub + 1
//! for its unit block ub), not an (up, gate) pair: each accumulator element is one
//! pre-activation, `x = α1·acc` (`fma.rn` with the bias), optionally rounded to bf16, then
//! `h = max(x, 0) ·rn max(x, 0)` (A8: the accumulator first scaled by its row's and token's
//! factors, as the gated epilogue). Each block goes through the same staging tile and
//! copy-out as the gated epilogue's one block (bf16, or A4's NVFP4 requantization of 16
//! columns), one after the other: the staging tile stays T × 64 columns, so the
//! shared-memory budget is the gated kernel's.

use moegen_dsl::{EpilogueRecipe, SwigluInput};

use super::Sm90;
use super::accum::{Element, elements};
use super::columns::{ColumnLoads, ColumnReader, store_columns};
use super::epilogue_a8::a8_unit;
use super::epilogue_swiglu::{SwigluParams, consumer_barrier, copy_out, stage_token_pair};
use super::mainloop::Consumer;
use crate::kernels::epilogue_math::{
    activation, activation_fast, load_activation_params, pre_activation, round_bf16,
};
use crate::kernels::skeleton::Unit;
use crate::ptx::{KernelBuilder, Reg, RegClass, Ty};

/// The epilogue of one unit: `acc` = this consumer's two h column blocks; `loads` its
/// columns' values (A8), loaded before the K loop.
pub(super) fn epilogue_relu2(
    b: &mut KernelBuilder,
    g: &Sm90,
    k: &Consumer,
    p: &SwigluParams,
    u: &Unit,
    acc: &[Vec<Reg>],
    loads: Option<&ColumnLoads>,
) {
    let l = &g.l;
    let a8 = p.a8.as_ref().map(|a| a8_unit(b, g, k, u, a));
    let columns = p.columns.as_ref().zip(loads);
    if acc.len() != 2 || a8.is_some() != columns.is_some() {
        let kernel = b.name.clone();
        let what = "ungated epilogue: two h blocks per consumer (A8: and a column table)";
        b.error(crate::ptx::BuildError::Inconsistent { kernel, what });
        return;
    }
    // The column table is written once per unit, before the first block's barrier (the
    // previous unit's last copy-out has read it), and read by both blocks.
    if let Some((cp, loads)) = columns {
        store_columns(b, g, k, cp, loads);
    }
    let al_addr = b.index_addr(p.alpha, u.expert, 4);
    let alpha1 = b.ld_global(Ty::F32, RegClass::F32, al_addr);
    let act = p.act_params.map(|base| load_activation_params(b, base, u.expert));
    let ub = b.mul_u32(u.n, l.parts);
    let ub = b.add_u32(ub, k.part);
    let all: Vec<Element> = elements(l.tile).collect();
    for (blk, block) in (0u32..).zip(acc) {
        let hb = b.mad_u32(ub, 2u32, blk);
        let bias = p.bias.map(|base| block_bias(b, k, p, u, base, hb));
        // The previous copy-out (this unit's block 0, or the previous unit's) has read the
        // staging tile.
        consumer_barrier(b, k);
        let reader = columns.map(|(cp, _)| ColumnReader::new(b, g, k, cp));
        for (i, pair) in (0u32..).zip(all.chunks_exact(4)) {
            let tau = reader.map(|r| r.scales(b, i));
            // Elements (v1, v0) of one n8 block: for each token (v0), rows r0 and r0 + 8.
            for v0 in 0..2u32 {
                let es: Vec<Element> = pair.iter().copied().filter(|e| e.v0 == v0).collect();
                let h: Vec<Reg> = es
                    .iter()
                    .map(|e| {
                        let bias = bias.map(|rows| rows[e.v1 as usize]);
                        let mut acc = block[e.index];
                        if let (Some(a), Some(t)) = (&a8, tau) {
                            acc = a.apply(b, acc, blk as usize, e.v1, t[v0 as usize]);
                        }
                        let mut x = pre_activation(b, alpha1, acc, bias);
                        if l.key.swiglu_input == SwigluInput::Bf16 {
                            x = round_bf16(b, x);
                        }
                        // Ungated: the pre-activation is the activation's only operand.
                        let kind = l.key.activation;
                        match l.key.recipe {
                            EpilogueRecipe::Exact => activation(b, kind, act.as_ref(), x, x),
                            // ReLU² has no transcendental: the same operations.
                            EpilogueRecipe::Fast => activation_fast(b, kind, act.as_ref(), x, x),
                        }
                    })
                    .collect();
                stage_token_pair(b, l, p, &es, h);
            }
        }
        consumer_barrier(b, k);
        copy_out(b, l, p, u, hb);
    }
}

/// This thread's two biases of h column block `hb` (rows r0 and r0 + 8): f32 [L, I], one
/// per W1 row. In an expert's partial last N block the column may lie past I, where the
/// consumer stores nothing, so the index is clamped to the expert's row.
fn block_bias(
    b: &mut KernelBuilder,
    k: &Consumer,
    p: &SwigluParams,
    u: &Unit,
    base: Reg,
    hb: Reg,
) -> [Reg; 2] {
    let col0 = b.shl_b32(hb, 6u32);
    let col0 = b.add_u32(col0, k.r0);
    let last = b.sub_u32(p.inter, 1u32);
    let expert_row = b.mul_u32(u.expert, p.inter);
    [0u32, 8].map(|dv| {
        let col = b.add_u32(col0, dv);
        let col = b.min_u32(col, last);
        let i = b.add_u32(expert_row, col);
        let a = b.index_addr(base, i, 4);
        b.ld_global(Ty::F32, RegClass::F32, a)
    })
}
