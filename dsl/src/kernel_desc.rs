//! Kernel descriptions: what codegen consumes to emit one kernel. A description is only
//! obtained through [`KernelDescBuilder::build`], which checks that its parts agree.

use crate::abi::{GemmKey, WeightFormat};
use crate::formats::{MXFP4_BLOCK, NVFP4_BLOCK};
use crate::resources::{KernelBudget, ResourceError, plan_gemm};
use crate::tactic::{GemmKind, GemmTactic, Raster};
use crate::target::Target;

/// Element type of a block-scaled operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ElementType {
    /// FP4 E2M1, packed two per byte.
    E2m1,
}

/// Type of the per-block scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ScaleType {
    /// E4M3 with sign 0 (NVFP4).
    Ue4m3,
    /// Power of two (MX formats).
    Ue8m0,
}

/// A block-scaled number format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct BlockScaledFormat {
    element: ElementType,
    scale: ScaleType,
    block: u32,
}

impl BlockScaledFormat {
    /// NVFP4: E2M1 values, one UE4M3 scale per 16, plus an f32 global scale per tensor.
    pub const NVFP4: Self = Self { element: ElementType::E2m1, scale: ScaleType::Ue4m3, block: 16 };
    /// MXFP4: E2M1 values, one UE8M0 scale per 32.
    pub const MXFP4: Self = Self { element: ElementType::E2m1, scale: ScaleType::Ue8m0, block: 32 };

    /// A format the block-scaled MMA (`kind::mxf4nvf4`) accepts: UE4M3 only with 16-element
    /// blocks; UE8M0 with 16 or 32 (sm100-ptx.md §2.2).
    pub fn new(element: ElementType, scale: ScaleType, block: u32) -> Result<Self, DescError> {
        match (scale, block) {
            (ScaleType::Ue4m3, 16) | (ScaleType::Ue8m0, 16 | 32) => {
                Ok(Self { element, scale, block })
            }
            _ => Err(DescError::BadScaleBlock { scale, block }),
        }
    }
    /// Element type.
    pub fn element(&self) -> ElementType {
        self.element
    }
    /// Scale type.
    pub fn scale(&self) -> ScaleType {
        self.scale
    }
    /// Elements per scale.
    pub fn block(&self) -> u32 {
        self.block
    }
    /// Whether a per-tensor f32 global scale applies (NVFP4 only).
    pub fn has_global_scale(&self) -> bool {
        self.scale == ScaleType::Ue4m3
    }
}

const _: () = assert!(NVFP4_BLOCK == 16 && MXFP4_BLOCK == 32);

/// How an operand reaches shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum OperandSource {
    /// Rows fetched one by one through an index map with cp.async (GEMM1's A).
    Gathered,
    /// A TMA tile load from a tensor map.
    Tma,
}

/// How an operand's scales are laid out in global memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ScaleLayout {
    /// Row-major per row (gatherable).
    Linear,
    /// The tensor-core 128x4 layout.
    Swizzled128x4,
    /// Hopper weights: values and scales in wgmma register-fragment order
    /// ([`crate::abi::sm90_weights`]).
    Sm90Fragments,
}

/// What the activations entering GEMM1 are.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum ActivationFormat {
    /// NVFP4 (A4): the Blackwell pipeline's arithmetic. SM100 multiplies them natively; on
    /// Hopper they are dequantized exactly to bf16 (e2m1 · scale) and GEMM1 requantizes its
    /// output to NVFP4 the same way.
    #[default]
    Nvfp4,
    /// bf16 (A16): Hopper only; GEMM1's output stays bf16.
    Bf16,
}

/// One GEMM input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Operand {
    /// Number format.
    pub format: BlockScaledFormat,
    /// How it is loaded.
    pub source: OperandSource,
    /// Where its scales live.
    pub scale_layout: ScaleLayout,
}

/// Whether SwiGLU sees α·acc in f32 or rounded to bf16 first (TRT-LLM PR 17409 found the
/// bf16 rounding closer to some unfused references).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum SwigluInput {
    /// Keep α·up and α·gate in f32 (default).
    #[default]
    F32,
    /// Round α·up and α·gate to bf16 (nearest-even) before SwiGLU.
    Bf16,
}

/// Which instructions GEMM1's SwiGLU + NVFP4 requantization epilogue uses; both recipes are
/// defined operation by operation in [`crate::epilogue_math`], which the CPU reference calls.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum EpilogueRecipe {
    /// Correctly rounded IEEE operations only (`fma`/`mul`/`add`/`div.rn`, a polynomial
    /// exp): the same bits on any IEEE machine, ~35 instructions per output element and a
    /// `div.rn` slow-path call per element.
    Exact,
    /// `ex2.approx.ftz` and `rcp.approx.ftz` (one MUFU each), α1 folded into the
    /// quantization: ~11 instructions per output element, branch-free. Modelled as correctly
    /// rounded with flush-to-zero; docs/reference.md states the model and the tolerance for
    /// hardware that deviates from it.
    #[default]
    Fast,
}

