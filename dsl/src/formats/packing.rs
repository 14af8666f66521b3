//! Two FP4 codes per byte, element 2i in the low nibble (the NVFP4/CUTLASS order, which the
//! tensor cores read from shared memory unchanged).

use super::FormatError;

/// Packs 4-bit codes (only the low nibble of each input is used) two per byte.
pub fn pack_nibbles(codes: &[u8]) -> Result<Vec<u8>, FormatError> {
    if !codes.len().is_multiple_of(2) {
        return Err(FormatError::OddNibbleCount { len: codes.len() });
    }
    Ok(codes.chunks_exact(2).map(|p| (p[0] & 0xF) | ((p[1] & 0xF) << 4)).collect())
}

/// Unpacks bytes into 4-bit codes, low nibble first.
pub fn unpack_nibbles(packed: &[u8]) -> Vec<u8> {
    packed.iter().flat_map(|&b| [b & 0xF, b >> 4]).collect()
}

/// The 4-bit code of element `i` of a packed row.
///
/// Returns `None` when `i` is past the end of `packed`.
pub fn nibble_at(packed: &[u8], i: usize) -> Option<u8> {
    let byte = *packed.get(i / 2)?;
    Some(if i.is_multiple_of(2) { byte & 0xF } else { byte >> 4 })
}
