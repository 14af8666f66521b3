// A GEMM without its cluster.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128] },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
