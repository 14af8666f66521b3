//! The dispatch pack's error record decoded into the errors its CPU counterpart
//! ([`super::pack_routes`]) returns for the same input, so a refusal reads the same whether
//! the host or the device packed: an id out of range as [`EpError::ExpertOutOfRange`], a
//! duplicate or a non-finite weight as the single layer names them, and a block too small
//! as [`EpError::PeerOverflow`] naming the peer (the record only has a flag; the per-peer
//! counts, written whole by the kernel, say which).

use crate::device_ops::DeviceOpError;
use crate::error::RuntimeError;
use crate::error_record::{RecordError, decode};

use super::{EpError, EpPartition};

/// `record` (the pack's error words) and `counts` (its per-peer counts) of a pack into
/// blocks of `per_peer` slots.
pub(crate) fn decode_pack(
    record: &[u32],
    partition: &EpPartition,
    counts: &[u32],
    per_peer: usize,
) -> Result<(), EpError> {
    match decode(record, partition.top_k(), partition.experts()) {
        Ok(()) => Ok(()),
        Err(RecordError::Input(RuntimeError::ExpertOutOfRange {
            token,
            slot,
            expert,
            experts,
        })) => {
            // The record holds the raw 32-bit id.
            let id = expert as i32;
            Err(EpError::ExpertOutOfRange { token, slot, id, experts })
        }
        Err(RecordError::Input(e)) => Err(EpError::Input(e)),
        Err(RecordError::TileOverflow(flags)) => {
            match counts.iter().enumerate().find(|&(_, &n)| n as usize > per_peer) {
                Some((rank, &n)) => {
                    Err(EpError::PeerOverflow { rank, routes: n as usize, per_peer })
                }
                None => Err(DeviceOpError::Record(RecordError::TileOverflow(flags)).into()),
            }
        }
        Err(e) => Err(DeviceOpError::Record(e).into()),
    }
}

/// Little-endian words of a download.
pub(crate) fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
