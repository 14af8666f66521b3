//! `moe-bench --ep G`'s timing: per tokens-per-rank N, the layer's whole step in either mode
//! (CUDA-graph replays of every rank, the slowest rank's time), the same rank's layer alone
//! over what the step put in its workspace (mode a: the gathered `G·N` tokens; mode b: the
//! `G·C` received route slots, top-1), i.e. its compute without the collectives, and one GPU
//! holding the same experts over its own N tokens, no expert parallelism (mode a: the rank's
//! layer itself; mode b: a top-k layer of the rank's window built for the comparison).

use moegen_dsl::FinalizeMode;
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_runtime::backend::{Backend, GraphId};
use moegen_runtime::ep::{Collective, EpBuffer, EpMode, EpPartition, NcclCollective};
use moegen_runtime::layer::{
    DeviceSlice, ForwardIo, KernelSet, MoeLayer, Workspace, WorkspaceSpec, arch_of,
};

use super::{EpRunError, Ranks, build_layer, mode_name, window_shape};
use crate::bench::{BenchShape, MxExpert, Variant, input_scale, median, synth_inputs};

/// One timed (finalize mode, tokens per rank).
#[derive(Clone, Debug, serde::Serialize)]
pub struct EpBenchRow {
    /// Ranks.
    pub ranks: usize,
    /// `all-gather (a)` or `all-to-all (b)`.
    pub mode: String,
    /// `Deterministic` or `BulkReduceAdd`.
    pub finalize: String,
    /// Tokens per rank (N).
    pub tokens_per_rank: usize,
    /// Median ms of one step (mode a: all-gather, the rank's layer, reduce-scatter; mode b:
    /// pack, all-to-all, the rank's layer, all-to-all, unpack, finalize), the slowest driven
    /// rank's.
    pub step_ms: f64,
    /// Median ms of the first driven rank's layer alone over what the step gave it (the
    /// `G·N` gathered tokens, or the `G·C` received route slots).
    pub local_ms: f64,
    /// Median ms of that layer over its own N tokens: one GPU holding the same experts.
    pub one_gpu_ms: f64,
    /// `1 − local / step`: the share of the step not spent in the rank's own layer
    /// (collectives and their waits).
    pub comm_share: f64,
    /// `step / one_gpu`.
    pub step_over_one_gpu: f64,
    /// The rank's tactic at `G·N` tokens (mode b: `G·C` route slots).
    pub tactic: String,
}

/// Times replays of per-backend graphs: `graphs[i]` on `backends[i]`, all launched, then
/// each backend's span; the slowest backend's per iteration, median over `iters`.
fn time_graphs(
    backends: &mut [&mut CudaBackend],
    graphs: &[GraphId],
    warmup: u32,
    iters: u32,
) -> Result<f64, EpRunError> {
    for _ in 0..warmup {
        for (b, g) in backends.iter_mut().zip(graphs) {
            b.replay(*g)?;
        }
    }
    let mut samples = Vec::new();
    for _ in 0..iters.max(1) {
        let mut starts = Vec::new();
        for (b, g) in backends.iter_mut().zip(graphs) {
            starts.push(b.record_event()?);
            b.replay(*g)?;
        }
        let mut ends = Vec::new();
        for b in backends.iter_mut() {
            ends.push(b.record_event()?);
        }
        let mut slowest = 0f64;
        for ((b, s), e) in backends.iter_mut().zip(starts).zip(ends) {
            slowest = slowest.max(f64::from(b.elapsed_ms(s, e)?));
        }
        samples.push(slowest);
    }
    Ok(median(&samples))
}

/// A graph of `layer` over `io` on `b`, timed alone.
fn time_layer(
    b: &mut CudaBackend,
    layer: &MoeLayer,
    ws: &Workspace,
    io: &ForwardIo,
    warmup: u32,
    iters: u32,
) -> Result<f64, EpRunError> {
    layer.forward(b, ws, io)?;
    let g = layer.capture(b, ws, io)?;
    let t = time_graphs(&mut [b], &[g], warmup, iters);
    b.drop_graph(g)?;
    t
}

/// One GPU holding rank `rank`'s experts with the model's top-k, for mode (b)'s
/// comparison (mode (a)'s rank layer is that layer already).
#[allow(clippy::too_many_arguments)]
fn one_gpu_layer(
    b: &mut CudaBackend,
    full: &BenchShape,
    p: &EpPartition,
    rank: usize,
    weights: &dyn Fn(usize) -> Vec<MxExpert>,
    v: Variant,
    finalize: FinalizeMode,
    max_n: usize,
    gs_x: f32,
) -> Result<(MoeLayer, Workspace), EpRunError> {
    let shape = window_shape(full, p, rank);
    let (layer, tiles) = build_layer(b, &shape, &weights(rank), v, finalize, max_n, gs_x)?;
    let spec = WorkspaceSpec {
        max_tokens: max_n,
        top_k: full.top_k,
        max_local_experts: p.local_experts(),
        max_hidden: full.hidden,
        max_intermediate: full.intermediate,
        tile_sizes: tiles,
        deterministic: finalize == FinalizeMode::Deterministic,
        arch: arch_of(b),
        activations: v.activations,
    };
    let ws = Workspace::new(b, &KernelSet::builtin(), spec)?;
    Ok((layer, ws))
}

