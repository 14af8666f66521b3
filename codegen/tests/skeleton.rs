//! The GEMM skeleton's pieces on their own: role dispatch forms and stage-ring carving.

use moegen_codegen::kernels::skeleton::{Routes, WarpSpan};
use moegen_codegen::ptx::smem::{Arena, RingEnd, SmemError, StagePart};
use moegen_codegen::ptx::{KernelBuilder, ModuleHeader, RegClass, render_module};

fn header() -> ModuleHeader<'static> {
    ModuleHeader { ptx_version: "8.8", target: "sm_100f", description: "test" }
}

fn setps(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("setp") || l.starts_with("and.pred"))
        .collect()
}

#[test]
fn dispatch_tests_each_span_in_its_cheapest_form_in_table_order() {
    let mut b = KernelBuilder::new("k");
    let warp = b.reg(RegClass::B32);
    let end = b.new_label("end");
    let roles = [
        (0, "epilogue", WarpSpan { first: 0, count: 4 }),
        (1, "mma", WarpSpan::one(8)),
        (2, "gather", WarpSpan { first: 4, count: 4 }),
    ];
    let routes = Routes::dispatch(&mut b, warp, &roles, &end);
    for role in [2, 1, 0] {
        assert!(routes.enter(&mut b, role));
        b.bra(&end);
    }
    assert!(!routes.enter(&mut b, 3), "no warp runs role 3");
    b.label(&end);
    b.ret();
    let ptx = render_module(&b, &header()).unwrap();
    let tests = setps(&ptx);
    assert_eq!(tests.len(), 5, "{tests:?}");
    assert!(tests[0].starts_with("setp.lt.u32") && tests[0].ends_with(", 4;"), "{tests:?}");
    assert!(tests[1].starts_with("setp.eq.u32") && tests[1].ends_with(", 8;"), "{tests:?}");
    assert!(tests[2].starts_with("setp.ge.u32") && tests[2].ends_with(", 4;"), "{tests:?}");
    assert!(tests[3].starts_with("setp.lt.u32") && tests[3].ends_with(", 8;"), "{tests:?}");
    assert!(tests[4].starts_with("and.pred"), "{tests:?}");
}

const PARTS: [StagePart; 2] = [
    StagePart { name: "tile", size: 1024, align: 1024 },
    StagePart { name: "scales", size: 100, align: 16 },
];

#[test]
fn a_stage_ring_repeats_at_its_stride_and_pads_short_stages() {
    let mut tight = Arena::new("test", 0, 1 << 20);
    let ring = tight.stage_ring(3, 2048, &PARTS, RingEnd::Tight).unwrap();
    assert_eq!(ring.parts, [0, 1024]);
    let offsets: Vec<u32> = ring.leaves.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1024, 2048, 3072, 4096, 5120]);
    // Tight: the arena ends at the last part; Padded: after the last whole stride.
    assert_eq!((ring.region.size, tight.end()), (5220, 5220));
    let mut padded = Arena::new("test", 0, 1 << 20);
    let ring = padded.stage_ring(3, 2048, &PARTS, RingEnd::Padded).unwrap();
    assert_eq!((ring.region.size, padded.end()), (6144, 6144));
}

#[test]
fn a_stage_longer_than_its_stride_or_no_stage_is_an_error() {
    let mut a = Arena::new("test", 0, 1 << 20);
    let err = a.stage_ring(2, 1024, &PARTS, RingEnd::Tight).unwrap_err();
    assert!(matches!(err, SmemError::Stride { region: "tile", stage: 1, .. }), "{err:?}");
    let mut a = Arena::new("test", 0, 1 << 20);
    let err = a.stage_ring(0, 2048, &PARTS, RingEnd::Tight).unwrap_err();
    assert_eq!(err, SmemError::Empty { region: "stage ring" });
}
