//! `moegen._native.Layer`: one moegen `MoeLayer` with its workspace and weights on a
//! backend, built once; passes over host arrays (the simulator) or device tensors (CUDA,
//! on the caller's stream). Nothing here picks a kernel or a tactic or checks a value
//! beyond dtype, shape and device: that is `MoeLayer`'s.

use std::sync::Mutex;

use moegen_dsl::epilogue_math::ActivationParams;
use moegen_runtime::prelude::*;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::activations::{self, Mxfp4Activations};
use crate::arrays::{DeviceTensor, HostArray};
use crate::construct::{Built, Needs, Options, Prepared, construct};
use crate::device::Gpu;
use crate::errors::{Error, Result};
use crate::host;
use crate::reference::{self, HostWeights};
use crate::weights::{self, FlashInferNvfp4, InterleavedMxfp4};

struct Inner {
    gpu: Gpu,
    layer: MoeLayer,
    workspace: Workspace,
}

/// A MoE layer run by moegen (Python: `moegen._native.Layer`; `moegen.MoeLayer` wraps it).
#[pyclass(module = "moegen._native", frozen)]
pub(crate) struct Layer {
    device: String,
    shape: MoeShape,
    config: LayerConfig,
    max_tokens: usize,
    input_scale: f32,
    arch: Arch,
    host_weights: Option<HostWeights>,
    inner: Mutex<Inner>,
}

/// One pass's inputs, on the host, as the kernels read them.
struct HostInputs {
    tokens: usize,
    x: Vec<bf16>,
    ids: Vec<i32>,
    weights: Vec<f32>,
}

fn shape_of(
    hidden: usize,
    intermediate: usize,
    (num_experts, offset, local, top_k): (usize, usize, usize, usize),
) -> Result<MoeShape> {
    let window = ExpertWindow::new(num_experts, offset, local, top_k)?;
    Ok(MoeShape::new(hidden, intermediate, window)?)
}

