// A routing tile of an SM100 kernel set has 128 or 256 rows (64 is a Hopper tile).
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 64,
            gemm1: { mma: [64, 128], cluster: [1, 1] },
            gemm2: { mma: [64, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
