//! Device memory as the layer sees it: slices with their sizes (the engine's or our own),
//! the shared workspace, and a layer's weights.

use moegen_dsl::ActivationFormat;
use moegen_dsl::abi::sm90_weights::a8;
use moegen_dsl::abi::{Buffer, SimtTarget, WeightFormat};
use moegen_dsl::plan::{
    ERROR_WORDS, ExpertWindow, MoeShape, WorkspacePlan, WorkspaceRequest, plan_workspace,
};
use moegen_dsl::{Arch, EpilogueSpec, TileSize};

use super::error::LayerError;
use super::kernel_set::KernelSet;
use super::workspace_refusal::check_spec;
use crate::backend::{Backend, DevicePtr};
use crate::error::RuntimeError;
use crate::error_record::{RecordError, decode};
use crate::reference::{
    ExpertEpilogue, PreparedWeights, Sm90A8Weights, Sm90Weights, Sm100MxWeights, validate_weights,
};

/// A device buffer and its size in bytes; the engine's memory or the backend's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSlice {
    /// Address.
    pub ptr: DevicePtr,
    /// Bytes usable from `ptr`.
    pub bytes: u64,
}

impl DeviceSlice {
    /// A slice of `bytes` at `ptr`.
    pub fn new(ptr: DevicePtr, bytes: u64) -> Self {
        Self { ptr, bytes }
    }

    /// Checks the slice holds `needed` bytes at an `align`-byte aligned address.
    pub fn check(&self, buffer: &'static str, needed: u64, align: u64) -> Result<(), LayerError> {
        if self.bytes < needed {
            return Err(LayerError::BufferTooSmall { buffer, needed, given: self.bytes });
        }
        if !self.ptr.0.is_multiple_of(align) {
            return Err(LayerError::Misaligned { buffer, ptr: self.ptr.0, align });
        }
        Ok(())
    }

    fn at(&self, offset: u64) -> DevicePtr {
        DevicePtr(self.ptr.0 + offset)
    }
}

/// What a workspace must serve: every layer of a model that will run with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceSpec {
    /// Most tokens of one forward pass.
    pub max_tokens: usize,
    /// Routes per token.
    pub top_k: usize,
    /// Most local experts of any layer.
    pub max_local_experts: usize,
    /// Largest H of any layer.
    pub max_hidden: usize,
    /// Largest I of any layer.
    pub max_intermediate: usize,
    /// Tile sizes the layers' tactics may use.
    pub tile_sizes: Vec<TileSize>,
    /// Room for the deterministic finalize.
    pub deterministic: bool,
    /// The generation whose kernels run with it (what the layers exchange in it).
    pub arch: Arch,
    /// The activations of the layers it serves (`LayerConfig::activations`), which decide
    /// the buffers between the routing sort and GEMM2 (`moegen_dsl::plan::WorkspaceRequest::
    /// activations`): SM100 NVFP4 or MXFP8, Hopper A4, A16 or A8. A layer of other
    /// activations is refused.
    pub activations: ActivationFormat,
}

/// One device workspace shared by every layer of a model: the routing sort's index maps,
/// the quantized activations, GEMM1's output, the error record, and (optionally) the
/// deterministic scratch, at the offsets of `moegen_dsl::plan`.
///
/// Not `Clone`: [`Self::release`] frees its memory, so there is one handle to it.
#[derive(Debug)]
pub struct Workspace {
    spec: WorkspaceSpec,
    plan: WorkspacePlan,
    memory: DeviceSlice,
    /// Allocated by [`Self::new`] (freed by [`Self::release`]), not the engine's.
    owned: bool,
}

/// Alignment the workspace's base needs (TMA reads GEMM1's output through it).
pub const WORKSPACE_ALIGN: u64 = 256;

