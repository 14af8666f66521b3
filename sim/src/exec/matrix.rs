//! `ldmatrix` and `stmatrix` (`.m8n8.xN{.trans}.b16`, PTX ISA "Warp-level matrix load/store
//! instruction"): each 8x8 matrix of 16-bit elements has its eight row addresses in lanes
//! 8j..8j+8 (matrix j), each row is 16 contiguous, 16-byte aligned bytes of shared memory,
//! and lane l holds elements (l/4, 2·(l%4)) and (l/4, 2·(l%4)+1) of each matrix, the first
//! in the low half of its register. `.trans` reads or writes the matrix column-major: the
//! row addresses then name columns.

use super::spaces::{bad, check_aligned};
use super::state::Cluster;
use crate::decode::Inst;
use crate::decode::op::{Addr, Dst, Src, Window};
use crate::error::SimError;

/// Memory row and element of element (r, c) of a matrix (its rows or, with `.trans`, its
/// columns are the memory rows).
fn placement(trans: bool, r: usize, c: usize) -> (usize, usize) {
    if trans { (c, r) } else { (r, c) }
}

impl Cluster<'_> {
    /// The shared (CTA, offset) of each of the 8·n memory rows.
    fn matrix_rows(
        &self,
        c: usize,
        part: &[usize],
        n: usize,
        addr: Addr,
        inst: &Inst,
    ) -> Result<Vec<(usize, u32)>, SimError> {
        // The PTX ISA leaves the instruction undefined unless every lane of the warp runs it.
        if part.len() != 32 {
            return Err(bad(
                inst,
                format!("needs all 32 lanes of the warp, {} are here", part.len()),
            ));
        }
        (0..8 * n)
            .map(|i| {
                let a = self.addr(c, part[i], addr);
                let (sc, off) = self.resolve_shared(c, a, Window::Cta, inst)?;
                check_aligned(inst, u64::from(off), 16)?;
                Ok((sc, off))
            })
            .collect()
    }

    pub fn ldmatrix(
        &mut self,
        c: usize,
        part: &[usize],
        trans: bool,
        d: &[Dst],
        addr: Addr,
        inst: &Inst,
    ) -> Result<(), SimError> {
        let rows = self.matrix_rows(c, part, d.len(), addr, inst)?;
        let mut mem = Vec::with_capacity(rows.len());
        for (i, &(sc, off)) in rows.iter().enumerate() {
            let bytes = self.read_shared(sc, off, 16, inst, part[i])?;
            let row: [u16; 8] =
                std::array::from_fn(|k| u16::from_le_bytes([bytes[2 * k], bytes[2 * k + 1]]));
            mem.push(row);
        }
        for (l, &t) in part.iter().enumerate() {
            for (j, &dst) in d.iter().enumerate() {
                let elem = |h: usize| {
                    let (mr, me) = placement(trans, l / 4, 2 * (l % 4) + h);
                    u64::from(mem[8 * j + mr][me])
                };
                self.set(c, t, dst, elem(0) | elem(1) << 16);
            }
        }
        Ok(())
    }

    pub fn stmatrix(
        &mut self,
        c: usize,
        part: &[usize],
        trans: bool,
        addr: Addr,
        v: &[Src],
        inst: &Inst,
    ) -> Result<(), SimError> {
        let rows = self.matrix_rows(c, part, v.len(), addr, inst)?;
        let mut mem = vec![[0u16; 8]; rows.len()];
        for (l, &t) in part.iter().enumerate() {
            for (j, &src) in v.iter().enumerate() {
                let x = self.val(c, t, src);
                for h in 0..2 {
                    let (mr, me) = placement(trans, l / 4, 2 * (l % 4) + h);
                    mem[8 * j + mr][me] = (x >> (16 * h)) as u16;
                }
            }
        }
        for (i, (&(sc, off), row)) in rows.iter().zip(&mem).enumerate() {
            let bytes: Vec<u8> = row.iter().flat_map(|e| e.to_le_bytes()).collect();
            self.write_shared(sc, off, &bytes, 0, inst, part[i])?;
        }
        Ok(())
    }
}
