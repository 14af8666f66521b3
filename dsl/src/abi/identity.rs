//! What a kernel is: a GEMM (its [`GemmKey`], defined in `gemm_key`), a SIMT kernel or a
//! corpus kernel, and its entry name, computed in one place.

use std::fmt;

use crate::gemm_key::GemmKey;

/// Targets of the SIMT kernels (routing sort, activation quantization, deterministic
/// finalize): the SM100 family, and Hopper so the same kernels run on the H200s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum SimtTarget {
    /// `sm_100f`.
    #[serde(rename = "sm_100f")]
    Sm100f,
    /// `sm_90a` (H100/H200).
    #[serde(rename = "sm_90a")]
    Sm90a,
}

impl SimtTarget {
    /// Both, SM100 first.
    pub const ALL: [SimtTarget; 2] = [SimtTarget::Sm100f, SimtTarget::Sm90a];
    /// `.target` name.
    pub const fn name(self) -> &'static str {
        match self {
            SimtTarget::Sm100f => "sm_100f",
            SimtTarget::Sm90a => "sm_90a",
        }
    }
    /// Short tag used in kernel names.
    pub const fn tag(self) -> &'static str {
        match self {
            SimtTarget::Sm100f => "sm100",
            SimtTarget::Sm90a => "sm90",
        }
    }
    /// Whether `cvt.rn.satfinite.e2m1x2.f32` exists (sm_100 family only).
    pub const fn has_e2m1_cvt(self) -> bool {
        matches!(self, SimtTarget::Sm100f)
    }
}

impl fmt::Display for SimtTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The SIMT kernel families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum SimtFamily {
    /// Routing sort pass 1: per-block expert histograms.
    MoeSortHistogram,
    /// Routing sort pass 2 (one block): tile runs, counters, per-block bases.
    MoeSortOffsets,
    /// Routing sort pass 3: every route's permuted row.
    MoeSortScatter,
    /// The whole routing sort in one block, for at most `ROUTES_PER_BLOCK` routes.
    MoeSortSingle,
    /// bf16 activations → NVFP4.
    QuantizeNvfp4,
    /// bf16 activations → MXFP8 (E4M3, a UE8M0 scale per 32): the SM100 MXFP8 × MXFP4
    /// GEMM1's input.
    QuantizeMxfp8,
    /// The deterministic finalize's fixed-order sum.
    FinalizeReduce,
    /// bf16 activations → NVFP4 → bf16 (e2m1 · scale, exact): Hopper's A4 input.
    QdqNvfp4,
    /// bf16 activations → E4M3 per token, the scale to each local route's permuted row:
    /// Hopper's A8 GEMM1 input.
    QuantFp8Tokens,
    /// GEMM1's bf16 output → E4M3 per permuted row: Hopper's A8 GEMM2 input.
    QuantFp8Rows,
    /// Expert-parallel all-to-all dispatch: each route's slot in its owner's send block
    /// (expert-sorted), its id, weight and expanded index, padding, per-peer counts.
    EpDispatchPack,
    /// Expert-parallel dispatch: each send slot's activation row.
    EpGatherRows,
    /// Expert-parallel combine: each returned row to its expanded index on the home rank.
    EpCombineUnpack,
}

