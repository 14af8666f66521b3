// The SM100 kernels implement NVFP4 only.
moegen_macros::moe_kernels! {
    mod kernels {
        format: mxfp4,
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1] },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
