//! The macro route and the build-script route give the same kernels for the same
//! description: names, PTX and manifest, byte for byte.

use moegen_codegen::builder::Builder;
use moegen_dsl::abi::SimtTarget;
use moegen_dsl::{FinalizeMode, GemmKind, GemmTactic, MoeTactic, Raster, SwigluInput, TileSize};

moegen_macros::moe_kernels! {
    mod declared {
        tactics: [
            {
                tile: 128,
                gemm1: { mma: [128, 256], cluster: [1, 1] },
                gemm2: { mma: [128, 256], cluster: [1, 2], ab_stages: 2 },
            },
            {
                tile: 256,
                gemm1: { mma: [256, 128], cluster: [2, 1] },
                gemm2: { mma: [256, 256], cluster: [2, 1] },
            },
        ],
        finalize: [bulk_reduce_add, deterministic],
        swiglu_input: bf16,
        simt: [sm_100f, sm_90a],
    }
}

fn gemm(kind: GemmKind, mma: [u32; 2], cluster: [u32; 2]) -> GemmTactic {
    GemmTactic::new(kind, mma, cluster, Raster::AlongN).unwrap()
}

#[test]
fn the_macro_expands_to_what_the_builder_writes() {
    let g2 = gemm(GemmKind::Gemm2, [128, 256], [1, 2]);
    let t128 = MoeTactic::new(TileSize::T128, gemm(GemmKind::Gemm1, [128, 256], [1, 1]), g2);
    let t256 = MoeTactic::new(
        TileSize::T256,
        gemm(GemmKind::Gemm1, [256, 128], [2, 1]),
        gemm(GemmKind::Gemm2, [256, 256], [2, 1]),
    );
    let tactics = [t128.unwrap(), t256.unwrap()];
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("same_as_builder");
    let _ = std::fs::remove_dir_all(&out);
    // The planned A/B depth of g2 is 3; the macro wrote `ab_stages: 2` and left the
    // accumulator stages to the resource model.
    let acc = moegen_dsl::plan_gemm(moegen_dsl::Target::Sm100f, &g2).unwrap().acc_stages;
    Builder::new()
        .tactics(tactics)
        .finalize_modes([FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic])
        .swiglu_input(SwigluInput::Bf16)
        .depths(g2, 2, acc)
        .simt_targets([SimtTarget::Sm100f, SimtTarget::Sm90a])
        .cargo_directives(false)
        .out_dir(&out)
        .emit()
        .unwrap();
    let manifest = std::fs::read_to_string(out.join("moegen_kernels.json")).unwrap();
    assert_eq!(declared::MANIFEST_JSON, manifest);
    let written = std::fs::read_dir(out.join("moegen_ptx")).unwrap().count();
    assert_eq!(declared::KERNELS.len(), written);
    assert_eq!(written, 2 + 2 * 2 + 10 + 12, "2 GEMM1, 2 GEMM2 × 2 finalize modes, 10 + 12 SIMT");
    for k in declared::kernels() {
        let ptx = std::fs::read_to_string(out.join("moegen_ptx").join(format!("{}.ptx", k.name)));
        assert_eq!(k.ptx, ptx.unwrap(), "{}", k.name);
    }
}
