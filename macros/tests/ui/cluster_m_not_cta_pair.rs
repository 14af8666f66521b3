// A 2-CTA MMA (M 256) runs on a CTA pair: its cluster M must be 2.
moegen_macros::moe_kernels! {
    mod kernels {
        tactics: [{
            tile: 256,
            gemm1: { mma: [256, 128], cluster: [2, 1] },
            gemm2: { mma: [256, 128], cluster: [1, 1] },
        }],
    }
}

fn main() {}