impl EpilogueRecipe {
    /// The recipe a target's kernels use unless told otherwise: `Fast` on SM100; `Exact` on
    /// Hopper, whose kernels implement only that one.
    pub fn default_for(target: Target) -> Self {
        match target.arch() {
            crate::tactic::Arch::Sm100 => EpilogueRecipe::Fast,
            crate::tactic::Arch::Sm90 => EpilogueRecipe::Exact,
        }
    }
}

/// How GEMM2 adds routes into the output.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum FinalizeMode {
    /// One bf16 bulk reduce-add per row into `out[token]`; the order of routes is up to the
    /// hardware, so the last bf16 rounding can differ from run to run.
    #[default]
    BulkReduceAdd,
    /// Write each route's bf16 row to `[N·k, H]`; a reduction kernel sums them in slot order.
    Deterministic,
}

/// What a kernel does with its accumulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Epilogue {
    /// GEMM1: α1, SwiGLU over 64-column (up, gate) pairs, requantize to `output`.
    SwigluRequant {
        /// Output format (scales written in the 128x4 layout over permuted rows).
        output: BlockScaledFormat,
        /// Precision of SwiGLU's inputs.
        swiglu_input: SwigluInput,
        /// Instructions of the epilogue arithmetic.
        recipe: EpilogueRecipe,
    },
    /// GEMM2: α2 · router weight, accumulate bf16 rows into the output.
    Finalize {
        /// Atomic or deterministic accumulation.
        mode: FinalizeMode,
    },
}

/// A validated kernel description.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KernelDesc {
    target: Target,
    tactic: GemmTactic,
    a: Operand,
    b: Operand,
    activations: ActivationFormat,
    epilogue: Epilogue,
    budget: KernelBudget,
    planned_depths: bool,
}

impl KernelDesc {
    /// Target.
    pub fn target(&self) -> Target {
        self.target
    }
    /// GEMM tactic.
    pub fn tactic(&self) -> &GemmTactic {
        &self.tactic
    }
    /// A operand (activations).
    pub fn a(&self) -> &Operand {
        &self.a
    }
    /// B operand (expert weights).
    pub fn b(&self) -> &Operand {
        &self.b
    }
    /// Epilogue.
    pub fn epilogue(&self) -> &Epilogue {
        &self.epilogue
    }
    /// Resource budget and pipeline depths.
    pub fn budget(&self) -> &KernelBudget {
        &self.budget
    }
    /// What the activations are.
    pub fn activations(&self) -> ActivationFormat {
        self.activations
    }

    /// The kernel's identity (everything that distinguishes it from another kernel).
    pub fn key(&self) -> GemmKey {
        let (swiglu_input, finalize, recipe) = match self.epilogue {
            Epilogue::SwigluRequant { swiglu_input, recipe, .. } => {
                (swiglu_input, FinalizeMode::default(), recipe)
            }
            Epilogue::Finalize { mode } => {
                (SwigluInput::default(), mode, EpilogueRecipe::default_for(self.target))
            }
        };
        let [_, mma_n] = self.tactic.mma_tiler();
        GemmKey {
            target: self.target,
            gemm: self.tactic.kind(),
            tile: self.tactic.tile(),
            mma_n,
            cluster_n: self.tactic.cluster()[1],
            raster: self.tactic.raster(),
            format: if self.b.format == BlockScaledFormat::MXFP4 {
                WeightFormat::Mxfp4
            } else {
                WeightFormat::Nvfp4
            },
            swiglu_input,
            recipe,
            finalize,
            activations: self.activations,
            ab_stages: self.budget.ab_stages,
            acc_stages: self.budget.acc_stages,
            planned_depths: self.planned_depths,
        }
    }
}

impl GemmKey {
    /// Rebuilds and revalidates the description this key names.
    pub fn desc(&self) -> Result<KernelDesc, DescError> {
        let cm = self.cta_group();
        let tactic = match self.target.arch() {
            crate::tactic::Arch::Sm100 => GemmTactic::new(
                self.gemm,
                [self.tile.rows(), self.mma_n],
                [cm, self.cluster_n],
                self.raster,
            )?,
            crate::tactic::Arch::Sm90 => {
                GemmTactic::new_sm90(self.gemm, self.tile.rows(), self.mma_n)?
            }
        };
        let format = match self.format {
            WeightFormat::Nvfp4 => BlockScaledFormat::NVFP4,
            WeightFormat::Mxfp4 => BlockScaledFormat::MXFP4,
        };
        let mut b = KernelDescBuilder::new(tactic)
            .target(self.target)
            .format(format)
            .activations(self.activations);
        match self.gemm {
            GemmKind::Gemm1 => b = b.swiglu_input(self.swiglu_input).recipe(self.recipe),
            GemmKind::Gemm2 => b = b.finalize(self.finalize),
        }
        if !self.planned_depths {
            b = b.depths(self.ab_stages, self.acc_stages);
        }
        b.build()
    }
}

