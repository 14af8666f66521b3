//! Pipelines: barrier counts follow from the parties that arrive, and an arrival a ring does
//! not count is a build error.

use moegen_codegen::kernels::pipeline::{Commit, CommitAt, CpAsyncNoinc, ExpectTx, Pipeline, Tx};
use moegen_codegen::kernels::sm90::layout::Sm90Layout;
use moegen_codegen::kernels::sm90::rings::stage_ring;
use moegen_codegen::kernels::sm90::smem::Sm90Smem;
use moegen_codegen::kernels::sm100::layout::Sm100Layout;
use moegen_codegen::kernels::sm100::rings::Rings;
use moegen_codegen::kernels::sm100::smem::Sm100Smem;
use moegen_codegen::ptx::smem::Region;
use moegen_codegen::ptx::{BuildError, KernelBuilder};
use moegen_dsl::{FinalizeMode, GemmKind, GemmTactic, KernelDescBuilder, Target, nvfp4_tactics};

fn rings(kind: GemmKind, cta_group: u32, cluster_n: u32) -> Rings {
    let t = nvfp4_tactics()
        .into_iter()
        .map(|t| if kind == GemmKind::Gemm1 { *t.gemm1() } else { *t.gemm2() })
        .find(|g| g.cluster() == [cta_group, cluster_n])
        .unwrap();
    let mut b = KernelDescBuilder::new(t);
    if kind == GemmKind::Gemm2 {
        b = b.finalize(FinalizeMode::BulkReduceAdd);
    }
    let l = Sm100Layout::new(&b.build().unwrap());
    Rings::new(&l, &Sm100Smem::plan(&l).unwrap().bars)
}

#[test]
fn counts_follow_the_roles_that_arrive() {
    // 2-CTA GEMM1: the leader's producer + 128 gather threads + the relay; one MMA issuer.
    let r = rings(GemmKind::Gemm1, 2, 1);
    assert_eq!((r.ab.full_count(), r.ab.empty_count()), (130, 1));
    assert_eq!(r.relay.as_ref().map(Pipeline::full_count), Some(128));
    assert_eq!((r.acc.full_count(), r.acc.empty_count()), (1, 8));
    // 1-CTA GEMM1: no relay.
    let r = rings(GemmKind::Gemm1, 1, 1);
    assert_eq!((r.ab.full_count(), r.ab.empty_count()), (129, 1));
    assert!(r.relay.is_none());
    assert_eq!((r.acc.full_count(), r.acc.empty_count()), (1, 4));
    // GEMM2, 2-CTA pairs, cluster N 2: the stage is shared by both pairs' MMA issuers.
    let r = rings(GemmKind::Gemm2, 2, 2);
    assert_eq!((r.ab.full_count(), r.ab.empty_count()), (1, 2));
    assert_eq!((r.acc.full_count(), r.acc.empty_count()), (1, 8));
}

fn hopper_ring(kind: GemmKind, n: u32) -> Pipeline {
    let t = GemmTactic::new_sm90(kind, 32, n).unwrap();
    let l = Sm90Layout::new(&KernelDescBuilder::new(t).target(Target::Sm90a).build().unwrap());
    stage_ring(&l, &Sm90Smem::plan(&l).unwrap()).stage
}

#[test]
fn hopper_counts_follow_the_warpgroups_that_arrive() {
    // GEMM1: the elected weight issuer + 128 gather threads; one arrival per consumer warp
    // (one consumer for N 128, two for N 256).
    let r = hopper_ring(GemmKind::Gemm1, 128);
    assert_eq!((r.full_count(), r.empty_count()), (129, 4));
    let r = hopper_ring(GemmKind::Gemm1, 256);
    assert_eq!((r.full_count(), r.empty_count()), (129, 8));
    // GEMM2: weights and the activation TMA on one expect_tx.
    let r = hopper_ring(GemmKind::Gemm2, 64);
    assert_eq!((r.full_count(), r.empty_count()), (1, 4));
    let r = hopper_ring(GemmKind::Gemm2, 256);
    assert_eq!((r.full_count(), r.empty_count()), (1, 8));
}

/// Counts come from the declarations alone; a party token declared on one ring makes no
/// handle on another (an arrival that ring does not count). That a handle cannot arrive
/// in a way its party did not declare is checked by the compiler (the `compile_fail`
/// examples of `kernels::pipeline`).
#[test]
fn a_party_of_another_ring_is_a_build_error() {
    let region = |offset| Region { name: "bars", index: None, offset, size: 16, align: 8 };
    let mut ring = Pipeline::new("test ring", 2, region(0), Some(region(16)));
    let producer = ring.produced_by("producer", ExpectTx);
    let consumer = ring.consumed_by("consumer", Commit { issuers: 2 });
    assert_eq!((ring.full_count(), ring.empty_count()), (1, 2));
    let mut other = Pipeline::new("other ring", 2, region(32), None);
    let gather = other.produced_by("gather", CpAsyncNoinc { threads: 32 });
    assert_eq!(other.full_count(), 32);

    let mut b = KernelBuilder::new("k");
    let smem = b.smem_addr(0);
    let p = ring.producer(&mut b, &producer, smem);
    p.commit(&mut b, Tx { bytes: 64.into(), only: None });
    let c = ring.consumer(&mut b, &consumer, smem);
    let group = moegen_codegen::ptx::CtaGroup::One;
    c.release(&mut b, CommitAt { group, mask: None });
    assert!(b.errors().is_empty());
    ring.producer(&mut b, &gather, smem);
    assert_eq!(
        b.errors(),
        [BuildError::UndeclaredArrival {
            kernel: "k".into(),
            ring: "test ring",
            side: "full",
            arrival: "cp.async arrive.noinc",
        }]
    );
}
