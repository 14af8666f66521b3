//! The kernel ABI: the one description of every kernel interface, used by codegen to emit
//! kernels and by the runtime to launch them.
//!
//! - [`ep`]: the expert-parallel all-to-all mode's padding id.
//! - [`error_record`]: the device-side error record the routing kernels write.
//! - [`identity`]: what a kernel is and its entry name.
//! - [`param`] and [`signature`](mod@signature): each kernel's parameters, by meaning.
//! - [`tensor_map`]: tensor-map layouts as functions of the problem.
//! - [`launch`]: threads, clusters, shared memory, TMEM, grid rules.
//! - [`roles`]: the GEMM kernels' warp roles.
//! - [`mufu_sweep`]: the MUFU sweep kernel's op order and input rule.
//! - [`info`]: [`KernelInfo`], the typed record a generated kernel set exports.

pub mod ep;
pub mod error_record;
pub mod identity;
pub mod info;
pub mod launch;
pub mod mufu_sweep;
pub mod param;
pub mod roles;
pub mod signature;
pub mod sm90_residency;
pub mod sm90_weights;
pub mod tensor_map;

// The GEMM identity and its format are part of the ABI's vocabulary (`KernelId::Gemm`, and
// generated kernel sets write them as `moegen_dsl::abi::…` constants); they live in leaf
// modules so that descriptions can use them without importing the ABI.
pub use crate::gemm_key::GemmKey;
pub use crate::options::{ActivationFormat, WeightFormat};
pub use identity::{CorpusKernel, KernelId, SimtFamily, SimtTarget};
pub use info::KernelInfo;
pub use launch::{GridRule, LaunchFacts, RowCount, SmemRule, launch_facts, persistent_units};
pub use param::{Buffer, Param, ParamKind, ParamType, Scalar, TensorMap};
pub use roles::{GemmRoles, gemm_roles};
pub use tensor_map::{MapDims, TensorMapLayout, TmaElement};

use crate::options::FinalizeMode;
use crate::tactic::{Arch, GemmKind};

