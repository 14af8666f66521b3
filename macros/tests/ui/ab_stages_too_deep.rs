// Deeper than the resource model plans (3 A/B stages for this GEMM2).
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1] },
            gemm2: { mma: [128, 256], cluster: [1, 2], ab_stages: 4 },
        }],
    }
}

fn main() {}
