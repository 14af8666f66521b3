//! The persistent GEMM grid: as many CTAs as the SMs hold at once (`ctas_per_sm` each, from
//! the resource model), never more than there are work units.

use moegen_dsl::abi::{GridRule, KernelId, KernelInfo, launch_facts};
use moegen_dsl::{GemmKind, GemmTactic, KernelDescBuilder, Target};
use moegen_runtime::launch::{GridInputs, launch_shape};

fn info(kind: GemmKind, tile: u32, n: u32) -> KernelInfo {
    info_of(GemmTactic::new_sm90(kind, tile, n).unwrap())
}

fn info_of(g: GemmTactic) -> KernelInfo {
    let key = KernelDescBuilder::new(g).target(Target::Sm90a).build().unwrap().key();
    let id = KernelId::Gemm(key);
    KernelInfo {
        id,
        name: "grid_test",
        ptx_target: "sm_90a",
        ptx: "",
        params: &[],
        launch: launch_facts(&id).unwrap(),
    }
}

fn inputs(max_tiles: u64) -> GridInputs {
    GridInputs {
        routes: 64,
        tokens: 16,
        hidden: 2048,
        intermediate: 1024,
        max_tiles,
        local_experts: 8,
        sm_count: 132,
        permuted_rows: max_tiles * 128,
    }
}

#[test]
fn small_tiles_fill_every_resident_slot_and_large_tiles_one_per_sm() {
    let small = info(GemmKind::Gemm1, 16, 128);
    assert_eq!(small.launch.grid, GridRule::Persistent);
    assert_eq!(small.launch.ctas_per_sm, 3);
    // 100 tiles × 2I/128 = 16 N blocks: 1600 units, more than 3 × 132 slots.
    assert_eq!(launch_shape(&small, &inputs(100)).unwrap().grid, 3 * 132);
    // 10 tiles: 160 units, fewer than the slots: one CTA per unit.
    assert_eq!(launch_shape(&small, &inputs(10)).unwrap().grid, 160);

    let large = info(GemmKind::Gemm1, 128, 256);
    assert_eq!(large.launch.ctas_per_sm, 1);
    assert_eq!(launch_shape(&large, &inputs(100)).unwrap().grid, 132);
}

/// A split-K GEMM launches whole clusters of its split, one cluster per unit at most, and a K
/// with fewer stages than the split is refused rather than launched (a rank would add
/// nothing of the unit).
#[test]
fn split_k_grids_are_whole_clusters_and_need_a_stage_per_rank() {
    for (split, kind) in [(2, GemmKind::Gemm1), (4, GemmKind::Gemm2)] {
        let g = GemmTactic::new_sm90(kind, 16, 128).unwrap().with_split_k(split).unwrap();
        let k = info_of(g);
        assert_eq!(k.launch.cluster, split);
        let resident = 132 * k.launch.ctas_per_sm;
        // 100 tiles: more units than clusters: every resident slot, in whole clusters.
        let shape = launch_shape(&k, &inputs(100)).unwrap();
        assert_eq!((shape.grid, shape.cluster), (resident / split * split, split));
        // One tile: a cluster per unit (GEMM1 2I/128 = 16 units, GEMM2 H/128 = 16).
        assert_eq!(launch_shape(&k, &inputs(1)).unwrap().grid, 16 * split);
        // K of one stage per rank passes, one fewer is refused.
        let short = |k_dim: u64| match kind {
            GemmKind::Gemm1 => GridInputs { hidden: k_dim, ..inputs(1) },
            GemmKind::Gemm2 => GridInputs { intermediate: k_dim, ..inputs(1) },
        };
        assert!(launch_shape(&k, &short(64 * u64::from(split))).is_ok());
        let err = launch_shape(&k, &short(64 * u64::from(split - 1))).unwrap_err();
        assert!(err.to_string().contains("fewer than the"), "{err}");
    }
}

/// On a device whose GPCs hold fewer clusters than `sm_count` × CTAs per SM / cluster (a
/// GH100's 132 SMs: at most 98 clusters of 4 at 3 CTAs per SM by its GPCs; an H100's driver
/// counted 92, the model's figure since), the grid holds only those: a
/// cluster past them would wait for a second wave with its whole share of the units. A
/// device that holds none is refused.
#[test]
fn clustered_grids_hold_only_the_clusters_the_device_runs_at_once() {
    use moegen_dsl::gpu::Gpu;
    use moegen_runtime::launch::launch_shape_holding;
    let g = GemmTactic::new_sm90(GemmKind::Gemm2, 16, 128).unwrap().with_split_k(4).unwrap();
    let k = info_of(g);
    assert_eq!((k.launch.cluster, k.launch.ctas_per_sm), (4, 3));
    let held = Gpu::H200.resident_clusters(k.launch.ctas_per_sm, k.launch.cluster);
    assert_eq!(held, 92);
    assert_eq!(launch_shape(&k, &inputs(100)).unwrap().grid, 99 * 4);
    assert_eq!(launch_shape_holding(&k, &inputs(100), Some(held)).unwrap().grid, 92 * 4);
    // Fewer units than clusters: one cluster per unit, whatever the device holds.
    assert_eq!(launch_shape_holding(&k, &inputs(1), Some(held)).unwrap().grid, 16 * 4);
    // The driver's count never raises the grid above the resource model's residency.
    assert_eq!(launch_shape_holding(&k, &inputs(100), Some(500)).unwrap().grid, 99 * 4);
    let err = launch_shape_holding(&k, &inputs(100), Some(0)).unwrap_err();
    assert!(err.to_string().contains("runs no cluster of 4 CTAs"), "{err}");
    let plain = info(GemmKind::Gemm1, 16, 128);
    let err = launch_shape_holding(&plain, &inputs(100), Some(0)).unwrap_err();
    assert!(err.to_string().contains("runs no CTA of this kernel"), "{err}");
}
