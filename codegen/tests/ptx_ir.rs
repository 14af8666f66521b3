//! The PTX builder and printer, and the module template's delimiters.

use moegen_codegen::ptx::ops::{Alu, Bulk, Cvt, FloatOp, IntOp, Mbarrier, Tcgen05, Wgmma};
use moegen_codegen::ptx::{
    BuildError, CtaGroup, Guard, KernelBuilder, Label, ModuleHeader, Operand, RegClass, Rnd, SReg,
    Space, Ty, render_module,
};
use moegen_dsl::abi::{Param, ParamKind, ParamType, Scalar};

fn header() -> ModuleHeader<'static> {
    ModuleHeader { ptx_version: "8.8", target: "sm_100f", description: "test" }
}

#[test]
fn vector_operands_and_tera_like_text_pass_through_untouched() {
    let mut b = KernelBuilder::new("k");
    let r0 = b.reg(RegClass::B32);
    let r1 = b.reg(RegClass::B32);
    b.pack_b64(r0, r1);
    b.comment("{% if x %} {{ y }} {# z #} stay literal");
    b.ret();
    let text = render_module(&b, &header()).unwrap();
    assert!(text.contains("\tmov.b64 %rd0, {%r0, %r1};"), "{text}");
    assert!(text.contains("{% if x %} {{ y }} {# z #} stay literal"), "{text}");
    assert!(text.contains(".reg .b32 %r<2>;"));
    assert!(text.contains(".reg .b64 %rd<1>;"));
    assert!(!text.contains(".reg .pred"), "classes without registers are not declared");
}

#[test]
fn operands_print_exactly() {
    let mut b = KernelBuilder::new("k");
    let r = b.reg(RegClass::B32);
    let p = b.reg(RegClass::Pred);
    let q = b.reg(RegClass::Pred);
    let mov = Alu::Mov(Ty::B32);
    b.emit(mov, vec![Operand::Reg(r).at(16), Operand::Reg(r).at(-8), Operand::addr(r)]);
    b.emit(
        mov,
        vec![Operand::Hex(0x0820_0480), Operand::F32(1.0 / 6.0), Operand::Imm(-1), Operand::Sink],
    );
    b.emit(mov, vec![Operand::NotPred(p), Operand::PredOut { value: None, pred: q }]);
    b.emit(mov, vec![Operand::PredOut { value: Some(r), pred: q }, SReg::ClusterCtarank.into()]);
    let l = Label::named("L");
    b.bra_unless(p, &l);
    b.label(&l);
    let text = render_module(&b, &header()).unwrap();
    assert!(text.contains("\tmov.b32 [%r0+16], [%r0-8], [%r0];"), "{text}");
    assert!(text.contains("\tmov.b32 0x08200480, 0f3E2AAAAB, -1, _;"), "{text}");
    assert!(text.contains("\tmov.b32 !%p0, _|%p1;"), "{text}");
    assert!(text.contains("\tmov.b32 %r0|%p1, %cluster_ctarank;"), "{text}");
    assert!(text.contains("\t@!%p0 bra L_L;\nL_L:"), "{text}");
}

