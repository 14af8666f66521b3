// Finalize modes are bulk_reduce_add and deterministic.
moegen_macros::moe_kernels! {
    mod kernels {
        finalize: [atomic],
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1] },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
