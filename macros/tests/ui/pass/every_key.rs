// Every key, and a depth override that the resource model allows.
moegen_macros::moe_kernels! {
    /// The kernels of this test.
    pub mod kernels {
        target: sm_100a,
        format: nvfp4,
        tactics: [
            {
                tile: 256,
                gemm1: { mma: [256, 256], cluster: [2, 1], raster: along_n },
                gemm2: { mma: [256, 128], cluster: [2, 2], ab_stages: 3, acc_stages: 1 },
            },
        ],
        finalize: [deterministic],
        swiglu_input: bf16,
        recipes: [exact],
        epilogues: [{ activation: geglu_tanh, gemm1_bias: true, gemm2_bias: false }],
        simt: [sm_90a],
    }
}

fn main() {
    let names: Vec<&str> = kernels::kernels().map(|k| k.name).collect();
    assert_eq!(
        names,
        [
            "moegen_sm100a_nvfp4_gemm1_t256_n256_c2x1_geglu_tanh_bias_bf16glu_exact",
            "moegen_sm100a_nvfp4_gemm2_t256_n128_c2x2_det_s3x1",
            "moegen_sm90_moe_sort_histogram",
            "moegen_sm90_moe_sort_offsets",
            "moegen_sm90_moe_sort_scatter",
            "moegen_sm90_moe_sort_single",
            "moegen_sm90_quantize_nvfp4",
            "moegen_sm90_finalize_reduce",
            "moegen_sm90_ep_dispatch_pack",
            "moegen_sm90_ep_gather_rows",
            "moegen_sm90_ep_combine_unpack",
            "moegen_sm90_qdq_nvfp4",
            "moegen_sm90_quant_fp8_tokens",
            "moegen_sm90_quant_fp8_rows",
        ]
    );
    let gemm2 = kernels::kernel(names[1]).unwrap();
    assert_eq!(gemm2.ptx_target, "sm_100a");
    assert!(gemm2.ptx.contains(".target sm_100a"));
    assert_eq!(kernels::find(&gemm2.id), Some(gemm2));
    assert!(kernels::MANIFEST_JSON.contains(names[6]));
}
