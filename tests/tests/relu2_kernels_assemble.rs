//! The ReLU² GEMM1s (not in the default set, like GeGLU's) assemble with ptxas with no
//! spill and no stack: on sm_90a A16, A4 and A8, with and without a GEMM1 bias, every GEMM1
//! width and schedule of the Hopper tactic space (cooperative N 128 and N 256, ping-pong N
//! 128 at T 128); on SM100 both recipes, 1-CTA and 2-CTA, for sm_100f, sm_103f and sm_100a.

use moegen_codegen::check::assemble_all;
use moegen_codegen::kernel_set::gemm_kernel;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{
    Activation, ActivationFormat, GemmKind, GemmTactic, KernelDescBuilder, Schedule, Target,
};
use moegen_tests::require;

#[test]
fn hopper_relu2_gemm1s_assemble_without_spills() {
    require(moegen_codegen::tools::ptxas());
    let mut kernels = Vec::new();
    let shapes = [
        (16, 128, Schedule::Cooperative),
        (64, 256, Schedule::Cooperative),
        (128, 128, Schedule::PingPong),
    ];
    for (tile, n, schedule) in shapes {
        let t = GemmTactic::new_sm90_scheduled(GemmKind::Gemm1, tile, n, schedule).unwrap();
        for (acts, format) in [
            (ActivationFormat::Bf16, WeightFormat::Nvfp4),
            (ActivationFormat::Nvfp4, WeightFormat::Nvfp4),
            (ActivationFormat::Fp8, WeightFormat::Mxfp4),
        ] {
            for bias in [false, true] {
                let d = KernelDescBuilder::new(t)
                    .target(Target::Sm90a)
                    .format(format)
                    .activations(acts)
                    .activation(Activation::Relu2)
                    .bias(bias)
                    .build()
                    .unwrap();
                kernels.push(gemm_kernel(&d).unwrap());
            }
        }
    }
    let runs = assemble_all(&kernels).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(runs.len(), kernels.len());
    for r in &runs {
        assert!(r.kernel.contains("relu2"), "{}", r.kernel);
        assert_eq!(r.arch, "sm_90a");
        assert_eq!(r.report.spill_stores + r.report.spill_loads + r.report.stack_frame, 0, "{r:?}");
        assert!(r.report.registers > 0, "{r:?}: ptxas reported no registers, the parse failed");
    }
}

/// The SM100 ReLU² GEMM1s, both recipes, with and without a bias, a 1-CTA and a 2-CTA
/// tactic: they assemble for every architecture they target (sm_100f, sm_103f, sm_100a)
/// with no spill and no stack.
#[test]
fn sm100_relu2_gemm1s_assemble_without_spills() {
    use moegen_codegen::check::assembly_targets;
    use moegen_dsl::{Arch, EpilogueRecipe};
    require(moegen_codegen::tools::ptxas());
    let mut kernels = Vec::new();
    let mut gemm1s: Vec<_> = moegen_dsl::tactics_for(Arch::Sm100)
        .into_iter()
        .map(|t| *t.gemm1())
        .filter(|g1| {
            (g1.mma_tiler() == [128, 128] && g1.cluster() == [1, 1])
                || (g1.mma_tiler() == [256, 256] && g1.cluster() == [2, 1])
        })
        .collect();
    gemm1s.dedup();
    assert_eq!(gemm1s.len(), 2, "{gemm1s:?}");
    for g1 in &gemm1s {
        for recipe in [EpilogueRecipe::Fast, EpilogueRecipe::Exact] {
            for bias in [false, true] {
                let d = KernelDescBuilder::new(*g1)
                    .recipe(recipe)
                    .activation(Activation::Relu2)
                    .bias(bias)
                    .build()
                    .unwrap();
                kernels.push(gemm_kernel(&d).unwrap());
            }
        }
    }
    assert_eq!(kernels.len(), 8);
    let runs = assemble_all(&kernels).unwrap_or_else(|e| panic!("{e}"));
    let expected: usize = kernels.iter().map(|k| assembly_targets(k).len()).sum();
    assert_eq!(runs.len(), expected);
    for r in &runs {
        assert!(r.kernel.contains("relu2"), "{}", r.kernel);
        assert_eq!(r.report.spill_stores + r.report.spill_loads + r.report.stack_frame, 0, "{r:?}");
        assert!(r.report.registers > 0, "{r:?}: ptxas reported no registers, the parse failed");
    }
}
