//! Pipelines: barrier counts follow from the parties that arrive, and an arrival a ring does
//! not count is a build error.

use moegen_codegen::kernels::pipeline::{Arrival, Party, Pipeline, Side, Signal};
use moegen_codegen::kernels::sm90::layout::Sm90Layout;
use moegen_codegen::kernels::sm90::rings::stage_ring;
use moegen_codegen::kernels::sm90::smem::Sm90Smem;
use moegen_codegen::kernels::sm100::layout::Sm100Layout;
use moegen_codegen::kernels::sm100::rings::Rings;
use moegen_codegen::kernels::sm100::smem::Sm100Smem;
use moegen_codegen::ptx::smem::Region;
use moegen_codegen::ptx::{BuildError, KernelBuilder, RegClass};
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
    stage_ring(&l, &Sm90Smem::plan(&l).unwrap())
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

#[test]
fn an_undeclared_arrival_is_a_build_error() {
    let region = |offset| Region { name: "bars", index: None, offset, size: 16, align: 8 };
    let ring = Pipeline {
        name: "test ring",
        stages: 2,
        full: region(0),
        empty: Some(region(16)),
        producers: vec![Party { role: "producer", arrival: Arrival::ExpectTx }],
        consumers: vec![Party { role: "consumer", arrival: Arrival::Commit { issuers: 1 } }],
        full_multicast: None,
        empty_multicast: None,
    };
    let mut b = KernelBuilder::new("k");
    let smem = b.smem_addr(0);
    let cur = ring.cursor(&mut b);
    ring.commit(&mut b, smem, cur, Signal::ExpectTx { bytes: 64, only: None });
    assert!(b.errors().is_empty());
    let bar = b.reg(RegClass::B32);
    ring.signal(&mut b, Side::Empty, bar, Signal::CpAsyncNoinc);
    assert_eq!(
        b.errors(),
        [BuildError::UndeclaredArrival {
            kernel: "k".into(),
            ring: "test ring",
            side: "empty",
            arrival: "cp.async arrive.noinc",
        }]
    );
}
