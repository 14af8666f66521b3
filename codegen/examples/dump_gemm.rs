//! Scratch: dump every kernel to /tmp/ptx.
use moegen_codegen::kernels::{finalize_reduce, gemm, moe_sort, quantize, simt_target::SimtTarget};
use moegen_codegen::ptx::{ModuleHeader, render_module};
use moegen_dsl::*;
fn main() {
    let w = |k: &moegen_codegen::ptx::KernelBuilder, t: &str| {
        let text =
            render_module(k, &ModuleHeader { ptx_version: "8.8", target: t, description: "x" })
                .unwrap();
        std::fs::write(format!("/tmp/ptx/{}.ptx", k.name), text).unwrap();
    };
    for t in nvfp4_tactics() {
        for g in [t.gemm1(), t.gemm2()] {
            let d = KernelDescBuilder::new(*g).build().unwrap();
            w(&gemm::build(&d).0, "sm_100f");
        }
    }
    for t in SimtTarget::ALL {
        for k in [
            moe_sort::build_histogram(t),
            moe_sort::build_offsets(t),
            moe_sort::build_scatter(t),
            quantize::build(t),
            finalize_reduce::build(t),
        ] {
            w(&k, t.name());
        }
    }
}
