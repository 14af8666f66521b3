//! Host code that runs the all-to-all mode's SIMT kernels on a [`Backend`] (the dispatch
//! pack, the send rows' gather, the combine's unpack), each returning what its CPU
//! counterpart ([`super::pack_routes`], [`super::gather_rows`], [`super::combine_unpack`])
//! returns, so results compare directly.

use half::bf16;
use moegen_dsl::abi::error_record::WORDS;

use super::launch::{
    PackBuffers, check_gather, check_pack, check_unpack, launch_combine_unpack, launch_gather_rows,
    launch_pack, product, reset_record, words_fit,
};
use super::pack_record::{decode_pack, words};
use super::{EpError, EpPartition, PackedSend};
use crate::backend::Backend;
use crate::device_ops::{DeviceOpError, from_bytes_i32, to_bytes_i32};
use crate::error::RuntimeError;

fn length(what: &'static str, actual: usize, expected: usize) -> Result<(), DeviceOpError> {
    if actual == expected {
        Ok(())
    } else {
        Err(RuntimeError::BufferLength { what, expected, actual }.into())
    }
}

fn bf16_bytes(v: &[bf16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect()
}

fn bf16_from(b: &[u8]) -> Vec<bf16> {
    b.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect()
}

/// `ep_dispatch_pack` over one rank's routing; its error record decoded into the errors
/// [`super::pack_routes`] returns for the same input (a peer over its block as
/// [`EpError::PeerOverflow`]).
pub fn device_ep_pack(
    b: &mut dyn Backend,
    partition: &EpPartition,
    ids: &[i32],
    weights: &[f32],
    tokens: usize,
    per_peer: usize,
) -> Result<PackedSend, EpError> {
    let routes = check_pack(partition, tokens, per_peer)?;
    length("routing experts", ids.len(), routes)?;
    length("router weights", weights.len(), routes)?;
    let g = partition.ranks();
    let slots = product("all-to-all send slots", g, per_peer)?;
    let bufs = PackBuffers {
        ids: b.upload_new(&to_bytes_i32(ids))?,
        weights: b
            .upload_new(&weights.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>())?,
        send_experts: b.alloc(slots * 4)?,
        send_weights: b.alloc(slots * 4)?,
        sent: b.alloc(slots * 4)?,
        counts: b.alloc(g * 4)?,
        record: b.alloc(WORDS * 4)?,
    };
    reset_record(b, bufs.record)?;
    launch_pack(b, partition, &bufs, tokens, per_peer)?;
    let words_of = |b: &mut dyn Backend, p, n: usize| b.download(p, n * 4).map(|v| words(&v));
    let record = words_of(b, bufs.record, WORDS)?;
    let counts = words_of(b, bufs.counts, g)?;
    decode_pack(&record, partition, &counts, per_peer)?;
    let i32s = |b: &mut dyn Backend, p, n: usize| b.download(p, n * 4).map(|v| from_bytes_i32(&v));
    Ok(PackedSend {
        per_peer,
        experts: i32s(b, bufs.send_experts, slots)?,
        weights: words_of(b, bufs.send_weights, slots)?.into_iter().map(f32::from_bits).collect(),
        sent: i32s(b, bufs.sent, slots)?,
        counts,
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
    check_gather(sent.len(), tokens, hidden, top_k)?;
    length("activations", x.len(), tokens * hidden)?;
    let d_sent = b.upload_new(&to_bytes_i32(sent))?;
    let d_x = b.upload_new(&bf16_bytes(x))?;
    let d_out = b.alloc(sent.len() * hidden * 2)?;
    launch_gather_rows(b, d_sent, d_x, d_out, sent.len(), tokens, hidden, top_k)?;
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
    // Before any division by `hidden`.
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
    check_unpack(sent.len(), routes, hidden)?;
    let d_sent = b.upload_new(&to_bytes_i32(sent))?;
    let d_recv = b.upload_new(&bf16_bytes(recv))?;
    let d_out = b.upload_new(&bf16_bytes(routes_out))?;
    launch_combine_unpack(b, d_sent, d_recv, d_out, sent.len(), routes, hidden)?;
    routes_out.copy_from_slice(&bf16_from(&b.download(d_out, routes_out.len() * 2)?));
    Ok(())
}
