//! The layer's GEMMs on the CPU with the H200's measured wgmma arithmetic
//! (`corpus::h200_wgmma_k16`) in place of the reference's exact-sum model; everything else
//! (α, SwiGLU, requantization, router weights, bf16 rounding) as the reference.

use half::bf16;
use moegen_dsl::ActivationFormat;
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::epilogue_math::{round_to_bf16, swiglu_f32};
use moegen_dsl::formats::{
    e2m1_to_f32, e4m3_to_f32, nibble_at, quantize_nvfp4_block, ue8m0_to_f32,
};
use moegen_dsl::plan::SWIGLU_INTERLEAVE;
use moegen_runtime::reference::Sm90Weights;
use moegen_runtime::routing::SortOutputs;
use moegen_validation::corpus::h200_wgmma_k16;

use super::problem::Problem;

/// Row `r` of one expert's `[rows, k]` matrix (linear codes and per-16 scales) as values.
fn row(w: &Sm90Weights, values: &[u8], scales: &[u8], r: usize, k: usize) -> Vec<f32> {
    (0..k)
        .map(|c| {
            let code = nibble_at(values, r * k + c).unwrap_or(0);
            let s = scales[r * k / 16 + c / 16];
            let s = match w.format {
                WeightFormat::Nvfp4 => e4m3_to_f32(s),
                WeightFormat::Mxfp4 => ue8m0_to_f32(s),
            };
            e2m1_to_f32(code) * s
        })
        .collect()
}

/// K16 steps in order from a zero accumulator.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.chunks_exact(16).zip(b.chunks_exact(16)).fold(0f32, |acc, (x, y)| {
        let x: [f32; 16] = std::array::from_fn(|i| x[i]);
        let y: [f32; 16] = std::array::from_fn(|i| y[i]);
        h200_wgmma_k16(acc, &x, &y)
    })
}

/// GEMM1's output h `[rows, I]` (bf16 bits; padding rows 0).
pub fn gemm1(p: &Problem, w: &Sm90Weights, acts: &[bf16], sort: &SortOutputs) -> Vec<u16> {
    let (h, i, k) = (p.shape.hidden, p.shape.intermediate, p.shape.top_k());
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let (vb, sb) = (i * h, i * h / 8);
    let mut out = vec![0u16; rows * i];
    for r in 0..rows {
        let Some((e, token, _)) = sort.route_of_row(r, k) else { continue };
        let x: Vec<f32> = acts[token * h..(token + 1) * h].iter().map(|v| v.to_f32()).collect();
        let (wv, ws) = (&w.w1[e * vb..(e + 1) * vb], &w.w1_scales[e * sb..(e + 1) * sb]);
        let hv: Vec<f32> = (0..i)
            .map(|j| {
                let up = (j / SWIGLU_INTERLEAVE) * 2 * SWIGLU_INTERLEAVE + j % SWIGLU_INTERLEAVE;
                let u = w.alpha1[e] * dot(&row(w, wv, ws, up, h), &x);
                let g = w.alpha1[e] * dot(&row(w, wv, ws, up + SWIGLU_INTERLEAVE, h), &x);
                swiglu_f32(u, g)
            })
            .collect();
        let dst = &mut out[r * i..(r + 1) * i];
        match w.activations {
            ActivationFormat::Bf16 => {
                for (d, v) in dst.iter_mut().zip(&hv) {
                    *d = bf16::from_f32(*v).to_bits();
                }
            }
            ActivationFormat::Nvfp4 => {
                for (b, block) in hv.chunks_exact(16).enumerate() {
                    let (q, sf) = quantize_nvfp4_block(block, w.fc2_input_scale);
                    for (j, code) in q.into_iter().enumerate() {
                        let v = e2m1_to_f32(code) * e4m3_to_f32(sf);
                        dst[b * 16 + j] = bf16::from_f32(v).to_bits();
                    }
                }
            }
        }
    }
    out
}

/// GEMM2's per-route contributions `[N·k, H]` from h (bf16 bits), NaN for non-local routes.
pub fn gemm2(p: &Problem, w: &Sm90Weights, hin: &[u16], sort: &SortOutputs) -> Vec<f32> {
    let (hid, i, k) = (p.shape.hidden, p.shape.intermediate, p.shape.top_k());
    let rows = sort.permuted_idx_to_expanded_idx.len();
    let (vb, sb) = (hid * i / 2, hid * i / 16);
    let mut out = vec![f32::NAN; p.tokens * k * hid];
    for r in 0..rows {
        let Some((e, token, slot)) = sort.route_of_row(r, k) else { continue };
        let a: Vec<f32> =
            hin[r * i..(r + 1) * i].iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
        let (wv, ws) = (&w.w2[e * vb..(e + 1) * vb], &w.w2_scales[e * sb..(e + 1) * sb]);
        let s = w.alpha2[e] * p.routing.weights[token * k + slot];
        for n in 0..hid {
            out[(token * k + slot) * hid + n] = round_to_bf16(dot(&row(w, wv, ws, n, i), &a) * s);
        }
    }
    out
}
