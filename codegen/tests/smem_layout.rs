//! The shared-memory allocator against the resource model: for every tactic, both targets,
//! GEMM1 and both GEMM2 finalize modes, and every pipeline depth the model allows, the GEMM
//! kernel's regions are aligned, disjoint, inside the reserved block (at the end) where they
//! belong and inside the dynamic shared memory the kernel requests; a budget they do not fit
//! in is a build error.

use moegen_codegen::kernel_set::gemm_kernel;
use moegen_codegen::kernels::sm90::layout::Sm90Layout;
use moegen_codegen::kernels::sm90::smem::Sm90Smem;
use moegen_codegen::kernels::sm100::layout::Sm100Layout;
use moegen_codegen::kernels::sm100::smem::Sm100Smem;
use moegen_codegen::kernels::sm100::{build, build_layout};
use moegen_codegen::ptx::smem::SmemError;
use moegen_codegen::ptx::{BuildError, ModuleHeader, render_module};
use moegen_dsl::abi::{KernelId, launch_facts};
use moegen_dsl::resources::RESERVED_SMEM;
use moegen_dsl::{
    Arch, FinalizeMode, GemmKind, GemmTactic, KernelDesc, KernelDescBuilder, Target, nvfp4_tactics,
    tactics_for,
};

/// Every distinct GEMM tactic with each epilogue variant, at the model's deepest pipelines.
fn planned(target: Target) -> Vec<(GemmTactic, FinalizeMode)> {
    let mut out = Vec::new();
    for t in tactics_for(target.arch()) {
        out.push((*t.gemm1(), FinalizeMode::default()));
        for mode in [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic] {
            out.push((*t.gemm2(), mode));
        }
    }
    out.sort_by_key(|(t, m)| format!("{t} {m:?} {target}"));
    out.dedup();
    out
}

fn desc(
    target: Target,
    t: GemmTactic,
    mode: FinalizeMode,
    depths: Option<(u32, u32)>,
) -> KernelDesc {
    let mut b = KernelDescBuilder::new(t).target(target);
    if target.arch() == Arch::Sm90 {
        // Both activation formats share one layout; A16 is the one without requantization.
        b = b.activations(moegen_dsl::ActivationFormat::Bf16);
    }
    if t.kind() == GemmKind::Gemm2 {
        b = b.finalize(mode);
    }
    if let Some((ab, acc)) = depths {
        b = b.depths(ab, acc);
    }
    b.build().unwrap()
}

fn check(d: &KernelDesc) {
    if d.target().arch() == Arch::Sm90 {
        return check_sm90(d);
    }
    let l = Sm100Layout::new(d);
    let name = format!("{} ab {} acc {}", l.name(), l.budget.ab_stages, l.budget.acc_stages);
    let smem = Sm100Smem::plan(&l).unwrap_or_else(|e| panic!("{name}: {e}"));
    let requested = launch_facts(&KernelId::Gemm(d.key())).unwrap().smem;
    assert_eq!(requested.per_local_expert, 0, "{name}");
    assert_eq!(requested.fixed, l.budget.smem_bytes, "{name}");
    let leaves = smem.leaves();
    for (i, r) in leaves.iter().enumerate() {
        assert!(r.size > 0, "{name}: empty {r}");
        assert!(r.is_aligned(), "{name}: misaligned {r}");
        assert!(r.end() <= requested.fixed, "{name}: {r} past {} B", requested.fixed);
        for q in &leaves[i + 1..] {
            assert!(!r.overlaps(q), "{name}: {r} overlaps {q}");
        }
    }
    // Barriers and the TMEM slot live in the reserved block, at the end of the requested
    // shared memory, each ring's barriers sized by its depth; the stage tiles and the staging
    // come before it.
    let bars = &smem.bars;
    let block_start = requested.fixed - l.budget.reserved_bytes;
    let acc_slots = l.budget.acc_ring_slots();
    for (r, stages) in [
        (bars.ab_full, l.budget.ab_stages),
        (bars.ab_empty, l.budget.ab_stages),
        (bars.acc_full, acc_slots),
        (bars.acc_empty, acc_slots),
    ]
    .into_iter()
    .chain(bars.relay_full.map(|r| (r, l.budget.ab_stages)))
    {
        assert_eq!(r.size, 8 * stages, "{name}: {r}");
        assert!(r.offset >= block_start && r.end() <= requested.fixed, "{name}: {r}");
    }
    assert_eq!(bars.relay_full.is_some(), l.relay_warp.is_some(), "{name}");
    assert!(smem.tmem_slot.offset >= block_start, "{name}");
    let before: Vec<_> = leaves.iter().filter(|r| r.end() <= block_start).collect();
    let staging = before.iter().filter(|r| r.name.contains("staging")).count();
    assert_eq!(staging, 1, "{name}");
    assert_eq!(before.len() - staging, 4 * l.budget.ab_stages as usize, "{name}");
    // Every stage is where the kernel addresses it: stage 0's tiles + s · stage_bytes.
    for r in leaves.iter().filter(|r| r.index.is_some() && !r.name.contains("staging")) {
        let s = r.index.unwrap_or(0);
        let within = match r.name {
            "A tile" => smem.a,
            "B tile" => smem.b,
            "SFA atoms" => smem.sfa,
            "SFB atoms" => smem.sfb,
            other => panic!("{name}: unexpected region {other}"),
        };
        assert_eq!(r.offset, smem.stages.offset + s * smem.stage_bytes + within, "{name}: {r}");
    }
    // And the kernel built on this layout renders.
    gemm_kernel(d).unwrap_or_else(|e| panic!("{name}: {e}"));
}

