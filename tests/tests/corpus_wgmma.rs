//! The wgmma corpus kernel (part of the default set's corpus group) renders with the ABI's
//! name and parameters, and assembles for sm_90a with four HGMMAs and no spill.

use moegen_codegen::kernel_set::corpus_kernel;
use moegen_codegen::ptxas::{assemble, count_sass, disassemble};
use moegen_dsl::abi::{CorpusKernel, KernelId, params};
use moegen_tests::require;

#[test]
fn corpus_wgmma_assembles_with_four_wgmmas() {
    require(moegen_codegen::tools::ptxas());
    let k = corpus_kernel(CorpusKernel::Wgmma).unwrap();
    let id = KernelId::Corpus(CorpusKernel::Wgmma);
    let ptx = &k.ptx;
    assert!(ptx.contains(&format!(".visible .entry {}(", id.name())), "{ptx}");
    assert!(ptx.contains(".target sm_90a"));
    assert_eq!(ptx.matches("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16").count(), 4);
    for p in params(&id) {
        assert!(ptx.contains(&format!(".param .u64 {}", p.name)), "{}", p.name);
    }
    let (report, cubin) = assemble(ptx, "sm_90a").unwrap();
    assert_eq!(report.spill_stores + report.spill_loads + report.stack_frame, 0, "{report:?}");
    let sass = count_sass(&disassemble(&cubin).unwrap());
    assert_eq!(sass.get("HGMMA"), 4);
}
