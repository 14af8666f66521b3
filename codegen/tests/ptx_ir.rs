//! The PTX builder and printer, and the module template's delimiters.

use moegen_codegen::ptx::{KernelBuilder, ModuleHeader, Operand, RegClass, render_module};
use moegen_dsl::abi::{Param, ParamKind, ParamType};

fn header() -> ModuleHeader<'static> {
    ModuleHeader { ptx_version: "8.8", target: "sm_100f", description: "test" }
}

#[test]
fn vector_operands_and_tera_like_text_pass_through_untouched() {
    let mut b = KernelBuilder::new("k");
    let r0 = b.reg(RegClass::B32);
    let r1 = b.reg(RegClass::B32);
    let rd = b.reg(RegClass::B64);
    b.ins("mov.b64", vec![rd.into(), Operand::Vector(vec![r0.into(), r1.into()])]);
    b.comment("{% if x %} {{ y }} {# z #} stay literal");
    b.ins("ret", vec![]);
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
    b.ins("x", vec![Operand::Reg(r).at(16), Operand::Reg(r).at(-8), Operand::Reg(r).at(0)]);
    b.ins(
        "y",
        vec![Operand::Hex(0x0820_0480), Operand::F32(1.0 / 6.0), Operand::Imm(-1), Operand::Sink],
    );
    b.ins_if(p, true, "bra", vec![Operand::Name("L".into())]);
    b.label("L");
    let text = render_module(&b, &header()).unwrap();
    assert!(text.contains("\tx [%r0+16], [%r0-8], [%r0];"), "{text}");
    assert!(text.contains("\ty 0x08200480, 0f3E2AAAAB, -1, _;"), "{text}");
    assert!(text.contains("\t@!%p0 bra L;\nL:"), "{text}");
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
    b.ins("ld.shared.u32", vec![Operand::Reg(base).at(0)]);
    let text = render_module(&b, &header()).unwrap();
    assert!(text.contains(".version 8.8\n.target sm_100f\n.address_size 64\n"), "{text}");
    assert!(text.contains(".extern .shared .align 1024 .b8 moegen_smem[];"));
    assert!(text.contains("\t.param .align 64 .b8 tmap[128],\n\t.param .u32 n\n)"), "{text}");
    assert!(text.contains(".reqntid 128, 1, 1\n{"));
}

#[test]
fn reading_a_parameter_the_abi_does_not_declare_fails_to_render() {
    let mut b = KernelBuilder::new("moegen_test");
    b.ld_param_u32("missing");
    let err = render_module(&b, &header()).unwrap_err();
    assert!(err.contains("parameter missing is not in its ABI"), "{err}");
}
