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
//! when `i` is even, in its high half when odd. The four bits of value i's E2M1 code
//! (mantissa, the two exponent bits, sign) sit at the word's bits [`VALUE_BITS`]`[i]`,
//! scattered so that the dequantization places each register with few instructions
//! (`codegen`'s `sm90/dequant.rs`): registers 0 and 1 are the word rotated right by 2 and 5
//! and masked; registers 2 and 3 are the word masked and multiplied by 0x42 and 9 (two
//! shifted copies that do not collide), then masked — 10 instructions per word.
//!
//! Scale tiles ([`scale_position`]) hold one byte per scale block, so their size follows the
//! format. NVFP4 (UE4M3 per 16): 256 bytes, for each of the tile's 64 rows the bytes of its
//! four K steps (`row · 4 + j`), one word per row. MXFP4 (one byte per 32): 128 bytes, one
//! word per pair of rows a thread's fragment covers (r and r + 8, `r = 16w + l/4`), at
//! `(8w + l/4) · 4` = `(t / 4) · 4`: bytes (block 0, r), (block 0, r + 8), (block 1, r),
//! (block 1, r + 8), so one load brings both rows' factors and the word shifted left by 7
//! or right by 1 and masked puts each row's two 32-blocks in the halves of a bf16 pair. (Until
//! 2026-12-06 MXFP4 used NVFP4's tile with each byte twice: 5.9 % more streamed weight bytes.)
//!
//! An MXFP4 scale byte is not the UE8M0 code S itself but the bf16 exponent field of the one
//! factor the kernel multiplies the placed E2M1 bits by ([`mxfp4_scale_field`]): the placed
//! bits are e2m1 · 2^−126, so the factor is 2^126 · 2^(S − 127) · 2^−ρ, ρ being the
//! matrix's shift ([`mxfp4_shift`], 0 unless some code exceeds 128, where 2^126 · scale
//! would not be a bf16). The weights the kernel multiplies are then e2m1 · scale · 2^−ρ, and
//! the epilogue's per-expert α carries 2^ρ.

use super::WeightFormat;

/// The bf16 exponent bias of the MXFP4 scale field: 126 (the 2^126 that makes placed bits
/// E2M1 values) + 127 (bf16) − 127 (UE8M0).
pub const MXFP4_FIELD_BIAS: i32 = 126;

/// The largest UE8M0 code whose 2^126 · scale is still a bf16 (2^127).
pub const MXFP4_UNSHIFTED_MAX: u8 = 128;

/// The shift ρ of an MXFP4 matrix whose largest scale code is `max_code`: the least
/// ρ ≥ 0 with 2^126 · 2^(max_code − 127 − ρ) a bf16.
pub fn mxfp4_shift(max_code: u8) -> u8 {
    max_code.saturating_sub(MXFP4_UNSHIFTED_MAX)
}

/// The bf16 exponent field (the stored scale byte) of a block with UE8M0 code `code` in a
/// matrix shifted by `shift`, or `None` where it is not a normal bf16 exponent (1‥254):
/// that block's factor 2^(field − 127) cannot be formed.
pub fn mxfp4_scale_field(code: u8, shift: u8) -> Option<u8> {
    let f = i32::from(code) - i32::from(shift) + MXFP4_FIELD_BIAS;
    u8::try_from(f).ok().filter(|f| (1..=254).contains(f))
}

/// The weight the kernel forms from E2M1 value `e2m1` and scale field `field`:
/// e2m1 · 2^−126 · 2^(field − 127), exact in f64 (a bf16 when the runtime accepts it).
pub fn mxfp4_kernel_weight(e2m1: f64, field: u8) -> f64 {
    e2m1 * (2f64).powi(i32::from(field) - 127 - 126)
}

/// Rows of a fragment tile (one wgmma M).
pub const TILE_ROWS: usize = 64;
/// K of a fragment tile (one pipeline stage).
pub const TILE_K: usize = 64;
/// Bytes of a value tile (64 × 64 E2M1).
pub const TILE_BYTES: usize = TILE_ROWS * TILE_K / 2;
/// Bytes of an NVFP4 scale tile (64 rows × 4 K16 steps).
pub const SCALE_TILE_BYTES: usize = TILE_ROWS * TILE_K / 16;
/// Bytes of an MXFP4 scale tile (64 rows × 2 blocks of 32).
pub const MXFP4_SCALE_TILE_BYTES: usize = TILE_ROWS * TILE_K / 32;

/// Bytes of one 64 × 64 scale tile of `format` (one byte per scale block).
pub const fn scale_tile_bytes(format: WeightFormat) -> usize {
    TILE_ROWS * TILE_K / format.block() as usize
}

/// The tile index of (row, k) in a `[rows, k]` matrix.
fn tile(rows: usize, row: usize, k: usize) -> usize {
    (k / TILE_K) * (rows / TILE_ROWS) + row / TILE_ROWS
}

