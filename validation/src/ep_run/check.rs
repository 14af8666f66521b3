//! `ep-check`'s comparison: the G-rank layer (either mode) against the single-GPU layer
//! holding every expert, on the same inputs: bit for bit with the deterministic finalize, within the
//! bulk-order slack otherwise (from the single layer's own route rows); then each rank's
//! CUDA graph of the step replayed against the eager step.

use moegen_dsl::FinalizeMode;
use moegen_dsl::abi::Buffer;
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_runtime::ep::{Collective, EpMode, NcclCollective};
use moegen_runtime::layer::{KernelSet, Workspace, WorkspaceSpec, arch_of};

use super::{EpRunError, Ranks, build_layer, rank_io};
use crate::bench::{BenchShape, Variant, input_scale, synth_inputs, synth_weights};
use crate::layer_check::finalize_slack;

/// One compared (finalize mode, tokens per rank).
#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckCase {
    /// Ranks of the communicator.
    pub ranks: usize,
    /// The ranks this process drove (and compared).
    pub driven: Vec<usize>,
    /// `all-gather (a)` or `all-to-all (b)`.
    pub mode: String,
    /// `Deterministic` or `BulkReduceAdd`.
    pub finalize: String,
    /// Tokens per rank.
    pub tokens_per_rank: usize,
    /// Output elements compared.
    pub elements: usize,
    /// Elements of the eager step outside the allowance (deterministic: any difference).
    pub mismatches: usize,
    /// Elements of the graph replay outside the allowance (deterministic: any difference
    /// from the eager step; bulk: outside the slack around the single layer).
    pub graph_mismatches: usize,
    /// Largest |difference| from the single layer, in units of the element's slack
    /// (deterministic: 0 when equal, else infinity).
    pub worst: f64,
}

fn bf(v: u16) -> f64 {
    f64::from(half::bf16::from_bits(v).to_f32())
}

