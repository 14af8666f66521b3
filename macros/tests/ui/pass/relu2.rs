// ReLU² (ungated: W1 with I rows) on SM100: its GEMM1 is generated beside the GEMM2, which
// takes no activation (the bias-free one here).
moegen_macros::moe_kernels! {
    pub mod kernels {
        tactics: [
            {
                tile: 256,
                gemm1: { mma: [256, 256], cluster: [2, 1] },
                gemm2: { mma: [256, 128], cluster: [2, 2] },
            },
        ],
        epilogues: [{ activation: relu2, gemm1_bias: true }],
        simt: [],
    }
}

fn main() {
    let names: Vec<&str> = kernels::kernels().map(|k| k.name).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].contains("_gemm1_") && names[0].ends_with("_relu2_bias"), "{names:?}");
    assert!(names[1].contains("_gemm2_") && !names[1].contains("relu2"), "{names:?}");
}