impl Workspace {
    /// The plan for `spec`.
    pub fn plan_for(spec: &WorkspaceSpec) -> Result<WorkspacePlan, LayerError> {
        Ok(plan_workspace(&WorkspaceRequest {
            tokens: spec.max_tokens as u64,
            top_k: spec.top_k as u64,
            local_experts: spec.max_local_experts as u64,
            intermediate: Some(spec.max_intermediate as u64),
            hidden: Some(spec.max_hidden as u64),
            tile_sizes: spec.tile_sizes.clone(),
            deterministic_scratch: spec.deterministic,
            arch: spec.arch,
            activations: spec.activations,
        })?)
    }

    /// Allocates a workspace (one allocation) on `b` for layers running `kernels`; a spec
    /// the set cannot serve is refused ([`WorkspaceRefusal`](super::WorkspaceRefusal) names the field).
    pub fn new(
        b: &mut dyn Backend,
        kernels: &KernelSet,
        spec: WorkspaceSpec,
    ) -> Result<Self, LayerError> {
        let plan = Self::plan_for(&spec)?;
        check_spec(kernels, &spec)?;
        let bytes = plan.workspace_bytes.max(1);
        let ptr = b.alloc(usize::try_from(bytes).map_err(|_| LayerError::BufferTooSmall {
            buffer: "workspace",
            needed: bytes,
            given: usize::MAX as u64,
        })?)?;
        Ok(Self { spec, plan, memory: DeviceSlice::new(ptr, bytes), owned: true })
    }

    /// A workspace in memory the engine owns (at least `plan_for(&spec)?.workspace_bytes`
    /// bytes, 256-byte aligned) for layers running `kernels`, checked as [`Self::new`]
    /// checks it.
    pub fn from_device(
        kernels: &KernelSet,
        spec: WorkspaceSpec,
        memory: DeviceSlice,
    ) -> Result<Self, LayerError> {
        let plan = Self::plan_for(&spec)?;
        check_spec(kernels, &spec)?;
        memory.check("workspace", plan.workspace_bytes, WORKSPACE_ALIGN)?;
        Ok(Self { spec, plan, memory, owned: false })
    }

    /// Gives the workspace's memory back: frees it when [`Self::new`] allocated it on `b`
    /// (after the stream's work, which may still use it); leaves the engine's memory of
    /// [`Self::from_device`] alone. Graphs captured with it must not be replayed afterwards.
    pub fn release(self, b: &mut dyn Backend) -> Result<(), LayerError> {
        if self.owned {
            b.free(self.memory.ptr)?;
        }
        Ok(())
    }

    /// What it serves.
    pub fn spec(&self) -> &WorkspaceSpec {
        &self.spec
    }
    /// Its plan.
    pub fn plan(&self) -> &WorkspacePlan {
        &self.plan
    }
    /// Its memory.
    pub fn memory(&self) -> DeviceSlice {
        self.memory
    }
    /// The address of workspace buffer `b`.
    pub fn ptr(&self, b: Buffer) -> Option<DevicePtr> {
        self.plan.buffer(b).map(|p| self.memory.at(p.offset))
    }

    /// Clears the error record (stream-ordered, one memset): every word to !0, which is no
    /// flag raised (the flag word holds them inverted) and no first offender.
    pub fn reset_errors(&self, b: &mut dyn Backend) -> Result<(), LayerError> {
        let p = self.ptr(Buffer::ErrorFlags).ok_or_else(|| missing("error_flags"))?;
        b.memset(p, crate::error_record::RESET_BYTE, (ERROR_WORDS * 4) as usize)?;
        Ok(())
    }

    /// Reads the error record (waits for the stream) and decodes it: an out-of-range expert
    /// id names its token, slot and value.
    pub fn check_errors(
        &self,
        b: &mut dyn Backend,
        window: &ExpertWindow,
    ) -> Result<(), LayerError> {
        let p = self.ptr(Buffer::ErrorFlags).ok_or_else(|| missing("error_flags"))?;
        let raw = b.download(p, (ERROR_WORDS * 4) as usize)?;
        let w: Vec<u32> =
            raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        decode_errors(&w, window)
    }
}

fn missing(what: &str) -> LayerError {
    LayerError::WorkspaceMismatch { reason: format!("the plan has no {what} buffer") }
}

