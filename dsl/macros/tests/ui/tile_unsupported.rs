// A routing tile has 128 or 256 rows.
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
