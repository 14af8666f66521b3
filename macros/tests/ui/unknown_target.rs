// moe_kernels! declares SM100 GEMMs; a Hopper target is refused on its token.
moegen_macros::moe_kernels! {
    mod kernels {
        target: sm_90a,
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1] },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
