//! The expert-parallel layer. In all-gather mode (a), vLLM's default, every rank's tokens
//! are all-gathered, each rank runs its expert window over all of them with its own
//! `MoeLayer`, and the results are reduce-scattered back to the tokens' home ranks (this
//! file). The all-to-all mode (b) is `all_to_all.rs`.
//!
//! - Bulk finalize: each rank's layer adds its routes into a `[G·N, H]` partial output, and
//!   a bf16 sum reduce-scatter adds the partials: one more order of bf16 additions, within
//!   the bulk mode's documented slack.
//! - Deterministic finalize: each rank leaves its routes' rows in its layer's finalize
//!   scratch (zeroed first, so the other ranks' routes are exact zeros), the reduce-scatter
//!   sums those rows (each element has one non-zero term at most, so the sum is exact), and
//!   the home rank runs the finalize over its `N·k` route rows with every route counted: the
//!   single layer's f32 slot-order sum of the same bf16 rows, bit for bit
//!   (docs/expert-parallel.md).
//!
//! Nothing on the step allocates, waits or reads back, so each rank's step can be captured
//! into a CUDA graph on its stream ([`ExpertParallel::capture`]).

use std::sync::atomic::AtomicUsize;

use moegen_dsl::FinalizeMode;
use moegen_dsl::abi::Buffer;
use moegen_dsl::abi::ep::Padding;

use super::collective::{Collective, Exchange};
use super::{EpBuffer, EpError, EpMode, EpPartition, EpWorkspace};
use crate::backend::{Backend, DevicePtr, GraphId};
use crate::layer::{DeviceSlice, ForwardIo, LayerError, MoeLayer};
use moegen_dsl::MoeTactic;

/// A layer whose experts are split over the ranks of a communicator; this process holds the
/// layers of the ranks it drives.
#[derive(Debug)]
pub struct ExpertParallel {
    partition: EpPartition,
    mode: EpMode,
    ranks: Vec<usize>,
    layers: Vec<MoeLayer>,
    /// Mode (b): the per-peer block of the last step enqueued, which the error check needs
    /// to name a peer overflow (a capture replays its step's blocks).
    pub(super) per_peer: AtomicUsize,
}

/// The address of `b` in `ws`'s plan.
pub(super) fn ep_ptr(ws: &EpWorkspace, b: EpBuffer) -> Result<DevicePtr, EpError> {
    ws.ptr(b).ok_or_else(|| EpError::Mismatch {
        rank: ws.rank(),
        reason: format!("the workspace's plan has no {b:?} buffer"),
    })
}

impl ExpertParallel {
    /// The layer of `ranks` (the ranks this process drives, as its collective lists them)
    /// in all-gather mode (a), one `MoeLayer` each, built for that rank's window of
    /// `partition`.
    pub fn new(
        partition: EpPartition,
        ranks: &[usize],
        layers: Vec<MoeLayer>,
    ) -> Result<Self, EpError> {
        Self::with_mode(partition, EpMode::AllGather, ranks, layers)
    }

    /// The layer in `mode`: each rank's `MoeLayer` built for
    /// [`EpMode::layer_window`] (mode (b): the rank's window, top-1), each rank's
    /// workspace planned for the same mode.
    pub fn with_mode(
        partition: EpPartition,
        mode: EpMode,
        ranks: &[usize],
        layers: Vec<MoeLayer>,
    ) -> Result<Self, EpError> {
        if ranks.is_empty() {
            return Err(EpError::ZeroRanks);
        }
        if layers.len() != ranks.len() {
            return Err(EpError::RankCount {
                what: "layers",
                given: layers.len(),
                expected: ranks.len(),
            });
        }
        let first = layers[0].config();
        for (&rank, layer) in ranks.iter().zip(&layers) {
            let want = mode.layer_window(&partition, rank)?;
            let shape = &layer.config().shape;
            if shape.hidden != first.shape.hidden || layer.config().finalize != first.finalize {
                return Err(EpError::Mismatch {
                    rank,
                    reason: format!(
                        "the layer has H {} and {:?}, the first rank's H {} and {:?}",
                        shape.hidden,
                        layer.config().finalize,
                        first.shape.hidden,
                        first.finalize
                    ),
                });
            }
            if shape.window != want {
                return Err(EpError::Mismatch {
                    rank,
                    reason: format!(
                        "the layer's window is {:?}, the partition's {want:?}",
                        shape.window
                    ),
                });
            }
        }
        Ok(Self { partition, mode, ranks: ranks.to_vec(), layers, per_peer: AtomicUsize::new(0) })
    }