impl Layer {
    fn build(
        device: &str,
        shape: MoeShape,
        options: Options,
        needs: Needs,
        prepare: impl FnOnce() -> Result<Prepared>,
        input_scale: f32,
    ) -> Result<Self> {
        let Built { gpu, layer, workspace, config, arch, host_weights } =
            construct(device, shape, options, needs, prepare, input_scale)?;
        Ok(Self {
            device: device.to_string(),
            shape,
            config,
            max_tokens: options.max_tokens,
            input_scale,
            arch,
            host_weights,
            inner: Mutex::new(Inner { gpu, layer, workspace }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tokens_of(&self, x_shape: &[usize]) -> Result<usize> {
        let h = self.shape.hidden;
        match x_shape {
            &[n, hh] if hh == h => Ok(n),
            other => Err(Error::Shape {
                input: "x".into(),
                actual: other.to_vec(),
                expected: format!("[num_tokens, {h}]"),
            }),
        }
    }

    fn routing_shape(&self, tokens: usize) -> (Vec<usize>, impl Fn() -> String) {
        let k = self.shape.top_k();
        (vec![tokens, k], move || format!("[{tokens}, {k}] (x's tokens, top_k)"))
    }

    fn host_inputs(&self, x: HostArray, ids: HostArray, weights: HostArray) -> Result<HostInputs> {
        let (x, ids, weights) = (x.checked()?, ids.checked()?, weights.checked()?);
        let tokens = self.tokens_of(&x.shape)?;
        let (shape, expected) = self.routing_shape(tokens);
        ids.shape_is(&shape, &expected)?;
        weights.shape_is(&shape, &expected)?;
        weights.dtype_in(&["float32"], "float32")?;
        Ok(HostInputs {
            tokens,
            x: host::bf16s(&x)?,
            ids: host::ids(&ids, self.shape.top_k())?,
            weights: weights.f32s(),
        })
    }
}

#[pymethods]
impl Layer {
    /// NVFP4 experts as FlashInfer's CuTe-DSL MoE takes them (host arrays, in its order).
    #[staticmethod]
    #[pyo3(signature = (device, hidden, intermediate, window, options, w1_weight,
        w1_weight_sf, w1_alpha, fc2_input_scale, w2_weight, w2_weight_sf, w2_alpha, input_scale))]
    #[allow(clippy::too_many_arguments)]
    fn nvfp4(
        py: Python<'_>,
        device: &str,
        hidden: usize,
        intermediate: usize,
        window: (usize, usize, usize, usize),
        options: PyOptions,
        w1_weight: HostArray,
        w1_weight_sf: HostArray,
        w1_alpha: HostArray,
        fc2_input_scale: f32,
        w2_weight: HostArray,
        w2_weight_sf: HostArray,
        w2_alpha: HostArray,
        input_scale: f32,
    ) -> Result<Self> {
        let shape = shape_of(hidden, intermediate, window)?;
        let w = FlashInferNvfp4 {
            w1_weight: w1_weight.checked()?,
            w1_weight_sf: w1_weight_sf.checked()?,
            w1_alpha: w1_alpha.checked()?,
            fc2_input_scale,
            w2_weight: w2_weight.checked()?,
            w2_weight_sf: w2_weight_sf.checked()?,
            w2_alpha: w2_alpha.checked()?,
            input_scale,
        };
        py.detach(|| {
            let prepare = || Ok(Prepared::Nvfp4(w.prepare(&shape)?));
            Self::build(device, shape, options_of(options), Needs::NVFP4, prepare, input_scale)
        })
    }

    /// gpt-oss's MXFP4 experts (`{name: host array}`, the checkpoint's tensor names without
    /// the layer prefix), with gpt-oss's clamped SwiGLU and `activations` `"bf16"` (Hopper's
    /// kernels) or `"mxfp8"` (SM100's).
    #[staticmethod]
    #[pyo3(signature = (device, hidden, intermediate, window, options, tensors, swiglu,
        activations))]
    #[allow(clippy::too_many_arguments)]
    fn gpt_oss(
        py: Python<'_>,
        device: &str,
        hidden: usize,
        intermediate: usize,
        window: (usize, usize, usize, usize),
        options: PyOptions,
        tensors: Vec<(String, HostArray)>,
        swiglu: (f32, f32, f32),
        activations: &str,
    ) -> Result<Self> {
        let activations = Mxfp4Activations::parse(activations)?;
        let shape = shape_of(hidden, intermediate, window)?;
        let tensors =
            tensors.into_iter().map(|(k, a)| Ok((k, a.checked()?))).collect::<Result<Vec<_>>>()?;
        let (alpha, beta, limit) = swiglu;
        let params = ActivationParams { alpha, beta, limit };
        py.detach(|| {
            let needs = Needs::mxfp4(activations);
            let prepare = || weights::gpt_oss(&shape, tensors, params, activations);
            Self::build(device, shape, options_of(options), needs, prepare, 1.0)
        })
    }

    /// MXFP4 experts in moegen's W1 layout (up and gate rows interleaved in blocks of 64),
    /// plain SwiGLU, `activations` `"bf16"` or `"mxfp8"`: the layout moe-bench writes.
    #[staticmethod]
    #[pyo3(signature = (device, hidden, intermediate, window, options, w1_values, w1_scales,
        w2_values, w2_scales, activations))]
    #[allow(clippy::too_many_arguments)]
    fn mxfp4(
        py: Python<'_>,
        device: &str,
        hidden: usize,
        intermediate: usize,
        window: (usize, usize, usize, usize),
        options: PyOptions,
        w1_values: HostArray,
        w1_scales: HostArray,
        w2_values: HostArray,
        w2_scales: HostArray,
        activations: &str,
    ) -> Result<Self> {
        let activations = Mxfp4Activations::parse(activations)?;
        let shape = shape_of(hidden, intermediate, window)?;
        let w = InterleavedMxfp4 {
            w1_values: w1_values.checked()?,
            w1_scales: w1_scales.checked()?,
            w2_values: w2_values.checked()?,
            w2_scales: w2_scales.checked()?,
        };
        py.detach(|| {
            let needs = Needs::mxfp4(activations);
            let prepare = || w.prepare(&shape, activations);
            Self::build(device, shape, options_of(options), needs, prepare, 1.0)
        })
    }

    /// A pass over host arrays on the simulator: bf16 output bytes `[tokens, hidden]`. The
    /// routing kernels' device-side checks are decoded after the pass.
    fn forward_host<'py>(
        &self,
        py: Python<'py>,
        x: HostArray,
        ids: HostArray,
        weights: HostArray,
    ) -> Result<Bound<'py, PyBytes>> {
        if self.device != "cpu" {
            return Err(Error::Device {
                input: "x".into(),
                actual: "cpu".into(),
                expected: self.device.clone(),
            });
        }
        let HostInputs { tokens, x, ids, weights } = self.host_inputs(x, ids, weights)?;
        let out = py.detach(|| {
            let mut inner = self.lock();
            let Inner { gpu, layer, workspace } = &mut *inner;
            host::forward(gpu.backend(), layer, workspace, tokens, (&x, &ids, &weights))
        })?;
        Ok(PyBytes::new(py, &host::bf16_bytes(&out)))
    }

    /// A pass over device tensors on the raw CUDA stream `stream` (torch's current stream):
    /// queues the kernels, allocates nothing, waits for nothing. `out` is overwritten.
    fn forward_device(
        &self,
        x: DeviceTensor,
        ids: DeviceTensor,
        weights: DeviceTensor,
        out: DeviceTensor,
        stream: usize,
    ) -> Result<()> {
        let tokens = self.tokens_of(&x.shape)?;
        let h = self.shape.hidden;
        let x_shape = || format!("[num_tokens, {h}]");
        let (rshape, rexp) = self.routing_shape(tokens);
        let d = self.device.as_str();
        let io = ForwardIo {
            tokens,
            activations: slice(&x, x.checked(d, "bfloat16", &[tokens, h], x_shape)?),
            expert_ids: slice(&ids, ids.checked(d, "int32", &rshape, &rexp)?),
            expert_weights: slice(&weights, weights.checked(d, "float32", &rshape, &rexp)?),
            output: slice(&out, out.checked(d, "bfloat16", &[tokens, h], x_shape)?),
        };
        let mut inner = self.lock();
        let Inner { gpu, layer, workspace } = &mut *inner;
        gpu.on_stream(stream, |b| layer.forward(b, workspace, &io).map(|_| ()))
    }

    /// Decodes the errors the routing kernels recorded on the device (expert ids out of
    /// range, one expert twice in a token, non-finite router weights); on CUDA it reads the
    /// record on `stream`, after the passes queued there, and waits for it.
    fn check_errors(&self, py: Python<'_>, stream: usize) -> Result<()> {
        py.detach(|| {
            let mut inner = self.lock();
            let Inner { gpu, layer, workspace } = &mut *inner;
            gpu.on_stream(stream, |b| layer.check_errors(b, workspace))
        })
    }

    /// moegen's CPU reference of this layer over host arrays: bf16 output bytes, computed
    /// for the tactic the layer runs at this token count (its routing tile and K splits).
    /// Needs the weights kept on the host (`keep_host_weights`).
    fn reference<'py>(
        &self,
        py: Python<'py>,
        x: HostArray,
        ids: HostArray,
        weights: HostArray,
    ) -> Result<Bound<'py, PyBytes>> {
        let Some(kept) = &self.host_weights else {
            return Err(Error::Unsupported {
                what: "reference".into(),
                reason: "the layer was built without keep_host_weights=True",
            });
        };
        let HostInputs { tokens, x, ids, weights } = self.host_inputs(x, ids, weights)?;
        let out = py.detach(|| -> Result<Vec<bf16>> {
            let tactic = self.lock().layer.dispatch().choose(tokens as u64)?.1;
            let routing = Routing { tokens, experts: ids, weights };
            reference::run(kept, &self.shape, &self.config, self.input_scale, &tactic, &x, &routing)
        })?;
        Ok(PyBytes::new(py, &host::bf16_bytes(&out)))
    }

    /// The tactic the layer runs for `tokens` tokens, as moegen prints it.
    fn tactic(&self, tokens: usize) -> Result<String> {
        Ok(self.lock().layer.dispatch().choose(tokens as u64)?.1.to_string())
    }

    /// `"sm100"` or `"sm90"`: the kernels' generation (the simulator's or the GPU's).
    #[getter]
    fn arch(&self) -> &'static str {
        activations::arch_name(self.arch)
    }

    /// What GEMM1 multiplies the experts by (`"nvfp4"`, `"bf16"` or `"mxfp8"`), quantized
    /// by the layer from the caller's bf16 `x`.
    #[getter]
    fn activations(&self) -> &'static str {
        activations::name(self.config.activations)
    }

    #[getter]
    fn device(&self) -> &str {
        &self.device
    }

    #[getter]
    fn hidden_size(&self) -> usize {
        self.shape.hidden
    }

    #[getter]
    fn intermediate_size(&self) -> usize {
        self.shape.intermediate
    }

    #[getter]
    fn top_k(&self) -> usize {
        self.shape.top_k()
    }

    #[getter]
    fn num_experts(&self) -> usize {
        self.shape.window.num_experts()
    }

    #[getter]
    fn num_local_experts(&self) -> usize {
        self.shape.local_experts()
    }

    #[getter]
    fn local_expert_offset(&self) -> usize {
        self.shape.window.offset()
    }

    #[getter]
    fn max_num_tokens(&self) -> usize {
        self.max_tokens
    }

    #[getter]
    fn deterministic(&self) -> bool {
        self.config.finalize == FinalizeMode::Deterministic
    }
}

/// `(max_tokens, deterministic, keep_host_weights, autotune)` from Python, `autotune`
/// `None` or `(warm-up runs, timed runs)`.
type PyOptions = (usize, bool, bool, Option<(u32, u32)>);

fn options_of((max_tokens, deterministic, keep_host_weights, autotune): PyOptions) -> Options {
    Options { max_tokens, deterministic, keep_host_weights, autotune }
}

fn slice(t: &DeviceTensor, bytes: u64) -> DeviceSlice {
    DeviceSlice::new(DevicePtr(t.ptr), bytes)
}
