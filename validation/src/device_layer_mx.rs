//! The SM100 MXFP8 × MXFP4 layer on a device (docs/sm100-mxf8f6f4.md): routing sort →
//! MXFP8 quantization of the activations (or the caller's MXFP8 rows) → GEMM1 → GEMM2 (and
//! the deterministic finalize's reduction), through kernels generated in this process as a
//! build script would (any epilogue; the default set holds the plain ones). Like
//! [`crate::device_layer`] it
//! uploads and allocates per call: a validation harness, on the simulator the end-to-end
//! check of the `kind::mxf8f6f4` kernels.

use std::collections::HashMap;
use std::sync::Mutex;

use half::bf16;
use moegen_dsl::abi::{Buffer, GemmKey, KernelInfo, MapDims, Scalar, SimtFamily};
use moegen_dsl::plan::PlanError;
use moegen_dsl::{
    ActivationFormat, FinalizeMode, GemmKind, GemmTactic, KernelDescBuilder, MoeTactic, Target,
    WeightFormat,
};
use moegen_runtime::backend::Backend;
use moegen_runtime::device_ops::{
    DeviceOpError, device_moe_sort_buffers, read_sort, run, simt_kernel,
};
use moegen_runtime::error::RuntimeError;
use moegen_runtime::launch::{Bindings, GridInputs};
use moegen_runtime::reference::{
    MoeShape, Mxfp8Activations, ReferenceOptions, Routing, Sm100MxGemm1Output, Sm100MxWeights,
    mx_padded_k, sm100_mx_h_scale_layout,
};
use moegen_runtime::routing::SortOutputs;

/// Everything one MX device run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceMxRun {
    /// The routing sort's outputs.
    pub sort: SortOutputs,
    /// The activations as the device quantized them (the caller's, when it gave MXFP8).
    pub activations: Mxfp8Activations,
    /// GEMM1's MXFP8 output (all rows, padding included, as the device left them).
    pub gemm1: Sm100MxGemm1Output,
    /// `[tokens, H]` bf16.
    pub output: Vec<bf16>,
}

/// The activations a run starts from.
#[derive(Clone, Copy, Debug)]
pub enum MxActivations<'a> {
    /// bf16 rows, quantized on the device by `quantize_mxfp8`.
    Bf16(&'a [bf16]),
    /// Rows already in MXFP8.
    Mxfp8(&'a Mxfp8Activations),
}

/// The MX layer's inputs.
#[derive(Clone, Copy, Debug)]
pub struct MxLayerInputs<'a> {
    /// Shape and expert window.
    pub shape: &'a MoeShape,
    /// Activations.
    pub acts: MxActivations<'a>,
    /// Prepared expert weights.
    pub weights: &'a Sm100MxWeights,
    /// Router output.
    pub routing: &'a Routing,
}

