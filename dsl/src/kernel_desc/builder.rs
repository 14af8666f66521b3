//! Building a [`KernelDesc`]: from a tactic and options ([`KernelDescBuilder`]) or from the
//! key it names ([`GemmKey::desc`]). Both end in the same validation.

use super::{DescError, KernelDesc};
use crate::gemm_key::GemmKey;
use crate::options::{
    Activation, ActivationFormat, EpilogueRecipe, FinalizeMode, SwigluInput, WeightFormat,
};
use crate::resources::plan_gemm_with;
use crate::tactic::{Arch, GemmKind, GemmTactic, Raster};
use crate::target::Target;

impl GemmKey {
    /// Rebuilds and revalidates the description this key names. A key whose parts do not
    /// name one kernel (another kernel's option set, stage counts that disagree with
    /// `planned_depths`, a cluster or raster a Hopper tactic cannot have) is refused.
    pub fn desc(&self) -> Result<KernelDesc, DescError> {
        let mut b = KernelDescBuilder::new(self.tactic()?)
            .target(self.target)
            .format(self.format)
            .activations(self.activations);
        match self.gemm {
            GemmKind::Gemm1 => {
                b = b
                    .swiglu_input(self.swiglu_input)
                    .recipe(self.recipe)
                    .activation(self.activation)
            }
            GemmKind::Gemm2 => b = b.finalize(self.finalize),
        }
        b = b.bias(self.bias);
        if !self.planned_depths {
            b = b.depths(self.ab_stages, self.acc_stages);
        }
        let desc = b.build()?;
        if desc.key != *self {
            return Err(DescError::NotAKernel { given: *self, built: desc.key });
        }
        Ok(desc)
    }
}

/// Builds a [`KernelDesc`]; defaults are the production NVFP4 kernels for the tactic.
#[derive(Clone, Debug)]
pub struct KernelDescBuilder {
    target: Target,
    tactic: GemmTactic,
    format: WeightFormat,
    activations: ActivationFormat,
    swiglu_input: SwigluInput,
    activation: Activation,
    bias: bool,
    recipe: Option<EpilogueRecipe>,
    finalize: FinalizeMode,
    depths: Option<(u32, u32)>,
}

impl KernelDescBuilder {
    /// Starts from a GEMM tactic (which fixes GEMM1 or GEMM2).
    pub fn new(tactic: GemmTactic) -> Self {
        Self {
            target: Target::default(),
            tactic,
            format: WeightFormat::Nvfp4,
            activations: ActivationFormat::default(),
            swiglu_input: SwigluInput::default(),
            activation: Activation::default(),
            bias: false,
            recipe: None,
            finalize: FinalizeMode::default(),
            depths: None,
        }
    }

    /// The GEMM tactic being described (a caller's options can depend on its kind).
    pub fn tactic(&self) -> GemmTactic {
        self.tactic
    }

