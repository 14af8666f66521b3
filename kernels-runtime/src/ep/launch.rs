//! Launches of the all-to-all mode's SIMT kernels over device buffers the caller owns: what
//! [`super::ExpertParallel`]'s step enqueues on a rank's stream (nothing allocated, nothing
//! read back) and what the test helpers of `device.rs` wrap with uploads. Each launch has a
//! size check of its own that touches no device, so a step can run every check before its
//! first operation.

use moegen_dsl::abi::error_record::WORDS;
use moegen_dsl::abi::{Buffer, Scalar, SimtFamily};
use moegen_dsl::plan::PlanError;

use super::EpPartition;
use crate::backend::{Backend, BackendError, DevicePtr};
use crate::device_ops::{DeviceOpError, run, simt_kernel};
use crate::launch::{Bindings, GridInputs};

pub(crate) fn product(what: &'static str, a: usize, b: usize) -> Result<usize, DeviceOpError> {
    a.checked_mul(b).ok_or_else(|| PlanError::Overflow { what }.into())
}

/// The kernels index rows with 32-bit words: `rows · H/2` must fit.
pub(crate) fn words_fit(
    what: &'static str,
    rows: usize,
    hidden: usize,
) -> Result<(), DeviceOpError> {
    if !hidden.is_multiple_of(2) || hidden == 0 {
        return Err(PlanError::Alignment {
            what: "hidden size",
            value: hidden as u64,
            multiple: 2,
            why: " (bf16 pairs)",
        }
        .into());
    }
    let words = product(what, rows, hidden / 2)?;
    if u32::try_from(words).is_err() {
        return Err(PlanError::IndexTooLarge { what, value: words as u64 }.into());
    }
    Ok(())
}

/// Clears a pack's error record in stream order, every word to !0 (what
/// `crate::error_record::RESET` holds: no flag raised, no first offender), without a host
/// upload, so it is captured.
pub(crate) fn reset_record(b: &mut dyn Backend, record: DevicePtr) -> Result<(), BackendError> {
    b.memset(record, crate::error_record::RESET_BYTE, WORDS * 4)
}

/// The pack's buffers: a rank's routing in, its `G·C` send slots, per-peer counts and error
/// record out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackBuffers {
    pub ids: DevicePtr,
    pub weights: DevicePtr,
    pub send_experts: DevicePtr,
    pub send_weights: DevicePtr,
    pub sent: DevicePtr,
    pub counts: DevicePtr,
    pub record: DevicePtr,
}

/// The pack's sizes: `tokens · k` routes into `G` blocks of `per_peer` slots.
pub(crate) fn check_pack(
    partition: &EpPartition,
    tokens: usize,
    per_peer: usize,
) -> Result<usize, DeviceOpError> {
    let routes = product("tokens × top_k", tokens, partition.top_k())?;
    if routes == 0 {
        return Err(PlanError::Zero { what: "tokens" }.into());
    }
    if per_peer == 0 {
        return Err(PlanError::Zero { what: "routes per peer" }.into());
    }
    let slots = product("all-to-all send slots", partition.ranks(), per_peer)?;
    if u32::try_from(slots).is_err() {
        return Err(PlanError::IndexTooLarge { what: "send slots", value: slots as u64 }.into());
    }
    Ok(routes)
}

/// `ep_dispatch_pack` over `tokens` tokens into blocks of `per_peer` slots.
pub(crate) fn launch_pack(
    b: &mut dyn Backend,
    partition: &EpPartition,
    bufs: &PackBuffers,
    tokens: usize,
    per_peer: usize,
) -> Result<(), DeviceOpError> {
    let routes = check_pack(partition, tokens, per_peer)?;
    let bind = Bindings::new()
        .buffer(Buffer::RoutedExperts, bufs.ids)
        .buffer(Buffer::RouterWeights, bufs.weights)
        .buffer(Buffer::EpSendExperts, bufs.send_experts)
        .buffer(Buffer::EpSendWeights, bufs.send_weights)
        .buffer(Buffer::EpSentRoutes, bufs.sent)
        .buffer(Buffer::EpPeerCounts, bufs.counts)
        .buffer(Buffer::ErrorFlags, bufs.record)
        .scalar(Scalar::NumRoutes, routes as u64)?
        .scalar(Scalar::TopK, partition.top_k() as u64)?
        .scalar(Scalar::NumExperts, partition.experts() as u64)?
        .scalar(Scalar::LocalExperts, partition.local_experts() as u64)?
        .scalar(Scalar::PerPeer, per_peer as u64)?;
    let k = simt_kernel(b, SimtFamily::EpDispatchPack)?;
    // One counter per expert of the model in shared memory.
    let grid = GridInputs { local_experts: partition.experts() as u64, ..GridInputs::default() };
    run(b, k, &bind, &grid)
}

