// A pipeline needs at least 2 A/B stages.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1], ab_stages: 1 },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