    /// Target (default sm_100f).
    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }
    /// Operand format for A, B and GEMM1's output (default NVFP4).
    pub fn format(mut self, format: WeightFormat) -> Self {
        self.format = format;
        self
    }
    /// What the activations are (default NVFP4; bf16 on Hopper only).
    pub fn activations(mut self, a: ActivationFormat) -> Self {
        self.activations = a;
        self
    }
    /// SwiGLU input precision (GEMM1 only).
    pub fn swiglu_input(mut self, v: SwigluInput) -> Self {
        self.swiglu_input = v;
        self
    }
    /// GEMM1's activation function (GEMM1 only; default SwiGLU).
    pub fn activation(mut self, v: Activation) -> Self {
        self.activation = v;
        self
    }
    /// A per-expert bias: GEMM1's before the activation, GEMM2's before the router weight
    /// (default none).
    pub fn bias(mut self, v: bool) -> Self {
        self.bias = v;
        self
    }
    /// Epilogue recipe (GEMM1 only; default [`Target::default_recipe`]).
    pub fn recipe(mut self, v: EpilogueRecipe) -> Self {
        self.recipe = Some(v);
        self
    }
    /// Finalize mode (GEMM2 only).
    pub fn finalize(mut self, v: FinalizeMode) -> Self {
        self.finalize = v;
        self
    }
    /// Overrides the pipeline depths the resource model picks (they may only be shallower).
    pub fn depths(mut self, ab_stages: u32, acc_stages: u32) -> Self {
        self.depths = Some((ab_stages, acc_stages));
        self
    }

    /// Validates and plans the kernel. Every option is either honoured by codegen or
    /// refused here with an error naming it.
    pub fn build(self) -> Result<KernelDesc, DescError> {
        let hopper = self.target.arch() == Arch::Sm90;
        self.check_target(hopper)?;
        let recipe = self.recipe.unwrap_or(self.target.default_recipe());
        // Hopper's Fast recipe swaps the activation's sigmoid for MUFU ex2/rcp; A4's NVFP4
        // requantization of h has no Fast form there (SM100 folds α into its block factors).
        if hopper && recipe == EpilogueRecipe::Fast && self.activations == ActivationFormat::Nvfp4 {
            return Err(self.unsupported(
                "the Fast epilogue recipe with NVFP4 activations (Hopper's A4 GEMM1 is Exact only)",
            ));
        }
        if self.tactic.raster() != Raster::AlongN {
            return Err(self.unsupported("raster AlongM (the persistent schedule walks N fastest)"));
        }
        let planned = plan_gemm_with(self.target, &self.tactic, self.format, self.activations)?;
        let mut budget = planned;
        if let Some((ab, acc)) = self.depths {
            budget = budget.with_depths(&self.tactic, ab, acc)?;
        }
        let planned_depths =
            (budget.ab_stages, budget.acc_stages) == (planned.ab_stages, planned.acc_stages);
        let gemm = self.tactic.kind();
        let (swiglu_input, recipe, finalize) = match gemm {
            GemmKind::Gemm1 => {
                if self.finalize != FinalizeMode::default() {
                    return Err(DescError::OptionForOtherGemm { option: "finalize mode", gemm });
                }
                (self.swiglu_input, recipe, FinalizeMode::default())
            }
            GemmKind::Gemm2 => {
                if self.swiglu_input != SwigluInput::default() {
                    return Err(DescError::OptionForOtherGemm { option: "SwiGLU input", gemm });
                }
                if self.activation != Activation::default() {
                    return Err(DescError::OptionForOtherGemm { option: "activation", gemm });
                }
                if self.recipe.is_some() {
                    return Err(DescError::OptionForOtherGemm { option: "epilogue recipe", gemm });
                }
                (SwigluInput::default(), recipe, self.finalize)
            }
        };
        let key = GemmKey {
            target: self.target,
            gemm,
            tile: self.tactic.tile(),
            mma_n: self.tactic.mma_tiler()[1],
            cluster_n: self.tactic.cluster()[1],
            raster: self.tactic.raster(),
            schedule: self.tactic.schedule(),
            split_k: self.tactic.split_k(),
            format: self.format,
            swiglu_input,
            activation: self.activation,
            bias: self.bias,
            recipe,
            finalize,
            activations: self.activations,
            ab_stages: budget.ab_stages,
            acc_stages: budget.acc_stages,
            planned_depths,
        };
        Ok(KernelDesc { key, budget })
    }

    /// The checks of what the target's kernels implement: the tactic's generation, the
    /// weight format, the activations and their SwiGLU precision.
    fn check_target(&self, hopper: bool) -> Result<(), DescError> {
        if self.tactic.arch() != self.target.arch() {
            return Err(self.unsupported("a tactic shaped for another GPU generation"));
        }
        if !hopper {
            return match (self.format, self.activations) {
                (WeightFormat::Nvfp4, ActivationFormat::Nvfp4)
                | (WeightFormat::Mxfp4, ActivationFormat::Mxfp8) => Ok(()),
                (WeightFormat::Mxfp4, _) => Err(self.unsupported(
                    "MXFP4 weights without MXFP8 activations (SM100 multiplies MXFP4 by MXFP8; \
                     NVFP4 activations take NVFP4 weights)",
                )),
                (_, ActivationFormat::Bf16) => Err(self.unsupported(
                    "bf16 activations (the block-scaled MMA takes NVFP4 or MXFP8 activations)",
                )),
                (_, ActivationFormat::Fp8) => Err(self.unsupported(
                    "per-row FP8 activations on SM100 (its FP8 path is MXFP8, a scale per 32)",
                )),
                (_, ActivationFormat::Mxfp8) => {
                    Err(self
                        .unsupported("MXFP8 activations with NVFP4 weights (MXFP8 takes MXFP4)"))
                }
            };
        }
        if self.activations == ActivationFormat::Mxfp8 {
            return Err(self.unsupported("MXFP8 activations on Hopper (its FP8 path is A8)"));
        }
        if self.activations == ActivationFormat::Fp8 && self.format != WeightFormat::Mxfp4 {
            // E2M1 · UE8M0 is an E4M3 value times a power of two; E2M1 · UE4M3 is not.
            return Err(self.unsupported("FP8 activations with NVFP4 weights (A8 takes MXFP4)"));
        }
        if self.activations != ActivationFormat::Nvfp4 && self.swiglu_input != SwigluInput::F32 {
            return Err(self.unsupported("bf16 SwiGLU inputs with bf16 or FP8 activations"));
        }
        Ok(())
    }

    fn unsupported(&self, option: &'static str) -> DescError {
        DescError::Unsupported { option, target: self.target }
    }
}
