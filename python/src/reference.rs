//! moegen's CPU reference of a layer, over the weights the layer kept on the host: what its
//! kernels compute, bit for bit (docs/reference.md), for tests and the GPU check.

use moegen_runtime::prelude::*;
use moegen_runtime::reference::{Sm90Tiling, Sm90Weights, moe_reference_sm90};

use crate::errors::Result;

/// The weights kept on the host for the reference, in the form the CPU reference of the
/// layer's generation takes.
pub(crate) enum HostWeights {
    /// SM100 kernels: `moe_reference`.
    Sm100(PreparedWeights),
    /// Hopper kernels: `moe_reference_sm90`.
    Sm90(Sm90Weights),
    /// SM100's MXFP8 × MXFP4 kernels: `moe_reference_sm100_mx`.
    Sm100Mx(Sm100MxWeights),
}

/// The reference's bf16 output `[tokens, hidden]` for bf16 `x` computed for `tactic` (the one
/// the layer runs at this token count): its routing tile and, on Hopper, its GEMMs' K splits
/// (a split tactic's partial sums round on their own).
pub(crate) fn run(
    kept: &HostWeights,
    shape: &MoeShape,
    c: &LayerConfig,
    input_scale: f32,
    tactic: &MoeTactic,
    x: &[bf16],
    routing: &Routing,
) -> Result<Vec<bf16>> {
    let tile = tactic.tile();
    // What the SM100 kernels' GEMM1 epilogue and finalize do for this configuration.
    let sm100 = ReferenceOptions {
        swiglu_input: c.swiglu_input,
        recipe: c.recipe_on(Target::Sm100f),
        finalize: c.finalize,
    };
    Ok(match kept {
        HostWeights::Sm100(w) => {
            let xf: Vec<f32> = x.iter().map(|v| v.to_f32()).collect();
            let acts = quantize_activations(&xf, routing.tokens, shape.hidden, input_scale)?;
            moe_reference(shape, &acts, w, routing, tile, sm100)?.output
        }
        HostWeights::Sm100Mx(w) => {
            // The layer quantizes x to MXFP8 on the device by this same rule.
            let acts = quantize_mxfp8_activations(x, routing.tokens, shape.hidden)?;
            moe_reference_sm100_mx(shape, &acts, w, routing, tile, sm100)?.output
        }
        HostWeights::Sm90(w) => {
            let tiling = Sm90Tiling::of(tactic)?;
            moe_reference_sm90(
                shape,
                x,
                input_scale,
                w,
                routing,
                tiling,
                c.swiglu_input,
                c.finalize,
            )?
            .output
        }
    })
}
