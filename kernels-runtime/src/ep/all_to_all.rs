//! The expert-parallel layer's all-to-all mode (b), DeepEP-style: each rank sends a peer
//! only the routes that peer owns, the owner runs its window as a top-1 layer over the
//! routes it received, and the rows go back to their home ranks.
//!
//! Per rank, on its stream: `ep_dispatch_pack` (the routes per owner, expert-sorted, in
//! fixed blocks of `C = N·min(k, E/G)` slots), `ep_gather_rows` (each slot's activation
//! row), three `all_to_all`s (rows, ids, weights), the top-1 layer over the `G·C` received
//! slots (its sort skips the padding), an `all_to_all` of its output rows back,
//! `ep_combine_unpack` (each row to its expanded index `t·k + s`) and the finalize over the
//! rank's `N·k` route rows.
//!
//! A top-1 layer's output row is the route's row as the single layer computes it (its
//! GEMMs and `bf16(acc·(α2·w))` do not depend on `k`; the finalize of one value is that
//! value, and a bulk reduce-add of one row onto zeros is that row), so the home rank's
//! slot-order finalize is the single layer's deterministic output bit for bit, in the bulk
//! mode too (its slot order is one of the orders the bulk mode's slack allows).
//!
//! The blocks are sized from the step's `N` (the same on every rank), so no count is read
//! on the host: nothing on the step allocates, waits or reads back, and it is captured like
//! mode (a).

use std::sync::atomic::Ordering;

use moegen_dsl::MoeTactic;
use moegen_dsl::abi::ep::Padding;
use moegen_dsl::abi::error_record::WORDS;

use super::collective::{Collective, Exchange};
use super::expert_parallel::ep_ptr;
use super::launch::{
    PackBuffers, check_gather, check_pack, check_unpack, launch_combine_unpack, launch_gather_rows,
    launch_pack, reset_record,
};
use super::pack_record::{decode_pack, words};
use super::{EpBuffer, EpError, EpWorkspace, ExpertParallel};
use crate::backend::Backend;
use crate::layer::{DeviceSlice, ForwardIo};

impl ExpertParallel {
    /// The sizes of a mode (b) step of `n` tokens per rank, checked before its first
    /// operation, as every launch of it will check them.
    pub(super) fn check_all_to_all(&self, n: usize) -> Result<(), EpError> {
        let p = self.partition();
        let hidden = self.layers()[0].config().shape.hidden;
        let c = p.max_routes_to_rank(n);
        let routes = check_pack(p, n, c)?;
        check_gather(p.ranks() * c, n, hidden, p.top_k())?;
        check_unpack(p.ranks() * c, routes, hidden)?;
        Ok(())
    }

