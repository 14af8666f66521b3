// src/lib.rs: `moe_kernels!` generates the kernels while this crate compiles.

moegen_macros::moe_kernels! {
    /// The kernels this crate runs: two tactics (128- and 256-row routing tiles), both
    /// finalize modes, the SIMT kernels for sm_100. `KERNELS`, `kernels()`,
    /// `kernel(name)`, `find(id)` and `MANIFEST_JSON`.
    pub mod kernels {
        target: sm_100f,
        format: nvfp4,
        tactics: [
            {
                tile: 128,
                gemm1: { mma: [128, 128], cluster: [1, 1] },
                gemm2: { mma: [128, 128], cluster: [1, 1] },
            },
            {
                tile: 256,
                gemm1: { mma: [256, 256], cluster: [2, 1] },
                gemm2: { mma: [256, 256], cluster: [2, 2] },
            },
        ],
        finalize: [bulk_reduce_add, deterministic],
        swiglu_input: f32,
        simt: [sm_100f],
    }
}
