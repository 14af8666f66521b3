//! The build-script route: `Builder` writes the module `include_kernels!()` includes, with the
//! PTX beside it, touching nothing that is already up to date.

use moegen_codegen::builder::{BuildError, Builder, MODULE_FILE, all_tactics};
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{FinalizeMode, GemmKind, GemmTactic, Raster};

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn emits_a_module_and_rewrites_nothing_the_second_time() {
    let out = dir("builder");
    let b = Builder::new()
        .tile_sizes(&[128])
        .finalize_modes([FinalizeMode::Deterministic])
        .cargo_directives(false)
        .out_dir(&out);
    let first = b.clone().emit().unwrap();
    // 8 tactics at T = 128: 2 GEMM1 + 4 deterministic GEMM2, and 10 SIMT kernels (the
    // routing sort's three passes and its one-block form, the NVFP4 and MXFP8 quantizers,
    // finalize, and expert parallelism's pack, gather and unpack).
    assert_eq!(first.kernels, 2 + 4 + 10);
    assert_eq!(first.written, first.kernels + 2, "PTX files, the manifest and the module");
    let module = std::fs::read_to_string(out.join(MODULE_FILE)).unwrap();
    assert!(module.contains("pub const KERNELS: &[::moegen_dsl::abi::KernelInfo]"));
    assert!(module.contains("moegen_sm100_nvfp4_gemm2_t128_n256_c1x2_det"));
    assert!(!module.contains("gemm2_t128_n256_c1x2\""), "no bulk-reduce GEMM2 was asked for");
    assert!(!module.contains("#[cfg(feature"), "a build script's module has no feature gates");
    assert!(module.contains(&format!("include_str!(\"{}", out.join("moegen_ptx").display())));
    let second = b.emit().unwrap();
    assert_eq!(second.written, 0);
}

#[test]
fn mxfp4_weights_make_the_mxfp8_gemms() {
    let out = dir("builder_mxfp4");
    let e = Builder::new()
        .format(WeightFormat::Mxfp4)
        .tile_sizes(&[256])
        .cargo_directives(false)
        .out_dir(&out)
        .emit()
        .unwrap();
    // T = 256: 2 GEMM1 + 4 bulk GEMM2, all `kind::mxf8f6f4`, and the 10 SIMT kernels.
    assert_eq!(e.kernels, 2 + 4 + 10);
    let module = std::fs::read_to_string(out.join(MODULE_FILE)).unwrap();
    assert!(module.contains("moegen_sm100_mxfp4_gemm1_t256_n256_c2x1_mxa8\""));
    assert!(module.contains("moegen_sm100_quantize_mxfp8\""));
    assert!(!module.contains("moegen_sm100_nvfp4_gemm"), "NVFP4 GEMMs were not asked for");
}

#[test]
fn refused_options_name_themselves() {
    let out = dir("builder_refused");
    let g = GemmTactic::new(GemmKind::Gemm2, [128, 128], [1, 1], Raster::AlongN).unwrap();
    let e = Builder::new().depths(g, 99, 1).cargo_directives(false).out_dir(&out).emit();
    assert!(e.unwrap_err().to_string().contains("A/B stages 99"));
    let e = Builder::new().tile_sizes(&[64]).cargo_directives(false).out_dir(&out).emit();
    assert!(matches!(e, Err(BuildError::TileSize { rows: 64, .. })), "{e:?}");
}

#[test]
fn a_bad_tile_size_is_named_with_the_targets_sizes() {
    let out = dir("builder_bad_tile");
    let e = Builder::new().tile_sizes(&[100]).cargo_directives(false).out_dir(&out).emit();
    let e = e.unwrap_err();
    assert!(matches!(e, BuildError::TileSize { rows: 100, .. }), "{e:?}");
    assert_eq!(e.to_string(), "tile_sizes: 100 is not one of sm_100f's tile sizes {128, 256}");
    // One good and one bad size: the bad one is named, not silently dropped.
    let e = Builder::new().tile_sizes(&[128, 100]).cargo_directives(false).out_dir(&out).emit();
    assert!(matches!(e, Err(BuildError::TileSize { rows: 100, .. })), "{e:?}");
    let e = Builder::new().tile_sizes(&[]).cargo_directives(false).out_dir(&out).emit();
    assert!(matches!(e, Err(BuildError::Empty { option: "tile_sizes" })), "{e:?}");
}

#[test]
fn a_tile_size_no_chosen_tactic_has_is_refused_whatever_the_call_order() {
    let out = dir("builder_tile_order");
    let t128: Vec<_> = all_tactics().into_iter().filter(|t| t.tile().rows() == 128).collect();
    // The tile filter applies to tactics chosen after it too.
    let e = Builder::new()
        .tile_sizes(&[256])
        .tactics(t128.clone())
        .cargo_directives(false)
        .out_dir(&out)
        .emit()
        .unwrap_err();
    assert!(matches!(e, BuildError::NoTacticAtTile { rows: 256, .. }), "{e:?}");
    assert!(e.to_string().contains("{128}"), "{e}");
    let e = Builder::new().tactics([]).cargo_directives(false).out_dir(&out).emit();
    assert!(matches!(e, Err(BuildError::Empty { option: "tactics" })), "{e:?}");
    let e = Builder::new().finalize_modes([]).cargo_directives(false).out_dir(&out).emit();
    assert!(matches!(e, Err(BuildError::Empty { option: "finalize_modes" })), "{e:?}");
}

#[test]
fn epilogues_are_generated_for_every_tactic_and_an_empty_list_is_refused() {
    use moegen_dsl::{Activation, EpilogueSpec};
    let out = dir("builder_epilogues");
    let geglu = EpilogueSpec { activation: Activation::GegluTanh, ..EpilogueSpec::PLAIN };
    let e = Builder::new()
        .tile_sizes(&[128])
        .epilogues([EpilogueSpec::PLAIN, EpilogueSpec::GPT_OSS, geglu])
        .cargo_directives(false)
        .out_dir(&out)
        .emit()
        .unwrap();
    // T = 128: 2 GEMM1 × 3 epilogues (each its own activation or bias), 4 bulk GEMM2 × 2
    // (plain and geglu share the bias-free GEMM2; gpt-oss's has a bias), 10 SIMT kernels.
    assert_eq!(e.kernels, 2 * 3 + 4 * 2 + 10);
    let module = std::fs::read_to_string(out.join(MODULE_FILE)).unwrap();
    assert!(module.contains("moegen_sm100_nvfp4_gemm1_t128_n128_c1x1_swiglu_clamped_bias\""));
    assert!(module.contains("moegen_sm100_nvfp4_gemm1_t128_n128_c1x1_geglu_tanh\""));
    assert!(module.contains("moegen_sm100_nvfp4_gemm2_t128_n128_c1x1_bias\""));
    let e = Builder::new().epilogues([]).cargo_directives(false).out_dir(&out).emit();
    assert!(matches!(e, Err(BuildError::Empty { option: "epilogues" })), "{e:?}");
}