#[test]
fn every_tactic_and_depth_fits_aligned_and_disjoint() {
    let mut checked = 0;
    // The SM100 GEMMs (the Hopper targets have their own tactics and kernels).
    for target in [Target::Sm100f, Target::Sm100a] {
        for (t, mode) in planned(target) {
            let max = desc(target, t, mode, None);
            let (max_ab, max_acc) = (max.budget().ab_stages, max.budget().acc_stages);
            assert!(max_ab >= 2 && max_acc >= 1, "{t}");
            for ab in 2..=max_ab {
                for acc in 1..=max_acc {
                    check(&desc(target, t, mode, Some((ab, acc))));
                    checked += 1;
                }
            }
        }
    }
    // SM100: 4 GEMM1 and 16 GEMM2 kernels per target; sm_90a: 8 GEMM1 and 24 GEMM2; each
    // at several depths.
    assert!(checked >= 2 * 20 * 2 + 32 * 2, "only {checked} layouts checked");
}

/// The Hopper GEMMs' layout: barriers in the reserved block, each stage's activation tile
/// 1024-aligned (the GMMA descriptor's swizzle pattern starts there) at stage 0's offset +
/// s · stage_bytes, the weights after it, one staging buffer per consumer warpgroup.
fn check_sm90(d: &KernelDesc) {
    let l = Sm90Layout::new(d);
    let name = format!("{} ab {}", l.name(), l.budget.ab_stages);
    let smem = Sm90Smem::plan(&l).unwrap_or_else(|e| panic!("{name}: {e}"));
    let requested = launch_facts(&KernelId::Gemm(d.key())).unwrap().smem;
    assert_eq!(requested.fixed, l.budget.smem_bytes, "{name}");
    let leaves = smem.leaves();
    for (i, r) in leaves.iter().enumerate() {
        assert!(r.size > 0, "{name}: empty {r}");
        assert!(r.is_aligned(), "{name}: misaligned {r}");
        assert!(r.end() <= requested.fixed, "{name}: {r} past {} B", requested.fixed);
        for q in &leaves[i + 1..] {
            assert!(!r.overlaps(q), "{name}: {r} overlaps {q}");
        }
    }
    for r in [smem.full, smem.empty] {
        assert_eq!(r.size, 8 * l.budget.ab_stages, "{name}: {r}");
        assert!(r.end() <= l.budget.reserved_bytes, "{name}: {r}");
    }
    let staging = leaves.iter().filter(|r| r.name == "epilogue staging").count();
    assert_eq!(staging, l.consumers as usize, "{name}");
    for r in leaves.iter().filter(|r| r.index.is_some() && r.name != "epilogue staging") {
        let s = r.index.unwrap_or(0);
        let within = match r.name {
            "activation tile" => {
                assert_eq!(r.offset % 1024, 0, "{name}: {r}");
                0
            }
            "fragment tiles" => smem.values,
            "scale tiles" => smem.scales,
            other => panic!("{name}: unexpected region {other}"),
        };
        assert_eq!(r.offset, smem.stages.offset + s * smem.stage_bytes + within, "{name}: {r}");
    }
    gemm_kernel(d).unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn header() -> ModuleHeader<'static> {
    ModuleHeader { ptx_version: "8.8", target: "sm_100f", description: "test" }
}

fn deepest(kind: GemmKind) -> Sm100Layout {
    let t = nvfp4_tactics().into_iter().find(|t| t.gemm1().cta_group().size() == 2).unwrap();
    let g = if kind == GemmKind::Gemm1 { *t.gemm1() } else { *t.gemm2() };
    Sm100Layout::new(&desc(Target::Sm100f, g, FinalizeMode::default(), None))
}

#[test]
fn barriers_past_the_reserved_block_are_a_build_error() {
    let mut l = deepest(GemmKind::Gemm1);
    assert_eq!(l.budget.reserved_bytes, RESERVED_SMEM);
    // Three rings of 64 stages need 1536 B of barriers: more than the reserved block.
    l.budget.ab_stages = 64;
    l.budget.smem_bytes = u32::MAX / 2;
    match Sm100Smem::plan(&l) {
        Err(SmemError::Overflow { arena, limit, .. }) => {
            assert_eq!(arena, "the reserved block");
            assert_eq!(limit, RESERVED_SMEM);
        }
        other => panic!("expected an overflow, got {other:?}"),
    }
    let (b, _) = build_layout(l);
    assert!(matches!(b.errors(), [BuildError::Smem { .. }]), "{:?}", b.errors());
    let err = render_module(&b, &header()).unwrap_err().to_string();
    assert!(err.contains("reserved block"), "{err}");
}

#[test]
fn stages_past_the_requested_shared_memory_are_a_build_error() {
    let mut l = deepest(GemmKind::Gemm2);
    l.budget.smem_bytes -= 1;
    let err = Sm100Smem::plan(&l).unwrap_err();
    assert!(matches!(
        err,
        SmemError::Overflow { arena: "the requested dynamic shared memory", .. }
    ));
    let (b, _) = build_layout(l);
    assert!(render_module(&b, &header()).is_err());
}

#[test]
fn a_planned_kernel_builds_without_errors() {
    let d = desc(Target::Sm100f, *nvfp4_tactics()[0].gemm1(), FinalizeMode::default(), None);
    let (b, _) = build(&d);
    assert!(b.errors().is_empty(), "{:?}", b.errors());
}
