// MXFP4 weights on SM100: the GEMMs multiply them by MXFP8 activations (`kind::mxf8f6f4`),
// and the set carries the MXFP8 quantizer beside the other SM100 SIMT kernels.
moegen_macros::moe_kernels! {
    pub mod kernels {
        format: mxfp4,
        tactics: [{
            tile: 128,
            gemm1: { mma: [128, 128], cluster: [1, 1] },
            gemm2: { mma: [128, 128], cluster: [1, 1] },
        }],
        simt: [sm_100f],
    }
}

fn main() {
    let names: Vec<&str> = kernels::kernels().map(|k| k.name).collect();
    assert!(names.contains(&"moegen_sm100_mxfp4_gemm1_t128_n128_c1x1_mxa8"), "{names:?}");
    assert!(names.contains(&"moegen_sm100_mxfp4_gemm2_t128_n128_c1x1_mxa8"), "{names:?}");
    assert!(names.contains(&"moegen_sm100_quantize_mxfp8"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("nvfp4_gemm")), "{names:?}");
}
