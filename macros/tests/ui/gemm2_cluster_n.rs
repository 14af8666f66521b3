// GEMM2's cluster N is 1 or 2.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1] },
            gemm2: { mma: [128, 128], cluster: [1, 4] },
        }],
    }
}

fn main() {}
