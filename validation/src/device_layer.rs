//! The whole NVFP4 MoE layer on a device: routing sort → GEMM1 → zero output → GEMM2 (and
//! for the deterministic variant, the fixed-order reduction), through the generated kernels
//! of one tactic, every launch built from the kernels' typed ABI. It uploads everything and
//! allocates every buffer per call: a validation harness, not the runtime's layer API. On the
//! simulator this is the end-to-end check of the SM100 kernels.

use half::bf16;
use moegen_dsl::abi::{Buffer, GemmKey, KernelId, MapDims, Scalar, SimtFamily};
use moegen_dsl::formats::Scale128x4;
use moegen_dsl::plan::PlanError;
use moegen_dsl::{FinalizeMode, KernelDescBuilder, MoeTactic, SwigluInput, Target};
use moegen_runtime::backend::Backend;
use moegen_runtime::device_ops::{
    DeviceOpError, device_moe_sort_buffers, find_kernel, read_sort, run, simt_kernel,
};
use moegen_runtime::error::RuntimeError;
use moegen_runtime::launch::{Bindings, GridInputs};
use moegen_runtime::reference::{
    Gemm1Output, MoeShape, Nvfp4Activations, PreparedWeights, ReferenceOptions, Routing,
    validate_weights,
};
use moegen_runtime::routing::SortOutputs;

/// Everything one device run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceRun {
    /// The routing sort's outputs.
    pub sort: SortOutputs,
    /// GEMM1's NVFP4 output (all rows, padding included, as the device left them).
    pub gemm1: Gemm1Output,
    /// `[tokens, H]` bf16.
    pub output: Vec<bf16>,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The generated kernel of one GEMM of `tactic` with `opts`.
pub(crate) fn gemm_key(
    g: &moegen_dsl::GemmTactic,
    opts: ReferenceOptions,
) -> Result<GemmKey, DeviceOpError> {
    let mut d = KernelDescBuilder::new(*g).target(Target::Sm100f);
    d = match g.kind() {
        moegen_dsl::GemmKind::Gemm1 => d.swiglu_input(opts.swiglu_input).recipe(opts.recipe),
        moegen_dsl::GemmKind::Gemm2 => d.finalize(opts.finalize),
    };
    d.build().map(|d| d.key()).map_err(|e| DeviceOpError::MissingKernel(e.to_string()))
}

/// The layer's inputs, as the CPU reference takes them.
#[derive(Clone, Copy, Debug)]
pub struct LayerInputs<'a> {
    /// Shape and expert window.
    pub shape: &'a MoeShape,
    /// NVFP4 activations.
    pub acts: &'a Nvfp4Activations,
    /// Prepared expert weights.
    pub weights: &'a PreparedWeights,
    /// Router output.
    pub routing: &'a Routing,
}

