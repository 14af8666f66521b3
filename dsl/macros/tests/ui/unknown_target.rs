// The GEMMs have SM100 targets only (sm_90a is a SIMT flavour).
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
