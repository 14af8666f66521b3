// One GEMM kernel serves every tactic that uses it, so its depths must agree.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [
            {
                tile: 128,
                gemm1: { mma: [128, 128], cluster: [1, 1], ab_stages: 4 },
                gemm2: { mma: [128, 128], cluster: [1, 1] },
            },
            {
                tile: 128,
                gemm1: { mma: [128, 128], cluster: [1, 1] },
                gemm2: { mma: [128, 256], cluster: [1, 1] },
            },
        ],
    }
}

fn main() {}
