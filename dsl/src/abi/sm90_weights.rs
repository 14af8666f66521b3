//! The Hopper weight layout: E2M1 values and their block scales arranged so that each thread
//! of a consumer warpgroup loads, per K = 16 step, one 32-bit word holding exactly the eight
//! values of its wgmma A fragment (register operand, bf16 after dequantization), and its
//! rows' scales with one broadcast read.
//!
//! Per expert, a `[rows, k]` matrix (rows and k multiples of 64) is cut into 64 × 64 tiles,
//! stored k-block-major (`tile = kb · rows/64 + mb`), so one pipeline stage of a CTA — N/64
//! consecutive row blocks at one k block — is one contiguous run of bytes.
//!
//! Inside a 2048-byte value tile, word `j · 128 + t` (K step j of 4, thread t of 128) holds
//! the fragment of warp `w = t / 32`, lane `l = t % 32`: with `r = 16w + l/4` and
//! `c = 16j + 2·(l%4)`, fragment values 0‥7 are (r, c), (r, c+1), (r+8, c), (r+8, c+1),
//! (r, c+8), (r, c+9), (r+8, c+8), (r+8, c+9) — the A-fragment order of `wgmma.m64nNk16`
//! (as `mma.m16n8k16`'s per warp): A register `i / 2` takes value `i` in its low bf16 half
//! when `i` is even, in its high half when odd. Value `i` sits in nibble `i / 2 + 4·(i % 2)`
//! of the word (nibble n: bits 4n‥4n+3): register k's two values are nibbles k and k + 4,
//! 16 bits apart like the halves they become, which is what lets the dequantization place
//! both with one multiply (`codegen`'s `sm90/dequant.rs`). A 256-byte scale tile holds, for each of
//! its 64 rows, the scale bytes of its four K steps (`row · 4 + j`): one byte per 16 values
//! (UE4M3 for NVFP4; for MXFP4 each UE8M0 scale appears for both 16-halves of its 32-block).

/// Rows of a fragment tile (one wgmma M).
pub const TILE_ROWS: usize = 64;
/// K of a fragment tile (one pipeline stage).
pub const TILE_K: usize = 64;
/// Bytes of a value tile (64 × 64 E2M1).
pub const TILE_BYTES: usize = TILE_ROWS * TILE_K / 2;
/// Bytes of a scale tile (64 rows × 4 K steps).
pub const SCALE_TILE_BYTES: usize = TILE_ROWS * TILE_K / 16;

/// The tile index of (row, k) in a `[rows, k]` matrix.
fn tile(rows: usize, row: usize, k: usize) -> usize {
    (k / TILE_K) * (rows / TILE_ROWS) + row / TILE_ROWS
}

/// Byte offset and nibble (0: low, 1: high) of value (row, k) of one expert's `[rows, k]`
/// matrix, or `None` outside it or when a dimension is not a multiple of 64.
pub fn value_position(rows: usize, k_dim: usize, row: usize, k: usize) -> Option<(usize, u32)> {
    if row >= rows || k >= k_dim || !rows.is_multiple_of(TILE_ROWS) || !k_dim.is_multiple_of(TILE_K)
    {
        return None;
    }
    let (r, c) = (row % TILE_ROWS, k % TILE_K);
    let (j, cc) = (c / 16, c % 16);
    let (w, rr) = (r / 16, r % 16);
    let lane = (rr % 8) * 4 + (cc % 8) / 2;
    let t = w * 32 + lane;
    let i = (cc % 2) + 2 * (rr / 8) + 4 * (cc / 8);
    let word = j * 128 + t;
    let nibble = i / 2 + 4 * (i % 2);
    Some((tile(rows, row, k) * TILE_BYTES + word * 4 + nibble / 2, (nibble % 2) as u32))
}

/// Byte offset of the scale of value (row, k) (its 16-block) of one expert's `[rows, k]`
/// scale matrix, or `None` outside it.
pub fn scale_position(rows: usize, k_dim: usize, row: usize, k: usize) -> Option<usize> {
    if row >= rows || k >= k_dim || !rows.is_multiple_of(TILE_ROWS) || !k_dim.is_multiple_of(TILE_K)
    {
        return None;
    }
    let (r, c) = (row % TILE_ROWS, k % TILE_K);
    Some(tile(rows, row, k) * SCALE_TILE_BYTES + r * 4 + c / 16)
}

/// Bytes of one expert's values.
pub fn value_bytes(rows: usize, k_dim: usize) -> usize {
    rows * k_dim / 2
}

/// Bytes of one expert's scales.
pub fn scale_bytes(rows: usize, k_dim: usize) -> usize {
    rows * k_dim / 16
}
