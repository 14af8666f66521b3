//! The CPU reference of the NVFP4 MoE layer: routing sort → GEMM1 → GEMM2 + finalize,
//! written from moe-pipeline.md and the arithmetic fixed in docs/reference.md, so that
//! kernels (simulated or on hardware) and benchmarks have one thing to be checked against.

mod checkpoint;
mod epilogue;
mod exact_dot;
mod gemm1;
mod gemm2;
mod mx_dot;
mod oracle;
mod par;
mod sm100_mx;
mod sm100_mx_activations;
mod sm100_mx_gemm;
mod sm90;
mod sm90_a8;
mod sm90_kernel_form;
mod weights;
mod wgmma_fp8_model;
mod wgmma_model;

pub use checkpoint::{
    CheckpointScales, ExpertTensors, Mxfp4Tensor, Nvfp4Tensor, import_mxfp4, import_nvfp4,
};
pub use epilogue::ExpertEpilogue;
pub use exact_dot::{DecodedRow, MMA_K, block_scaled_dot, fixed_to_f32};
pub use gemm1::{Gemm1Options, Gemm1Output, gemm1_reference};
pub use gemm2::{Routing, finalize, gemm2_contributions};
pub use moegen_dsl::plan::{MoeShape, SWIGLU_INTERLEAVE};
pub use mx_dot::{E2m1Row, E4m3Row, MX_MMA_K, add_scaled_rn, mx_dot, mx_dot_bytes};
pub use oracle::{oracle_moe, oracle_moe_epilogue, relative_l2_error};
pub use sm90::{
    KernelLayout, Sm90Gemm1Output, Sm90ReferenceRun, Sm90Tiling, Sm90Weights, moe_reference_sm90,
    sm90_activations, sm90_gemm1_h, sm90_gemm1_reference, sm90_gemm1_reference_with,
    sm90_gemm2_contributions,
};
pub use sm90_a8::{
    Sm90A8ReferenceRun, Sm90A8Weights, moe_reference_sm90_a8, quantize_fp8_row, sm90_a8_gemm1_h,
    sm90_a8_gemm1_reference, sm90_a8_gemm1_reference_with, sm90_a8_gemm2_contributions,
};
pub use sm100_mx::{
    MX_K_TILE, Sm100MxWeights, mx_padded_k, sm100_mx_w1_scale_layout, sm100_mx_w2_scale_layout,
};
pub use sm100_mx_activations::{Mxfp8Activations, quantize_mxfp8_activations};
pub use sm100_mx_gemm::{
    Sm100MxGemm1Output, Sm100MxReferenceRun, moe_reference_sm100_mx, sm100_mx_gemm1_h,
    sm100_mx_gemm1_reference, sm100_mx_gemm2_contributions, sm100_mx_h_scale_layout,
};
pub use weights::{
    Nvfp4Activations, PreparedWeights, prepare_relu2_weights, prepare_weights,
    quantize_activations, validate_weights, w1_scale_layout, w1_scale_layout_for, w2_scale_layout,
};
pub use wgmma_fp8_model::{wgmma_dot_e4m3, wgmma_dot_e4m3_split, wgmma_step_e4m3};
pub use wgmma_model::{SplitK, wgmma_dot, wgmma_dot_split, wgmma_step};

use half::bf16;
use moegen_dsl::{EpilogueRecipe, FinalizeMode, SwigluInput, TileSize};

use crate::error::{Result, check_len};
use crate::routing::{SortOutputs, moe_sort_router};

/// Choices the reference makes explicit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReferenceOptions {
    /// SwiGLU input precision.
    pub swiglu_input: SwigluInput,
    /// GEMM1's epilogue recipe (the SM100 kernels' default: Fast).
    pub recipe: EpilogueRecipe,
    /// How routes are summed.
    pub finalize: FinalizeMode,
}

/// Every intermediate of one reference run.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceRun {
    /// Routing sort outputs.
    pub sort: SortOutputs,
    /// GEMM1's NVFP4 output.
    pub gemm1: Gemm1Output,
    /// `[tokens, H]` output.
    pub output: Vec<bf16>,
}

/// Runs the whole layer on the CPU.
pub fn moe_reference(
    shape: &MoeShape,
    x: &Nvfp4Activations,
    w: &PreparedWeights,
    routing: &Routing,
    tile: TileSize,
    opts: ReferenceOptions,
) -> Result<ReferenceRun> {
    check_len("routing tokens", routing.tokens, x.tokens)?;
    let sort = moe_sort_router(&routing.experts, routing.tokens, &shape.window, tile)?;
    let g1 = Gemm1Options { swiglu_input: opts.swiglu_input, recipe: opts.recipe };
    let gemm1 = gemm1_reference(shape, x, w, &sort, g1)?;
    let contrib = gemm2_contributions(shape, &gemm1, w, &sort, routing)?;
    let output = finalize(&contrib, routing.tokens, shape.top_k(), shape.hidden, opts.finalize)?;
    Ok(ReferenceRun { sort, gemm1, output })
}
