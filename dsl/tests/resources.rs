//! The resource model against the limits (against the production reference:
//! moegen-codegen's tests/anchors.rs).

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::kernel_desc::{OperandSource, ScaleLayout};
use moegen_dsl::*;

#[test]
fn every_kernel_fits_the_target() {
    for target in [Target::Sm100f, Target::Sm100a] {
        let lim = target.limits();
        for g in nvfp4_gemms() {
            let b = plan_gemm(target, &g).unwrap();
            assert!(b.smem_bytes <= lim.max_dynamic_smem, "{g}: {} B", b.smem_bytes);
            assert!(b.tmem_alloc_columns <= lim.tmem_columns, "{g}");
            assert!(b.tmem_alloc_columns.is_power_of_two() && b.tmem_alloc_columns >= 32);
            assert!(b.tmem_acc_columns + b.tmem_sf_columns <= b.tmem_alloc_columns);
            assert!(b.ab_stages >= 2 && b.acc_stages >= 1);
            assert_eq!(b.stage_bytes % 1024, 0, "{g}: stages stay 1024-B aligned for 128B swizzle");
        }
    }
}

#[test]
fn overlapped_accumulators_fit_the_tmem_budget() {
    // N = 256: two 256-column accumulators in 512 − 96 (double-buffered scale factors)
    // = 416 columns, sharing 96; buffer 1 starts at column 160.
    let g = GemmTactic::new(GemmKind::Gemm1, [128, 256], [1, 1], Raster::AlongN).unwrap();
    let b = plan_gemm(Target::Sm100f, &g).unwrap();
    assert_eq!((b.acc_stages, b.acc_overlap_columns, b.tmem_acc_columns), (2, 96, 416));
    assert_eq!((b.tmem_sf_columns, b.tmem_alloc_columns), (96, 512));
    assert_eq!((b.acc_ring_slots(), b.acc_buffer_stride(), b.acc_n()), (1, 160, 256));
    // One accumulator on request: no overlap.
    let s = b.with_depths(&g, 2, 1).unwrap();
    assert_eq!((s.acc_overlap_columns, s.tmem_acc_columns, s.acc_ring_slots()), (0, 256, 1));
    // N = 128: two disjoint accumulators, two ring slots.
    let g = GemmTactic::new(GemmKind::Gemm2, [128, 128], [1, 1], Raster::AlongN).unwrap();
    let b = plan_gemm(Target::Sm100f, &g).unwrap();
    assert_eq!((b.acc_overlap_columns, b.acc_ring_slots(), b.acc_buffer_stride()), (0, 2, 128));
}

#[test]
fn stage_bytes_and_tx_counts_match_the_reference_ptx() {
    // sm100-ptx.md §7.2: 36864 B per 128x128x256 stage, 77824 B on the leader for 256x256.
    let g = GemmTactic::new(GemmKind::Gemm2, [128, 128], [1, 1], Raster::AlongN).unwrap();
    let b = plan_gemm(Target::Sm100f, &g).unwrap();
    assert_eq!((b.stage_bytes, b.tma_tx_bytes_per_stage), (36864, 36864));
    let g = GemmTactic::new(GemmKind::Gemm2, [256, 256], [2, 1], Raster::AlongN).unwrap();
    let b = plan_gemm(Target::Sm100f, &g).unwrap();
    assert_eq!((b.stage_bytes, b.tma_tx_bytes_per_stage), (38912, 77824));
    // GEMM1 gathers A and SFA: only B and SFB are TMA bytes.
    let g = GemmTactic::new(GemmKind::Gemm1, [128, 256], [1, 1], Raster::AlongN).unwrap();
    let b = plan_gemm(Target::Sm100f, &g).unwrap();
    assert_eq!(b.tma_tx_bytes_per_stage, 32768 + 4096);
}

#[test]
fn depth_overrides_only_go_shallower() {
    let g = GemmTactic::new(GemmKind::Gemm1, [128, 128], [1, 1], Raster::AlongN).unwrap();
    let b = plan_gemm(Target::Sm100f, &g).unwrap();
    let s = b.with_depths(&g, 3, 1).unwrap();
    assert_eq!((s.ab_stages, s.acc_stages), (3, 1));
    assert_eq!(s.smem_bytes, b.reserved_bytes + b.epilogue_bytes + 3 * b.stage_bytes);
    assert!(matches!(
        b.with_depths(&g, b.ab_stages + 1, 1),
        Err(ResourceError::DepthOutOfRange { .. })
    ));
    assert!(matches!(b.with_depths(&g, 1, 1), Err(ResourceError::DepthOutOfRange { .. })));
    assert!(matches!(b.with_depths(&g, 2, 3), Err(ResourceError::DepthOutOfRange { .. })));
}

#[test]
fn kernel_descriptions_validate_their_parts() {
    let ts = nvfp4_tactics();
    let t = ts[0];
    let d = KernelDescBuilder::new(*t.gemm1()).build().unwrap();
    assert_eq!(d.a().source, OperandSource::Gathered);
    assert_eq!(d.a().scale_layout, ScaleLayout::Linear);
    assert_eq!(d.b().scale_layout, ScaleLayout::Swizzled128x4);
    assert!(matches!(d.epilogue(), Epilogue::SwigluRequant { swiglu_input: SwigluInput::F32, .. }));
    assert_eq!(d.budget(), &plan_gemm(Target::Sm100f, t.gemm1()).unwrap());
    let d =
        KernelDescBuilder::new(*t.gemm2()).finalize(FinalizeMode::Deterministic).build().unwrap();
    assert_eq!(d.a().source, OperandSource::Tma);
    assert_eq!(d.epilogue(), Epilogue::Finalize { mode: FinalizeMode::Deterministic });
    assert!(matches!(
        KernelDescBuilder::new(*t.gemm1()).finalize(FinalizeMode::Deterministic).build(),
        Err(DescError::OptionForOtherGemm { .. })
    ));
    assert!(matches!(
        KernelDescBuilder::new(*t.gemm2()).swiglu_input(SwigluInput::Bf16).build(),
        Err(DescError::OptionForOtherGemm { .. })
    ));
    // MXFP4 is a valid format the SM100 kernels do not implement: refused, not ignored.
    assert!(matches!(
        KernelDescBuilder::new(*t.gemm1()).format(WeightFormat::Mxfp4).build(),
        Err(DescError::Unsupported { .. })
    ));
    assert!(!WeightFormat::Mxfp4.has_global_scale());
    let d = KernelDescBuilder::new(*t.gemm1()).depths(2, 1).build().unwrap();
    assert_eq!(d.budget().ab_stages, 2);
    assert!(matches!(
        KernelDescBuilder::new(*t.gemm1()).depths(99, 1).build(),
        Err(DescError::Resources(_))
    ));
    assert_eq!(WeightFormat::Nvfp4.block() as usize, moegen_dsl::formats::NVFP4_BLOCK);
    assert_eq!(WeightFormat::Mxfp4.block() as usize, moegen_dsl::formats::MXFP4_BLOCK);
}