/// The MXFP8 × MXFP4 kernel of GEMM `g` with `opts` and the weights' epilogue, generated once
/// per process.
fn mx_kernel(
    g: &GemmTactic,
    opts: ReferenceOptions,
    w: &Sm100MxWeights,
) -> Result<&'static KernelInfo, DeviceOpError> {
    static MADE: Mutex<Option<HashMap<GemmKey, &'static KernelInfo>>> = Mutex::new(None);
    let spec = w.epilogue.spec();
    let d = KernelDescBuilder::new(*g)
        .target(Target::Sm100f)
        .format(WeightFormat::Mxfp4)
        .activations(ActivationFormat::Mxfp8);
    let d = match g.kind() {
        GemmKind::Gemm1 => d
            .swiglu_input(opts.swiglu_input)
            .recipe(opts.recipe)
            .activation(spec.activation)
            .bias(spec.gemm1_bias),
        GemmKind::Gemm2 => d.finalize(opts.finalize).bias(spec.gemm2_bias),
    };
    let desc = d.build().map_err(|e| DeviceOpError::MissingKernel(e.to_string()))?;
    let mut made = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let made = made.get_or_insert_with(HashMap::new);
    if let Some(k) = made.get(&desc.key()) {
        return Ok(k);
    }
    let k = crate::layer_check::generated_kernel(&desc, "sm_100f")
        .map_err(|e| DeviceOpError::MissingKernel(e.to_string()))?;
    made.insert(desc.key(), k);
    Ok(k)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Runs the MX layer with `tactic` on `b`; `clusters` persistent clusters per GEMM (0: one
/// per work unit).
pub fn device_mx_layer(
    b: &mut dyn Backend,
    inputs: &MxLayerInputs<'_>,
    tactic: &MoeTactic,
    opts: ReferenceOptions,
    clusters: u32,
) -> Result<DeviceMxRun, DeviceOpError> {
    let MxLayerInputs { shape, acts, weights: w, routing } = *inputs;
    let (h, i, k, l) = (shape.hidden, shape.intermediate, shape.top_k(), shape.local_experts());
    moegen_dsl::plan::check_gemm_shape(Target::Sm100f, h as u64, i as u64)?;
    if let Some(w) = tactic.gemm1_wide() {
        return Err(DeviceOpError::MissingKernel(format!(
            "{tactic}: a GEMM1 paired with {w} (this routine launches one GEMM1 kernel)"
        )));
    }
    w.validate(shape)?;
    let tokens = routing.tokens;
    if routing.weights.len() != tokens * k || routing.experts.len() != tokens * k {
        return Err(RuntimeError::BufferLength {
            what: "routing",
            expected: tokens * k,
            actual: routing.weights.len(),
        }
        .into());
    }
    if !tactic.applies_to(1, i as u64, h as u64) {
        return Err(PlanError::Alignment {
            what: "hidden size",
            value: h as u64,
            multiple: u64::from(2 * tactic.gemm2().mma_tiler()[1]),
            why: " (the N tiles of this tactic's 2-wide GEMM2 clusters)",
        }
        .into());
    }
    let tile = tactic.tile();
    let det = opts.finalize == FinalizeMode::Deterministic;
    let k1 = mx_kernel(tactic.gemm1(), opts, w)?;
    let k2 = mx_kernel(tactic.gemm2(), opts, w)?;
    let scale_cols = mx_padded_k(h)? / 32;

    let sort = device_moe_sort_buffers(
        b,
        &routing.experts,
        tokens,
        &shape.window,
        tile,
        moegen_dsl::abi::ep::Padding::Refuse,
    )?;
    // The activations: the caller's MXFP8 rows, or bf16 rows quantized here.
    let (d_x, d_xsf) = match acts {
        MxActivations::Mxfp8(x) => {
            x.validate()?;
            if x.tokens != tokens || x.hidden != h {
                return Err(RuntimeError::BufferLength {
                    what: "MXFP8 activations",
                    expected: tokens * h,
                    actual: x.tokens * x.hidden,
                }
                .into());
            }
            (b.upload_new(&x.codes)?, b.upload_new(&x.scales)?)
        }
        MxActivations::Bf16(x) => {
            if x.len() != tokens * h {
                return Err(RuntimeError::BufferLength {
                    what: "bf16 activations",
                    expected: tokens * h,
                    actual: x.len(),
                }
                .into());
            }
            let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
            let d_bf16 = b.upload_new(&bytes)?;
            // Both filled with 0xFF first (NaN codes and scales): the quantizer must write
            // every byte, the padding scales' zeros included.
            let d_x = b.upload_new(&vec![0xFF; tokens * h])?;
            let d_xsf = b.upload_new(&vec![0xFF; tokens * scale_cols])?;
            let bind = Bindings::new()
                .buffer(Buffer::ActivationsBf16, d_bf16)
                .buffer(Buffer::Activations, d_x)
                .buffer(Buffer::ActivationScales, d_xsf)
                .scalar(Scalar::Tokens, tokens as u64)?
                .scalar(Scalar::Hidden, h as u64)?;
            let q = simt_kernel(b, SimtFamily::QuantizeMxfp8)?;
            let grid = GridInputs { tokens: tokens as u64, hidden: h as u64, ..Default::default() };
            run(b, q, &bind, &grid)?;
            (d_x, d_xsf)
        }
    };
    let rows = sort.max_rows;
    let h_layout = sm100_mx_h_scale_layout(shape, rows)?;
    let d_h = b.alloc(rows * i)?;
    let d_hsf = b.alloc(h_layout.bytes())?;
    let out_rows = if det { tokens * k } else { tokens };
    // Freshly allocated memory is zero: the bulk reduce-add needs a zeroed output.
    let d_out = b.alloc(out_rows * h * 2)?;
    let mut bind = sort
        .bind(Bindings::new())
        .buffer(Buffer::Activations, d_x)
        .buffer(Buffer::ActivationScales, d_xsf)
        .buffer(Buffer::W1, b.upload_new(&w.w1)?)
        .buffer(Buffer::W1Scales, b.upload_new(&w.w1_scales)?)
        .buffer(Buffer::W2, b.upload_new(&w.w2)?)
        .buffer(Buffer::W2Scales, b.upload_new(&w.w2_scales)?)
        .buffer(Buffer::Alpha1, b.upload_new(&f32_bytes(&w.alpha1))?)
        .buffer(Buffer::Alpha2, b.upload_new(&f32_bytes(&w.alpha2))?)
        .buffer(Buffer::RouterWeights, b.upload_new(&f32_bytes(&routing.weights))?)
        .buffer(Buffer::Gemm1Output, d_h)
        .buffer(Buffer::Gemm1OutputScales, d_hsf)
        .buffer(if det { Buffer::FinalizeScratch } else { Buffer::Output }, d_out)
        .map_dims(MapDims {
            hidden: h as u64,
            intermediate: i as u64,
            local_experts: l as u64,
            permuted_rows: rows as u64,
        })
        .live_tile_mask(u64::MAX)
        .scalar(Scalar::Hidden, h as u64)?
        .scalar(Scalar::Intermediate, i as u64)?
        .scalar(Scalar::TopK, k as u64)?
        .scalar(Scalar::MaxTiles, sort.max_tiles as u64)?
        .scalar(Scalar::Tokens, tokens as u64)?;
    let [params, b1, b2] = w.epilogue.device_bytes();
    for (buffer, bytes) in
        [(Buffer::ActivationParams, params), (Buffer::Gemm1Bias, b1), (Buffer::Gemm2Bias, b2)]
    {
        if !bytes.is_empty() {
            bind = bind.buffer(buffer, b.upload_new(&bytes)?);
        }
    }
    let grid = GridInputs {
        routes: sort.routes as u64,
        tokens: tokens as u64,
        hidden: h as u64,
        intermediate: i as u64,
        max_tiles: sort.max_tiles as u64,
        local_experts: l as u64,
        sm_count: if clusters == 0 { u32::MAX } else { clusters.saturating_mul(4) },
        permuted_rows: rows as u64,
    };
    let gemm_grid = |k: &KernelInfo| GridInputs {
        sm_count: if clusters == 0 { u32::MAX } else { clusters.saturating_mul(k.launch.cluster) },
        ..grid
    };
    run(b, k1, &bind, &gemm_grid(k1))?;
    run(b, k2, &bind, &gemm_grid(k2))?;
    let output_ptr = if det {
        let d_final = b.alloc(tokens * h * 2)?;
        let fin = simt_kernel(b, SimtFamily::FinalizeReduce)?;
        run(b, fin, &bind.clone().buffer(Buffer::Output, d_final), &grid)?;
        d_final
    } else {
        d_out
    };
    let out = b.download(output_ptr, tokens * h * 2)?;
    let activations = Mxfp8Activations {
        tokens,
        hidden: h,
        codes: b.download(d_x, tokens * h)?,
        scales: b.download(d_xsf, tokens * scale_cols)?,
    };
    let gemm1 = Sm100MxGemm1Output {
        rows,
        cols: i,
        codes: b.download(d_h, rows * i)?,
        scales: b.download(d_hsf, h_layout.bytes())?,
        scale_layout: h_layout,
    };
    let sort = read_sort(b, &sort, tile)?;
    Ok(DeviceMxRun {
        sort,
        activations,
        gemm1,
        output: out
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
    })
}