/// The single layer (every expert on the device of `backends[0]`) and the G-rank layer in
/// `mode` on every token count, in both finalize modes. Returns the cases and gives the
/// backends and communicator back.
#[allow(clippy::too_many_arguments)]
pub fn check_ranks(
    mut backends: Vec<CudaBackend>,
    mut coll: NcclCollective,
    full: &BenchShape,
    v: Variant,
    mode: EpMode,
    tokens: &[usize],
    seed: u64,
    log: &mut dyn FnMut(&str),
) -> Result<(Vec<CheckCase>, Vec<CudaBackend>, NcclCollective), EpRunError> {
    let g = coll.world();
    let (h, k, e) = (full.hidden, full.top_k, full.experts);
    let every = BenchShape { local_experts: e, expert_offset: 0, ..full.clone() };
    let all_weights = synth_weights(&every, seed);
    let max_n = tokens.iter().copied().max().unwrap_or(1);
    let largest = synth_inputs(full, g * max_n, seed);
    let gs_x = input_scale(std::slice::from_ref(&largest))?;
    let l = e / g;
    let ordinal = backends.first().map_or(0, |b| b.stream().context().ordinal());
    let mut single = CudaBackend::new(ordinal)?;
    let mut cases = Vec::new();
    for finalize in [FinalizeMode::Deterministic, FinalizeMode::BulkReduceAdd] {
        log(&format!("{g} ranks, {finalize:?}: building the single layer and the ranks"));
        // The single layer in deterministic mode serves both: its output (deterministic
        // cases) and its route rows, whose magnitudes bound the bulk slack.
        let (one, tiles) = build_layer(
            &mut single,
            &every,
            &all_weights,
            v,
            FinalizeMode::Deterministic,
            g * max_n,
            gs_x,
        )?;
        let spec = WorkspaceSpec {
            max_tokens: g * max_n,
            top_k: k,
            max_local_experts: e,
            max_hidden: h,
            max_intermediate: full.intermediate,
            tile_sizes: tiles,
            deterministic: true,
            arch: arch_of(&single),
            activations: v.activations,
        };
        let one_ws = Workspace::new(&mut single, &KernelSet::builtin(), spec)?;
        let weights = |r: usize| all_weights[r * l..(r + 1) * l].to_vec();
        let mut ranks =
            Ranks::new(backends, coll, full, &weights, v, (mode, finalize), max_n, gs_x)?;
        for &n in tokens {
            let inputs = synth_inputs(full, g * n, seed);
            let io = rank_io(&mut single, &inputs, 0..g * n, h, k)?;
            one.forward(&mut single, &one_ws, &io)?;
            one.check_errors(&mut single, &one_ws)?;
            let want = single.download(io.output.ptr, g * n * h * 2)?;
            let want: Vec<u16> =
                want.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
            let slack = if finalize == FinalizeMode::BulkReduceAdd {
                let p = one_ws.ptr(Buffer::FinalizeScratch).ok_or_else(|| EpRunError::Env {
                    var: "workspace",
                    reason: "no finalize scratch".into(),
                })?;
                let raw = single.download(p, g * n * k * h * 2)?;
                let c: Vec<f32> = raw
                    .chunks_exact(2)
                    .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                    .collect();
                finalize_slack(&c, g * n, k, h, finalize)
            } else {
                vec![0.0; g * n * h]
            };
            single.free_all(&[
                io.activations.ptr,
                io.expert_ids.ptr,
                io.expert_weights.ptr,
                io.output.ptr,
            ])?;

            let ios = ranks.upload(&inputs, n)?;
            ranks.forward(&ios)?;
            let got = ranks.outputs(&ios)?;
            let driven = ranks.ep.ranks().to_vec();
            // Rank r's rows of the single layer's output, in driven order.
            let rows: Vec<usize> =
                driven.iter().flat_map(|&r| (r * n * h)..((r + 1) * n * h)).collect();
            let judge = |out: &[u16]| {
                let mut bad = 0;
                let mut worst = 0f64;
                for (&o, &j) in out.iter().zip(&rows) {
                    let d = (bf(o) - bf(want[j])).abs();
                    let over = if o == want[j] {
                        0.0
                    } else if slack[j] > 0.0 {
                        d / slack[j]
                    } else {
                        f64::INFINITY
                    };
                    if over > 1.0 {
                        bad += 1;
                    }
                    worst = worst.max(over);
                }
                (bad, worst)
            };
            let (mismatches, worst) = judge(&got);
            let graphs = ranks.capture(&ios)?;
            for (b, io) in ranks.backends.iter_mut().zip(&ios) {
                b.memset(io.output.ptr, 0, io.output.bytes as usize)?;
            }
            for (b, gr) in ranks.backends.iter_mut().zip(&graphs) {
                b.replay(*gr)?;
            }
            let replayed = ranks.outputs(&ios)?;
            let graph_mismatches = if finalize == FinalizeMode::Deterministic {
                replayed.iter().zip(&got).filter(|(a, b)| a != b).count()
            } else {
                judge(&replayed).0
            };
            for (b, gr) in ranks.backends.iter_mut().zip(graphs) {
                b.drop_graph(gr)?;
            }
            ranks.free(&ios)?;
            let case = CheckCase {
                ranks: g,
                driven,
                mode: super::mode_name(mode).to_owned(),
                finalize: format!("{finalize:?}"),
                tokens_per_rank: n,
                elements: got.len(),
                mismatches,
                graph_mismatches,
                worst,
            };
            log(&format!(
                "{g} ranks {:?} N={n}: {} mismatches of {}, graph {} (worst {:.3})",
                finalize, case.mismatches, case.elements, case.graph_mismatches, case.worst
            ));
            cases.push(case);
        }
        one.release(&mut single)?;
        one_ws.release(&mut single)?;
        (backends, coll) = ranks.into_parts()?;
    }
    Ok((cases, backends, coll))
}