/// The parameter list of a kernel, with the path of the constant that holds it (generated
/// code names the constant instead of copying the list).
pub fn signature(id: &KernelId) -> (&'static str, &'static [Param]) {
    use signature as s;
    match id {
        // MXFP8 keys first: only SM100 has MXFP8 GEMMs (`KernelDescBuilder` refuses them on
        // Hopper), so the Hopper arm's A8 lists stand for them only in patterns.
        KernelId::Gemm(k) if k.activations == ActivationFormat::Mxfp8 => {
            match (k.gemm, k.finalize, k.activation.has_params(), k.bias) {
                (GemmKind::Gemm1, _, false, false) => ("GEMM1_MX", s::GEMM1_MX),
                (GemmKind::Gemm1, _, true, false) => ("GEMM1_MX_ACT", s::GEMM1_MX_ACT),
                (GemmKind::Gemm1, _, false, true) => ("GEMM1_MX_BIAS", s::GEMM1_MX_BIAS),
                (GemmKind::Gemm1, _, true, true) => ("GEMM1_MX_ACT_BIAS", s::GEMM1_MX_ACT_BIAS),
                (GemmKind::Gemm2, FinalizeMode::BulkReduceAdd, _, false) => {
                    ("GEMM2_MX", s::GEMM2_MX)
                }
                (GemmKind::Gemm2, FinalizeMode::BulkReduceAdd, _, true) => {
                    ("GEMM2_MX_BIAS", s::GEMM2_MX_BIAS)
                }
                (GemmKind::Gemm2, FinalizeMode::Deterministic, _, false) => {
                    ("GEMM2_MX_DETERMINISTIC", s::GEMM2_MX_DETERMINISTIC)
                }
                (GemmKind::Gemm2, FinalizeMode::Deterministic, _, true) => {
                    ("GEMM2_MX_DETERMINISTIC_BIAS", s::GEMM2_MX_DETERMINISTIC_BIAS)
                }
            }
        }
        KernelId::Gemm(k) if k.target.arch() == Arch::Sm90 => match (k.gemm, k.finalize) {
            (GemmKind::Gemm1, _) => {
                use ActivationFormat as A;
                match (k.activations, k.activation.has_params(), k.bias) {
                    (A::Bf16, false, false) => ("SM90_GEMM1_A16", s::SM90_GEMM1_A16),
                    (A::Bf16, true, false) => ("SM90_GEMM1_A16_ACT", s::SM90_GEMM1_A16_ACT),
                    (A::Bf16, false, true) => ("SM90_GEMM1_A16_BIAS", s::SM90_GEMM1_A16_BIAS),
                    (A::Bf16, true, true) => {
                        ("SM90_GEMM1_A16_ACT_BIAS", s::SM90_GEMM1_A16_ACT_BIAS)
                    }
                    (A::Nvfp4, false, false) => ("SM90_GEMM1_A4", s::SM90_GEMM1_A4),
                    (A::Nvfp4, true, false) => ("SM90_GEMM1_A4_ACT", s::SM90_GEMM1_A4_ACT),
                    (A::Nvfp4, false, true) => ("SM90_GEMM1_A4_BIAS", s::SM90_GEMM1_A4_BIAS),
                    (A::Nvfp4, true, true) => ("SM90_GEMM1_A4_ACT_BIAS", s::SM90_GEMM1_A4_ACT_BIAS),
                    (A::Fp8 | A::Mxfp8, false, false) => ("SM90_GEMM1_A8", s::SM90_GEMM1_A8),
                    (A::Fp8 | A::Mxfp8, true, false) => ("SM90_GEMM1_A8_ACT", s::SM90_GEMM1_A8_ACT),
                    (A::Fp8 | A::Mxfp8, false, true) => {
                        ("SM90_GEMM1_A8_BIAS", s::SM90_GEMM1_A8_BIAS)
                    }
                    (A::Fp8 | A::Mxfp8, true, true) => {
                        ("SM90_GEMM1_A8_ACT_BIAS", s::SM90_GEMM1_A8_ACT_BIAS)
                    }
                }
            }
            (GemmKind::Gemm2, finalize) => {
                use FinalizeMode as F;
                let a8 = k.activations == ActivationFormat::Fp8;
                match (a8, finalize, k.bias) {
                    (true, F::BulkReduceAdd, false) => ("SM90_GEMM2_A8", s::SM90_GEMM2_A8),
                    (true, F::BulkReduceAdd, true) => ("SM90_GEMM2_A8_BIAS", s::SM90_GEMM2_A8_BIAS),
                    (true, F::Deterministic, false) => {
                        ("SM90_GEMM2_A8_DETERMINISTIC", s::SM90_GEMM2_A8_DETERMINISTIC)
                    }
                    (true, F::Deterministic, true) => {
                        ("SM90_GEMM2_A8_DETERMINISTIC_BIAS", s::SM90_GEMM2_A8_DETERMINISTIC_BIAS)
                    }
                    (false, F::BulkReduceAdd, false) => ("SM90_GEMM2", s::SM90_GEMM2),
                    (false, F::BulkReduceAdd, true) => ("SM90_GEMM2_BIAS", s::SM90_GEMM2_BIAS),
                    (false, F::Deterministic, false) => {
                        ("SM90_GEMM2_DETERMINISTIC", s::SM90_GEMM2_DETERMINISTIC)
                    }
                    (false, F::Deterministic, true) => {
                        ("SM90_GEMM2_DETERMINISTIC_BIAS", s::SM90_GEMM2_DETERMINISTIC_BIAS)
                    }
                }
            }
        },
        KernelId::Gemm(k) => match (k.gemm, k.finalize, k.activation.has_params(), k.bias) {
            (GemmKind::Gemm1, _, false, false) => ("GEMM1", s::GEMM1),
            (GemmKind::Gemm1, _, true, false) => ("GEMM1_ACT", s::GEMM1_ACT),
            (GemmKind::Gemm1, _, false, true) => ("GEMM1_WITH_BIAS", s::GEMM1_WITH_BIAS),
            (GemmKind::Gemm1, _, true, true) => ("GEMM1_ACT_BIAS", s::GEMM1_ACT_BIAS),
            (GemmKind::Gemm2, FinalizeMode::BulkReduceAdd, _, false) => ("GEMM2", s::GEMM2),
            (GemmKind::Gemm2, FinalizeMode::BulkReduceAdd, _, true) => {
                ("GEMM2_WITH_BIAS", s::GEMM2_WITH_BIAS)
            }
            (GemmKind::Gemm2, FinalizeMode::Deterministic, _, false) => {
                ("GEMM2_DETERMINISTIC", s::GEMM2_DETERMINISTIC)
            }
            (GemmKind::Gemm2, FinalizeMode::Deterministic, _, true) => {
                ("GEMM2_DETERMINISTIC_BIAS", s::GEMM2_DETERMINISTIC_BIAS)
            }
        },
        KernelId::Simt { family, .. } => match family {
            SimtFamily::MoeSortHistogram => ("MOE_SORT_HISTOGRAM", s::MOE_SORT_HISTOGRAM),
            SimtFamily::MoeSortOffsets => ("MOE_SORT_OFFSETS", s::MOE_SORT_OFFSETS),
            SimtFamily::MoeSortScatter => ("MOE_SORT_SCATTER", s::MOE_SORT_SCATTER),
            SimtFamily::MoeSortSingle => ("MOE_SORT_SINGLE", s::MOE_SORT_SINGLE),
            SimtFamily::QuantizeNvfp4 => ("QUANTIZE_NVFP4", s::QUANTIZE_NVFP4),
            SimtFamily::QuantizeMxfp8 => ("QUANTIZE_MXFP8", s::QUANTIZE_MXFP8),
            SimtFamily::FinalizeReduce => ("FINALIZE_REDUCE", s::FINALIZE_REDUCE),
            SimtFamily::QdqNvfp4 => ("QDQ_NVFP4", s::QDQ_NVFP4),
            SimtFamily::QuantFp8Tokens => ("QUANT_FP8_TOKENS", s::QUANT_FP8_TOKENS),
            SimtFamily::QuantFp8Rows => ("QUANT_FP8_ROWS", s::QUANT_FP8_ROWS),
            SimtFamily::EpDispatchPack => ("EP_DISPATCH_PACK", s::EP_DISPATCH_PACK),
            SimtFamily::EpGatherRows => ("EP_GATHER_ROWS", s::EP_GATHER_ROWS),
            SimtFamily::EpCombineUnpack => ("EP_COMBINE_UNPACK", s::EP_COMBINE_UNPACK),
        },
        KernelId::Corpus(c) => match c {
            CorpusKernel::Alu => ("CORPUS_ALU", s::CORPUS_ALU),
            CorpusKernel::Pipeline => ("CORPUS_PIPELINE", s::CORPUS_PIPELINE),
            CorpusKernel::Tma => ("CORPUS_TMA", s::CORPUS_TMA),
            CorpusKernel::Cluster => ("CORPUS_CLUSTER", s::CORPUS_CLUSTER),
            CorpusKernel::Warp => ("CORPUS_WARP", s::CORPUS_WARP),
            CorpusKernel::Wgmma => ("CORPUS_WGMMA", s::CORPUS_WGMMA),
            CorpusKernel::Mufu => ("CORPUS_MUFU", s::CORPUS_MUFU),
        },
    }
}

/// The parameters of a kernel.
pub fn params(id: &KernelId) -> &'static [Param] {
    signature(id).1
}
