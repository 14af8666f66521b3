// At most 2 accumulator stages fit.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 256], cluster: [1, 1] },
            gemm2: { mma: [128, 128], cluster: [1, 1], acc_stages: 3 },
        }],
    }
}

fn main() {}