    /// The mode.
    pub fn mode(&self) -> EpMode {
        self.mode
    }

    /// The partition.
    pub fn partition(&self) -> &EpPartition {
        &self.partition
    }
    /// The driven ranks.
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }
    /// The driven ranks' layers (their dispatch tables, tactics).
    pub fn layers(&self) -> &[MoeLayer] {
        &self.layers
    }
    /// The driven ranks' layers, to replace a dispatch table (`MoeLayer::set_dispatch`).
    pub fn layers_mut(&mut self) -> &mut [MoeLayer] {
        &mut self.layers
    }

    /// Frees every driven rank's weights (`backends` in driven order).
    pub fn release(self, backends: &mut [&mut dyn Backend]) -> Result<(), EpError> {
        self.count("backends", backends.len())?;
        let mut first = Ok(());
        for (layer, b) in self.layers.into_iter().zip(backends.iter_mut()) {
            let r = layer.release(&mut **b);
            if first.is_ok() {
                first = r;
            }
        }
        Ok(first?)
    }

    fn count(&self, what: &'static str, given: usize) -> Result<(), EpError> {
        if given == self.ranks.len() {
            Ok(())
        } else {
            Err(EpError::RankCount { what, given, expected: self.ranks.len() })
        }
    }

    /// Checks everything of one step on the host, before the first operation; returns the
    /// tokens per rank.
    fn check(
        &self,
        coll: &dyn Collective,
        backends: usize,
        workspaces: &[&EpWorkspace],
        ios: &[ForwardIo],
    ) -> Result<usize, EpError> {
        if coll.world() != self.partition.ranks() || coll.driven() != self.ranks.as_slice() {
            return Err(EpError::Mismatch {
                rank: self.ranks.first().copied().unwrap_or(0),
                reason: format!(
                    "the collective has {} ranks driving {:?}; the layer {} ranks driving {:?}",
                    coll.world(),
                    coll.driven(),
                    self.partition.ranks(),
                    self.ranks
                ),
            });
        }
        self.count("backends", backends)?;
        self.count("workspaces", workspaces.len())?;
        self.count("forward buffers", ios.len())?;
        let n = ios.first().map_or(0, |io| io.tokens);
        for ((&rank, layer), (ws, io)) in
            self.ranks.iter().zip(&self.layers).zip(workspaces.iter().zip(ios))
        {
            if io.tokens != n {
                return Err(EpError::UnequalTokens {
                    rank,
                    tokens: io.tokens,
                    first_rank: self.ranks[0],
                    first: n,
                });
            }
            let plan = ws.plan();
            if ws.rank() != rank || *plan.partition() != self.partition {
                return Err(EpError::Mismatch {
                    rank,
                    reason: format!(
                        "the workspace was planned for rank {} of {:?}",
                        ws.rank(),
                        plan.partition()
                    ),
                });
            }
            if plan.mode() != self.mode {
                return Err(EpError::Mismatch {
                    rank,
                    reason: format!(
                        "the workspace was planned for {:?}, the layer runs {:?}",
                        plan.mode(),
                        self.mode
                    ),
                });
            }
            let s = &layer.config().shape;
            let deterministic = layer.config().finalize == FinalizeMode::Deterministic;
            if s.hidden > plan.hidden() || plan.deterministic().is_some_and(|d| d != deterministic)
            {
                return Err(EpError::Mismatch {
                    rank,
                    reason: format!(
                        "the layer (H {}, deterministic {deterministic}) does not match the \
                         workspace's plan (H {}, {})",
                        s.hidden,
                        plan.hidden(),
                        plan.deterministic().map_or("either finalize", |d| if d {
                            "deterministic"
                        } else {
                            "bulk"
                        })
                    ),
                });
            }
            if n == 0 {
                return Err(
                    LayerError::from(moegen_dsl::plan::PlanError::Zero { what: "tokens" }).into()
                );
            }
            if n > plan.max_tokens() {
                return Err(EpError::TooManyTokens { tokens: n, max: plan.max_tokens() });
            }
            let (t, h, k) = (n as u64, s.hidden as u64, s.top_k() as u64);
            io.activations.check("activations", t * h * 2, 16)?;
            io.expert_ids.check("expert ids", t * k * 4, 4)?;
            io.expert_weights.check("expert weights", t * k * 4, 4)?;
            io.output.check("output", t * h * 2, 16)?;
        }
        if self.mode == EpMode::AllToAll {
            self.check_all_to_all(n)?;
        }
        Ok(n)
    }

    /// One step over the driven ranks: `backends`, `workspaces` and `ios` in driven order,
    /// the same token count on every rank. Returns each rank's tactic.
    pub fn forward(
        &self,
        coll: &mut dyn Collective,
        backends: &mut [&mut dyn Backend],
        workspaces: &[&EpWorkspace],
        ios: &[ForwardIo],
    ) -> Result<Vec<MoeTactic>, EpError> {
        let n = self.check(coll, backends.len(), workspaces, ios)?;
        match self.mode {
            EpMode::AllGather => self.forward_all_gather(coll, backends, workspaces, ios, n),
            EpMode::AllToAll => self.forward_all_to_all(coll, backends, workspaces, ios, n),
        }
    }

    fn forward_all_gather(
        &self,
        coll: &mut dyn Collective,
        backends: &mut [&mut dyn Backend],
        workspaces: &[&EpWorkspace],
        ios: &[ForwardIo],
        n: usize,
    ) -> Result<Vec<MoeTactic>, EpError> {
        let g = self.partition.ranks();
        let k = self.partition.top_k();
        let hidden = self.layers[0].config().shape.hidden;
        let layer_ptr = |ws: &EpWorkspace, b: Buffer| {
            ws.layer_workspace().ptr(b).ok_or_else(|| EpError::Mismatch {
                rank: ws.rank(),
                reason: format!("the layer workspace has no {} buffer", b.name()),
            })
        };
        let gather = |pick: fn(&ForwardIo) -> DevicePtr, into: EpBuffer| {
            workspaces
                .iter()
                .zip(ios)
                .map(|(ws, io)| Ok(Exchange { send: pick(io), recv: ep_ptr(ws, into)? }))
                .collect::<Result<Vec<_>, EpError>>()
        };
        let acts = gather(|io| io.activations.ptr, EpBuffer::Activations)?;
        let ids = gather(|io| io.expert_ids.ptr, EpBuffer::ExpertIds)?;
        let weights = gather(|io| io.expert_weights.ptr, EpBuffer::RouterWeights)?;
        coll.all_gather(backends, &acts, n * hidden * 2)?;
        coll.all_gather(backends, &ids, n * k * 4)?;
        coll.all_gather(backends, &weights, n * k * 4)?;

        let deterministic = workspaces[0].plan().deterministic() == Some(true);
        let gathered = g * n;
        let mut tactics = Vec::with_capacity(self.ranks.len());
        let mut reduce = Vec::with_capacity(self.ranks.len());
        for ((layer, b), (ws, io)) in
            self.layers.iter().zip(backends.iter_mut()).zip(workspaces.iter().zip(ios))
        {
            let (_, tactic) = layer.dispatch().choose(gathered as u64)?;
            let output = if deterministic {
                // Never written with the finalize skipped; the scratch is large enough for
                // the layer's size check of a `[G·N, H]` output.
                let p = layer_ptr(ws, Buffer::FinalizeScratch)?;
                DeviceSlice::new(p, (gathered * k * hidden * 2) as u64)
            } else {
                let p = ep_ptr(ws, EpBuffer::Partial)?;
                DeviceSlice::new(p, (gathered * hidden * 2) as u64)
            };
            let gio = ForwardIo {
                tokens: gathered,
                activations: DeviceSlice::new(
                    ep_ptr(ws, EpBuffer::Activations)?,
                    (gathered * hidden * 2) as u64,
                ),
                expert_ids: DeviceSlice::new(
                    ep_ptr(ws, EpBuffer::ExpertIds)?,
                    (gathered * k * 4) as u64,
                ),
                expert_weights: DeviceSlice::new(
                    ep_ptr(ws, EpBuffer::RouterWeights)?,
                    (gathered * k * 4) as u64,
                ),
                output,
            };
            // The gathered ids are the callers' own: a NO_ROUTE there is a wrong id.
            if deterministic {
                // Other ranks' routes must read as exact zeros in the reduce-scatter.
                b.memset(output.ptr, 0, gathered * k * hidden * 2)?;
                layer.run_pass(
                    &mut **b,
                    ws.layer_workspace(),
                    &gio,
                    &tactic,
                    false,
                    Padding::Refuse,
                )?;
                reduce.push(Exchange { send: output.ptr, recv: ep_ptr(ws, EpBuffer::Routes)? });
            } else {
                layer.run_pass(
                    &mut **b,
                    ws.layer_workspace(),
                    &gio,
                    &tactic,
                    true,
                    Padding::Refuse,
                )?;
                reduce.push(Exchange { send: output.ptr, recv: io.output.ptr });
            }
            tactics.push(tactic);
        }
        if deterministic {
            coll.reduce_scatter_bf16(backends, &reduce, n * k * hidden)?;
            for ((layer, b), (ws, io)) in
                self.layers.iter().zip(backends.iter_mut()).zip(workspaces.iter().zip(ios))
            {
                let routes = ep_ptr(ws, EpBuffer::Routes)?;
                let all_local = ep_ptr(ws, EpBuffer::AllLocal)?;
                layer.finalize_routes(&mut **b, routes, all_local, io.output.ptr, n, k)?;
            }
        } else {
            coll.reduce_scatter_bf16(backends, &reduce, n * hidden)?;
        }
        Ok(tactics)
    }

    /// Captures one step into a graph per driven rank (each on its backend's stream);
    /// replay every rank's graph for the same buffers and token count. The collective must
    /// be capturable (NCCL is; the host collective is not and fails here).
    pub fn capture(
        &self,
        coll: &mut dyn Collective,
        backends: &mut [&mut dyn Backend],
        workspaces: &[&EpWorkspace],
        ios: &[ForwardIo],
    ) -> Result<Vec<GraphId>, EpError> {
        self.count("backends", backends.len())?;
        let mut begun = 0;
        let mut result = Ok(Vec::new());
        for b in backends.iter_mut() {
            if let Err(e) = b.begin_capture() {
                result = Err(e.into());
                break;
            }
            begun += 1;
        }
        if result.is_ok() {
            result = self.forward(coll, backends, workspaces, ios);
        }
        // End every capture begun, whatever happened, so the streams are usable again.
        let mut graphs = Vec::with_capacity(begun);
        for b in backends.iter_mut().take(begun) {
            match b.end_capture() {
                Ok(g) => graphs.push(g),
                Err(e) if result.is_ok() => result = Err(e.into()),
                Err(_) => {}
            }
        }
        result?;
        Ok(graphs)
    }

    /// Reads every driven rank's error record (waits for the streams). Mode (a): each rank
    /// sorts every gathered token, so a bad route is reported by each rank with its gathered
    /// token index `home rank · N + token`. Mode (b): each rank packs its own tokens, so a
    /// bad route is [`EpError::OnRank`] naming its home rank, token and slot, as
    /// [`super::pack_routes`] names it.
    pub fn check_errors(
        &self,
        backends: &mut [&mut dyn Backend],
        workspaces: &[&EpWorkspace],
    ) -> Result<(), EpError> {
        self.count("backends", backends.len())?;
        self.count("workspaces", workspaces.len())?;
        if self.mode == EpMode::AllToAll {
            self.check_pack_errors(backends, workspaces)?;
        }
        for ((layer, b), ws) in self.layers.iter().zip(backends.iter_mut()).zip(workspaces) {
            layer.check_errors(&mut **b, ws.layer_workspace())?;
        }
        Ok(())
    }
}
