use moegen_codegen::kernels::gemm;
use moegen_codegen::ptx::{ModuleHeader, render_module};
use moegen_dsl::*;
fn main() {
    for t in nvfp4_tactics() {
        for g in [t.gemm1(), t.gemm2()] {
            let d = KernelDescBuilder::new(*g).build().unwrap();
            let (k, _) = gemm::build(&d);
            let text = render_module(&k, &ModuleHeader { ptx_version: "8.8", target: "sm_100f", description: "x" }).unwrap();
            std::fs::write(format!("/tmp/ptx/{}.ptx", k.name), text).unwrap();
        }
    }
}
