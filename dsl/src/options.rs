//! The option enums a GEMM kernel's identity is made of: the weight format, what the
//! activations are, GEMM1's activation function and its input precision, the epilogue recipe
//! and the finalize mode.
//!
//! A leaf: nothing here imports from (or links into) the rest of the crate, so the identity
//! (`gemm_key`), the descriptions (`kernel_desc`), the ABI and the CPU reference can all name
//! these values without importing one another. Which values a target accepts is decided
//! where descriptions are built (`KernelDescBuilder::build`), not here.

/// Block-scaled FP4 formats a GEMM kernel can be generated for: E2M1 values with one scale
/// per block. GEMM1's output is requantized to the same format. New formats (another
/// element type, another scale) are new variants here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum WeightFormat {
    /// NVFP4: one UE4M3 scale per 16 and an f32 global scale per tensor.
    Nvfp4,
    /// MXFP4: one UE8M0 (power of two) scale per 32.
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
    /// Elements per scale.
    pub const fn block(self) -> u32 {
        match self {
            WeightFormat::Nvfp4 => 16,
            WeightFormat::Mxfp4 => 32,
        }
    }
    /// Whether a per-tensor f32 global scale applies (NVFP4 only: its UE4M3 scales cover a
    /// narrow range, MXFP4's powers of two do not need one).
    pub const fn has_global_scale(self) -> bool {
        matches!(self, WeightFormat::Nvfp4)
    }
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
    /// FP8 E4M3 (A8): Hopper only, MXFP4 weights. Each row of GEMM1's and GEMM2's input is
    /// quantized to E4M3 with a power-of-two scale (docs/hopper.md, "W4A8"); the weights are
    /// expanded to E4M3 in registers and multiplied on the FP8 tensor cores.
    Fp8,
    /// MXFP8 (E4M3 values, one UE8M0 scale per 32; `formats::quantize_mxfp8_block`): SM100
    /// only, MXFP4 weights, multiplied natively by `tcgen05.mma.kind::mxf8f6f4`; GEMM1
    /// requantizes its output to MXFP8 (docs/sm100-mxf8f6f4.md).
    Mxfp8,
}

impl ActivationFormat {
    /// Short tag used in kernel names and tables: `a4`, `a16`, `a8`, `mxa8`.
    pub const fn tag(self) -> &'static str {
        match self {
            ActivationFormat::Nvfp4 => "a4",
            ActivationFormat::Bf16 => "a16",
            ActivationFormat::Fp8 => "a8",
            ActivationFormat::Mxfp8 => "mxa8",
        }
    }
    /// K elements of one Hopper pipeline stage: one 128-byte activation row (64 bf16 or
    /// 128 E4M3 values).
    pub const fn sm90_k_stage(self) -> u32 {
        match self {
            ActivationFormat::Fp8 => 128,
            _ => 64,
        }
    }
}

/// The function GEMM1's epilogue turns its pre-activations into one value of h: a gated
/// activation reads an (up, gate) pair (W1 has 2I rows), an ungated one ([`Activation::Relu2`])
/// one value (W1 has I rows; `Activation::gated`). `epilogue_math::activation_exact` defines
/// each operation by operation. The per-expert parameters of [`Activation::SwigluClamped`] are runtime data (a buffer), not
/// part of a kernel's identity.
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
pub enum Activation {
    /// SwiGLU: h = up · silu(gate) (default).
    #[default]
    Swiglu,
    /// SwiGLU with per-expert (α, β, limit), FlashInfer's parameterisation (gpt-oss: α 1.702,
    /// β 1, limit 7): gate = min(gate, limit), up = clamp(up, −limit, limit),
    /// h = gate · σ(α·gate) · (up + β).
    SwigluClamped,
    /// GeGLU with the tanh approximation: h = up · gelu_tanh(gate), gelu_tanh(g) =
    /// g · σ(2·√(2/π)·(g + 0.044715·g³)).
    GegluTanh,
    /// ReLU², not gated: h = relu(x)² with x the one pre-activation of h's column (W1 has I
    /// rows, not 2I): `max(x, 0)` (a NaN x gives 0, as PTX's `max.f32`) times itself.
    Relu2,
}

impl Activation {
    /// Every activation.
    pub const ALL: [Activation; 4] =
        [Activation::Swiglu, Activation::SwigluClamped, Activation::GegluTanh, Activation::Relu2];
    /// Short tag used in kernel names and keys: `swiglu`, `swiglu_clamped`, `geglu_tanh`,
    /// `relu2`.
    pub const fn tag(self) -> &'static str {
        match self {
            Activation::Swiglu => "swiglu",
            Activation::SwigluClamped => "swiglu_clamped",
            Activation::GegluTanh => "geglu_tanh",
            Activation::Relu2 => "relu2",
        }
    }
    /// Whether h is a function of an (up, gate) pair, so that W1 holds 2I rows (up and gate
    /// per h column); false for ReLU², whose W1 holds I rows.
    pub const fn gated(self) -> bool {
        !matches!(self, Activation::Relu2)
    }
    /// W1's rows per expert for `intermediate` h columns: 2I gated, I ungated. Every size
    /// derived from W1 (weights, scales, GEMM1 bias) follows it.
    pub const fn w1_rows(self, intermediate: usize) -> usize {
        if self.gated() { 2 * intermediate } else { intermediate }
    }
    /// Whether the activation reads per-expert parameters (α, β, limit).
    pub const fn has_params(self) -> bool {
        matches!(self, Activation::SwigluClamped)
    }
}

/// A layer's epilogue functions: GEMM1's activation and which GEMMs add a per-expert bias.
/// Each GEMM kernel carries its part in its key (`GemmKey::activation`, `GemmKey::bias`).
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
pub struct EpilogueSpec {
    /// GEMM1's activation.
    pub activation: Activation,
    /// GEMM1 adds a per-expert bias to its pre-activations.
    pub gemm1_bias: bool,
    /// GEMM2 adds a per-expert bias before the router weight.
    pub gemm2_bias: bool,
}

impl EpilogueSpec {
    /// Plain SwiGLU, no biases (the default).
    pub const PLAIN: EpilogueSpec =
        EpilogueSpec { activation: Activation::Swiglu, gemm1_bias: false, gemm2_bias: false };
    /// gpt-oss: clamped SwiGLU (α, β, limit per expert) and both biases.
    pub const GPT_OSS: EpilogueSpec =
        EpilogueSpec { activation: Activation::SwigluClamped, gemm1_bias: true, gemm2_bias: true };
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
/// defined operation by operation in `epilogue_math`, which the CPU reference calls. A
/// target's default is `Target::default_recipe`.
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
    /// `ex2.approx.ftz` and `rcp.approx.ftz` (one MUFU each) for the sigmoid; on SM100 with
    /// α1 folded into the quantization and element pairs as `.f32x2` (~8.5 issue slots per
    /// output element, branch-free),
    /// on Hopper (bf16 and FP8 activations) in place of Exact's exp polynomial and division.
    /// Modelled as correctly rounded with flush-to-zero; docs/reference.md states the model
    /// and the tolerance for hardware that deviates from it.
    #[default]
    Fast,
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
