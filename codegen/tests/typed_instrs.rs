//! The typed-operand instructions: they lower to the exact PTX text, and a struct with an
//! operand of the wrong class, count or range is refused (recorded, nothing emitted, the
//! kernel fails to render), as is a positional operand list for one of their opcodes.

use moegen_codegen::ptx::instrs::{
    BulkStore, CpAsync, MbarInit, MbarWait, SetMaxNReg, Shfl, Tcgen05Ld, Tcgen05Mma, TmaLoad,
    WaitKind, WgmmaMma,
};
use moegen_codegen::ptx::ops::{CacheOp, LdRepeat, LdShape, MmaKind, ShflMode, Tcgen05};
use moegen_codegen::ptx::{
    Accumulate, BuildError, CtaGroup, KernelBuilder, ModuleHeader, Operand, OperandError, Reg,
    RegClass, Stmt, TmemAddr, render_module,
};

fn header() -> ModuleHeader<'static> {
    ModuleHeader { ptx_version: "8.8", target: "sm_100f", description: "test" }
}

/// The one operand error `b` recorded, with nothing emitted.
fn refused(b: &KernelBuilder) -> OperandError {
    assert!(b.body().is_empty(), "a refused instruction is not emitted: {:?}", b.body());
    assert!(render_module(b, &header()).is_err(), "a kernel with a refused operand renders");
    match b.errors() {
        [BuildError::Operand { source, .. }] => source.clone(),
        other => panic!("expected one operand error, got {other:?}"),
    }
}

