//! The generated Hopper GEMMs (and `qdq_nvfp4`) on the device, against the CPU reference
//! and against the H200's measured arithmetic (`model`): GEMM1 with padding rows preset to
//! a NaN pattern that must survive; GEMM2 from the model's h with NaN padding rows, the
//! deterministic scratch rows of non-local routes preset to NaN, the bulk reduce-add into a
//! zeroed output.

use half::bf16;
use moegen_dsl::abi::{Buffer, KernelId, KernelInfo, MapDims, Scalar, SimtFamily, SimtTarget};
use moegen_dsl::kernel_desc::BlockScaledFormat;
use moegen_dsl::{
    ActivationFormat, FinalizeMode, GemmKind, GemmTactic, KernelDescBuilder, SwigluInput, Target,
    TileSize,
};
use moegen_runtime::backend::{Backend, DevicePtr};
use moegen_runtime::device_ops::{find_kernel, run};
use moegen_runtime::launch::{Bindings, GridInputs};
use moegen_runtime::reference::{
    Sm90Weights, finalize, sm90_activations, sm90_gemm1_reference, sm90_gemm2_contributions,
};
use moegen_runtime::routing::moe_sort;

use super::model;
use super::problem::{Problem, bytes_bf16, bytes_f32, bytes_i32, bytes_u32, u16s};

/// bf16 NaN with a payload no kernel writes.
const SENTINEL: u16 = 0x7FC1;

/// One GEMM's tiles and N values to run.
pub struct Tiles {
    pub tile: u32,
    pub gemm1: Vec<u32>,
    pub gemm2: Vec<u32>,
}

/// Counts of one comparison.
struct Tally {
    n: usize,
    differ: usize,
    far: usize,
}

/// Valid positions of `got` against `want`; "far" is a relative difference above 5% (of
/// at least 10^−3).
fn tally(got: &[u16], want: &[u16], mask: &[bool]) -> Tally {
    let mut t = Tally { n: 0, differ: 0, far: 0 };
    for ((g, w), m) in got.iter().zip(want).zip(mask) {
        if !*m {
            continue;
        }
        t.n += 1;
        if g != w {
            t.differ += 1;
            let (g, w) = (bf16::from_bits(*g).to_f32(), bf16::from_bits(*w).to_f32());
            // NaN counts as far.
            let close = (g - w).abs() / w.abs().max(1e-3) <= 0.05;
            if !close {
                t.far += 1;
            }
        }
    }
    t
}

fn gemm_kernel(
    g: GemmTactic,
    format: BlockScaledFormat,
    activations: ActivationFormat,
    finalize: FinalizeMode,
) -> Result<&'static KernelInfo, String> {
    let mut d = KernelDescBuilder::new(g).target(Target::Sm90a).format(format);
    d = d.activations(activations);
    if g.kind() == GemmKind::Gemm2 {
        d = d.finalize(finalize);
    }
    let key = d.build().map_err(|e| e.to_string())?.key();
    find_kernel(&KernelId::Gemm(key)).map_err(|e| e.to_string())
}

/// The device's `qdq_nvfp4` against `sm90_activations`.
fn qdq(b: &mut dyn Backend, p: &Problem, want: &[bf16]) -> Result<bool, String> {
    let e = |x: moegen_runtime::backend::BackendError| x.to_string();
    let h = p.shape.hidden;
    let k =
        find_kernel(&KernelId::Simt { family: SimtFamily::QdqNvfp4, target: SimtTarget::Sm90a })
            .map_err(|e| e.to_string())?;
    let raw = b.upload_new(&bytes_bf16(&p.x)).map_err(e)?;
    let out = b.alloc(p.tokens * h * 2).map_err(e)?;
    let gs = b.upload_new(&p.input_scale.to_le_bytes()).map_err(e)?;
    let bind = Bindings::new()
        .buffer(Buffer::ActivationsBf16, raw)
        .buffer(Buffer::ActivationsDequantized, out)
        .buffer(Buffer::ActivationGlobalScale, gs)
        .scalar(Scalar::Tokens, p.tokens as u64)
        .and_then(|x| x.scalar(Scalar::Hidden, h as u64))
        .map_err(|e| e.to_string())?;
    let grid = GridInputs { tokens: p.tokens as u64, hidden: h as u64, ..Default::default() };
    run(b, k, &bind, &grid).map_err(|e| e.to_string())?;
    let got = u16s(&b.download(out, p.tokens * h * 2).map_err(e)?);
    let eq = got.iter().zip(want).all(|(g, w)| *g == w.to_bits());
    println!("  qdq_nvfp4 {}x{h}: {}", p.tokens, if eq { "bit-exact" } else { "DIFFERS" });
    Ok(eq)
}

