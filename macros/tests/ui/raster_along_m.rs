// The persistent schedule walks N fastest; along_m is refused by name.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1], raster: along_m },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
