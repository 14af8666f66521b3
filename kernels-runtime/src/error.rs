//! The one error type of moegen-runtime: every invalid input is reported, never panics.

use moegen_dsl::formats::FormatError;
use moegen_dsl::plan::PlanError;

/// Invalid input to a runtime function.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// A routed expert id outside [0, experts).
    #[error("token {token} slot {slot} routes to expert {expert}, outside [0, {experts})")]
    ExpertOutOfRange {
        /// Token.
        token: usize,
        /// Slot within top_k.
        slot: usize,
        /// The id given.
        expert: i64,
        /// Number of experts.
        experts: usize,
    },
    /// A router weight that is NaN or infinite.
    #[error("token {token} slot {slot}: the router weight is NaN or infinite")]
    NonFiniteRouterWeight {
        /// Token.
        token: usize,
        /// Slot within top_k.
        slot: usize,
    },
    /// A token naming one expert at two of its slots (the sort would route it there twice).
    #[error(
        "token {token} slot {slot} routes to expert {expert}, which slot {earlier_slot} of the same token already names"
    )]
    DuplicateExpert {
        /// Token.
        token: usize,
        /// The later slot.
        slot: usize,
        /// The earliest slot with the same id.
        earlier_slot: usize,
        /// The id given twice.
        expert: i64,
    },
    /// A buffer whose length does not match its shape.
    #[error("{what} holds {actual} elements, its shape needs {expected}")]
    BufferLength {
        /// Which buffer.
        what: &'static str,
        /// Expected length.
        expected: usize,
        /// Actual length.
        actual: usize,
    },
    /// NaN or infinity where a finite value is required.
    #[error("{what} contains NaN or infinity")]
    NonFinite {
        /// What was checked.
        what: &'static str,
    },
    /// A scale that must be positive is not.
    #[error("{what} = {value} must be positive and finite")]
    BadScale {
        /// Which scale.
        what: &'static str,
        /// Its value.
        value: f32,
    },
    /// An NVFP4 block scale with its sign bit set (UE4M3 scales are unsigned: the kernels
    /// would read the code without its sign, the reference with it).
    #[error("{what} holds a negative scale code at byte {offset}")]
    NegativeScaleCode {
        /// Which tensor.
        what: &'static str,
        /// Byte offset.
        offset: usize,
    },
    /// An MXFP4 block on Hopper whose weights the kernels cannot form exactly: its scale
    /// lies too far below the largest of its expert's matrix (the matrix is shifted by
    /// 2^−ρ so that its largest scale fits the kernels' bf16 factor; docs/hopper.md,
    /// "Dequantization").
    #[error(
        "{what} of expert {expert}: the block at byte {offset} (scale code {code}) is more than 133 binades below the expert's largest scale code {max}; the Hopper kernels' weights e2m1 · scale · 2^-{shift} would not be exact bf16"
    )]
    Mxfp4ScaleSpan {
        /// Which tensor.
        what: &'static str,
        /// The local expert.
        expert: usize,
        /// Byte offset of the block's scale in `Sm90Weights::w1_scales` or `w2_scales` (one
        /// code per 16 values, expert after expert).
        offset: usize,
        /// The block's UE8M0 code.
        code: u8,
        /// The largest code of the expert's matrix.
        max: u8,
        /// The matrix's shift ρ.
        shift: u8,
    },
    /// A scale code whose weights are no bf16 on Hopper: 6 · scale overflows (MXFP4 codes
    /// 253 and 254; the kernels' weights are bf16).
    #[error("{what}: scale code {code} at byte {offset} makes 6 · scale overflow bf16")]
    ScaleOverflow {
        /// Which tensor.
        what: &'static str,
        /// Byte offset.
        offset: usize,
        /// The code.
        code: u8,
    },
    /// A NaN scale code in a weight tensor.
    #[error("{what} holds a NaN scale code at byte {offset}")]
    NanScaleCode {
        /// Which tensor.
        what: &'static str,
        /// Byte offset.
        offset: usize,
    },
    /// An expert's `up` and `gate` tensors have different global scales (GEMM1 applies one).
    #[error(
        "expert {expert}: up and gate have different global scales ({up} vs {gate}); GEMM1 needs one per expert"
    )]
    MismatchedGlobalScales {
        /// Local expert.
        expert: usize,
        /// Up's global scale.
        up: f32,
        /// Gate's global scale.
        gate: f32,
    },
    /// A block scale an exact conversion cannot represent.
    #[error(
        "{what} of expert {expert}: block {block} needs scale 2^{exponent}, below E4M3's 2^-9 range for this expert"
    )]
    ScaleRange {
        /// Which tensor.
        what: &'static str,
        /// Local expert.
        expert: usize,
        /// Scale block (row-major).
        block: usize,
        /// The exponent needed.
        exponent: i32,
    },
    /// Routing outputs inconsistent with the shape they are used with.
    #[error("routing sort outputs do not match this problem: {reason}")]
    SortMismatch {
        /// What does not match.
        reason: &'static str,
    },
    /// An activation format the called routine does not compute with the given weights.
    #[error("{what}: {reason}")]
    UnsupportedActivations {
        /// The routine or input at fault.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A weight format the called routine does not lay out for the given target.
    #[error("{what}: {reason}")]
    UnsupportedWeights {
        /// The routine or input at fault.
        what: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A GEMM1 activation the called routine does not take: ReLU² (ungated, W1 of I rows)
    /// for weights already in an engine's memory (`LayerWeights::from_device` sizes W1 for
    /// a gated layer's 2I rows).
    #[error("{what} does not implement activation {activation}")]
    UnsupportedActivation {
        /// The routine or input at fault.
        what: &'static str,
        /// The activation's tag (`Activation::tag`).
        activation: &'static str,
    },
    /// A format routine rejected its input.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A size or shape the planning arithmetic rejects (zero, overflow, alignment, window).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A checkpoint file that cannot be read, or is not a valid safetensors file.
    #[error("checkpoint file {path}: {reason}")]
    CheckpointFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A tensor a checkpoint layout needs is in none of the files.
    #[error("tensor {tensor} is missing from the checkpoint")]
    MissingTensor {
        /// The tensor's name.
        tensor: String,
    },
    /// Two checkpoint files hold a tensor of the same name.
    #[error("tensor {tensor} is in both {first} and {second}")]
    DuplicateTensor {
        /// The tensor's name.
        tensor: String,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
    /// A checkpoint tensor of an element type its layout does not have.
    #[error("tensor {tensor} is {actual}, expected {expected}")]
    TensorDtype {
        /// The tensor's name.
        tensor: String,
        /// The dtypes accepted (safetensors names).
        expected: &'static str,
        /// The file's dtype.
        actual: String,
    },
    /// A checkpoint tensor whose shape does not match the layer's shape.
    #[error("tensor {tensor} has shape {actual:?}, expected {expected:?}")]
    TensorShape {
        /// The tensor's name.
        tensor: String,
        /// The shape the layer needs.
        expected: Vec<usize>,
        /// The file's shape.
        actual: Vec<usize>,
    },
    /// A block scale code in a checkpoint tensor that decodes to no scale (NaN, or a negative
    /// UE4M3 code).
    #[error("tensor {tensor} holds a {reason} scale code {code:#04x} at element {offset}")]
    TensorScaleCode {
        /// The tensor's name.
        tensor: String,
        /// Element index in the whole tensor (row-major).
        offset: usize,
        /// The code.
        code: u8,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A checkpoint's scalar scale that is not positive and finite.
    #[error("tensor {tensor} = {value} must be positive and finite")]
    TensorScale {
        /// The tensor's name.
        tensor: String,
        /// Its value.
        value: f32,
    },
    /// NaN or infinity in a checkpoint tensor that must be finite.
    #[error("tensor {tensor} holds NaN or infinity at element {offset}")]
    TensorNonFinite {
        /// The tensor's name.
        tensor: String,
        /// Element index in the whole tensor (row-major).
        offset: usize,
    },
    /// The layer's expert window asks for experts the checkpoint does not hold.
    #[error(
        "tensor {tensor}: the expert window (first {offset}, {local} experts) is outside the checkpoint's {file_experts} experts"
    )]
    ExpertWindowOutsideFile {
        /// The tensor at fault (the stacked tensor, or the first missing expert's).
        tensor: String,
        /// The window's first global expert.
        offset: usize,
        /// Its experts.
        local: usize,
        /// Experts the checkpoint holds.
        file_experts: usize,
    },
    /// A checkpoint holding a different number of experts than the layer's shape.
    #[error("tensor {tensor}: the checkpoint holds {actual} experts, the layer's shape {expected}")]
    ExpertCount {
        /// The tensor at fault.
        tensor: String,
        /// Experts in the layer's shape.
        expected: usize,
        /// Experts in the checkpoint.
        actual: usize,
    },
    /// A checkpoint expert whose `up` and `gate` global scales differ (GEMM1 applies one).
    #[error(
        "expert {expert}: {up} = {up_value} and {gate} = {gate_value} differ; GEMM1 needs one global scale for up and gate"
    )]
    CheckpointGlobalScales {
        /// Global expert id.
        expert: usize,
        /// Up's scale tensor.
        up: String,
        /// Its value.
        up_value: f32,
        /// Gate's scale tensor.
        gate: String,
        /// Its value.
        gate_value: f32,
    },
    /// An A8 table code outside 1‥12 (`abi::sm90_weights::a8`).
    #[error("{what}: byte {offset} holds table code {code}, outside 1..=12")]
    BadTableCode {
        /// Which tensor.
        what: &'static str,
        /// Byte offset.
        offset: usize,
        /// The code.
        code: u8,
    },
    /// A K split no Hopper GEMM kernel has: each unit's K is split over 1 CTA (no split) or
    /// over one of `moegen_dsl::sm90_tactics::SM90_SPLIT_K`, and the reference models only
    /// the splits a kernel can run (`reference::SplitK`).
    #[error(
        "a Hopper GEMM cannot split K over {split} CTAs (1, or one of {:?})",
        moegen_dsl::sm90_tactics::SM90_SPLIT_K
    )]
    UnsupportedSplitK {
        /// The split given.
        split: u32,
    },
    /// An MXFP4 scale given per 16 values whose two halves of a 32-block differ.
    #[error("{what}: the scale codes at {offset} and {} differ; MXFP4 has one per 32 values", offset + 1)]
    SplitMxfp4Scale {
        /// Which tensor.
        what: &'static str,
        /// Byte offset of the first code of the pair.
        offset: usize,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, RuntimeError>;

pub(crate) fn check_len(what: &'static str, actual: usize, expected: usize) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(RuntimeError::BufferLength { what, expected, actual })
    }
}