/// Decodes the error record (`crate::error_record`) into the layer's errors.
pub(crate) fn decode_errors(w: &[u32], window: &ExpertWindow) -> Result<(), LayerError> {
    decode(w, window.top_k(), window.num_experts()).map_err(|e| match e {
        RecordError::Input(e) => LayerError::Input(e),
        other => LayerError::Device(other),
    })
}

/// The device buffers of a layer's epilogue data: the activation's parameters and each
/// bias its spec has (`ExpertEpilogue::device_bytes`).
fn epilogue_parts(ep: &ExpertEpilogue) -> Vec<(Buffer, Vec<u8>)> {
    let spec = ep.spec();
    let [params, b1, b2] = ep.device_bytes();
    let mut out = Vec::new();
    if spec.activation.has_params() {
        out.push((Buffer::ActivationParams, params));
    }
    if spec.gemm1_bias {
        out.push((Buffer::Gemm1Bias, b1));
    }
    if spec.gemm2_bias {
        out.push((Buffer::Gemm2Bias, b2));
    }
    out
}

/// What one upload holds: its layout's identity (generation, weight format, activations),
/// the four weight matrices' bytes, other per-layout buffers, the epilogue data, α1 and α2,
/// and (`fc2_input_scale`, activation global scale).
struct Upload<'a> {
    kind: (Arch, WeightFormat, ActivationFormat),
    matrices: [Vec<u8>; 4],
    extra: Vec<(Buffer, Vec<u8>)>,
    epilogue: &'a ExpertEpilogue,
    alphas: (&'a [f32], &'a [f32]),
    scales: (f32, f32),
}

/// A layer's weights on the device, uploaded once (or the engine's, by address), in the
/// layout of one GPU generation's kernels. Not `Clone`: [`Self::release`] frees what it
/// uploaded, so there is one handle to it.
#[derive(Debug)]
pub struct LayerWeights {
    pub(crate) shape: MoeShape,
    pub(crate) buffers: Vec<(Buffer, DeviceSlice)>,
    /// The buffers were uploaded by this crate (freed by [`Self::release`]), not the engine's.
    pub(crate) owned: bool,
    pub(crate) arch: Arch,
    pub(crate) format: WeightFormat,
    pub(crate) activations: ActivationFormat,
    /// What the uploaded epilogue data serves (plain: none uploaded).
    pub(crate) epilogue: EpilogueSpec,
}

impl LayerWeights {
    /// Uploads prepared NVFP4 weights (`reference::prepare_weights`, `import_nvfp4`,
    /// `import_mxfp4`) and the activation global scale `input_scale` (the static scale the
    /// layer quantizes its bf16 input with, and that `alpha1` was computed for). On a Hopper
    /// device they are re-laid into its fragment layout for NVFP4 activations (A4: the
    /// Blackwell arithmetic); use [`Self::upload_sm90`] for bf16 activations or MXFP4.
    pub fn upload(
        b: &mut dyn Backend,
        shape: &MoeShape,
        w: &PreparedWeights,
        input_scale: f32,
    ) -> Result<Self, LayerError> {
        validate_weights(shape, w)?;
        if b.simt_target() == SimtTarget::Sm90a {
            let hw = Sm90Weights::from_prepared(shape, w, ActivationFormat::Nvfp4)?;
            return Self::upload_sm90(b, shape, &hw, input_scale);
        }
        let matrices = [&w.w1, &w.w1_scales, &w.w2, &w.w2_scales].map(|v| v.clone());
        Self::upload_parts(
            b,
            shape,
            Upload {
                kind: (Arch::Sm100, WeightFormat::Nvfp4, ActivationFormat::Nvfp4),
                matrices,
                extra: Vec::new(),
                epilogue: &w.epilogue,
                alphas: (&w.alpha1, &w.alpha2),
                scales: (w.fc2_input_scale, input_scale),
            },
        )
    }

