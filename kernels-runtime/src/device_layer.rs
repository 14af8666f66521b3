//! The whole NVFP4 MoE layer on a device: routing sort → GEMM1 → zero output → GEMM2 (and
//! for the deterministic variant, the fixed-order reduction), through the generated kernels
//! of one tactic. Launch shapes come from the kernels' manifest; tensor maps from the
//! backend. On the simulator this is the end-to-end check of the SM100 kernels.

use half::bf16;
use moegen_dsl::formats::Scale128x4;
use moegen_dsl::{FinalizeMode, MoeTactic, SwigluInput};

use crate::backend::{Backend, DevicePtr, KernelArg, LaunchShape, TensorMapSpec, TmaElement};
use crate::device_ops::{DeviceOpError, SortBuffers, device_moe_sort_buffers, kernel, read_sort};
use crate::error::RuntimeError;
use crate::reference::{
    Gemm1Output, MoeShape, Nvfp4Activations, PreparedWeights, ReferenceOptions, Routing,
    validate_weights,
};
use crate::routing::SortOutputs;

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

/// Launch facts of a kernel from the manifest.
struct Launch {
    name: &'static str,
    ptx: &'static str,
    threads: u32,
    cluster: u32,
    smem: u32,
}

fn manifest_launch(name: &str) -> Result<Launch, DeviceOpError> {
    let k = moegen_kernels::kernel(name)
        .ok_or_else(|| DeviceOpError::MissingKernel(name.to_owned()))?;
    let manifest: serde_json::Value = serde_json::from_str(moegen_kernels::MANIFEST_JSON)
        .map_err(|_| DeviceOpError::MissingKernel("manifest".into()))?;
    let e = manifest["kernels"]
        .as_array()
        .and_then(|ks| ks.iter().find(|e| e["name"] == name))
        .ok_or_else(|| DeviceOpError::MissingKernel(name.to_owned()))?;
    let num = |v: &serde_json::Value| v.as_u64().unwrap_or(0) as u32;
    Ok(Launch {
        name: k.name,
        ptx: k.ptx,
        threads: num(&e["threads"]),
        cluster: num(&e["cluster_dims"][0]).max(1),
        smem: num(&e["dynamic_smem"]["fixed"]),
    })
}

fn u4_map(
    address: DevicePtr,
    dims: Vec<u64>,
    strides: Vec<u64>,
    box_dims: Vec<u32>,
    swizzle: u32,
) -> TensorMapSpec {
    TensorMapSpec { element: TmaElement::U4Packed, address, dims, strides, box_dims, swizzle }
}

