//! Where block scales live in memory.
//!
//! *128x4* is the tensor-core layout (cuBLAS/CUTLASS "128x4"; moe-pipeline.md §2): rows are
//! padded to 128 and scale columns to 4; each 512-byte atom holds 128 rows × 4 columns with
//! `offset = atom·512 + (r%32)·16 + ((r/32)%4)·4 + (c%4)`,
//! `atom = (r/128)·(Kc/4) + c/4`. One 128-row block × one 256-wide K stage (16 scale columns)
//! is 4 consecutive atoms, 2048 contiguous bytes, which a single TMA box can fetch.
//!
//! *Linear* is plain row-major `[rows, cols]`, used for activations whose rows are gathered
//! per token.

use super::FormatError;

/// Rows of one 128x4 atom.
pub const ATOM_ROWS: usize = 128;
/// Scale columns of one 128x4 atom.
pub const ATOM_COLS: usize = 4;
/// Bytes of one 128x4 atom.
pub const ATOM_BYTES: usize = ATOM_ROWS * ATOM_COLS;

/// The 128x4 swizzled layout of a `[rows, cols]` scale matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scale128x4 {
    rows: usize,
    cols: usize,
    padded_rows: usize,
    padded_cols: usize,
}

fn round_up(x: usize, m: usize) -> Option<usize> {
    x.checked_add(m - 1).map(|v| v / m * m)
}

impl Scale128x4 {
    /// Layout for `rows` rows and `cols` scale columns (K/16 for NVFP4).
    pub fn new(rows: usize, cols: usize) -> Result<Self, FormatError> {
        if rows == 0 || cols == 0 {
            return Err(FormatError::ZeroSize { rows, cols });
        }
        let overflow = FormatError::SizeOverflow { rows, cols };
        let padded_rows = round_up(rows, ATOM_ROWS).ok_or(overflow.clone())?;
        let padded_cols = round_up(cols, ATOM_COLS).ok_or(overflow.clone())?;
        padded_rows.checked_mul(padded_cols).ok_or(overflow)?;
        Ok(Self { rows, cols, padded_rows, padded_cols })
    }

    /// Logical rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Logical scale columns.
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// Rows rounded up to 128.
    pub fn padded_rows(&self) -> usize {
        self.padded_rows
    }
    /// Scale columns rounded up to 4.
    pub fn padded_cols(&self) -> usize {
        self.padded_cols
    }
    /// Bytes of the swizzled buffer, padding included.
    pub fn bytes(&self) -> usize {
        self.padded_rows * self.padded_cols
    }

    /// Byte offset of (r, c) for any r < padded_rows, c < padded_cols; `None` outside.
    pub fn offset(&self, r: usize, c: usize) -> Option<usize> {
        if r >= self.padded_rows || c >= self.padded_cols {
            return None;
        }
        let atom = (r / ATOM_ROWS) * (self.padded_cols / ATOM_COLS) + c / ATOM_COLS;
        Some(atom * ATOM_BYTES + (r % 32) * 16 + ((r / 32) % 4) * 4 + (c % ATOM_COLS))
    }

    /// Inverse of [`Self::offset`]: the padded (r, c) stored at byte `offset`.
    pub fn coords(&self, offset: usize) -> Option<(usize, usize)> {
        if offset >= self.bytes() {
            return None;
        }
        let atom = offset / ATOM_BYTES;
        let within = offset % ATOM_BYTES;
        let atoms_per_row_block = self.padded_cols / ATOM_COLS;
        let r = (atom / atoms_per_row_block) * ATOM_ROWS + ((within / 4) % 4) * 32 + within / 16;
        let c = (atom % atoms_per_row_block) * ATOM_COLS + within % 4;
        Some((r, c))
    }

    /// Swizzles a linear `[rows, cols]` scale matrix; padding bytes are zero.
    pub fn swizzle(&self, linear: &[u8]) -> Result<Vec<u8>, FormatError> {
        let expected = self.rows * self.cols;
        if linear.len() != expected {
            return Err(FormatError::LengthMismatch { expected, actual: linear.len() });
        }
        let mut out = vec![0u8; self.bytes()];
        for r in 0..self.rows {
            for c in 0..self.cols {
                // In range by construction: r < rows ≤ padded_rows, c < cols ≤ padded_cols.
                if let Some(o) = self.offset(r, c) {
                    out[o] = linear[r * self.cols + c];
                }
            }
        }
        Ok(out)
    }

    /// Reads the logical `[rows, cols]` scales back out of a swizzled buffer.
    pub fn unswizzle(&self, swizzled: &[u8]) -> Result<Vec<u8>, FormatError> {
        if swizzled.len() != self.bytes() {
            return Err(FormatError::LengthMismatch {
                expected: self.bytes(),
                actual: swizzled.len(),
            });
        }
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for r in 0..self.rows {
            for c in 0..self.cols {
                out.push(self.offset(r, c).map_or(0, |o| swizzled[o]));
            }
        }
        Ok(out)
    }
}

/// Row-major `[rows, cols]` scales (activations, gathered per token by GEMM1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinearScales {
    /// Rows (tokens).
    pub rows: usize,
    /// Scale columns per row.
    pub cols: usize,
}

impl LinearScales {
    /// Byte offset of (r, c); `None` outside.
    pub fn offset(&self, r: usize, c: usize) -> Option<usize> {
        (r < self.rows && c < self.cols).then(|| r * self.cols + c)
    }
}
