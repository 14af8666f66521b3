//! Host code that runs the all-to-all mode's SIMT kernels on a [`Backend`] (the dispatch
//! pack, the send rows' gather, the combine's unpack), each returning what its CPU
//! counterpart ([`super::pack_routes`], [`super::gather_rows`], [`super::combine_unpack`])
//! returns, so results compare directly.

use half::bf16;
use moegen_dsl::abi::error_record::WORDS;
use moegen_dsl::abi::{Buffer, Scalar, SimtFamily};
use moegen_dsl::plan::PlanError;

use super::{EpPartition, PackedSend};
use crate::backend::Backend;
use crate::device_ops::{DeviceOpError, from_bytes_i32, run, simt_kernel, to_bytes_i32};
use crate::error::RuntimeError;
use crate::error_record::{RESET, RecordError, decode};
use crate::launch::{Bindings, GridInputs};

fn product(what: &'static str, a: usize, b: usize) -> Result<usize, DeviceOpError> {
    a.checked_mul(b).ok_or_else(|| PlanError::Overflow { what }.into())
}

fn length(what: &'static str, actual: usize, expected: usize) -> Result<(), DeviceOpError> {
    if actual == expected {
        Ok(())
    } else {
        Err(RuntimeError::BufferLength { what, expected, actual }.into())
    }
}

