//! How GEMM1's epilogues write h, per 64-column step: NVFP4 (two 16-blocks' E2M1 codes, 32
//! bytes, and a 32-bit word of four UE4M3 scales) or MXFP8 (two 32-blocks' E4M3 codes, 64
//! bytes, and two UE8M0 scale bytes). The codes go to the thread's staging row for the
//! warp's TMA store, the scales straight into the 128x4 layout: row r's word of atom a at
//! `a·512 + (r % 32)·16 + (r / 32 % 4)·4`, NVFP4 with one atom per step, MXFP8 with half.

use moegen_dsl::Sm100Operands;
use moegen_dsl::abi::Buffer;

use super::Sm100;
use super::epilogue::Step;
use crate::kernels::e4m3_scale::mxfp8_block;
use crate::kernels::epilogue_math::{BlockQuant, requant_pair};
use crate::ptx::ops::{Access, Memory};
use crate::ptx::{Guard, KernelBuilder, Operand, Reg, RegClass, Space, Ty, VecWidth};

/// What a GEMM1 epilogue needs to write h, loaded once.
pub(super) struct HOutput {
    operands: Sm100Operands,
    out_sf: Reg,
    atoms_per_rowblock: Reg,
    lane_sf: Reg,
    /// NVFP4's output global scale (`fc2_input_scale`); MXFP8 has none.
    pub gs: Option<Reg>,
}

/// A step's 64 values of h: computed already, or on demand in column order (MXFP8 takes
/// each 32-block as it quantizes it, so only half the step's values are ever live).
pub(super) enum HValues<'a> {
    /// All 64.
    Ready(&'a [Reg; 64]),
    /// Value i when asked, i = 0, 1, … 63.
    Lazy(&'a mut dyn FnMut(&mut KernelBuilder, usize) -> Reg),
}

impl HValues<'_> {
    /// The 32 values from `first` on, in order.
    fn block(&mut self, b: &mut KernelBuilder, first: usize) -> [Reg; 32] {
        match self {
            HValues::Ready(h) => std::array::from_fn(|i| h[first + i]),
            HValues::Lazy(f) => std::array::from_fn(|i| f(b, first + i)),
        }
    }
}

/// A tile's scale destinations.
pub(super) enum TileScales {
    /// The address of this row's word in step 0's atom.
    Nvfp4 { base: Reg },
    /// The address of this row's word in atom 0 of h's row block, and the tile's first
    /// 64-column step of h counted from column 0.
    Mxfp8 { row: Reg, first_step: Reg },
}

/// The buffers [`HOutput`] reads, loaded first (the epilogues' emission order).
pub(super) struct HOutputBuffers {
    operands: Sm100Operands,
    out_sf: Reg,
    /// NVFP4's output global scale (`fc2_input_scale`); MXFP8 has none.
    pub gs: Option<Reg>,
}

impl HOutputBuffers {
    pub fn load(b: &mut KernelBuilder, g: &Sm100) -> Self {
        let operands = g.l.operands;
        let gs = (operands == Sm100Operands::Nvfp4).then(|| {
            let gsp = b.ld_buffer(Buffer::Fc2InputScale);
            b.ld_global(Ty::F32, RegClass::F32, gsp)
        });
        let out_sf = b.ld_buffer(Buffer::Gemm1OutputScales);
        Self { operands, out_sf, gs }
    }

    /// Atoms per 128 rows of h's scales: I/16 scales (NVFP4) or Kp(I)/32 (MXFP8), four
    /// per atom.
    pub fn atoms_per_rowblock(&self, b: &mut KernelBuilder, inter: Reg) -> Reg {
        match self.operands {
            Sm100Operands::Nvfp4 => b.shr_u32(inter, 6u32),
            Sm100Operands::Mxfp8Mxfp4 => {
                let padded = b.add_u32(inter, 127u32);
                b.shr_u32(padded, 7u32)
            }
        }
    }

    /// The writer, with this thread's word of each atom (`lane·16 + quarter·4`).
    pub fn finish(self, atoms_per_rowblock: Reg, lane_sf: Reg) -> HOutput {
        let Self { operands, out_sf, gs } = self;
        HOutput { operands, out_sf, atoms_per_rowblock, lane_sf, gs }
    }
}

impl HOutput {
    /// Bytes of h one step stages per row.
    pub fn step_bytes(&self) -> u32 {
        64 * self.operands.activation_bits() / 8
    }