/// Times the layer in `mode` over the communicator's ranks at every `tokens` per rank, in
/// `finalize` mode; `weights(r)` are rank r's experts.
#[allow(clippy::too_many_arguments)]
pub fn time_ranks(
    backends: Vec<CudaBackend>,
    coll: NcclCollective,
    full: &BenchShape,
    weights: &dyn Fn(usize) -> Vec<MxExpert>,
    v: Variant,
    (mode, finalize): (EpMode, FinalizeMode),
    tokens: &[usize],
    (warmup, iters, seed): (u32, u32, u64),
    log: &mut dyn FnMut(&str),
) -> Result<(Vec<EpBenchRow>, Vec<CudaBackend>, NcclCollective), EpRunError> {
    let g = coll.world();
    let max_n = tokens.iter().copied().max().unwrap_or(1);
    let gs_x = input_scale(std::slice::from_ref(&synth_inputs(full, g * max_n, seed)))?;
    log(&format!(
        "{g} ranks, {}, {finalize:?}: building {} ranks' layers",
        mode_name(mode),
        backends.len()
    ));
    let mut ranks = Ranks::new(backends, coll, full, weights, v, (mode, finalize), max_n, gs_x)?;
    let p = *ranks.ep.partition();
    let first = ranks.ep.ranks()[0];
    let baseline = match mode {
        EpMode::AllGather => None,
        EpMode::AllToAll => Some(one_gpu_layer(
            &mut ranks.backends[0],
            full,
            &p,
            first,
            weights,
            v,
            finalize,
            max_n,
            gs_x,
        )?),
    };
    let h = full.hidden;
    let mut rows = Vec::new();
    for &n in tokens {
        let inputs = synth_inputs(full, g * n, seed);
        let ios = ranks.upload(&inputs, n)?;
        ranks.forward(&ios)?;
        let graphs = ranks.capture(&ios)?;
        let mut bs: Vec<&mut CudaBackend> = ranks.backends.iter_mut().collect();
        let step_ms = time_graphs(&mut bs, &graphs, warmup, iters)?;
        for (b, gr) in ranks.backends.iter_mut().zip(graphs) {
            b.drop_graph(gr)?;
        }
        // The first driven rank's layer alone: over the rows the step put into its
        // workspace (gathered tokens, or received route slots of one route each), then one
        // GPU over its own N tokens.
        let (layer, ws) = (&ranks.ep.layers()[0], &ranks.workspaces[0]);
        let b = &mut ranks.backends[0];
        let (gathered, k) = match mode {
            EpMode::AllGather => (g * n, full.top_k),
            EpMode::AllToAll => (g * p.max_routes_to_rank(n), 1),
        };
        let out = DeviceSlice::new(b.alloc(gathered * h * 2)?, (gathered * h * 2) as u64);
        let at = |buf: EpBuffer, bytes: usize| {
            ws.ptr(buf).map(|p| DeviceSlice::new(p, bytes as u64)).ok_or_else(|| EpRunError::Env {
                var: "workspace",
                reason: format!("no {buf:?} buffer"),
            })
        };
        let gio = ForwardIo {
            tokens: gathered,
            activations: at(EpBuffer::Activations, gathered * h * 2)?,
            expert_ids: at(EpBuffer::ExpertIds, gathered * k * 4)?,
            expert_weights: at(EpBuffer::RouterWeights, gathered * k * 4)?,
            output: out,
        };
        let lw = ws.layer_workspace();
        let local_ms = time_layer(b, layer, lw, &gio, warmup, iters)?;
        let one_gpu_ms = match &baseline {
            None => time_layer(b, layer, lw, &ios[0], warmup, iters)?,
            Some((one, one_ws)) => time_layer(b, one, one_ws, &ios[0], warmup, iters)?,
        };
        let (_, tactic) = layer.dispatch().choose(gathered as u64)?;
        b.free(out.ptr)?;
        ranks.free(&ios)?;
        let row = EpBenchRow {
            ranks: g,
            mode: mode_name(mode).to_owned(),
            finalize: format!("{finalize:?}"),
            tokens_per_rank: n,
            step_ms,
            local_ms,
            one_gpu_ms,
            comm_share: (1.0 - local_ms / step_ms).max(0.0),
            step_over_one_gpu: step_ms / one_gpu_ms,
            tactic: tactic.to_string(),
        };
        log(&format!(
            "{g} ranks {} {finalize:?} N={n}: step {:.4} ms, local {:.4} ms, one GPU {:.4} ms",
            row.mode, row.step_ms, row.local_ms, row.one_gpu_ms
        ));
        rows.push(row);
    }
    if let Some((one, one_ws)) = baseline {
        one.release(&mut ranks.backends[0])?;
        one_ws.release(&mut ranks.backends[0])?;
    }
    let (backends, coll) = ranks.into_parts()?;
    Ok((rows, backends, coll))
}