/// Runs every listed GEMM of `format` × `activations` on `b`; false if any check fails: a
/// value far from the reference, any difference from the measured arithmetic (GEMM1, the
/// deterministic GEMM2, and the bulk GEMM2 for k ≤ 2, where the order of routes cannot
/// matter), a written padding row or non-local route row.
pub fn check(
    b: &mut dyn Backend,
    p: &Problem,
    w: &Sm90Weights,
    format: BlockScaledFormat,
    tiles: &[Tiles],
    ctas: Option<u32>,
) -> Result<bool, String> {
    let e = |x: moegen_runtime::backend::BackendError| x.to_string();
    let s = &p.shape;
    let (h, i, k, l) = (s.hidden, s.intermediate, s.top_k(), s.local_experts());
    let act = w.activations;
    let [w1, s1, w2, s2] = w.fragment_layout(s).map_err(|e| e.to_string())?;
    let mut up = |v: &[u8]| b.upload_new(v).map_err(e);
    let (w1, s1, w2, s2) = (up(&w1)?, up(&s1)?, up(&w2)?, up(&s2)?);
    let (a1, a2) = (up(&bytes_f32(&w.alpha1))?, up(&bytes_f32(&w.alpha2))?);
    let fc2 = up(&w.fc2_input_scale.to_le_bytes())?;
    let acts =
        sm90_activations(&p.x, p.tokens, h, act, p.input_scale).map_err(|e| e.to_string())?;
    let px = up(&bytes_bf16(&acts))?;
    let rw = up(&bytes_f32(&p.routing.weights))?;
    let mut ok = true;
    if act == ActivationFormat::Nvfp4 {
        ok &= qdq(b, p, &acts)?;
    }
    for t in tiles {
        let tile = TileSize::from_rows(t.tile).map_err(|e| e.to_string())?;
        let sort =
            moe_sort(&p.routing.experts, p.tokens, &s.window, tile).map_err(|e| e.to_string())?;
        let rows = sort.permuted_idx_to_expanded_idx.len();
        let valid: Vec<bool> =
            (0..rows * i).map(|j| sort.route_of_row(j / i, k).is_some()).collect();
        let ref_h: Vec<u16> = sm90_gemm1_reference(s, &acts, w, &sort, SwigluInput::F32)
            .map_err(|e| e.to_string())?
            .values
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let model_h = model::gemm1(p, w, &acts, &sort);
        let dev_sort: [DevicePtr; 4] = [
            b.upload_new(&bytes_i32(&sort.tile_idx_to_expert_idx)).map_err(e)?,
            b.upload_new(&bytes_i32(&sort.tile_idx_to_mn_limit)).map_err(e)?,
            b.upload_new(&bytes_i32(&sort.permuted_idx_to_expanded_idx)).map_err(e)?,
            b.upload_new(&bytes_u32(&[sort.num_non_exiting_tiles as u32])).map_err(e)?,
        ];
        let base = Bindings::new()
            .buffer(Buffer::TileIdxToExpertIdx, dev_sort[0])
            .buffer(Buffer::TileIdxToMnLimit, dev_sort[1])
            .buffer(Buffer::PermutedIdxToExpandedIdx, dev_sort[2])
            .buffer(Buffer::NumNonExitingTiles, dev_sort[3])
            .scalar(Scalar::Hidden, h as u64)
            .and_then(|x| x.scalar(Scalar::Intermediate, i as u64))
            .and_then(|x| x.scalar(Scalar::TopK, k as u64))
            .and_then(|x| x.scalar(Scalar::MaxTiles, sort.max_tiles() as u64))
            .map_err(|e| e.to_string())?
            .map_dims(MapDims {
                hidden: h as u64,
                intermediate: i as u64,
                local_experts: l as u64,
                permuted_rows: rows as u64,
            });
        let grid = GridInputs {
            hidden: h as u64,
            intermediate: i as u64,
            max_tiles: sort.max_tiles() as u64,
            sm_count: ctas.unwrap_or(b.sm_count()),
            ..Default::default()
        };
        let sentinel: Vec<u8> = SENTINEL.to_le_bytes().repeat(rows * i);
        let hbuf = b.upload_new(&sentinel).map_err(e)?;
        let xbuf = match act {
            ActivationFormat::Bf16 => Buffer::ActivationsBf16,
            ActivationFormat::Nvfp4 => Buffer::ActivationsDequantized,
        };
        for &n in &t.gemm1 {
            let g = GemmTactic::new_sm90(GemmKind::Gemm1, t.tile, n).map_err(|e| e.to_string())?;
            let kinfo = gemm_kernel(g, format, act, FinalizeMode::default())?;
            b.upload(hbuf, &sentinel).map_err(e)?;
            let bind = base
                .clone()
                .buffer(Buffer::W1, w1)
                .buffer(Buffer::W1Scales, s1)
                .buffer(xbuf, px)
                .buffer(Buffer::Gemm1OutputBf16, hbuf)
                .buffer(Buffer::Alpha1, a1)
                .buffer(Buffer::Fc2InputScale, fc2);
            run(b, kinfo, &bind, &grid).map_err(|e| e.to_string())?;
            let got = u16s(&b.download(hbuf, rows * i * 2).map_err(e)?);
            let vs_ref = tally(&got, &ref_h, &valid);
            let vs_model = tally(&got, &model_h, &valid);
            let padding = got.iter().zip(&valid).all(|(g, v)| *v || *g == SENTINEL);
            println!(
                "  {}: {} values, {} differ from the reference ({} far), {} from the measured arithmetic{}",
                kinfo.name,
                vs_ref.n,
                vs_ref.differ,
                vs_ref.far,
                vs_model.differ,
                if padding { "" } else { ", PADDING ROWS WRITTEN" }
            );
            ok &= vs_ref.far == 0 && vs_model.differ == 0 && padding;
        }
        // GEMM2 from the model's h, padding rows NaN.
        let hin: Vec<u16> =
            model_h.iter().zip(&valid).map(|(v, m)| if *m { *v } else { SENTINEL }).collect();
        b.upload(hbuf, &hin.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>())
            .map_err(e)?;
        let ref_c = sm90_gemm2_contributions(
            s,
            &moegen_runtime::reference::Sm90Gemm1Output {
                rows,
                cols: i,
                values: model_h.iter().map(|&v| bf16::from_bits(v)).collect(),
            },
            w,
            &sort,
            &p.routing,
        )
        .map_err(|e| e.to_string())?;
        let model_c = model::gemm2(p, w, &model_h, &sort);
        let local: Vec<bool> = model_c.iter().map(|v| !v.is_nan()).collect();
        let bits = |c: &[f32]| c.iter().map(|v| bf16::from_f32(*v).to_bits()).collect::<Vec<u16>>();
        let (ref_det, model_det) = (bits(&ref_c), bits(&model_c));
        let zero_nan =
            |c: &[f32]| c.iter().map(|v| if v.is_nan() { 0.0 } else { *v }).collect::<Vec<f32>>();
        let out_of = |c: &[f32], mode| -> Result<Vec<u16>, String> {
            Ok(finalize(&zero_nan(c), p.tokens, k, h, mode)
                .map_err(|e| e.to_string())?
                .iter()
                .map(|v| v.to_bits())
                .collect())
        };
        let (ref_out, model_out) = (
            out_of(&ref_c, FinalizeMode::BulkReduceAdd)?,
            out_of(&model_c, FinalizeMode::BulkReduceAdd)?,
        );
        for &n in &t.gemm2 {
            for mode in [FinalizeMode::Deterministic, FinalizeMode::BulkReduceAdd] {
                let g =
                    GemmTactic::new_sm90(GemmKind::Gemm2, t.tile, n).map_err(|e| e.to_string())?;
                let kinfo = gemm_kernel(g, format, act, mode)?;
                let (len, buf_kind, init) = match mode {
                    FinalizeMode::Deterministic => (
                        p.tokens * k * h,
                        Buffer::FinalizeScratch,
                        SENTINEL.to_le_bytes().repeat(p.tokens * k * h),
                    ),
                    FinalizeMode::BulkReduceAdd => {
                        (p.tokens * h, Buffer::Output, vec![0u8; p.tokens * h * 2])
                    }
                };
                let obuf = b.upload_new(&init).map_err(e)?;
                let bind = base
                    .clone()
                    .buffer(Buffer::Gemm1OutputBf16, hbuf)
                    .buffer(Buffer::W2, w2)
                    .buffer(Buffer::W2Scales, s2)
                    .buffer(Buffer::Alpha2, a2)
                    .buffer(Buffer::RouterWeights, rw)
                    .buffer(buf_kind, obuf);
                run(b, kinfo, &bind, &grid).map_err(|e| e.to_string())?;
                let got = u16s(&b.download(obuf, len * 2).map_err(e)?);
                let (vs_ref, vs_model, untouched) = match mode {
                    FinalizeMode::Deterministic => (
                        tally(&got, &ref_det, &local),
                        tally(&got, &model_det, &local),
                        got.iter().zip(&local).all(|(g, m)| *m || *g == SENTINEL),
                    ),
                    FinalizeMode::BulkReduceAdd => {
                        let all = vec![true; len];
                        (tally(&got, &ref_out, &all), tally(&got, &model_out, &all), true)
                    }
                };
                // The bulk reduce-add adds a token's routes in the hardware's order: only for
                // k ≤ 2 is that the reference's slot order.
                let exact_expected = mode == FinalizeMode::Deterministic || k <= 2;
                println!(
                    "  {}: {} values, {} differ from the reference ({} far), {} from the measured arithmetic{}{}",
                    kinfo.name,
                    vs_ref.n,
                    vs_ref.differ,
                    vs_ref.far,
                    vs_model.differ,
                    if exact_expected { "" } else { " (route order: not compared exactly)" },
                    if untouched { "" } else { ", NON-LOCAL ROUTE ROWS WRITTEN" }
                );
                ok &= untouched && (!exact_expected || (vs_ref.far == 0 && vs_model.differ == 0));
            }
        }
    }
    Ok(ok)
}