    /// The scale destinations of this thread's row (`row0 + tid`) in the tile of N block
    /// `n`, whose first 64-column step of h is step `n · steps`.
    pub fn tile_scales(
        &self,
        b: &mut KernelBuilder,
        row0: Reg,
        tid: Reg,
        n: Reg,
        steps: u32,
    ) -> TileScales {
        let row = b.add_u32(row0, tid);
        let rowblock = b.shr_u32(row, 7u32);
        let atom_row = b.mul_u32(rowblock, self.atoms_per_rowblock);
        let sf_off = b.mad_u32(atom_row, 512u32, self.lane_sf);
        let sf_row = b.index_addr(self.out_sf, sf_off, 1);
        match self.operands {
            Sm100Operands::Nvfp4 => {
                // This N block's first scale atom.
                let atom0 = b.mul_wide_u32(n, steps * 512);
                TileScales::Nvfp4 { base: b.add_u64(sf_row, atom0) }
            }
            Sm100Operands::Mxfp8Mxfp4 => {
                TileScales::Mxfp8 { row: sf_row, first_step: b.mul_u32(n, steps) }
            }
        }
    }

    /// Quantizes `h` (the 64 values of this thread's row, step `step` of the tile), stages its
    /// codes at `staged(step bytes)` and stores its scales when `in_n` (the step lies inside
    /// I). `how` is NVFP4's block quantization (unused for MXFP8).
    #[allow(clippy::too_many_arguments)]
    pub fn store_step(
        &self,
        b: &mut KernelBuilder,
        mut h: HValues<'_>,
        how: Option<BlockQuant>,
        staged: &mut dyn FnMut(&mut KernelBuilder, u32) -> Reg,
        tile: &TileScales,
        step: Step,
        in_n: Reg,
    ) {
        let step_bytes = self.step_bytes();
        let st = Memory::St(Access::vector(Space::Shared, VecWidth::V4, Ty::B32));
        match (tile, how) {
            (&TileScales::Nvfp4 { base }, Some(how)) => {
                // Block by block: a lazy step holds only the 32 values being quantized.
                let lo = h.block(b, 0);
                let (w_lo, sc_lo) = requant_pair(b, &lo, how);
                let hi = h.block(b, 32);
                let (w_hi, sc_hi) = requant_pair(b, &hi, how);
                let staged = staged(b, step_bytes);
                b.emit(st, vec![Operand::addr(staged), Operand::regs(&w_lo)]);
                b.emit(st, vec![Operand::Reg(staged).at(16), Operand::regs(&w_hi)]);
                // Scale columns 4·(N block·steps + s) .. +4 of this row: one 32-bit word.
                let word = b.mov_b32(RegClass::B32, Operand::regs(&[sc_lo, sc_hi]));
                let dst = step.offset_u64(b, base, 512);
                b.emit_if(
                    Guard::when(in_n),
                    Memory::St(Access::scalar(Space::Global, Ty::B32)),
                    vec![Operand::addr(dst), word.into()],
                );
            }
            (&TileScales::Mxfp8 { row, first_step }, _) => {
                // Each block's codes go to the staging row as soon as they exist, so a lazy
                // step holds only the 32 values being quantized.
                let staged = staged(b, step_bytes);
                let lo = h.block(b, 0);
                let (w_lo, sc_lo) = mxfp8_block(b, &lo);
                b.emit(st, vec![Operand::addr(staged), Operand::regs(&w_lo[..4])]);
                b.emit(st, vec![Operand::Reg(staged).at(16), Operand::regs(&w_lo[4..])]);
                let hi = h.block(b, 32);
                let (w_hi, sc_hi) = mxfp8_block(b, &hi);
                b.emit(st, vec![Operand::Reg(staged).at(32), Operand::regs(&w_hi[..4])]);
                b.emit(st, vec![Operand::Reg(staged).at(48), Operand::regs(&w_hi[4..])]);
                // Step q of h holds scale columns 2q and 2q + 1: bytes 2·(q % 2) and up of
                // the row's word in atom q / 2.
                let q = step.offset(b, first_step, 1);
                let atom = b.shr_u32(q, 1u32);
                let odd = b.and_b32(q, 1u32);
                let byte = b.shl_b32(odd, 1u32);
                let off = b.mad_u32(atom, 512u32, byte);
                let dst = b.index_addr(row, off, 1);
                let hi_code = b.shl_b32(sc_hi, 8u32);
                let pair = b.or_b32(sc_lo, hi_code);
                let pair = b.cvt_u16_u32(pair);
                b.emit_if(
                    Guard::when(in_n),
                    Memory::St(Access::scalar(Space::Global, Ty::B16)),
                    vec![Operand::addr(dst), pair.into()],
                );
            }
            // NVFP4 always comes with its block quantization (the epilogues pass it).
            (TileScales::Nvfp4 { .. }, None) => {
                let kernel = b.name.clone();
                b.error(crate::ptx::BuildError::Inconsistent {
                    kernel,
                    what: "an NVFP4 epilogue step without its block quantization",
                });
            }
        }
    }
}
