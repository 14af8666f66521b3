//! What one K stage of an SM100 GEMM holds, for each pair of operand formats the block-scaled
//! MMA takes: NVFP4 × NVFP4 (`kind::mxf4nvf4`, K 64 per MMA, a UE4M3 scale per 16) and
//! MXFP8 × MXFP4 (`kind::mxf8f6f4`, K 32 per MMA, a UE8M0 scale per 32; docs/sm100-mxf8f6f4.md).
//!
//! Both fill one 128-byte swizzle row per operand row and stage, so tile bytes, swizzle,
//! descriptor strides and the four MMAs per stage are shared: NVFP4 packs 256 values in the
//! row, MXFP8 holds 128 E4M3 bytes, and the MXFP4 weights arrive padded by the TMA (16
//! codes in 8 bytes, then 8 bytes of padding). What differs is K per stage and per MMA, the
//! bytes the TMA moves from global memory, and the scale bytes per row.

use crate::options::{ActivationFormat, WeightFormat};

/// The operand formats of an SM100 GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sm100Operands {
    /// NVFP4 weights × NVFP4 activations.
    Nvfp4,
    /// MXFP4 weights × MXFP8 activations.
    Mxfp8Mxfp4,
}

/// Bytes of one operand row of one K stage in shared memory (one 128B swizzle row).
pub const STAGE_ROW_BYTES: u32 = 128;
/// MMAs per K stage.
pub const MMAS_PER_STAGE: u32 = 4;

impl Sm100Operands {
    /// The pair a weight format and activation format name, if SM100 multiplies it.
    pub const fn of(format: WeightFormat, activations: ActivationFormat) -> Option<Self> {
        match (format, activations) {
            (WeightFormat::Nvfp4, ActivationFormat::Nvfp4) => Some(Self::Nvfp4),
            (WeightFormat::Mxfp4, ActivationFormat::Mxfp8) => Some(Self::Mxfp8Mxfp4),
            _ => None,
        }
    }
    /// K elements per stage.
    pub const fn k_stage(self) -> u32 {
        match self {
            Self::Nvfp4 => 256,
            Self::Mxfp8Mxfp4 => 128,
        }
    }
    /// K elements per MMA instruction.
    pub const fn mma_k(self) -> u32 {
        self.k_stage() / MMAS_PER_STAGE
    }
    /// Elements per scale.
    pub const fn scale_block(self) -> u32 {
        match self {
            Self::Nvfp4 => 16,
            Self::Mxfp8Mxfp4 => 32,
        }
    }
    /// Scale bytes per operand row and stage.
    pub const fn stage_scale_bytes(self) -> u32 {
        self.k_stage() / self.scale_block()
    }
    /// 512-byte scale atoms (128 rows × 4 bytes) per 128 rows and stage.
    pub const fn scale_atoms_per_stage(self) -> u32 {
        self.stage_scale_bytes() / 4
    }
    /// Bits of one activation element (A operand, and GEMM1's output).
    pub const fn activation_bits(self) -> u32 {
        match self {
            Self::Nvfp4 => 4,
            Self::Mxfp8Mxfp4 => 8,
        }
    }
    /// Bytes of one stage's weight row as it comes from global memory: the packed codes
    /// (the TMA pads MXFP4 rows to a byte per code in shared memory). The full barrier
    /// counts these bytes, as CUTLASS arms it (docs/sm100-mxf8f6f4.md).
    pub const fn weight_row_global_bytes(self) -> u32 {
        self.k_stage() / 2
    }
    /// Bytes of one stage's activation row from global memory.
    pub const fn activation_row_bytes(self) -> u32 {
        self.k_stage() * self.activation_bits() / 8
    }
    /// The K multiple a weight matrix is padded to in global memory: MXFP4 rows go through
    /// the padding TMA type, whose box row is exactly 128 codes and whose dimension must be
    /// a multiple of 128 (`16U4_ALIGN16B`); NVFP4 rows are not padded.
    pub const fn weight_k_multiple(self) -> u32 {
        match self {
            Self::Nvfp4 => 1,
            Self::Mxfp8Mxfp4 => 128,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_pairs_fill_a_swizzle_row_per_stage() {
        for o in [Sm100Operands::Nvfp4, Sm100Operands::Mxfp8Mxfp4] {
            assert_eq!(o.activation_row_bytes(), STAGE_ROW_BYTES);
            assert_eq!(o.mma_k() * MMAS_PER_STAGE, o.k_stage());
            assert_eq!(o.k_stage() % o.scale_block(), 0);
        }
        let mx = Sm100Operands::Mxfp8Mxfp4;
        assert_eq!((mx.k_stage(), mx.mma_k(), mx.stage_scale_bytes()), (128, 32, 4));
        assert_eq!((mx.scale_atoms_per_stage(), mx.weight_row_global_bytes()), (1, 64));
        let nv = Sm100Operands::Nvfp4;
        assert_eq!((nv.k_stage(), nv.mma_k(), nv.stage_scale_bytes()), (256, 64, 16));
        assert_eq!(nv.scale_atoms_per_stage(), 4);
        assert_eq!(Sm100Operands::of(WeightFormat::Mxfp4, ActivationFormat::Nvfp4), None);
        assert_eq!(Sm100Operands::of(WeightFormat::Nvfp4, ActivationFormat::Mxfp8), None);
    }
}
