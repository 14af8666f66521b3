//! The SM100 GEMM1s whose epilogue keeps more values live per element than plain SwiGLU (a
//! GEMM1 bias, the clamped SwiGLU, or both: gpt-oss's) assemble with ptxas for sm_100f and
//! sm_103f with no spill and no stack, at every GEMM1 width (1-CTA and 2-CTA,
//! N 128 and 256), in both weight formats and with both recipes. They read their step's
//! accumulators in halves and their biases a quad at a time (`sm100/step_inputs.rs`); read
//! all at once they spilled (docs/sm100-mxf8f6f4.md).

use moegen_codegen::check::parallel_map;
use moegen_codegen::kernel_set::gemm_kernel;
use moegen_codegen::ptxas::assemble;
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
        (Activation::GegluTanh, true),
    ];
    let mut kernels = Vec::new();
    for g in &gemm1s {
        assert_eq!(g.kind(), GemmKind::Gemm1);
        for (format, acts) in formats {
            for (activation, bias) in epilogues {
                for recipe in [EpilogueRecipe::Fast, EpilogueRecipe::Exact] {
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
    assert_eq!(kernels.len(), 4 * 2 * 4 * 2);
    // sm_100f PTX for sm_100f and sm_103f, whose register allocations differ; sm_100a (the
    // same PTX retargeted) allocated as sm_100f wherever it was compared (2026-12-07).
    let jobs: Vec<_> =
        kernels.iter().flat_map(|k| ["sm_100f", "sm_103f"].map(|a| (k, a))).collect();
    let runs = parallel_map(&jobs, |&(k, arch)| (k, arch, assemble(&k.ptx, arch)));
    for (k, arch, run) in runs {
        let name = &k.name;
        let (r, _) = run.unwrap_or_else(|e| panic!("{name} for {arch}: {e}"));
        assert_eq!(r.spill_stores + r.spill_loads + r.stack_frame, 0, "{name} for {arch}: {r:?}");
        assert!(r.registers > 0, "{name} for {arch}: ptxas reported no registers");
    }
}
