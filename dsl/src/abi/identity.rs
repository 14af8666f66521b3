//! Kernel identity: what a kernel is (family, target, tactic, options) and its entry name,
//! computed in one place.

use std::fmt;

use crate::kernel_desc::{ActivationFormat, EpilogueRecipe, FinalizeMode, SwigluInput};
use crate::tactic::{GemmKind, Raster, TileSize};
use crate::target::Target;

/// Block-scaled formats a GEMM kernel can be generated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum WeightFormat {
    /// E2M1 with one UE4M3 scale per 16 and an f32 global scale.
    Nvfp4,
    /// E2M1 with one UE8M0 scale per 32.
    Mxfp4,
}

impl WeightFormat {
    /// Short tag used in kernel names.
    pub const fn tag(self) -> &'static str {
        match self {
            WeightFormat::Nvfp4 => "nvfp4",
            WeightFormat::Mxfp4 => "mxfp4",
        }
    }
}

/// Everything that makes one GEMM kernel differ from another. Built from a validated
/// [`crate::KernelDesc`] by [`crate::KernelDesc::key`]; plain data so generated code can
/// write it as a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct GemmKey {
    /// PTX target.
    pub target: Target,
    /// GEMM1 or GEMM2.
    pub gemm: GemmKind,
    /// Routing tile (MMA M).
    pub tile: TileSize,
    /// MMA N.
    pub mma_n: u32,
    /// Cluster N (cluster M is the CTA-group size, derived from the tile).
    pub cluster_n: u32,
    /// Tile walk order.
    pub raster: Raster,
    /// Operand format.
    pub format: WeightFormat,
    /// SwiGLU input precision (GEMM1; the default for GEMM2).
    pub swiglu_input: SwigluInput,
    /// Epilogue recipe (GEMM1; the target's default for GEMM2).
    pub recipe: EpilogueRecipe,
    /// Finalize mode (GEMM2; the default for GEMM1).
    pub finalize: FinalizeMode,
    /// What the activations are (NVFP4 on SM100; NVFP4 or bf16 on Hopper).
    pub activations: ActivationFormat,
    /// A/B pipeline stages.
    pub ab_stages: u32,
    /// Accumulator stages.
    pub acc_stages: u32,
    /// Whether the stage counts are the resource model's (false: overridden, and named).
    pub planned_depths: bool,
}

impl GemmKey {
    /// CTAs per cluster.
    pub const fn cluster_ctas(&self) -> u32 {
        self.cta_group() * self.cluster_n
    }
    /// CTA-group size (cluster M).
    pub const fn cta_group(&self) -> u32 {
        match self.tile {
            TileSize::T256 => 2,
            _ => 1,
        }
    }
    /// The kernel family name (`gemm1`, `gemm2`, `gemm2_deterministic`).
    pub const fn family(&self) -> &'static str {
        match (self.gemm, self.finalize) {
            (GemmKind::Gemm1, _) => "gemm1",
            (GemmKind::Gemm2, FinalizeMode::BulkReduceAdd) => "gemm2",
            (GemmKind::Gemm2, FinalizeMode::Deterministic) => "gemm2_deterministic",
        }
    }

    /// The entry name: `moegen_<arch>_<format>_<gemm>_t<T>_n<N>_c<M>x<N>` and a suffix per
    /// non-default option.
    pub fn name(&self) -> String {
        let mut s = format!(
            "moegen_{}_{}_{}_t{}_n{}_c{}x{}",
            self.target.arch_tag(),
            self.format.tag(),
            self.gemm,
            self.tile.rows(),
            self.mma_n,
            self.cta_group(),
            self.cluster_n
        );
        if self.target.arch() == crate::tactic::Arch::Sm90 {
            s.push_str(match self.activations {
                ActivationFormat::Nvfp4 => "_a4",
                ActivationFormat::Bf16 => "_a16",
            });
        }
        if self.finalize == FinalizeMode::Deterministic {
            s.push_str("_det");
        }
        if self.swiglu_input == SwigluInput::Bf16 {
            s.push_str("_bf16glu");
        }
        if self.recipe != EpilogueRecipe::default_for(self.target) {
            s.push_str(match self.recipe {
                EpilogueRecipe::Exact => "_exact",
                EpilogueRecipe::Fast => "_fast",
            });
        }
        if self.raster == Raster::AlongM {
            s.push_str("_alongm");
        }
        if !self.planned_depths {
            s.push_str(&format!("_s{}x{}", self.ab_stages, self.acc_stages));
        }
        s
    }
}

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
    /// bf16 activations → NVFP4.
    QuantizeNvfp4,
    /// The deterministic finalize's fixed-order sum.
    FinalizeReduce,
    /// bf16 activations → NVFP4 → bf16 (e2m1 · scale, exact): Hopper's A4 input.
    QdqNvfp4,
}

impl SimtFamily {
    /// The families every target has, in set order.
    pub const ALL: [SimtFamily; 5] = [
        SimtFamily::MoeSortHistogram,
        SimtFamily::MoeSortOffsets,
        SimtFamily::MoeSortScatter,
        SimtFamily::QuantizeNvfp4,
        SimtFamily::FinalizeReduce,
    ];
    /// The families of a target: Hopper adds the A4 quantize-dequantize.
    pub fn of(target: SimtTarget) -> Vec<SimtFamily> {
        let mut v = Self::ALL.to_vec();
        if target == SimtTarget::Sm90a {
            v.push(SimtFamily::QdqNvfp4);
        }
        v
    }
    /// Family name.
    pub const fn name(self) -> &'static str {
        match self {
            SimtFamily::MoeSortHistogram => "moe_sort_histogram",
            SimtFamily::MoeSortOffsets => "moe_sort_offsets",
            SimtFamily::MoeSortScatter => "moe_sort_scatter",
            SimtFamily::QuantizeNvfp4 => "quantize_nvfp4",
            SimtFamily::FinalizeReduce => "finalize_reduce",
            SimtFamily::QdqNvfp4 => "qdq_nvfp4",
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
