//! Kernel descriptions: what codegen consumes to emit one kernel. A description is a
//! validated [`GemmKey`] and the resource budget planned for it; it is only obtained through
//! [`KernelDescBuilder::build`] (or [`GemmKey::desc`]), which check that the key's parts
//! agree. Everything else a description tells (tactic, operands, epilogue) is derived from
//! the key, so there is one copy of a kernel's identity.
//!
//! - [`builder`] holds [`KernelDescBuilder`] and [`GemmKey::desc`].
//! - [`error`] holds [`DescError`].

pub mod builder;
pub mod error;

pub use builder::KernelDescBuilder;
pub use error::DescError;

use crate::formats::{MXFP4_BLOCK, NVFP4_BLOCK};
use crate::gemm_key::GemmKey;
use crate::options::{ActivationFormat, EpilogueRecipe, FinalizeMode, SwigluInput, WeightFormat};
use crate::resources::KernelBudget;
use crate::tactic::{Arch, GemmKind, GemmTactic};
use crate::target::Target;

const _: () = assert!(
    WeightFormat::Nvfp4.block() == NVFP4_BLOCK as u32
        && WeightFormat::Mxfp4.block() == MXFP4_BLOCK as u32
);

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
    /// (`abi::sm90_weights`).
    Sm90Fragments,
}

/// One GEMM input, as the key implies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Operand {
    /// Number format.
    pub format: WeightFormat,
    /// How it is loaded.
    pub source: OperandSource,
    /// Where its scales live.
    pub scale_layout: ScaleLayout,
}

/// What a kernel does with its accumulator, as the key implies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Epilogue {
    /// GEMM1: α1, SwiGLU over 64-column (up, gate) pairs, requantize to `output`.
    SwigluRequant {
        /// Output format (scales written in the 128x4 layout over permuted rows).
        output: WeightFormat,
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

/// A validated kernel description: the key and the budget the resource model planned for
/// it (its stage counts are the key's).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KernelDesc {
    key: GemmKey,
    budget: KernelBudget,
}

impl KernelDesc {
    /// The kernel's identity (everything that distinguishes it from another kernel).
    pub fn key(&self) -> GemmKey {
        self.key
    }
    /// Target.
    pub fn target(&self) -> Target {
        self.key.target
    }
    /// GEMM tactic.
    pub fn tactic(&self) -> GemmTactic {
        GemmTactic::of_validated_key(&self.key)
    }
    /// What the activations are.
    pub fn activations(&self) -> ActivationFormat {
        self.key.activations
    }
    /// Resource budget and pipeline depths.
    pub fn budget(&self) -> &KernelBudget {
        &self.budget
    }
    /// A operand: GEMM1 gathers activation rows (linear scales); GEMM2 loads GEMM1's
    /// output with TMA (scales in the layout GEMM1 wrote).
    pub fn a(&self) -> Operand {
        match self.key.gemm {
            GemmKind::Gemm1 => Operand {
                format: self.key.format,
                source: OperandSource::Gathered,
                scale_layout: ScaleLayout::Linear,
            },
            GemmKind::Gemm2 => self.b(),
        }
    }
    /// B operand (expert weights), loaded with TMA.
    pub fn b(&self) -> Operand {
        Operand {
            format: self.key.format,
            source: OperandSource::Tma,
            scale_layout: match self.key.arch() {
                Arch::Sm100 => ScaleLayout::Swizzled128x4,
                Arch::Sm90 => ScaleLayout::Sm90Fragments,
            },
        }
    }
    /// Epilogue: the key's GEMM1 or GEMM2 options.
    pub fn epilogue(&self) -> Epilogue {
        match self.key.gemm {
            GemmKind::Gemm1 => Epilogue::SwigluRequant {
                output: self.key.format,
                swiglu_input: self.key.swiglu_input,
                recipe: self.key.recipe,
            },
            GemmKind::Gemm2 => Epilogue::Finalize { mode: self.key.finalize },
        }
    }
}