/// Where the bits of fragment value i (0‥7) of a word sit: `[mantissa, exponent bit 0,
/// exponent bit 1, sign]`, the E2M1 code's bits 0‥3. Register i / 2's placement takes value
/// i's mantissa and exponent to bf16 bits 6–8 and its sign to 15 (+16 for the high half):
///
/// - register 0 (values 0, 1): `rotr(w, 2) & 0x81C081C0`;
/// - register 1 (values 2, 3): `rotr(w, 5) & 0x81C081C0`;
/// - register 2 (values 4, 5): `((w & 0x40454045) · 0x42) & 0x81C081C0`;
/// - register 3 (values 6, 7): `((w & 0x80A880A8) · 9) & 0x81C081C0`.
///
/// Every bit of the word is used once.
pub const VALUE_BITS: [[u32; 4]; 8] = [
    [8, 9, 10, 17],
    [24, 25, 26, 1],
    [11, 12, 13, 20],
    [27, 28, 29, 4],
    [0, 6, 2, 14],
    [16, 22, 18, 30],
    [3, 7, 5, 15],
    [19, 23, 21, 31],
];

/// `word` with the E2M1 `code` (low four bits) of value `bits` (a row of [`VALUE_BITS`])
/// OR-ed in: the value's bits must be clear in `word`.
pub fn place_code(word: u32, bits: [u32; 4], code: u8) -> u32 {
    bits.iter().enumerate().fold(word, |w, (j, &b)| w | (u32::from((code >> j) & 1) << b))
}

/// The E2M1 code of value `bits` (a row of [`VALUE_BITS`]) in `word`.
pub fn code_at(word: u32, bits: [u32; 4]) -> u8 {
    bits.iter().enumerate().fold(0, |c, (j, &b)| c | ((((word >> b) & 1) as u8) << j))
}

/// Byte offset of the 32-bit word (little-endian) holding value (row, k) of one expert's
/// `[rows, k]` matrix and the bits of its code there ([`VALUE_BITS`]), or `None` outside
/// the matrix or when a dimension is not a multiple of 64.
pub fn value_position(
    rows: usize,
    k_dim: usize,
    row: usize,
    k: usize,
) -> Option<(usize, [u32; 4])> {
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
    Some((tile(rows, row, k) * TILE_BYTES + word * 4, VALUE_BITS[i]))
}

/// Byte offset of the scale of value (row, k) (its 16-block for NVFP4, 32-block for MXFP4)
/// of one expert's `[rows, k]` matrix, or `None` outside it.
pub fn scale_position(
    format: WeightFormat,
    rows: usize,
    k_dim: usize,
    row: usize,
    k: usize,
) -> Option<usize> {
    if row >= rows || k >= k_dim || !rows.is_multiple_of(TILE_ROWS) || !k_dim.is_multiple_of(TILE_K)
    {
        return None;
    }
    let (r, c) = (row % TILE_ROWS, k % TILE_K);
    let at = tile(rows, row, k) * scale_tile_bytes(format);
    Some(match format {
        WeightFormat::Nvfp4 => at + r * 4 + c / 16,
        // Row pair (r mod 16 < 8 and r + 8) in word 8·(r / 16) + r mod 8; block-major bytes.
        WeightFormat::Mxfp4 => at + (8 * (r / 16) + r % 8) * 4 + (c / 32) * 2 + (r % 16) / 8,
    })
}

/// Bytes of one expert's values.
pub fn value_bytes(rows: usize, k_dim: usize) -> usize {
    rows * k_dim / 2
}

/// Bytes of one expert's scales.
pub fn scale_bytes(format: WeightFormat, rows: usize, k_dim: usize) -> usize {
    rows * k_dim / format.block() as usize
}