/// The kernels index rows with 32-bit words: `rows · H/2` must fit.
fn words_fit(what: &'static str, rows: usize, hidden: usize) -> Result<(), DeviceOpError> {
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

fn bf16_bytes(v: &[bf16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

fn bf16_from(b: &[u8]) -> Vec<bf16> {
    b.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect()
}

/// `ep_dispatch_pack` over one rank's routing; the error record decoded as the routing
/// sort's (a peer block overflowing reads as [`RecordError::TileOverflow`]: a plan for fewer
/// tokens than were run).
pub fn device_ep_pack(
    b: &mut dyn Backend,
    partition: &EpPartition,
    ids: &[i32],
    weights: &[f32],
    tokens: usize,
    per_peer: usize,
) -> Result<PackedSend, DeviceOpError> {
    let k = partition.top_k();
    let routes = product("tokens × top_k", tokens, k)?;
    if routes == 0 {
        return Err(PlanError::Zero { what: "tokens" }.into());
    }
    if per_peer == 0 {
        return Err(PlanError::Zero { what: "routes per peer" }.into());
    }
    length("routing experts", ids.len(), routes)?;
    length("router weights", weights.len(), routes)?;
    let g = partition.ranks();
    let slots = product("all-to-all send slots", g, per_peer)?;
    if u32::try_from(slots).is_err() {
        return Err(PlanError::IndexTooLarge { what: "send slots", value: slots as u64 }.into());
    }
    let d_ids = b.upload_new(&to_bytes_i32(ids))?;
    let d_w = b.upload_new(&weights.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>())?;
    let d_e = b.alloc(slots * 4)?;
    let d_sw = b.alloc(slots * 4)?;
    let d_sent = b.alloc(slots * 4)?;
    let d_counts = b.alloc(g * 4)?;
    let d_flags = b.upload_new(&RESET.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>())?;
    let bind = Bindings::new()
        .buffer(Buffer::RoutedExperts, d_ids)
        .buffer(Buffer::RouterWeights, d_w)
        .buffer(Buffer::EpSendExperts, d_e)
        .buffer(Buffer::EpSendWeights, d_sw)
        .buffer(Buffer::EpSentRoutes, d_sent)
        .buffer(Buffer::EpPeerCounts, d_counts)
        .buffer(Buffer::ErrorFlags, d_flags)
        .scalar(Scalar::NumRoutes, routes as u64)?
        .scalar(Scalar::TopK, k as u64)?
        .scalar(Scalar::NumExperts, partition.experts() as u64)?
        .scalar(Scalar::LocalExperts, partition.local_experts() as u64)?
        .scalar(Scalar::PerPeer, per_peer as u64)?;
    let k_pack = simt_kernel(b, SimtFamily::EpDispatchPack)?;
    // One counter per expert of the model in shared memory.
    let grid = GridInputs { local_experts: partition.experts() as u64, ..GridInputs::default() };
    run(b, k_pack, &bind, &grid)?;
    let record: Vec<u32> =
        from_bytes_i32(&b.download(d_flags, WORDS * 4)?).iter().map(|&v| v as u32).collect();
    decode(&record, k, partition.experts()).map_err(|e| match e {
        RecordError::Input(e) => DeviceOpError::Input(e),
        other => DeviceOpError::Record(other),
    })?;
    let words = |b: &mut dyn Backend, p, n: usize| b.download(p, n * 4).map(|v| from_bytes_i32(&v));
    Ok(PackedSend {
        per_peer,
        experts: words(b, d_e, slots)?,
        weights: words(b, d_sw, slots)?.into_iter().map(|v| f32::from_bits(v as u32)).collect(),
        sent: words(b, d_sent, slots)?,
        counts: words(b, d_counts, g)?.into_iter().map(|v| v as u32).collect(),
    })
}

/// `ep_gather_rows`: each send slot's activation row from `x` (`[tokens, hidden]`).
pub fn device_ep_gather_rows(
    b: &mut dyn Backend,
    sent: &[i32],
    x: &[bf16],
    tokens: usize,
    hidden: usize,
    top_k: usize,
) -> Result<Vec<bf16>, DeviceOpError> {
    words_fit("send rows", sent.len(), hidden)?;
    words_fit("activations", tokens, hidden)?;
    length("activations", x.len(), tokens * hidden)?;
    let routes = product("tokens × top_k", tokens, top_k)?;
    if sent.is_empty() || routes == 0 {
        return Err(PlanError::Zero { what: "send slots and routes" }.into());
    }
    let d_sent = b.upload_new(&to_bytes_i32(sent))?;
    let d_x = b.upload_new(&bf16_bytes(x))?;
    let d_out = b.alloc(sent.len() * hidden * 2)?;
    let bind = Bindings::new()
        .buffer(Buffer::EpSentRoutes, d_sent)
        .buffer(Buffer::ActivationsBf16, d_x)
        .buffer(Buffer::EpSendRows, d_out)
        .scalar(Scalar::Tokens, sent.len() as u64)?
        .scalar(Scalar::Hidden, hidden as u64)?
        .scalar(Scalar::TopK, top_k as u64)?
        .scalar(Scalar::NumRoutes, routes as u64)?;
    let k = simt_kernel(b, SimtFamily::EpGatherRows)?;
    let grid =
        GridInputs { tokens: sent.len() as u64, hidden: hidden as u64, ..GridInputs::default() };
    run(b, k, &bind, &grid)?;
    Ok(bf16_from(&b.download(d_out, sent.len() * hidden * 2)?))
}

/// `ep_combine_unpack`: each returned row (`recv`, `[sent.len(), hidden]`) to its expanded
/// index in `routes_out` (`[routes, hidden]`, uploaded first so untouched rows show).
pub fn device_ep_combine_unpack(
    b: &mut dyn Backend,
    sent: &[i32],
    recv: &[bf16],
    hidden: usize,
    routes_out: &mut [bf16],
) -> Result<(), DeviceOpError> {
    words_fit("returned rows", sent.len(), hidden)?;
    length("returned rows", recv.len(), sent.len() * hidden)?;
    if sent.is_empty() || routes_out.is_empty() || !routes_out.len().is_multiple_of(hidden) {
        return Err(RuntimeError::BufferLength {
            what: "route rows",
            expected: (routes_out.len() / hidden).max(1) * hidden,
            actual: routes_out.len(),
        }
        .into());
    }
    let routes = routes_out.len() / hidden;
    words_fit("route rows", routes, hidden)?;
    let d_sent = b.upload_new(&to_bytes_i32(sent))?;
    let d_recv = b.upload_new(&bf16_bytes(recv))?;
    let d_out = b.upload_new(&bf16_bytes(routes_out))?;
    let bind = Bindings::new()
        .buffer(Buffer::EpSentRoutes, d_sent)
        .buffer(Buffer::EpCombineRecv, d_recv)
        .buffer(Buffer::FinalizeScratch, d_out)
        .scalar(Scalar::Tokens, sent.len() as u64)?
        .scalar(Scalar::Hidden, hidden as u64)?
        .scalar(Scalar::NumRoutes, routes as u64)?;
    let k = simt_kernel(b, SimtFamily::EpCombineUnpack)?;
    let grid =
        GridInputs { tokens: sent.len() as u64, hidden: hidden as u64, ..GridInputs::default() };
    run(b, k, &bind, &grid)?;
    routes_out.copy_from_slice(&bf16_from(&b.download(d_out, routes_out.len() * 2)?));
    Ok(())
}