    /// Uploads MXFP4 weights for the SM100 MXFP8 × MXFP4 kernels (`reference::Sm100MxWeights`:
    /// K padded to 128 codes, UE8M0 scales per 32 in 128x4 atoms; docs/sm100-mxf8f6f4.md).
    /// The layer quantizes its bf16 input to MXFP8 itself (no global scale: its uploaded
    /// activation scale is 1, unused by these kernels).
    pub fn upload_sm100_mx(
        b: &mut dyn Backend,
        shape: &MoeShape,
        w: &Sm100MxWeights,
    ) -> Result<Self, LayerError> {
        w.validate(shape)?;
        if b.simt_target() != SimtTarget::Sm100f {
            return Err(RuntimeError::UnsupportedActivations {
                what: "LayerWeights::upload_sm100_mx",
                reason: "MXFP8 × MXFP4 kernels run on SM100 (Hopper takes MXFP4 as A16 or A8)",
            }
            .into());
        }
        let matrices = [&w.w1, &w.w1_scales, &w.w2, &w.w2_scales].map(|v| v.clone());
        Self::upload_parts(
            b,
            shape,
            Upload {
                kind: (Arch::Sm100, WeightFormat::Mxfp4, ActivationFormat::Mxfp8),
                matrices,
                extra: Vec::new(),
                epilogue: &w.epilogue,
                alphas: (&w.alpha1, &w.alpha2),
                scales: (1.0, 1.0),
            },
        )
    }

    /// Uploads Hopper weights (`reference::Sm90Weights`: NVFP4 or MXFP4, α for one
    /// activation format) in the sm_90a kernels' fragment layout.
    pub fn upload_sm90(
        b: &mut dyn Backend,
        shape: &MoeShape,
        w: &Sm90Weights,
        input_scale: f32,
    ) -> Result<Self, LayerError> {
        if w.activations == ActivationFormat::Fp8 {
            return Err(RuntimeError::UnsupportedActivations {
                what: "LayerWeights::upload_sm90",
                reason: "weights for FP8 activations (A8) go through Sm90A8Weights::from_sm90 and upload_sm90_a8",
            }
            .into());
        }
        let (matrices, alpha1, alpha2) = w.kernel_layout(shape)?;
        Self::upload_parts(
            b,
            shape,
            Upload {
                kind: (Arch::Sm90, w.format, w.activations),
                matrices,
                extra: Vec::new(),
                epilogue: &w.epilogue,
                alphas: (&alpha1, &alpha2),
                scales: (w.fc2_input_scale, input_scale),
            },
        )
    }

    /// Uploads Hopper A8 weights (`reference::Sm90A8Weights`: MXFP4 prepared for FP8
    /// activations) in the A8 kernels' layout, with their row factors. The A8 layer has no
    /// global activation scales (its activations carry one power-of-two scale per row):
    /// both uploaded scales are 1.
    pub fn upload_sm90_a8(
        b: &mut dyn Backend,
        shape: &MoeShape,
        w: &Sm90A8Weights,
    ) -> Result<Self, LayerError> {
        let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        Self::upload_parts(
            b,
            shape,
            Upload {
                kind: (Arch::Sm90, WeightFormat::Mxfp4, ActivationFormat::Fp8),
                matrices: w.fragment_layout(shape)?,
                extra: vec![
                    (Buffer::W1RowScales, f32s(&w.w1_rows)),
                    (Buffer::W2RowScales, f32s(&w.w2_rows)),
                ],
                epilogue: &w.epilogue,
                alphas: (&w.alpha1, &w.alpha2),
                scales: (1.0, 1.0),
            },
        )
    }

