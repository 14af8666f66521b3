// MMA N is 128 or 256.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 192], cluster: [1, 1] },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