/// A 128x4 scale buffer viewed as u16 atoms: {256 u16 per atom, atoms per row block,
/// row blocks, experts}.
fn sf_map(
    address: DevicePtr,
    k: usize,
    rows: usize,
    experts: Option<usize>,
    box_rowblocks: u32,
) -> TensorMapSpec {
    let atoms = (k / 16).div_ceil(4) as u64;
    let rowblocks = rows.div_ceil(128) as u64;
    let mut dims = vec![256, atoms, rowblocks];
    let mut strides = vec![512, atoms * 512];
    let mut box_dims = vec![256, 4, box_rowblocks];
    if let Some(l) = experts {
        dims.push(l as u64);
        strides.push(atoms * 512 * rowblocks);
        box_dims.push(1);
    }
    TensorMapSpec { element: TmaElement::U16, address, dims, strides, box_dims, swizzle: 0 }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
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
    if !h.is_multiple_of(256) || !i.is_multiple_of(256) {
        return Err(RuntimeError::Alignment {
            what: "hidden and intermediate sizes (kernels)",
            value: h.min(i),
            multiple: 256,
        }
        .into());
    }
    if opts.swiglu_input != SwigluInput::F32 {
        return Err(DeviceOpError::MissingKernel(
            "GEMM1 with bf16 SwiGLU inputs (not in the default set)".into(),
        ));
    }
    validate_weights(shape, w)?;
    if routing.tokens != x.tokens || x.hidden != h || routing.weights.len() != routing.tokens * k {
        return Err(RuntimeError::BufferLength {
            what: "routing/activations",
            expected: x.tokens,
            actual: routing.tokens,
        }
        .into());
    }
    if !tactic.applies_to(1, i as u64, h as u64) {
        return Err(RuntimeError::Alignment {
            what: "N tiles for this tactic's cluster",
            value: h,
            multiple: 2 * tactic.gemm2().mma_tiler()[1] as usize,
        }
        .into());
    }
    let tile = tactic.tile();
    let t = tile.rows() as usize;
    let tag = b.kernel_tag();
    let g1 = tactic.gemm1();
    let g2 = tactic.gemm2();
    let [_, n1] = g1.mma_tiler();
    let [cm, cn2] = g2.cluster();
    let [_, n2] = g2.mma_tiler();
    let det = opts.finalize == FinalizeMode::Deterministic;
    let k1 = manifest_launch(&format!("moegen_{tag}_nvfp4_gemm1_t{t}_n{n1}_c{cm}x1"))?;
    let k2 = manifest_launch(&format!(
        "moegen_{tag}_nvfp4_gemm2_t{t}_n{n2}_c{cm}x{cn2}{}",
        if det { "_det" } else { "" }
    ))?;

    let sort: SortBuffers =
        device_moe_sort_buffers(b, &routing.experts, routing.tokens, &shape.window, tile)?;
    let rows = sort.max_rows;
    let d_x = b.upload_new(&x.packed)?;
    let d_xsf = b.upload_new(&x.scales)?;
    let d_w1 = b.upload_new(&w.w1)?;
    let d_w1sf = b.upload_new(&w.w1_scales)?;
    let d_w2 = b.upload_new(&w.w2)?;
    let d_w2sf = b.upload_new(&w.w2_scales)?;
    let d_a1 = b.upload_new(&f32_bytes(&w.alpha1))?;
    let d_a2 = b.upload_new(&f32_bytes(&w.alpha2))?;
    let d_gs = b.upload_new(&w.fc2_input_scale.to_le_bytes())?;
    let d_rw = b.upload_new(&f32_bytes(&routing.weights))?;
    let h_layout = Scale128x4::new(rows, i / 16).map_err(RuntimeError::from)?;
    let d_h = b.alloc(rows * i / 2)?;
    let d_hsf = b.alloc(h_layout.bytes())?;
    let out_rows = if det { routing.tokens * k } else { routing.tokens };
    // Freshly allocated memory is zero: the bulk reduce-add needs a zeroed output.
    let d_out = b.alloc(out_rows * h * 2)?;

    let u = |v: usize| KernelArg::U32(v as u32);
    let p = KernelArg::Ptr;
    let tail = [
        p(sort.tile_expert),
        p(sort.tile_limit),
        p(sort.p2e),
        p(sort.live),
        u(h),
        u(i),
        u(k),
        u(sort.max_tiles),
    ];

    // GEMM1.
    let map = |b: &mut dyn Backend, s: TensorMapSpec| b.encode_tensor_map(&s).map(KernelArg::Bytes);
    let tm_b1 = map(
        b,
        u4_map(
            d_w1,
            vec![h as u64, 2 * i as u64, l as u64],
            vec![(h / 2) as u64, (i * h) as u64],
            vec![256, n1 / cm, 1],
            128,
        ),
    )?;
    let tm_sfb1 = map(b, sf_map(d_w1sf, h, 2 * i, Some(l), n1.div_ceil(128)))?;
    let tm_out = map(
        b,
        u4_map(d_h, vec![i as u64, rows as u64], vec![(i / 2) as u64], vec![n1 / 2, 32], 0),
    )?;
    let mut args = vec![tm_b1, tm_sfb1, tm_out, p(d_x), p(d_xsf), p(d_hsf), p(d_a1), p(d_gs)];
    args.extend(tail.iter().cloned());
    let units1 = sort.max_tiles * (2 * i).div_ceil(n1 as usize);
    let cl1 = if clusters == 0 { units1 as u32 } else { clusters.min(units1 as u32).max(1) };
    b.launch_cluster(
        k1.ptx,
        k1.name,
        LaunchShape { grid: cl1 * k1.cluster, block: k1.threads, dynamic_smem: k1.smem },
        k1.cluster,
        &args,
    )?;

    // GEMM2.
    let tm_a = map(
        b,
        u4_map(d_h, vec![i as u64, rows as u64], vec![(i / 2) as u64], vec![256, 128], 128),
    )?;
    let tm_sfa = map(b, sf_map(d_hsf, i, rows, None, 1))?;
    let tm_b2 = map(
        b,
        u4_map(
            d_w2,
            vec![i as u64, h as u64, l as u64],
            vec![(i / 2) as u64, (h * i / 2) as u64],
            vec![256, n2 / cm, 1],
            128,
        ),
    )?;
    let tm_sfb2 = map(b, sf_map(d_w2sf, i, h, Some(l), n2.div_ceil(128)))?;
    let mut args = vec![tm_a, tm_sfa, tm_b2, tm_sfb2, p(d_a2), p(d_rw), p(d_out)];
    args.extend(tail.iter().cloned());
    let units2 = sort.max_tiles * h.div_ceil(n2 as usize) / cn2 as usize;
    let cl2 = if clusters == 0 { units2 as u32 } else { clusters.min(units2 as u32).max(1) };
    b.launch_cluster(
        k2.ptx,
        k2.name,
        LaunchShape { grid: cl2 * k2.cluster, block: k2.threads, dynamic_smem: k2.smem },
        k2.cluster,
        &args,
    )?;

    let output_ptr = if det {
        let d_final = b.alloc(routing.tokens * h * 2)?;
        let (ptx, name) = kernel(b, "finalize_reduce")?;
        let args = [p(d_out), p(sort.e2p), p(d_final), u(routing.tokens), u(h), u(k)];
        let grid = (routing.tokens * h / 2).div_ceil(256).min(4096) as u32;
        b.launch(ptx, name, LaunchShape { grid, block: 256, dynamic_smem: 0 }, &args)?;
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
