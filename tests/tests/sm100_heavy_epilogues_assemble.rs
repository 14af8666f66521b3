//! The SM100 GEMM1s whose epilogue keeps more values live per element than plain SwiGLU
//! (gpt-oss's clamped SwiGLU with a GEMM1 bias, a bias alone, the clamp alone) assemble with
//! ptxas for sm_100f, sm_103f and sm_100a with no spill and no stack, at every GEMM1 width (1-CTA and
//! 2-CTA, N 128 and 256), in both weight formats and both recipes. They read their step's
//! accumulators in halves and their biases a quad at a time (`sm100/step_inputs.rs`); read
//! all at once they spilled 4 to 1440 bytes (docs/sm100-mxf8f6f4.md).

use moegen_codegen::check::assemble_all;
use moegen_codegen::kernel_set::gemm_kernel;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{
    Activation, ActivationFormat, Arch, EpilogueRecipe, GemmKind, GemmTactic, KernelDescBuilder,
};
use moegen_tests::require;

#[test]
fn clamped_and_bias_gemm1s_assemble_without_spills() {
    require(moegen_codegen::tools::ptxas());
    let mut gemm1s: Vec<GemmTactic> =
        moegen_dsl::tactics_for(Arch::Sm100).into_iter().map(|t| *t.gemm1()).collect();
    gemm1s.sort_by_key(|g| format!("{g}"));
    gemm1s.dedup();
    assert_eq!(gemm1s.len(), 4, "{gemm1s:?}");
    let formats = [
        (WeightFormat::Mxfp4, ActivationFormat::Mxfp8),
        (WeightFormat::Nvfp4, ActivationFormat::Nvfp4),
    ];
    let epilogues = [
        (Activation::SwigluClamped, true),
        (Activation::Swiglu, true),
        (Activation::SwigluClamped, false),
    ];
    let mut kernels = Vec::new();
    for g in &gemm1s {
        assert_eq!(g.kind(), GemmKind::Gemm1);
        for (format, acts) in formats {
            for (activation, bias) in epilogues {
                for recipe in [EpilogueRecipe::Fast, EpilogueRecipe::Exact] {
                    // gpt-oss's epilogue with both recipes; the bias or the clamp alone with
                    // the default (Fast) one.
                    if (activation, bias) != epilogues[0] && recipe == EpilogueRecipe::Exact {
                        continue;
                    }
                    let d = KernelDescBuilder::new(*g)
                        .format(format)
                        .activations(acts)
                        .activation(activation)
                        .bias(bias)
                        .recipe(recipe)
                        .build()
                        .unwrap();
                    kernels.push(gemm_kernel(&d).unwrap());
                }
            }
        }
    }
    assert_eq!(kernels.len(), 4 * 2 * 4);
    let runs = assemble_all(&kernels).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(runs.len(), 3 * kernels.len(), "sm_100f, sm_103f and sm_100a each");
    for r in &runs {
        assert_eq!(r.report.spill_stores + r.report.spill_loads + r.report.stack_frame, 0, "{r:?}");
        assert!(r.report.registers > 0, "{r:?}: ptxas reported no registers, the parse failed");
    }
}
