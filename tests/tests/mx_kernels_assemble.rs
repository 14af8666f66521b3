//! The SM100 MXFP8 × MXFP4 GEMMs (`kind::mxf8f6f4`, docs/sm100-mxf8f6f4.md) assemble with
//! ptxas, no spill and no stack: every GEMM1 and GEMM2 of the tactic space (both finalize
//! modes) for sm_100f (assembled for sm_100f and sm_103f) and sm_100a, and the 1-CTA and 2-CTA N 256 GEMM1s with each recipe and ReLU² for
//! sm_100f, sm_103f and sm_100a. (A GEMM1 bias and the clamped SwiGLU:
//! sm100_heavy_epilogues_assemble.rs.)

use moegen_codegen::check::assemble_all;
use moegen_codegen::kernel_set::gemm_kernel;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{
    Activation, ActivationFormat, Arch, EpilogueRecipe, FinalizeMode, GemmKind, GemmTactic,
    KernelDescBuilder, Target,
};
use moegen_tests::require;

fn mx(t: GemmTactic) -> KernelDescBuilder {
    KernelDescBuilder::new(t).format(WeightFormat::Mxfp4).activations(ActivationFormat::Mxfp8)
}

fn gemms() -> Vec<GemmTactic> {
    let mut all: Vec<GemmTactic> = moegen_dsl::tactics_for(Arch::Sm100)
        .into_iter()
        .flat_map(|t| [*t.gemm1(), *t.gemm2()])
        .collect();
    all.sort_by_key(|g| format!("{g}"));
    all.dedup();
    all
}

#[test]
fn every_mx_gemm_assembles_for_every_sm100_target_without_spills() {
    require(moegen_codegen::tools::ptxas());
    let mut kernels = Vec::new();
    for (target, g) in [Target::Sm100f, Target::Sm100a]
        .into_iter()
        .flat_map(|t| gemms().into_iter().map(move |g| (t, g)))
    {
        let finals: &[FinalizeMode] = match g.kind() {
            GemmKind::Gemm1 => &[FinalizeMode::BulkReduceAdd],
            GemmKind::Gemm2 => &[FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic],
        };
        for &f in finals {
            let d = match g.kind() {
                GemmKind::Gemm1 => mx(g),
                GemmKind::Gemm2 => mx(g).finalize(f),
            };
            let d = d.target(target).build().unwrap();
            kernels.push(gemm_kernel(&d).unwrap());
        }
    }
    assert_eq!(kernels.len(), 2 * (4 + 8 * 2), "every GEMM1, every GEMM2 in both modes");
    let runs = assemble_all(&kernels).unwrap_or_else(|e| panic!("{e}"));
    // sm_100f kernels assemble for sm_100f and sm_103f, sm_100a kernels for sm_100a.
    for arch in ["sm_100f", "sm_103f", "sm_100a"] {
        assert_eq!(runs.iter().filter(|r| r.arch == arch).count(), 4 + 8 * 2, "{arch}");
    }
    for r in &runs {
        assert!(r.kernel.contains("_mxa8"), "{}", r.kernel);
        assert_eq!(r.report.spill_stores + r.report.spill_loads + r.report.stack_frame, 0, "{r:?}");
        assert!(r.report.registers > 0, "{r:?}: ptxas reported no registers, the parse failed");
    }
}

#[test]
fn mx_gemm1_epilogues_assemble_on_every_sm100_target() {
    require(moegen_codegen::tools::ptxas());
    let mut kernels = Vec::new();
    let wide: Vec<GemmTactic> = gemms()
        .into_iter()
        .filter(|g| g.kind() == GemmKind::Gemm1 && g.mma_tiler()[1] == 256)
        .filter(|g| g.cluster()[1] == 1)
        .collect();
    assert_eq!(wide.len(), 2, "{wide:?}");
    for g in wide {
        for target in [Target::Sm100f, Target::Sm100a] {
            for (activation, bias, recipe) in [
                (Activation::Swiglu, false, EpilogueRecipe::Exact),
                (Activation::Swiglu, false, EpilogueRecipe::Fast),
                (Activation::Relu2, false, EpilogueRecipe::Fast),
            ] {
                let d = mx(g)
                    .target(target)
                    .activation(activation)
                    .bias(bias)
                    .recipe(recipe)
                    .build()
                    .unwrap();
                kernels.push(gemm_kernel(&d).unwrap());
            }
        }
    }
    let runs = assemble_all(&kernels).unwrap_or_else(|e| panic!("{e}"));
    // sm_100f kernels assemble for sm_100f and sm_103f.
    assert!(runs.iter().any(|r| r.arch == "sm_103f"), "{runs:?}");
    for r in &runs {
        assert_eq!(r.report.spill_stores + r.report.spill_loads + r.report.stack_frame, 0, "{r:?}");
    }
}
