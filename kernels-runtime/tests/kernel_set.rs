//! A kernel set resolves a layer's GEMMs whatever pipeline depths they were generated with:
//! a build script or `moe_kernels!` may override the resource model's stage counts.

use moegen_dsl::abi::{KernelId, KernelInfo, WeightFormat};
use moegen_dsl::{Arch, TileSize};
use moegen_runtime::layer::{KernelSet, LayerConfig, MoeLayer};
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::ExpertWindow;

/// `k` as if generated with other depths (the name says so, as codegen names it).
fn with_depths(k: &'static KernelInfo, ab: u32, acc: u32) -> &'static KernelInfo {
    let KernelId::Gemm(key) = k.id else { panic!("{} is not a GEMM", k.name) };
    let key =
        moegen_dsl::abi::GemmKey { ab_stages: ab, acc_stages: acc, planned_depths: false, ..key };
    let name: &'static str = Box::leak(KernelId::Gemm(key).name().into_boxed_str());
    Box::leak(Box::new(KernelInfo { id: KernelId::Gemm(key), name, ..*k }))
}

#[test]
fn overridden_depths_resolve_and_planned_ones_win() {
    let builtin = KernelSet::builtin();
    let shape = MoeShape::new(512, 256, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    let config = LayerConfig::new(shape);
    let all = MoeLayer::candidates(&config, &builtin, 8, Arch::Sm100, WeightFormat::Nvfp4).unwrap();
    let t = all.iter().find(|t| t.tile() == TileSize::T128).copied().unwrap();
    let g1 = builtin.kernels().iter().copied().find(|k| matches!(k.id, KernelId::Gemm(g) if g.gemm == moegen_dsl::GemmKind::Gemm1 && g.tile == TileSize::T128 && g.mma_n == t.gemm1().mma_tiler()[1] && g.planned_depths)).unwrap();
    let KernelId::Gemm(key) = g1.id else { unreachable!() };
    // Only the overridden build: it resolves.
    let fake = with_depths(g1, 1, 1);
    assert!(fake.name.ends_with("_s1x1"), "{}", fake.name);
    let others = builtin.kernels().iter().copied().filter(|k| k.id != g1.id);
    let set = KernelSet::new(others.clone().chain([fake]));
    assert_eq!(set.find_gemm(&key).map(|k| k.name), Some(fake.name));
    let cands = MoeLayer::candidates(&config, &set, 8, Arch::Sm100, WeightFormat::Nvfp4).unwrap();
    assert!(cands.contains(&t), "a tactic whose GEMM1 has overridden depths is a candidate");
    // Both builds: the resource model's depths are preferred.
    let both = KernelSet::new(others.chain([fake, g1]));
    assert_eq!(both.find_gemm(&key).map(|k| k.name), Some(g1.name));
    // Another key (other MMA N) does not match.
    let other = moegen_dsl::abi::GemmKey { mma_n: if key.mma_n == 128 { 256 } else { 128 }, ..key };
    assert_ne!(set.find_gemm(&other).map(|k| k.name), Some(fake.name));
}