fn text(b: &KernelBuilder) -> String {
    assert_eq!(b.errors(), [], "no errors");
    b.body().iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

struct MmaRegs {
    d: Reg,
    a: Reg,
    b: Reg,
    idesc: Reg,
    sf: Reg,
    acc: Reg,
}

fn mma_regs(b: &mut KernelBuilder) -> MmaRegs {
    MmaRegs {
        d: b.reg(RegClass::B32),
        a: b.reg(RegClass::B64),
        b: b.reg(RegClass::B64),
        idesc: b.reg(RegClass::B32),
        sf: b.reg(RegClass::B32),
        acc: b.reg(RegClass::Pred),
    }
}

fn mma(r: &MmaRegs) -> Tcgen05Mma {
    let sf = TmemAddr::new(r.sf);
    Tcgen05Mma {
        group: CtaGroup::One,
        kind: MmaKind::Mxf4Nvf4Block16,
        d_tmem: TmemAddr::new(r.d),
        a_desc: r.a,
        b_desc: r.b,
        idesc: r.idesc,
        scale_a_tmem: sf.col(4),
        scale_b_tmem: sf.col(16).col(4),
        enable_input_d: Accumulate::When(r.acc),
    }
}

#[test]
fn an_mma_prints_its_named_operands_in_ptx_order() {
    let mut b = KernelBuilder::new("k");
    let r = mma_regs(&mut b);
    b.push(mma(&r));
    b.push(Tcgen05Mma { enable_input_d: Accumulate::Always, ..mma(&r) });
    assert_eq!(
        text(&b),
        "\ttcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16 \
         [%r0], %rd0, %rd1, %r1, [%r2+4], [%r2+20], %p0;\n\
         \ttcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16 \
         [%r0], %rd0, %rd1, %r1, [%r2+4], [%r2+20], 1;"
    );
}

#[test]
fn an_mma_with_a_descriptor_of_the_wrong_class_is_refused() {
    let mut b = KernelBuilder::new("k");
    let r = mma_regs(&mut b);
    b.push(Tcgen05Mma { a_desc: r.idesc, ..mma(&r) });
    let e = refused(&b);
    assert!(matches!(e, OperandError::Class { field: "a_desc", .. }), "{e:?}");
    assert!(e.to_string().contains("tcgen05.mma: a_desc is %r1"), "{e}");
}

#[test]
fn an_mma_enabled_by_a_non_predicate_is_refused() {
    let mut b = KernelBuilder::new("k");
    let r = mma_regs(&mut b);
    b.push(Tcgen05Mma { enable_input_d: Accumulate::When(r.d), ..mma(&r) });
    assert!(matches!(refused(&b), OperandError::Class { field: "enable_input_d", .. }));
}

#[test]
fn a_tmem_column_past_the_last_is_refused() {
    let mut b = KernelBuilder::new("k");
    let r = mma_regs(&mut b);
    b.push(Tcgen05Mma { scale_b_tmem: TmemAddr::new(r.sf).col(500).col(12), ..mma(&r) });
    let e = refused(&b);
    assert!(matches!(e, OperandError::Range { field: "scale_b_tmem", value: 512, .. }), "{e:?}");
}

#[test]
fn a_tmem_load_needs_one_register_per_repeat() {
    let mut b = KernelBuilder::new("k");
    let base = b.reg(RegClass::B32);
    let dst = b.regs(RegClass::F32, 3);
    let src = TmemAddr::new(base).col(8);
    b.push(Tcgen05Ld { shape: LdShape::Lanes32x32b, repeat: LdRepeat::X4, dst, src });
    let e = refused(&b);
    assert_eq!(e, OperandError::Count { instr: "tcgen05.ld", field: "dst", expected: 4, found: 3 });

    let mut b = KernelBuilder::new("k");
    let base = b.reg(RegClass::B32);
    let dst = b.regs(RegClass::F32, 2);
    b.push(Tcgen05Ld {
        shape: LdShape::Lanes32x32b,
        repeat: LdRepeat::X2,
        dst,
        src: TmemAddr::new(base).col(8),
    });
    assert_eq!(text(&b), "\ttcgen05.ld.sync.aligned.32x32b.x2.b32 {%f0, %f1}, [%r0+8];");
}

#[test]
fn a_tensor_load_takes_its_rank_and_multicast_from_its_operands() {
    let mut b = KernelBuilder::new("k");
    let (dst, bar) = (b.reg(RegClass::B32), b.reg(RegClass::B32));
    let map = b.reg(RegClass::B64);
    let mask = b.reg(RegClass::B16);
    let coords = vec![Operand::Imm(0), dst.into(), Operand::Imm(7)];
    let load = TmaLoad { dst, map, coords, bar, multicast: Some(mask), cta_group: None };
    b.push(load.clone());
    assert_eq!(
        text(&b),
        "\tcp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes\
         .multicast::cluster [%r0], [%rd0, {0, %r0, 7}], [%r1], %h0;"
    );

    let mut b = KernelBuilder::new("k");
    b.push(TmaLoad { coords: vec![Operand::Imm(0); 6], ..load.clone() });
    assert!(matches!(refused(&b), OperandError::Range { field: "coords", value: 6, .. }));

    let mut b = KernelBuilder::new("k");
    b.push(TmaLoad { multicast: Some(dst), ..load });
    assert!(matches!(refused(&b), OperandError::Class { field: "multicast", .. }));
}

#[test]
fn barrier_and_bulk_operands_out_of_range_are_refused() {
    let mut b = KernelBuilder::new("k");
    let bar = b.reg(RegClass::B32);
    b.push(MbarInit { bar, count: 0 });
    assert!(matches!(refused(&b), OperandError::Range { field: "count", .. }));

    let mut b = KernelBuilder::new("k");
    let (ready, bar) = (b.reg(RegClass::Pred), b.reg(RegClass::B32));
    b.push(MbarWait { kind: WaitKind::Test, ready, bar, parity: Operand::Imm(2) });
    assert!(matches!(refused(&b), OperandError::Range { field: "parity", value: 2, .. }));

    let mut b = KernelBuilder::new("k");
    let bar = b.reg(RegClass::B32);
    b.push(MbarWait { kind: WaitKind::Test, ready: bar, bar, parity: Operand::Imm(1) });
    assert!(matches!(refused(&b), OperandError::Class { field: "ready", .. }));

    let mut b = KernelBuilder::new("k");
    let (dst, src) = (b.reg(RegClass::B64), b.reg(RegClass::B32));
    b.push(BulkStore { dst, src, bytes: 24.into(), reduce_add: None });
    assert!(matches!(refused(&b), OperandError::Range { field: "bytes", value: 24, .. }));

    let mut b = KernelBuilder::new("k");
    let (dst, src) = (b.reg(RegClass::B64), b.reg(RegClass::B32));
    b.push(BulkStore { dst: src, src: dst, bytes: 32.into(), reduce_add: None });
    assert!(matches!(refused(&b), OperandError::Class { field: "dst", .. }));
}

#[test]
fn wgmma_operands_are_checked_against_the_shape() {
    let mut b = KernelBuilder::new("k");
    let d = b.regs(RegClass::F32, 15);
    let a = [0; 4].map(|_| b.reg(RegClass::B32));
    let b_desc = b.reg(RegClass::B64);
    let mma = WgmmaMma {
        n: 32,
        d,
        a,
        b_desc,
        scale_d: Accumulate::Always,
        negate_a: false,
        negate_b: true,
        transpose_b: false,
    };
    b.push(mma.clone());
    assert!(matches!(refused(&b), OperandError::Count { field: "d", expected: 16, found: 15, .. }));

    let mut b = KernelBuilder::new("k");
    b.push(WgmmaMma { n: 12, ..mma.clone() });
    assert!(matches!(refused(&b), OperandError::Range { field: "n", value: 12, .. }));

    let mut b = KernelBuilder::new("k");
    b.push(WgmmaMma { n: 30, d: mma.d[..15].to_vec(), ..mma });
    assert!(matches!(refused(&b), OperandError::Range { field: "n", .. }));

    let mut b = KernelBuilder::new("k");
    b.push(SetMaxNReg { inc: true, count: 100 });
    assert!(matches!(refused(&b), OperandError::Range { field: "count", value: 100, .. }));
}

#[test]
fn a_shuffle_reports_its_range_predicate_only_into_a_predicate() {
    let mut b = KernelBuilder::new("k");
    let (d, v) = (b.reg(RegClass::B32), b.reg(RegClass::B32));
    let p = b.reg(RegClass::Pred);
    let shfl = Shfl {
        mode: ShflMode::Up,
        dst: d,
        in_range: Some(p),
        src: v,
        lane: Operand::Imm(3),
        clamp: Operand::Imm(0),
        members: Operand::Imm(-1),
    };
    b.push(shfl.clone());
    assert_eq!(text(&b), "\tshfl.sync.up.b32 %r0|%p0, %r1, 3, 0, -1;");

    let mut b = KernelBuilder::new("k");
    b.push(Shfl { in_range: Some(v), ..shfl.clone() });
    assert!(matches!(refused(&b), OperandError::Class { field: "in_range", .. }));

    let mut b = KernelBuilder::new("k");
    b.push(Shfl { lane: Operand::SharedArray, ..shfl });
    assert!(matches!(refused(&b), OperandError::Class { field: "lane", .. }));
}

#[test]
fn a_typed_opcode_with_positional_operands_is_refused() {
    let mut b = KernelBuilder::new("k");
    let r = mma_regs(&mut b);
    b.emit(Tcgen05::Mma(CtaGroup::One, MmaKind::Mxf4Nvf4Block16), vec![r.d.into()]);
    assert!(
        matches!(b.errors(), [BuildError::Untyped { op, .. }] if op.starts_with("tcgen05.mma")),
        "{:?}",
        b.errors()
    );
    let err = render_module(&b, &header()).unwrap_err().to_string();
    assert!(err.contains("takes named operands"), "{err}");
    // Opcodes without operands stay positional.
    let mut b = KernelBuilder::new("k");
    b.emit(Tcgen05::WaitLd, vec![]);
    assert!(matches!(b.body(), [Stmt::Instr(_)]) && b.errors().is_empty());
}

#[test]
fn a_cp_async_size_must_fit_its_cache_policy() {
    let mut b = KernelBuilder::new("k");
    let (dst, n) = (b.reg(RegClass::B32), b.reg(RegClass::B32));
    let src = b.reg(RegClass::B64);
    let copy = CpAsync {
        cache: CacheOp::Ca,
        dst,
        dst_offset: 512,
        src,
        src_offset: 0,
        bytes: 8,
        src_bytes: n,
    };
    b.push(copy);
    assert_eq!(text(&b), "\tcp.async.ca.shared.global [%r0+512], [%rd0], 8, %r1;");

    let mut b = KernelBuilder::new("k");
    b.push(CpAsync { cache: CacheOp::Cg, ..copy });
    assert!(matches!(refused(&b), OperandError::Range { field: "bytes", value: 8, .. }));
}
