//! The Hopper ReLU² GEMM1s (not in the default set, like GeGLU's) assemble with ptxas for
//! sm_90a with no spill and no stack: A16 and A4, with and without a GEMM1 bias, every GEMM1
//! width and schedule of the Hopper tactic space (cooperative N 128 and N 256, ping-pong N
//! 128 at T 128).

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
        for acts in [ActivationFormat::Bf16, ActivationFormat::Nvfp4] {
            for bias in [false, true] {
                let d = KernelDescBuilder::new(t)
                    .target(Target::Sm90a)
                    .format(WeightFormat::Nvfp4)
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
