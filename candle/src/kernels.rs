//! The kernels a layer launches: moegen's built-in set, plus gpt-oss's SM100 MXFP8 GEMMs,
//! which the built-in set leaves out (on SM100 it holds plain SwiGLU's GEMMs only; other
//! epilogues are generated on demand: docs/sm100-mxf8f6f4.md). They are generated here while
//! the crate compiles, so nothing is generated at run time.

use moegen_dsl::options::EpilogueSpec;
use moegen_runtime::prelude::*;

moegen_macros::moe_kernels! {
    /// gpt-oss's epilogue (clamped SwiGLU, both biases) for every SM100 tactic, MXFP4 weights
    /// × MXFP8 activations, both finalize modes; the SIMT kernels come from the built-in set.
    // The layer takes the whole set; the module's lookups by name and id go unused.
    #[allow(dead_code)]
    mod gpt_oss_mxfp8 {
        target: sm_100f,
        format: mxfp4,
        finalize: [bulk_reduce_add, deterministic],
        epilogues: [gpt_oss],
        simt: [],
    }
}

/// The set a layer of `config` is built from. Only the MXFP8 layers with an epilogue beyond
/// plain SwiGLU get the generated GEMMs: every other layer keeps the built-in set, and so its
/// checksum (the key of the autotuner's cached results).
pub(crate) fn for_layer(config: &LayerConfig) -> KernelSet {
    let builtin = KernelSet::builtin();
    if config.activations != ActivationFormat::Mxfp8 || config.epilogue == EpilogueSpec::PLAIN {
        return builtin;
    }
    KernelSet::new(builtin.kernels().iter().copied().chain(gpt_oss_mxfp8::kernels()))
}