    /// One mode (b) step of `n` tokens per rank (checked).
    pub(super) fn forward_all_to_all(
        &self,
        coll: &mut dyn Collective,
        backends: &mut [&mut dyn Backend],
        workspaces: &[&EpWorkspace],
        ios: &[ForwardIo],
        n: usize,
    ) -> Result<Vec<MoeTactic>, EpError> {
        let p = *self.partition();
        let (g, k) = (p.ranks(), p.top_k());
        let hidden = self.layers()[0].config().shape.hidden;
        let c = p.max_routes_to_rank(n);
        let slots = g * c;
        self.per_peer.store(c, Ordering::Relaxed);

        // Dispatch: every rank's routes packed per owner, with their activation rows.
        for (b, (ws, io)) in backends.iter_mut().zip(workspaces.iter().zip(ios)) {
            let bufs = PackBuffers {
                ids: io.expert_ids.ptr,
                weights: io.expert_weights.ptr,
                send_experts: ep_ptr(ws, EpBuffer::SendExperts)?,
                send_weights: ep_ptr(ws, EpBuffer::SendWeights)?,
                sent: ep_ptr(ws, EpBuffer::SentRoutes)?,
                counts: ep_ptr(ws, EpBuffer::PeerCounts)?,
                record: ep_ptr(ws, EpBuffer::PackRecord)?,
            };
            reset_record(&mut **b, bufs.record)?;
            launch_pack(&mut **b, &p, &bufs, n, c)?;
            let rows = ep_ptr(ws, EpBuffer::CombineSend)?;
            launch_gather_rows(&mut **b, bufs.sent, io.activations.ptr, rows, slots, n, hidden, k)?;
        }
        let exchange = |from: EpBuffer, to: EpBuffer| {
            workspaces
                .iter()
                .map(|ws| Ok(Exchange { send: ep_ptr(ws, from)?, recv: ep_ptr(ws, to)? }))
                .collect::<Result<Vec<_>, EpError>>()
        };
        let row_bytes = c * hidden * 2;
        coll.all_to_all(
            backends,
            &exchange(EpBuffer::CombineSend, EpBuffer::Activations)?,
            row_bytes,
        )?;
        coll.all_to_all(backends, &exchange(EpBuffer::SendExperts, EpBuffer::ExpertIds)?, c * 4)?;
        coll.all_to_all(
            backends,
            &exchange(EpBuffer::SendWeights, EpBuffer::RouterWeights)?,
            c * 4,
        )?;

        // The owners: a top-1 layer over every received slot, its rows into the combine's
        // send buffer (the dispatch's rows there are no longer needed).
        let mut tactics = Vec::with_capacity(workspaces.len());
        for ((layer, b), ws) in self.layers().iter().zip(backends.iter_mut()).zip(workspaces) {
            let (_, tactic) = layer.dispatch().choose(slots as u64)?;
            let slice = |buf, bytes: usize| {
                Ok::<_, EpError>(DeviceSlice::new(ep_ptr(ws, buf)?, bytes as u64))
            };
            let rio = ForwardIo {
                tokens: slots,
                activations: slice(EpBuffer::Activations, slots * hidden * 2)?,
                expert_ids: slice(EpBuffer::ExpertIds, slots * 4)?,
                expert_weights: slice(EpBuffer::RouterWeights, slots * 4)?,
                output: slice(EpBuffer::CombineSend, slots * hidden * 2)?,
            };
            // The one sort that skips NO_ROUTE: these blocks' padding is the pack's own.
            layer.run_pass(&mut **b, ws.layer_workspace(), &rio, &tactic, true, Padding::Skip)?;
            tactics.push(tactic);
        }

        // The combine: rows home, each to its expanded index, then the slot-order finalize.
        coll.all_to_all(
            backends,
            &exchange(EpBuffer::CombineSend, EpBuffer::CombineRecv)?,
            row_bytes,
        )?;
        for ((layer, b), (ws, io)) in
            self.layers().iter().zip(backends.iter_mut()).zip(workspaces.iter().zip(ios))
        {
            let routes = ep_ptr(ws, EpBuffer::Routes)?;
            // A dropped route (NO_ROUTE in the router's ids) gets no row back: it must read
            // as zero, not as the previous step's row.
            b.memset(routes, 0, n * k * hidden * 2)?;
            let sent = ep_ptr(ws, EpBuffer::SentRoutes)?;
            let recv = ep_ptr(ws, EpBuffer::CombineRecv)?;
            launch_combine_unpack(&mut **b, sent, recv, routes, slots, n * k, hidden)?;
            let all_local = ep_ptr(ws, EpBuffer::AllLocal)?;
            layer.finalize_routes(&mut **b, routes, all_local, io.output.ptr, n, k)?;
        }
        Ok(tactics)
    }

    /// Decodes every driven rank's pack record (waits for the streams): the first bad
    /// input, named on its home rank.
    pub(super) fn check_pack_errors(
        &self,
        backends: &mut [&mut dyn Backend],
        workspaces: &[&EpWorkspace],
    ) -> Result<(), EpError> {
        let p = self.partition();
        let c = self.per_peer.load(Ordering::Relaxed);
        for ((&rank, b), ws) in self.ranks().iter().zip(backends.iter_mut()).zip(workspaces) {
            let record = words(&b.download(ep_ptr(ws, EpBuffer::PackRecord)?, WORDS * 4)?);
            let counts = words(&b.download(ep_ptr(ws, EpBuffer::PeerCounts)?, p.ranks() * 4)?);
            decode_pack(&record, p, &counts, c)
                .map_err(|e| EpError::OnRank { rank, error: Box::new(e) })?;
        }
        Ok(())
    }
}
