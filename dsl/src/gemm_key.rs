//! The one identity of a GEMM kernel: [`GemmKey`]. Everything else that needs to know which
//! kernel it is looking at (the description, codegen's layouts, the ABI, the runtime's
//! lookup) reads it from the key instead of keeping its own copy.

use crate::options::{
    Activation, ActivationFormat, EpilogueRecipe, FinalizeMode, SwigluInput, WeightFormat,
};
use crate::tactic::{Arch, GemmKind, GemmTactic, Raster, Schedule, TacticError, TileSize};
use crate::target::Target;

/// Everything that makes one GEMM kernel differ from another. A validated one comes from
/// [`crate::KernelDescBuilder::build`] (as [`crate::KernelDesc::key`]), and
/// [`GemmKey::desc`] turns a key back into its description; plain data so generated code can
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
    /// How the consumer warpgroups share units (Hopper; cooperative on SM100).
    pub schedule: Schedule,
    /// CTAs of a cluster that split each unit's K (Hopper; 1 on SM100 and without a split).
    pub split_k: u32,
    /// Operand format.
    pub format: WeightFormat,
    /// SwiGLU input precision (GEMM1; the default for GEMM2).
    pub swiglu_input: SwigluInput,
    /// GEMM1's activation function (the default for GEMM2).
    pub activation: Activation,
    /// A per-expert bias: GEMM1's (f32 [L, 2I], added to the pre-activations) or GEMM2's
    /// (f32 [L, H], added before the router weight scales the row).
    pub bias: bool,
    /// Epilogue recipe (GEMM1; the target's default for GEMM2).
    pub recipe: EpilogueRecipe,
    /// Finalize mode (GEMM2; the default for GEMM1).
    pub finalize: FinalizeMode,
    /// What the activations are (NVFP4 or MXFP8 on SM100; NVFP4, bf16 or FP8 on Hopper).
    pub activations: ActivationFormat,
    /// A/B pipeline stages.
    pub ab_stages: u32,
    /// Accumulator stages.
    pub acc_stages: u32,
    /// Whether the stage counts are the resource model's (false: overridden, and named).
    pub planned_depths: bool,
}

impl GemmKey {
    /// The GPU generation of the target.
    pub const fn arch(&self) -> Arch {
        self.target.arch()
    }
    /// CTAs per cluster: the CTA group, the N ranks and the CTAs splitting K.
    pub const fn cluster_ctas(&self) -> u32 {
        self.cta_group() * self.cluster_n * self.split_k
    }
    /// CTA-group size (cluster M).
    pub const fn cta_group(&self) -> u32 {
        match self.tile {
            TileSize::T256 => 2,
            _ => 1,
        }
    }
    /// The tactic the key names, validated for its target's generation.
    pub fn tactic(&self) -> Result<GemmTactic, TacticError> {
        match self.arch() {
            Arch::Sm100 => GemmTactic::new(
                self.gemm,
                [self.tile.rows(), self.mma_n],
                [self.cta_group(), self.cluster_n],
                self.raster,
            )?
            .with_split_k(self.split_k),
            Arch::Sm90 => GemmTactic::new_sm90_scheduled(
                self.gemm,
                self.tile.rows(),
                self.mma_n,
                self.schedule,
            )?
            .with_split_k(self.split_k),
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
        // Hopper names every activation format; SM100 the ones besides its NVFP4 default.
        if self.arch() == Arch::Sm90 || self.activations != ActivationFormat::Nvfp4 {
            s.push('_');
            s.push_str(self.activations.tag());
        }
        if self.schedule == Schedule::PingPong {
            s.push_str("_pp");
        }
        if self.split_k > 1 {
            s.push_str(&format!("_k{}", self.split_k));
        }
        if self.finalize == FinalizeMode::Deterministic {
            s.push_str("_det");
        }
        if self.activation != Activation::Swiglu {
            s.push('_');
            s.push_str(self.activation.tag());
        }
        if self.bias {
            s.push_str("_bias");
        }
        if self.swiglu_input == SwigluInput::Bf16 {
            s.push_str("_bf16glu");
        }
        if self.recipe != self.target.default_recipe() {
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