impl SimtFamily {
    /// The families every target has, in set order.
    pub const ALL: [SimtFamily; 9] = [
        SimtFamily::MoeSortHistogram,
        SimtFamily::MoeSortOffsets,
        SimtFamily::MoeSortScatter,
        SimtFamily::MoeSortSingle,
        SimtFamily::QuantizeNvfp4,
        SimtFamily::FinalizeReduce,
        SimtFamily::EpDispatchPack,
        SimtFamily::EpGatherRows,
        SimtFamily::EpCombineUnpack,
    ];
    /// The families of a target: Hopper adds the A4 quantize-dequantize and the A8
    /// quantizers, SM100 the MXFP8 quantizer.
    pub fn of(target: SimtTarget) -> Vec<SimtFamily> {
        let mut v = Self::ALL.to_vec();
        match target {
            SimtTarget::Sm90a => v.extend([
                SimtFamily::QdqNvfp4,
                SimtFamily::QuantFp8Tokens,
                SimtFamily::QuantFp8Rows,
            ]),
            SimtTarget::Sm100f => v.push(SimtFamily::QuantizeMxfp8),
        }
        v
    }
    /// Family name.
    pub const fn name(self) -> &'static str {
        match self {
            SimtFamily::MoeSortHistogram => "moe_sort_histogram",
            SimtFamily::MoeSortOffsets => "moe_sort_offsets",
            SimtFamily::MoeSortScatter => "moe_sort_scatter",
            SimtFamily::MoeSortSingle => "moe_sort_single",
            SimtFamily::QuantizeNvfp4 => "quantize_nvfp4",
            SimtFamily::QuantizeMxfp8 => "quantize_mxfp8",
            SimtFamily::FinalizeReduce => "finalize_reduce",
            SimtFamily::QdqNvfp4 => "qdq_nvfp4",
            SimtFamily::QuantFp8Tokens => "quant_fp8_tokens",
            SimtFamily::QuantFp8Rows => "quant_fp8_rows",
            SimtFamily::EpDispatchPack => "ep_dispatch_pack",
            SimtFamily::EpGatherRows => "ep_gather_rows",
            SimtFamily::EpCombineUnpack => "ep_combine_unpack",
        }
    }
}

/// The differential corpus's kernels (validation only; sm_90a).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum CorpusKernel {
    /// ALU and conversions.
    Alu,
    /// cp.async → mbarrier pipeline.
    Pipeline,
    /// TMA in every swizzle mode.
    Tma,
    /// Cluster multicast, remote arrive, bulk copies.
    Cluster,
    /// Shuffles, votes, reductions, named barriers.
    Warp,
    /// One warpgroup's wgmma on a dequantized NVFP4 tile: fragment, accumulator and
    /// descriptor layouts, and the tensor cores' accumulation.
    Wgmma,
    /// `ex2.approx` and `rcp.approx` (ftz and not) over a strided range of f32 inputs: the
    /// hardware check of the simulator's MUFU models.
    Mufu,
}

impl CorpusKernel {
    /// Every corpus kernel, in set order.
    pub const ALL: [CorpusKernel; 7] = [
        CorpusKernel::Alu,
        CorpusKernel::Pipeline,
        CorpusKernel::Tma,
        CorpusKernel::Cluster,
        CorpusKernel::Warp,
        CorpusKernel::Wgmma,
        CorpusKernel::Mufu,
    ];
    /// Family name.
    pub const fn name(self) -> &'static str {
        match self {
            CorpusKernel::Alu => "corpus_alu",
            CorpusKernel::Pipeline => "corpus_pipeline",
            CorpusKernel::Tma => "corpus_tma",
            CorpusKernel::Cluster => "corpus_cluster",
            CorpusKernel::Warp => "corpus_warp",
            CorpusKernel::Wgmma => "corpus_wgmma",
            CorpusKernel::Mufu => "corpus_mufu",
        }
    }
}

/// What a kernel is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum KernelId {
    /// A GEMM of the layer.
    Gemm(GemmKey),
    /// A SIMT kernel of the layer.
    Simt {
        /// Which.
        family: SimtFamily,
        /// For which target.
        target: SimtTarget,
    },
    /// A validation kernel of the differential corpus.
    Corpus(CorpusKernel),
}

impl KernelId {
    /// The PTX entry name.
    pub fn name(&self) -> String {
        match self {
            KernelId::Gemm(k) => k.name(),
            KernelId::Simt { family, target } => {
                format!("moegen_{}_{}", target.tag(), family.name())
            }
            KernelId::Corpus(c) => format!("moegen_sm90_{}", c.name()),
        }
    }
    /// The family name.
    pub fn family(&self) -> &'static str {
        match self {
            KernelId::Gemm(k) => k.family(),
            KernelId::Simt { family, .. } => family.name(),
            KernelId::Corpus(c) => c.name(),
        }
    }
    /// The `.target` of the PTX.
    pub fn ptx_target(&self) -> &'static str {
        match self {
            KernelId::Gemm(k) => k.target.name(),
            KernelId::Simt { target, .. } => target.name(),
            KernelId::Corpus(_) => SimtTarget::Sm90a.name(),
        }
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}