    /// Uploads one layout's buffers in one batch: W1, its scales, W2, its scales, `extra`,
    /// the epilogue's data, α1, α2, `fc2_input_scale` and the activation global scale.
    fn upload_parts(
        b: &mut dyn Backend,
        shape: &MoeShape,
        u: Upload<'_>,
    ) -> Result<Self, LayerError> {
        let [w1, s1, w2, s2] = u.matrices;
        let mut parts = vec![
            (Buffer::W1, w1),
            (Buffer::W1Scales, s1),
            (Buffer::W2, w2),
            (Buffer::W2Scales, s2),
        ];
        parts.extend(u.extra);
        parts.extend(epilogue_parts(u.epilogue));
        let (arch, format, activations) = u.kind;
        let mut out = Self {
            shape: *shape,
            buffers: Vec::new(),
            owned: true,
            arch,
            format,
            activations,
            epilogue: u.epilogue.spec(),
        };
        let ((alpha1, alpha2), (fc2_input_scale, input_scale)) = (u.alphas, u.scales);
        out.push_all(b, parts, alpha1, alpha2, fc2_input_scale, input_scale)?;
        Ok(out)
    }

    fn push_all(
        &mut self,
        b: &mut dyn Backend,
        parts: Vec<(Buffer, Vec<u8>)>,
        alpha1: &[f32],
        alpha2: &[f32],
        fc2_input_scale: f32,
        input_scale: f32,
    ) -> Result<(), LayerError> {
        for (what, v) in [("input scale", input_scale), ("fc2 input scale", fc2_input_scale)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(RuntimeError::BadScale { what, value: v }.into());
            }
        }
        let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let rest = [
            (Buffer::Alpha1, f32s(alpha1)),
            (Buffer::Alpha2, f32s(alpha2)),
            (Buffer::Fc2InputScale, fc2_input_scale.to_le_bytes().to_vec()),
            (Buffer::ActivationGlobalScale, input_scale.to_le_bytes().to_vec()),
        ];
        let all: Vec<(Buffer, Vec<u8>)> = parts.into_iter().chain(rest).collect();
        let bytes: Vec<&[u8]> = all.iter().map(|(_, v)| v.as_slice()).collect();
        let ptrs = b.upload_all(&bytes)?;
        for ((buf, v), ptr) in all.iter().zip(ptrs) {
            self.buffers.push((*buf, DeviceSlice::new(ptr, v.len() as u64)));
        }
        Ok(())
    }

    /// Weights already on the device (the engine's memory), each checked against `shape`:
    /// W1, W1 scales, W2, W2 scales, α1, α2, `fc2_input_scale` and the activation global
    /// scale, in the layout of `arch`'s kernels (SM100: `reference::PreparedWeights`;
    /// Hopper: `Sm90Weights::fragment_layout` with α from `Sm90Weights::kernel_alphas` (both
    /// from `Sm90Weights::kernel_layout`), or
    /// for FP8 activations
    /// `Sm90A8Weights::fragment_layout` and the row factors `W1RowScales`, `W2RowScales`),
    /// with the scale encoding `format` and α for `activations`.
    pub fn from_device(
        shape: &MoeShape,
        arch: Arch,
        format: WeightFormat,
        activations: ActivationFormat,
        buffers: &[(Buffer, DeviceSlice)],
    ) -> Result<Self, LayerError> {
        let need = Self::sizes_for(shape, arch, format, activations)?;
        let mut out = Vec::with_capacity(need.len());
        for (buf, bytes) in need {
            let slice = buffers.iter().find(|(b, _)| *b == buf).map(|(_, s)| *s).ok_or(
                LayerError::BufferTooSmall { buffer: buf.name(), needed: bytes, given: 0 },
            )?;
            slice.check(buf.name(), bytes, 16)?;
            out.push((buf, slice));
        }
        Ok(Self {
            shape: *shape,
            buffers: out,
            owned: false,
            arch,
            format,
            activations,
            epilogue: EpilogueSpec::PLAIN,
        })
    }

    /// These device weights with the engine's epilogue data for `spec`, each buffer checked
    /// against the shape: `ActivationParams` f32 [L, 4] (α, β, limit, 0) for activations
    /// with parameters, `Gemm1Bias` f32 [L, 2I] (up's I, then gate's I per expert) and
    /// `Gemm2Bias` f32 [L, H] for the biases `spec` names. Only weights from
    /// [`Self::from_device`] (the engine's memory) take them; uploaded weights carry theirs
    /// from `Sm90Weights::with_epilogue`.
    pub fn with_device_epilogue(
        mut self,
        spec: EpilogueSpec,
        buffers: &[(Buffer, DeviceSlice)],
    ) -> Result<Self, LayerError> {
        if !spec.activation.gated() {
            // from_device sizes W1 for 2I rows; engine-held ReLU² weights are not taken.
            return Err(RuntimeError::UnsupportedActivation {
                what: "LayerWeights::with_device_epilogue (engine weights are gated)",
                activation: spec.activation.tag(),
            }
            .into());
        }
        if self.owned || self.epilogue != EpilogueSpec::PLAIN {
            return Err(LayerError::WorkspaceMismatch {
                reason: "epilogue buffers join engine weights (from_device) that carry none yet"
                    .into(),
            });
        }
        let (l, h, i) = (
            self.shape.local_experts() as u64,
            self.shape.hidden as u64,
            self.shape.intermediate as u64,
        );
        let mut need = Vec::new();
        if spec.activation.has_params() {
            need.push((Buffer::ActivationParams, l * 16));
        }
        if spec.gemm1_bias {
            need.push((Buffer::Gemm1Bias, l * 2 * i * 4));
        }
        if spec.gemm2_bias {
            need.push((Buffer::Gemm2Bias, l * h * 4));
        }
        for (buf, bytes) in need {
            let slice = buffers.iter().find(|(b, _)| *b == buf).map(|(_, s)| *s).ok_or(
                LayerError::BufferTooSmall { buffer: buf.name(), needed: bytes, given: 0 },
            )?;
            slice.check(buf.name(), bytes, 16)?;
            self.buffers.push((buf, slice));
        }
        self.epilogue = spec;
        Ok(self)
    }

    /// The buffers a layer's weights consist of on `arch`, with their sizes in bytes, for the
    /// activations `format` is multiplied by there: SM100 NVFP4 weights with NVFP4
    /// activations and MXFP4 with MXFP8, Hopper's bf16 (the A16 and A4 sizes are the same;
    /// [`Self::sizes_for`] for A8).
    pub fn sizes(
        shape: &MoeShape,
        arch: Arch,
        format: WeightFormat,
    ) -> Result<Vec<(Buffer, u64)>, LayerError> {
        let activations = match (arch, format) {
            (Arch::Sm100, WeightFormat::Mxfp4) => ActivationFormat::Mxfp8,
            (Arch::Sm100, WeightFormat::Nvfp4) => ActivationFormat::Nvfp4,
            (Arch::Sm90, _) => ActivationFormat::Bf16,
        };
        Self::sizes_for(shape, arch, format, activations)
    }

    /// The buffers a layer's weights consist of on `arch` for `activations`, with their
    /// sizes in bytes.
    pub fn sizes_for(
        shape: &MoeShape,
        arch: Arch,
        format: WeightFormat,
        activations: ActivationFormat,
    ) -> Result<Vec<(Buffer, u64)>, LayerError> {
        if activations == ActivationFormat::Fp8 {
            if format != WeightFormat::Mxfp4 {
                return Err(RuntimeError::UnsupportedActivations {
                    what: "NVFP4 weights",
                    reason: "FP8 activations (A8) take MXFP4 weights",
                }
                .into());
            }
            if arch != Arch::Sm90 {
                return Err(RuntimeError::UnsupportedActivations {
                    what: "LayerWeights",
                    reason: "FP8 activations (A8) run on Hopper only",
                }
                .into());
            }
            let (h, i, l) = (shape.hidden, shape.intermediate, shape.local_experts() as u64);
            let bytes = |x: usize| x as u64;
            return Ok(vec![
                (Buffer::W1, l * bytes(a8::value_bytes(2 * i, h))),
                (Buffer::W1Scales, l * bytes(a8::scale_bytes(2 * i, h))),
                (Buffer::W2, l * bytes(a8::value_bytes(h, i))),
                (Buffer::W2Scales, l * bytes(a8::scale_bytes(h, i))),
                (Buffer::W1RowScales, 4 * l * bytes(2 * i)),
                (Buffer::W2RowScales, 4 * l * bytes(h)),
                (Buffer::Alpha1, 4 * l),
                (Buffer::Alpha2, 4 * l),
                (Buffer::Fc2InputScale, 4),
                (Buffer::ActivationGlobalScale, 4),
            ]);
        }
        let (h, i, l) =
            (shape.hidden as u64, shape.intermediate as u64, shape.local_experts() as u64);
        if activations == ActivationFormat::Mxfp8 {
            if arch != Arch::Sm100 || format != WeightFormat::Mxfp4 {
                return Err(RuntimeError::UnsupportedActivations {
                    what: "LayerWeights",
                    reason: "MXFP8 activations run on SM100 with MXFP4 weights",
                }
                .into());
            }
            // Gated W1 (2I rows), K padded to 128 codes (`reference::Sm100MxWeights`).
            let (hp, ip) = (h.next_multiple_of(128), i.next_multiple_of(128));
            let (s1, s2) = (
                crate::reference::sm100_mx_w1_scale_layout(shape, moegen_dsl::Activation::Swiglu)?
                    .bytes() as u64,
                crate::reference::sm100_mx_w2_scale_layout(shape)?.bytes() as u64,
            );
            return Ok(vec![
                (Buffer::W1, l * 2 * i * hp / 2),
                (Buffer::W1Scales, l * s1),
                (Buffer::W2, l * h * ip / 2),
                (Buffer::W2Scales, l * s2),
                (Buffer::Alpha1, 4 * l),
                (Buffer::Alpha2, 4 * l),
                (Buffer::Fc2InputScale, 4),
                (Buffer::ActivationGlobalScale, 4),
            ]);
        }
        if arch == Arch::Sm100 && activations != ActivationFormat::Nvfp4 {
            return Err(RuntimeError::UnsupportedActivations {
                what: "LayerWeights",
                reason: "SM100 layers take NVFP4 or MXFP8 activations",
            }
            .into());
        }
        if arch == Arch::Sm100 && format != WeightFormat::Nvfp4 {
            return Err(RuntimeError::UnsupportedWeights {
                what: "LayerWeights::sizes_for",
                reason: "SM100 layers take NVFP4 weights with NVFP4 activations (MXFP4 with MXFP8)",
            }
            .into());
        }
        let (s1, s2) = match arch {
            Arch::Sm100 => (
                crate::reference::w1_scale_layout(shape)?.bytes() as u64,
                crate::reference::w2_scale_layout(shape)?.bytes() as u64,
            ),
            // One byte per scale block (abi::sm90_weights::scale_bytes).
            Arch::Sm90 => {
                let block = u64::from(format.block());
                (2 * i * h / block, h * i / block)
            }
        };
        Ok(vec![
            (Buffer::W1, l * i * h),
            (Buffer::W1Scales, l * s1),
            (Buffer::W2, l * h * i / 2),
            (Buffer::W2Scales, l * s2),
            (Buffer::Alpha1, 4 * l),
            (Buffer::Alpha2, 4 * l),
            (Buffer::Fc2InputScale, 4),
            (Buffer::ActivationGlobalScale, 4),
        ])
    }

    /// Gives the weights' memory back: frees the buffers [`Self::upload`] or
    /// [`Self::upload_sm90`] made on `b` (after the stream's work, which may still use them);
    /// leaves the engine's buffers of [`Self::from_device`] alone. Graphs captured with them
    /// must not be replayed afterwards.
    pub fn release(self, b: &mut dyn Backend) -> Result<(), LayerError> {
        if self.owned {
            let ptrs: Vec<DevicePtr> = self.buffers.iter().map(|(_, s)| s.ptr).collect();
            b.free_all(&ptrs)?;
        }
        Ok(())
    }

    /// The layer shape these weights are for.
    pub fn shape(&self) -> &MoeShape {
        &self.shape
    }
    /// The generation whose layout they are in.
    pub fn arch(&self) -> Arch {
        self.arch
    }
    /// Their scale encoding.
    pub fn format(&self) -> WeightFormat {
        self.format
    }
}