#[test]
fn typed_opcodes_spell_their_modifiers() {
    let cases: Vec<(moegen_codegen::ptx::Op, &str)> = vec![
        (
            Alu::Cvt(Cvt::satfinite(Rnd::Rn, Ty::E2m1x2, Ty::F32)).into(),
            "cvt.rn.satfinite.e2m1x2.f32",
        ),
        (
            Mbarrier::TryWaitParity(Space::SharedCta).into(),
            "mbarrier.try_wait.parity.shared::cta.b64",
        ),
        (
            Bulk::TensorLoad { dims: 3, multicast: true, cta_group: Some(CtaGroup::Two) }.into(),
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster.cta_group::2",
        ),
        (
            Tcgen05::Commit { group: CtaGroup::One, multicast: true }.into(),
            "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64",
        ),
        (
            Bulk::ReduceAdd { ty: Ty::Bf16 }.into(),
            "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16",
        ),
        (Bulk::Load.into(), "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"),
        (
            Wgmma::MmaBf16RegA { n: 32 }.into(),
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16",
        ),
        (Wgmma::Fence.into(), "wgmma.fence.sync.aligned"),
        (Wgmma::CommitGroup.into(), "wgmma.commit_group.sync.aligned"),
        (Wgmma::WaitGroup.into(), "wgmma.wait_group.sync.aligned"),
        (Wgmma::SetMaxNReg { inc: true }.into(), "setmaxnreg.inc.sync.aligned.u32"),
        (Wgmma::SetMaxNReg { inc: false }.into(), "setmaxnreg.dec.sync.aligned.u32"),
        (Alu::Int(IntOp::Prmt, Ty::B32).into(), "prmt.b32"),
        (Alu::Int(IntOp::Max, Ty::U16x2).into(), "max.u16x2"),
        (Alu::Int(IntOp::ShfRWrap, Ty::B32).into(), "shf.r.wrap.b32"),
        (Alu::Float(FloatOp::Mul(Rnd::Rn), Ty::Bf16x2).into(), "mul.rn.bf16x2"),
    ];
    for (op, text) in cases {
        assert_eq!(op.to_string(), text);
    }
}

#[test]
fn module_skeleton_has_header_params_and_directives() {
    const PARAMS: &[Param] = &[
        Param { name: "tmap", kind: ParamKind::Validation(ParamType::TensorMap), meaning: "" },
        Param { name: "n", kind: ParamKind::Validation(ParamType::U32), meaning: "" },
    ];
    let mut b = KernelBuilder::new("moegen_test");
    b.declare(PARAMS);
    b.directives.push(".reqntid 128, 1, 1".into());
    let base = b.smem_addr(0);
    let n = b.ld_arg_u32(1);
    let p = b.reg(RegClass::Pred);
    b.emit_if(Guard::when(p), Alu::Mov(Ty::U32), vec![base.into(), n.into()]);
    let text = render_module(&b, &header()).unwrap();
    assert!(text.contains(".version 8.8\n.target sm_100f\n.address_size 64\n"), "{text}");
    assert!(text.contains(".extern .shared .align 1024 .b8 moegen_smem[];"));
    assert!(text.contains("\tmov.u32 %r0, moegen_smem;\n\tld.param.u32 %r1, [n];"), "{text}");
    assert!(text.contains("\t.param .align 64 .b8 tmap[128],\n\t.param .u32 n\n)"), "{text}");
    assert!(text.contains(".reqntid 128, 1, 1\n{"));
}

#[test]
fn reading_a_parameter_the_abi_does_not_declare_fails_to_render() {
    let mut b = KernelBuilder::new("moegen_test");
    b.declare(moegen_dsl::abi::signature::QUANTIZE_NVFP4);
    b.ld_scalar(Scalar::Intermediate);
    assert_eq!(
        b.errors(),
        [BuildError::UndeclaredParam {
            kernel: "moegen_test".into(),
            param: "Scalar(Intermediate)".into()
        }]
    );
    let err = render_module(&b, &header()).unwrap_err().to_string();
    assert!(err.contains("parameter Scalar(Intermediate) is not in its ABI"), "{err}");
}

#[test]
fn a_validation_argument_read_by_the_wrong_type_fails_to_render() {
    const PARAMS: &[Param] =
        &[Param { name: "n", kind: ParamKind::Validation(ParamType::U32), meaning: "" }];
    let mut b = KernelBuilder::new("moegen_test");
    b.declare(PARAMS);
    b.ld_arg_u64(0);
    b.ld_arg_u32(1);
    assert_eq!(
        b.errors(),
        [
            BuildError::UndeclaredParam {
                kernel: "moegen_test".into(),
                param: "argument 0 of type U64".into()
            },
            BuildError::UndeclaredParam {
                kernel: "moegen_test".into(),
                param: "argument 1 of type U32".into()
            },
        ]
    );
}
