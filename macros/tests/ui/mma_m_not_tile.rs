// The routing-tile invariant: GEMM1's MMA M must equal the tile size.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 256,
            gemm1: { mma: [128, 128], cluster: [1, 1] },
            gemm2: { mma: [256, 128], cluster: [2, 1] },
        }],
    }
}

fn main() {}