/// The A8 (FP8 activations) form of the layout: the kernels expand E2M1 codes to E4M3 in
/// registers for `wgmma.m64nNk32.e4m3`, one K32 step per 8-bit A fragment.
///
/// Per expert, a `[rows, k]` matrix (rows a multiple of 64; k padded with zero codes to a
/// multiple of 128) is cut into 64 × 128 tiles, stored k-block-major like the A16 form. A
/// 4096-byte value tile holds, for half `h` (K32 steps 2h, 2h+1) and thread `t` (warp
/// `w = t/32`, lane `l`), 16 bytes at `h · 2048 + t · 16`: words (step 2h, row r), (2h, r+8),
/// (2h+1, r), (2h+1, r+8), with `r = 16w + l/4` — one conflict-free `ld.shared.v4` per half.
/// The word of (step j, row ρ) holds ρ's 8 values of A registers `a0`/`a1` (k = 32j + c + i)
/// and `a2`/`a3` (k = 32j + 16 + c + i), `c = 4·(l%4)`, i = 0‥3, placed so that one mask, two
/// `prmt` lookups and two sign merges expand them: value (a0, i) has its magnitude (code
/// bits 0–2) at bits 4i‥4i+2 and its sign at bit 8i + 7; value (a2, i) its magnitude at
/// bits 16 + 4i‥ and its sign at bit 8i + 3.
///
/// A 256-byte scale tile holds, per row and K32 step j, the byte at `row · 4 + j`: the
/// block's table code `c` in 1‥12, the E4M3 table `|e2m1| · 2^(c − 6)` the kernel builds
/// with two multiply-adds (`A8_TABLE_*`). The row's factor 2^ρ (`ρ = s_max − 6`, s_max the
/// row's largest UE8M0 exponent) is applied to the accumulator in the epilogue, so a block
/// of exponent s has `c = s − s_max + 12`; blocks more than 11 binades below their row's
/// largest take c = 1 with their codes requantized to E2M1 (round to nearest even), the one
/// inexact step of the A8 weight preparation.
pub mod a8 {
    /// Rows of a tile.
    pub const TILE_ROWS: usize = 64;
    /// K of a tile (one pipeline stage: 128 E4M3 activations per 128-byte row).
    pub const TILE_K: usize = 128;
    /// Bytes of a value tile (64 × 128 E2M1).
    pub const TILE_BYTES: usize = TILE_ROWS * TILE_K / 2;
    /// Bytes of a scale tile (64 rows × 4 K32 steps).
    pub const SCALE_TILE_BYTES: usize = TILE_ROWS * TILE_K / 32;
    /// Smallest table code.
    pub const MIN_CODE: u8 = 1;
    /// Largest table code (6 · 2^6 = 384 ≤ 448: no overflow).
    pub const MAX_CODE: u8 = 12;
    /// Table bytes 0‥3 (|e2m1| codes 0‥3) at code c: `c · A8_TABLE_LO_MUL + A8_TABLE_LO_ADD`.
    pub const TABLE_LO_MUL: u32 = 0x0808_0800;
    /// See [`TABLE_LO_MUL`].
    pub const TABLE_LO_ADD: u32 = 0x0C08_0000;
    /// Table bytes 4‥7 (|e2m1| codes 4‥7) at code c: `c · A8_TABLE_HI_MUL + A8_TABLE_HI_ADD`.
    pub const TABLE_HI_MUL: u32 = 0x0808_0808;
    /// See [`TABLE_HI_MUL`].
    pub const TABLE_HI_ADD: u32 = 0x1C18_1410;

    /// K padded to whole tiles.
    pub fn padded_k(k: usize) -> usize {
        k.next_multiple_of(TILE_K)
    }

    fn tile(rows: usize, row: usize, k: usize) -> usize {
        (k / TILE_K) * (rows / TILE_ROWS) + row / TILE_ROWS
    }

    /// Byte offset and bit of the magnitude (3 bits) and the bit of the sign of value
    /// (row, k) of one expert's `[rows, padded k]` matrix, or `None` outside it or when
    /// `rows` is not a multiple of 64: `(byte of the word, magnitude shift, sign shift)`
    /// within the little-endian 32-bit word at the returned word offset.
    pub fn value_position(
        rows: usize,
        k_dim: usize,
        row: usize,
        k: usize,
    ) -> Option<(usize, u32, u32)> {
        if row >= rows || k >= padded_k(k_dim) || !rows.is_multiple_of(TILE_ROWS) {
            return None;
        }
        let (r, c) = (row % TILE_ROWS, k % TILE_K);
        let (j, cc) = (c / 32, c % 32);
        let (w, rr) = (r / 16, r % 16);
        let upper = cc >= 16;
        let i = cc % 4;
        let lane = (rr % 8) * 4 + (cc % 16) / 4;
        let t = w * 32 + lane;
        let (h, jj) = (j / 2, j % 2);
        let word = h * 512 + t * 4 + jj * 2 + rr / 8;
        let (mag, sign) = if upper { (16 + 4 * i, 8 * i + 3) } else { (4 * i, 8 * i + 7) };
        Some((tile(rows, row, k) * TILE_BYTES + word * 4, mag as u32, sign as u32))
    }

    /// Byte offset of the table code of value (row, k)'s K32 block, or `None` outside.
    pub fn scale_position(rows: usize, k_dim: usize, row: usize, k: usize) -> Option<usize> {
        if row >= rows || k >= padded_k(k_dim) || !rows.is_multiple_of(TILE_ROWS) {
            return None;
        }
        let (r, c) = (row % TILE_ROWS, k % TILE_K);
        Some(tile(rows, row, k) * SCALE_TILE_BYTES + r * 4 + c / 32)
    }

    /// Bytes of one expert's values.
    pub fn value_bytes(rows: usize, k_dim: usize) -> usize {
        rows * padded_k(k_dim) / 2
    }

    /// Bytes of one expert's table codes.
    pub fn scale_bytes(rows: usize, k_dim: usize) -> usize {
        rows * padded_k(k_dim) / 32
    }

    /// The E4M3 byte the kernel's table gives |e2m1| code `m` (0‥7) at table code `c`.
    pub fn table_byte(c: u8, m: u8) -> u8 {
        let (mul, add, at) = if m < 4 {
            (TABLE_LO_MUL, TABLE_LO_ADD, m)
        } else {
            (TABLE_HI_MUL, TABLE_HI_ADD, m - 4)
        };
        (u32::from(c).wrapping_mul(mul).wrapping_add(add) >> (8 * u32::from(at))) as u8
    }
}
