//! The split-K Hopper tactics (`GemmTactic::split_k`) on the simulated Hopper: each unit's K
//! split over a cluster of 2 or 4 CTAs, the other ranks' fp32 accumulators handed to rank 0
//! through distributed shared memory and added in rank order. The layer's output is the
//! split reference's bit for bit (each rank's stages accumulated by the wgmma model from
//! zero, then the partial sums added in rank order), for A16 and A8, with K not a multiple
//! of the split and GEMM2's last N block partial; and the split reference is not the
//! unsplit one, so the comparison sees the hand-off's order.

use moegen_dsl::abi::WeightFormat;
use moegen_dsl::{ActivationFormat, Arch, FinalizeMode, TileSize, sm90_tactics};
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::layer::KernelSet;
use moegen_runtime::reference::{MoeShape, Sm90Tiling};
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{LayerCase, RoutePattern, check_tactics_picked, problem};

/// H 576 (GEMM1: 9 stages of 64, 5 of A8's 128; GEMM2 N 128 ends in a half block), I 512
/// (GEMM2: 8 and 4 stages), 8 experts, experts 2–5 local, top 2.
fn case(
    format: WeightFormat,
    activations: ActivationFormat,
    finalize: FinalizeMode,
    tokens: usize,
    seed: u64,
) -> LayerCase {
    let shape = MoeShape::new(576, 512, ExpertWindow::new(8, 2, 4, 2).unwrap()).unwrap();
    LayerCase::new(shape, tokens, activations, format, finalize, seed, RoutePattern::Spread)
}

/// The split tactics' names with GEMM2 N of `widths`, in the tactic space's order.
fn split_tactics(widths: &[u32]) -> Vec<String> {
    sm90_tactics()
        .iter()
        .filter(|t| t.gemm1().split_k() > 1 || t.gemm2().split_k() > 1)
        .filter(|t| widths.contains(&t.gemm2().mma_tiler()[1]))
        .map(ToString::to_string)
        .collect()
}

/// Every split tactic the built-in set holds for the case runs, and matches bit for bit:
/// MXFP4 ships GEMM2 N 64 only (docs/hopper.md, "What ships"), NVFP4 both widths. Each case
/// is one where, for every tactic that splits both GEMMs, the split reference differs from
/// the unsplit one in some output element (the bf16 outputs hide most f32 differences: the
/// seeds are chosen so a few show), so the comparison sees the ranks' ranges and their order.
#[test]
fn split_k_layers_match_the_split_reference_bit_for_bit() {
    use ActivationFormat::{Bf16, Fp8};
    use FinalizeMode::{BulkReduceAdd, Deterministic};
    use WeightFormat::{Mxfp4, Nvfp4};
    for (format, acts, finalize, tokens, seed, widths) in [
        (Mxfp4, Bf16, Deterministic, 32, 12, &[64][..]),
        (Mxfp4, Fp8, BulkReduceAdd, 6, 11, &[64][..]),
        (Nvfp4, Bf16, Deterministic, 32, 13, &[64, 128][..]),
    ] {
        let want = split_tactics(widths);
        let label = format!("{format:?} {acts:?}");
        let p = problem(case(format, acts, finalize, tokens, seed)).unwrap();
        let unsplit = p.reference(Arch::Sm90, Sm90Tiling::unsplit(TileSize::T16)).unwrap();
        let mut sim = SimBackend::hopper().with_sm_count(4);
        let rows =
            check_tactics_picked(&mut sim, &p, None, Some("_k"), &KernelSet::builtin()).unwrap();
        let names: Vec<String> = rows.iter().map(|r| r.tactic.clone()).collect();
        assert_eq!(names, want, "{label}");
        for r in &rows {
            assert_eq!(r.identical, r.elements, "{label} {}: max ulp {}", r.tactic, r.max_ulp);
            assert!(r.rel_l2_vs_oracle < 0.3, "{label} {}: {}", r.tactic, r.rel_l2_vs_oracle);
            let t = tiling(&r.tactic);
            if t.gemm1.get() == 1 || t.gemm2.get() == 1 {
                continue;
            }
            let split = p.reference(Arch::Sm90, t).unwrap();
            let differ = split.iter().zip(&unsplit).filter(|(a, b)| a.to_bits() != b.to_bits());
            assert!(differ.count() > 0, "{label} {}: the split changes no output", r.tactic);
        }
    }
}

/// The reference tiling of a split tactic's name.
fn tiling(name: &str) -> Sm90Tiling {
    let t = sm90_tactics().into_iter().find(|t| t.to_string() == name).unwrap();
    Sm90Tiling::of(&t).unwrap()
}

/// On a device whose GPCs hold fewer clusters than its SMs' slots (two GPCs of 2 SMs: one
/// cluster of 4 each at 3 CTAs per SM, where 4 SMs as one pool would hold 3), a split of 4
/// launches only the clusters that run at once, each taking more units, and the layer still
/// matches the split reference bit for bit; a split of 2 keeps every slot (3 per GPC).
#[test]
fn split_k_grids_hold_only_the_clusters_the_gpcs_run_and_stay_exact() {
    use moegen_runtime::backend::Backend;
    use moegen_runtime::launch::{GridInputs, launch_shape, launch_shape_on};
    let mut sim = SimBackend::hopper().with_gpcs(&[2, 2]);
    assert_eq!(sim.sm_count(), 4);
    let grid = GridInputs {
        routes: 64,
        tokens: 32,
        hidden: 576,
        intermediate: 512,
        max_tiles: 8,
        local_experts: 4,
        sm_count: sim.sm_count(),
        permuted_rows: 8 * 16,
    };
    let k4 = moegen_kernels::kernel("moegen_sm90_nvfp4_gemm2_t16_n128_c1x1_a16_k4").unwrap();
    let k2 = moegen_kernels::kernel("moegen_sm90_nvfp4_gemm2_t16_n128_c1x1_a16_k2").unwrap();
    let plain = moegen_kernels::kernel("moegen_sm90_nvfp4_gemm2_t16_n128_c1x1_a16").unwrap();
    assert_eq!(sim.resident_clusters(k4, 0).unwrap(), Some(2));
    assert_eq!(launch_shape(k4, &grid).unwrap().grid, 3 * 4);
    assert_eq!(launch_shape_on(&mut sim, k4, &grid).unwrap().grid, 2 * 4);
    assert_eq!(launch_shape_on(&mut sim, k2, &grid).unwrap().grid, 6 * 2);
    assert_eq!(sim.resident_clusters(plain, 0).unwrap(), Some(12));
    assert_eq!(SimBackend::hopper().with_sm_count(4).resident_clusters(k4, 0).unwrap(), None);
    assert_eq!(launch_shape_on(&mut sim, plain, &grid).unwrap().grid, 12);

    let p = problem(case(
        WeightFormat::Nvfp4,
        ActivationFormat::Bf16,
        FinalizeMode::BulkReduceAdd,
        32,
        13,
    ))
    .unwrap();
    let rows =
        check_tactics_picked(&mut sim, &p, None, Some("_k4"), &KernelSet::builtin()).unwrap();
    assert!(rows.len() >= 3, "{} tactics", rows.len());
    for r in &rows {
        assert_eq!(r.identical, r.elements, "{}: max ulp {}", r.tactic, r.max_ulp);
    }
}