/// The gather's sizes: `slots` send rows from `tokens` activation rows.
pub(crate) fn check_gather(
    slots: usize,
    tokens: usize,
    hidden: usize,
    top_k: usize,
) -> Result<usize, DeviceOpError> {
    words_fit("send rows", slots, hidden)?;
    words_fit("activations", tokens, hidden)?;
    let routes = product("tokens × top_k", tokens, top_k)?;
    if slots == 0 || routes == 0 {
        return Err(PlanError::Zero { what: "send slots and routes" }.into());
    }
    Ok(routes)
}

/// `ep_gather_rows`: each of `slots` send slots' activation row (`sent`, `[slots]`) from `x`
/// (`[tokens, hidden]`) into `out` (`[slots, hidden]`), zeros on padding.
#[allow(clippy::too_many_arguments)] // three buffers and four sizes, as the kernel's ABI
pub(crate) fn launch_gather_rows(
    b: &mut dyn Backend,
    sent: DevicePtr,
    x: DevicePtr,
    out: DevicePtr,
    slots: usize,
    tokens: usize,
    hidden: usize,
    top_k: usize,
) -> Result<(), DeviceOpError> {
    let routes = check_gather(slots, tokens, hidden, top_k)?;
    let bind = Bindings::new()
        .buffer(Buffer::EpSentRoutes, sent)
        .buffer(Buffer::ActivationsBf16, x)
        .buffer(Buffer::EpSendRows, out)
        .scalar(Scalar::Tokens, slots as u64)?
        .scalar(Scalar::Hidden, hidden as u64)?
        .scalar(Scalar::TopK, top_k as u64)?
        .scalar(Scalar::NumRoutes, routes as u64)?;
    let k = simt_kernel(b, SimtFamily::EpGatherRows)?;
    let grid = GridInputs { tokens: slots as u64, hidden: hidden as u64, ..GridInputs::default() };
    run(b, k, &bind, &grid)
}

/// The unpack's sizes: `slots` returned rows into `routes` route rows.
pub(crate) fn check_unpack(
    slots: usize,
    routes: usize,
    hidden: usize,
) -> Result<(), DeviceOpError> {
    words_fit("returned rows", slots, hidden)?;
    words_fit("route rows", routes, hidden)?;
    if slots == 0 || routes == 0 {
        return Err(PlanError::Zero { what: "returned rows and routes" }.into());
    }
    Ok(())
}

/// `ep_combine_unpack`: each of `slots` returned rows (`recv`, `[slots, hidden]`) to its
/// expanded index `sent[slot]` in `routes_out` (`[routes, hidden]`); padding skipped.
pub(crate) fn launch_combine_unpack(
    b: &mut dyn Backend,
    sent: DevicePtr,
    recv: DevicePtr,
    routes_out: DevicePtr,
    slots: usize,
    routes: usize,
    hidden: usize,
) -> Result<(), DeviceOpError> {
    check_unpack(slots, routes, hidden)?;
    let bind = Bindings::new()
        .buffer(Buffer::EpSentRoutes, sent)
        .buffer(Buffer::EpCombineRecv, recv)
        .buffer(Buffer::FinalizeScratch, routes_out)
        .scalar(Scalar::Tokens, slots as u64)?
        .scalar(Scalar::Hidden, hidden as u64)?
        .scalar(Scalar::NumRoutes, routes as u64)?;
    let k = simt_kernel(b, SimtFamily::EpCombineUnpack)?;
    let grid = GridInputs { tokens: slots as u64, hidden: hidden as u64, ..GridInputs::default() };
    run(b, k, &bind, &grid)
}