/// Builds a [`KernelDesc`]; defaults are the production NVFP4 kernels for the tactic.
#[derive(Clone, Debug)]
pub struct KernelDescBuilder {
    target: Target,
    tactic: GemmTactic,
    format: BlockScaledFormat,
    activations: ActivationFormat,
    swiglu_input: SwigluInput,
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
            format: BlockScaledFormat::NVFP4,
            activations: ActivationFormat::default(),
            swiglu_input: SwigluInput::default(),
            recipe: None,
            finalize: FinalizeMode::default(),
            depths: None,
        }
    }
    /// Target (default sm_100f).
    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }
    /// Operand format for A, B and GEMM1's output (default NVFP4).
    pub fn format(mut self, format: BlockScaledFormat) -> Self {
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
    /// Epilogue recipe (GEMM1 only; default [`EpilogueRecipe::default_for`] the target).
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
        let arch = self.target.arch();
        let hopper = arch == crate::tactic::Arch::Sm90;
        if self.tactic.arch() != arch {
            return Err(DescError::Unsupported {
                option: "a tactic shaped for another GPU generation",
                target: self.target,
            });
        }
        if self.format != BlockScaledFormat::NVFP4
            && !(hopper && self.format == BlockScaledFormat::MXFP4)
        {
            return Err(DescError::Unsupported {
                option: if hopper {
                    "format (NVFP4 or MXFP4 weights)"
                } else {
                    "format (only NVFP4: E2M1 with UE4M3 block16 scales)"
                },
                target: self.target,
            });
        }
        if self.activations == ActivationFormat::Bf16 && !hopper {
            return Err(DescError::Unsupported {
                option: "bf16 activations (the block-scaled MMA takes NVFP4 activations)",
                target: self.target,
            });
        }
        if hopper
            && self.activations == ActivationFormat::Bf16
            && self.swiglu_input != SwigluInput::F32
        {
            return Err(DescError::Unsupported {
                option: "bf16 SwiGLU inputs with bf16 activations",
                target: self.target,
            });
        }
        let recipe = self.recipe.unwrap_or(EpilogueRecipe::default_for(self.target));
        if hopper && recipe != EpilogueRecipe::Exact {
            return Err(DescError::Unsupported {
                option: "the Fast epilogue recipe (the Hopper kernels implement Exact)",
                target: self.target,
            });
        }
        if self.tactic.raster() != Raster::AlongN {
            return Err(DescError::Unsupported {
                option: "raster AlongM (the persistent schedule walks N fastest)",
                target: self.target,
            });
        }
        let planned = plan_gemm(self.target, &self.tactic)?;
        let mut budget = planned;
        if let Some((ab, acc)) = self.depths {
            budget = budget.with_depths(&self.tactic, ab, acc)?;
        }
        let planned_depths =
            (budget.ab_stages, budget.acc_stages) == (planned.ab_stages, planned.acc_stages);
        let weights = Operand {
            format: self.format,
            source: OperandSource::Tma,
            scale_layout: if hopper {
                ScaleLayout::Sm90Fragments
            } else {
                ScaleLayout::Swizzled128x4
            },
        };
        let (a, epilogue) = match self.tactic.kind() {
            GemmKind::Gemm1 => {
                if self.finalize != FinalizeMode::default() {
                    return Err(DescError::OptionForOtherGemm {
                        option: "finalize mode",
                        gemm: GemmKind::Gemm1,
                    });
                }
                (
                    Operand {
                        format: self.format,
                        source: OperandSource::Gathered,
                        scale_layout: ScaleLayout::Linear,
                    },
                    Epilogue::SwigluRequant {
                        output: self.format,
                        swiglu_input: self.swiglu_input,
                        recipe,
                    },
                )
            }
            GemmKind::Gemm2 => {
                if self.swiglu_input != SwigluInput::default() {
                    return Err(DescError::OptionForOtherGemm {
                        option: "SwiGLU input",
                        gemm: GemmKind::Gemm2,
                    });
                }
                if self.recipe.is_some() {
                    return Err(DescError::OptionForOtherGemm {
                        option: "epilogue recipe",
                        gemm: GemmKind::Gemm2,
                    });
                }
                (weights, Epilogue::Finalize { mode: self.finalize })
            }
        };
        Ok(KernelDesc {
            target: self.target,
            tactic: self.tactic,
            a,
            b: weights,
            activations: self.activations,
            epilogue,
            budget,
            planned_depths,
        })
    }
}

/// A description that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DescError {
    /// Scale type and block size the MMA cannot combine.
    #[error("{scale:?} scales cannot have {block}-element blocks")]
    BadScaleBlock {
        /// Scale type.
        scale: ScaleType,
        /// Block size.
        block: u32,
    },
    /// An option that belongs to the other GEMM.
    #[error("the {option} option does not apply to {gemm}")]
    OptionForOtherGemm {
        /// Option name.
        option: &'static str,
        /// The GEMM being built.
        gemm: GemmKind,
    },
    /// The target cannot hold the tactic.
    #[error(transparent)]
    Resources(#[from] ResourceError),
    /// The tactic itself is invalid.
    #[error(transparent)]
    Tactic(#[from] crate::tactic::TacticError),
    /// An option codegen does not implement for this target.
    #[error("{option} is not implemented for {target}")]
    Unsupported {
        /// The option and the value refused.
        option: &'static str,
        /// The target.
        target: Target,
    },
}