/// Runs the layer with `tactic` on `b`; `clusters` persistent clusters per GEMM (0: one per
/// work unit).
pub fn device_moe_layer(
    b: &mut dyn Backend,
    inputs: &LayerInputs<'_>,
    tactic: &MoeTactic,
    opts: ReferenceOptions,
    clusters: u32,
) -> Result<DeviceRun, DeviceOpError> {
    let LayerInputs { shape, acts: x, weights: w, routing } = *inputs;
    let (h, i, k, l) = (shape.hidden, shape.intermediate, shape.top_k(), shape.local_experts());
    moegen_dsl::plan::check_gemm_shape(moegen_dsl::Target::Sm100f, h as u64, i as u64)?;
    if let Some(w) = tactic.gemm1_wide() {
        return Err(DeviceOpError::MissingKernel(format!(
            "{tactic}: a GEMM1 paired with {w} (this routine launches one GEMM1 kernel)"
        )));
    }
    if opts.swiglu_input != SwigluInput::F32 {
        return Err(DeviceOpError::MissingKernel(
            "GEMM1 with bf16 SwiGLU inputs (not in the default set)".into(),
        ));
    }
    validate_weights(shape, w)?;
    // The kernels looked up below are the plain-SwiGLU ones without biases, whose W1 map
    // spans 2I gated rows: any other epilogue (biases, another activation, ReLU²'s I rows)
    // is refused rather than run with the weights read as the wrong layout.
    let epilogue = w.epilogue.spec();
    if epilogue != moegen_dsl::EpilogueSpec::PLAIN {
        return Err(DeviceOpError::MissingKernel(format!(
            "GEMM1/GEMM2 with the weights' epilogue {epilogue:?} (this routine runs the plain \
             SwiGLU kernels without biases)"
        )));
    }
    if routing.tokens != x.tokens || x.hidden != h || routing.weights.len() != routing.tokens * k {
        return Err(RuntimeError::BufferLength {
            what: "routing/activations",
            expected: x.tokens,
            actual: routing.tokens,
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
    let k1 = find_kernel(&KernelId::Gemm(gemm_key(tactic.gemm1(), opts)?))?;
    let k2 = find_kernel(&KernelId::Gemm(gemm_key(tactic.gemm2(), opts)?))?;

    let sort = device_moe_sort_buffers(
        b,
        &routing.experts,
        routing.tokens,
        &shape.window,
        tile,
        moegen_dsl::abi::ep::Padding::Refuse,
    )?;
    let rows = sort.max_rows;
    let h_layout = Scale128x4::new(rows, i / 16).map_err(RuntimeError::from)?;
    let d_h = b.alloc(rows * i / 2)?;
    let d_hsf = b.alloc(h_layout.bytes())?;
    let out_rows = if det { routing.tokens * k } else { routing.tokens };
    // Freshly allocated memory is zero: the bulk reduce-add needs a zeroed output.
    let d_out = b.alloc(out_rows * h * 2)?;
    let bind = sort
        .bind(Bindings::new())
        .buffer(Buffer::Activations, b.upload_new(&x.packed)?)
        .buffer(Buffer::ActivationScales, b.upload_new(&x.scales)?)
        .buffer(Buffer::W1, b.upload_new(&w.w1)?)
        .buffer(Buffer::W1Scales, b.upload_new(&w.w1_scales)?)
        .buffer(Buffer::W2, b.upload_new(&w.w2)?)
        .buffer(Buffer::W2Scales, b.upload_new(&w.w2_scales)?)
        .buffer(Buffer::Alpha1, b.upload_new(&f32_bytes(&w.alpha1))?)
        .buffer(Buffer::Alpha2, b.upload_new(&f32_bytes(&w.alpha2))?)
        .buffer(Buffer::Fc2InputScale, b.upload_new(&w.fc2_input_scale.to_le_bytes())?)
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
        .scalar(Scalar::Tokens, routing.tokens as u64)?;
    let grid = GridInputs {
        routes: sort.routes as u64,
        tokens: routing.tokens as u64,
        hidden: h as u64,
        intermediate: i as u64,
        max_tiles: sort.max_tiles as u64,
        local_experts: l as u64,
        // `clusters` persistent clusters, or (0) one CTA per work unit.
        sm_count: if clusters == 0 { u32::MAX } else { clusters.saturating_mul(4) },
        permuted_rows: rows as u64,
    };
    let gemm_grid = |k: &moegen_dsl::abi::KernelInfo| GridInputs {
        sm_count: if clusters == 0 { u32::MAX } else { clusters.saturating_mul(k.launch.cluster) },
        ..grid
    };
    run(b, k1, &bind, &gemm_grid(k1))?;
    run(b, k2, &bind, &gemm_grid(k2))?;
    let output_ptr = if det {
        let d_final = b.alloc(routing.tokens * h * 2)?;
        let fin = simt_kernel(b, SimtFamily::FinalizeReduce)?;
        run(b, fin, &bind.clone().buffer(Buffer::Output, d_final), &grid)?;
        d_final
    } else {
        d_out
    };
    let out = b.download(output_ptr, routing.tokens * h * 2)?;
    let gemm1 = Gemm1Output {
        rows,
        cols: i,
        packed: b.download(d_h, rows * i / 2)?,
        scales: b.download(d_hsf, h_layout.bytes())?,
        scale_layout: h_layout,
    };
    let sort = read_sort(b, &sort, tile)?;
    Ok(DeviceRun {
        sort,
        gemm1,
        output: out
            .chunks_exact(2)
            .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
    })
}
