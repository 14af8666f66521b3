//! The simulator's tensor-map encoding. On a GPU the 128-byte CUtensorMap is opaque and made
//! by `cuTensorMapEncodeTiled`; the simulator's backend writes the same parameters into
//! this documented layout instead, and TMA instructions read them back.
//!
//! Layout (little endian): 0 magic "MGTM"; 4 data type (u8: 0 UINT8, 1 UINT16, 13
//! 16U4_ALIGN8B, 14 16U4_ALIGN16B; 13 and 14 are CUDA's own enum values); 5 rank (u8, 1..=5);
//! 6 swizzle (u8: 0 none, 1 32B, 2 64B, 3 128B); 7 unused; 8 global address (u64); 16
//! dims[5] (u64, elements); 56 strides[4] (u64, bytes, of dims 1..); 88 box[5] (u32,
//! elements).
//!
//! 16U4_ALIGN16B (PTX `.b4x16_p64`) is packed two elements per byte in global memory, but a
//! load lands every 16 elements in shared memory as their 8 bytes followed by 8 bytes of
//! padding: the operand form `tcgen05.mma.kind::mxf8f6f4` reads (docs/sm100-mxf8f6f4.md).

use crate::error::TensorMapError;

/// Element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TmaDataType {
    /// One byte.
    U8,
    /// Two bytes.
    U16,
    /// Packed 4-bit elements, two per byte (CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B).
    U4Packed,
    /// 4-bit elements packed two per byte in global memory and padded in shared memory, 8
    /// data bytes then 8 zero bytes per 16 elements (CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B,
    /// PTX `.b4x16_p64`). Loads only.
    U4Padded,
}

impl TmaDataType {
    /// Bits per element in global memory.
    pub fn bits(self) -> u64 {
        match self {
            TmaDataType::U8 => 8,
            TmaDataType::U16 => 16,
            TmaDataType::U4Packed | TmaDataType::U4Padded => 4,
        }
    }

    /// The name of CUDA's `CUtensorMapDataType` value.
    pub fn cuda_name(self) -> &'static str {
        match self {
            TmaDataType::U8 => "UINT8",
            TmaDataType::U16 => "UINT16",
            TmaDataType::U4Packed => "16U4_ALIGN8B",
            TmaDataType::U4Padded => "16U4_ALIGN16B",
        }
    }
    fn code(self) -> u8 {
        match self {
            TmaDataType::U8 => 0,
            TmaDataType::U16 => 1,
            TmaDataType::U4Packed => 13,
            TmaDataType::U4Padded => 14,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(TmaDataType::U8),
            1 => Some(TmaDataType::U16),
            13 => Some(TmaDataType::U4Packed),
            14 => Some(TmaDataType::U4Padded),
            _ => None,
        }
    }
}

/// A tiled tensor map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMap {
    /// Element type.
    pub dtype: TmaDataType,
    /// Global base address.
    pub address: u64,
    /// Size of each dimension in elements, innermost first.
    pub dims: Vec<u64>,
    /// Byte stride of dimensions 1.. (dimension 0 is dense).
    pub strides: Vec<u64>,
    /// Box size in elements per dimension.
    pub box_dims: Vec<u32>,
    /// Swizzle span in bytes: 0 (none), 32, 64 or 128.
    pub swizzle: u32,
}

const MAGIC: &[u8; 4] = b"MGTM";

/// The one inner box size (elements) cuTensorMapEncodeTiled accepts for 16U4_ALIGN16B.
const PADDED_BOX: u32 = 128;

impl TensorMap {
    /// The 128 bytes a kernel receives.
    pub fn encode(&self) -> Result<[u8; 128], TensorMapError> {
        let rank = self.dims.len();
        if !(1..=5).contains(&rank) || self.box_dims.len() != rank || self.strides.len() + 1 != rank
        {
            return Err(TensorMapError::Rank {
                rank,
                box_dims: self.box_dims.len(),
                strides: self.strides.len(),
            });
        }
        if self.box_dims.iter().any(|&b| b == 0 || b > 256) {
            return Err(TensorMapError::BoxDims { box_dims: self.box_dims.clone() });
        }
        let sw = match self.swizzle {
            0 => 0u8,
            32 => 1,
            64 => 2,
            128 => 3,
            s => return Err(TensorMapError::Swizzle { swizzle: s }),
        };
        if self.dtype == TmaDataType::U4Padded {
            self.check_padded()?;
        }
        // cuTensorMapEncodeTiled's rules: 16-byte aligned base and strides, strides < 2^40.
        if !self.address.is_multiple_of(16)
            || self.strides.iter().any(|&s| !s.is_multiple_of(16) || s >= 1 << 40)
        {
            return Err(TensorMapError::Alignment {
                address: self.address,
                strides: self.strides.clone(),
            });
        }
        if self.dtype == TmaDataType::U4Packed && !self.dims[0].is_multiple_of(2) {
            return Err(TensorMapError::OddPackedDim { dim: self.dims[0] });
        }
        let inner_bytes = u64::from(self.box_dims[0]) * self.dtype.bits() / 8;
        if !inner_bytes.is_multiple_of(16) || (sw > 0 && inner_bytes > u64::from(self.swizzle)) {
            return Err(TensorMapError::InnerBox { bytes: inner_bytes, swizzle: self.swizzle });
        }
        let mut b = [0u8; 128];
        b[..4].copy_from_slice(MAGIC);
        b[4] = self.dtype.code();
        b[5] = rank as u8;
        b[6] = sw;
        b[8..16].copy_from_slice(&self.address.to_le_bytes());
        for (i, d) in self.dims.iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&d.to_le_bytes());
        }
        for (i, s) in self.strides.iter().enumerate() {
            b[56 + 8 * i..64 + 8 * i].copy_from_slice(&s.to_le_bytes());
        }
        for (i, x) in self.box_dims.iter().enumerate() {
            b[88 + 4 * i..92 + 4 * i].copy_from_slice(&x.to_le_bytes());
        }
        Ok(b)
    }

    /// cuTensorMapEncodeTiled's extra rules for 16U4_ALIGN16B (CUDA driver API; the
    /// 128B_ATOM_32B swizzle it also allows is not modelled).
    fn check_padded(&self) -> Result<(), TensorMapError> {
        let rule = |rule: &'static str, value: u64| Err(TensorMapError::PaddedU4 { rule, value });
        if self.box_dims[0] != PADDED_BOX {
            return rule("box_dims[0] must be 128 elements", u64::from(self.box_dims[0]));
        }
        if !self.dims[0].is_multiple_of(u64::from(PADDED_BOX)) {
            return rule("dims[0] must be a multiple of 128 elements", self.dims[0]);
        }
        if !self.address.is_multiple_of(32) {
            return rule("the global address must be 32-byte aligned", self.address);
        }
        if let Some(&s) = self.strides.iter().find(|s| !s.is_multiple_of(32)) {
            return rule("every stride must be a multiple of 32 bytes", s);
        }
        if !matches!(self.swizzle, 0 | 128) {
            return rule("the swizzle must be none or 128B", u64::from(self.swizzle));
        }
        Ok(())
    }

    /// Reads a map written by [`Self::encode`].
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < 128 || &b[..4] != MAGIC {
            return None;
        }
        let rank = usize::from(b[5]);
        if !(1..=5).contains(&rank) {
            return None;
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        let map = Self {
            dtype: TmaDataType::from_code(b[4])?,
            address: u64_at(8),
            dims: (0..rank).map(|i| u64_at(16 + 8 * i)).collect(),
            strides: (0..rank - 1).map(|i| u64_at(56 + 8 * i)).collect(),
            box_dims: (0..rank).map(|i| u32_at(88 + 4 * i)).collect(),
            swizzle: match b[6] {
                0 => 0,
                1 => 32,
                2 => 64,
                3 => 128,
                _ => return None,
            },
        };
        // The rest of the code relies on what encode() guarantees.
        map.encode().ok()?;
        Some(map)
    }

    /// Bytes of one box in global memory: what a load transfers and counts on its mbarrier
    /// (for 16U4_ALIGN16B the packed bytes, as CUTLASS arms the barrier).
    pub fn box_bytes(&self) -> usize {
        let elems: u64 = self.box_dims.iter().map(|&x| u64::from(x)).product();
        (elems * self.dtype.bits() / 8) as usize
    }

    /// Bytes one box occupies in shared memory: [`Self::box_bytes`], doubled by the padding
    /// of 16U4_ALIGN16B.
    pub fn shared_box_bytes(&self) -> usize {
        match self.dtype {
            TmaDataType::U4Padded => 2 * self.box_bytes(),
            _ => self.box_bytes(),
        }
    }

    /// The shared-memory image (before swizzling) of a box whose global bytes, in the order
    /// of [`Self::box_addresses`], are `packed`: unchanged, except that 16U4_ALIGN16B puts
    /// 8 zero bytes after every 8.
    pub(crate) fn shared_image(&self, packed: Vec<u8>) -> Vec<u8> {
        if self.dtype != TmaDataType::U4Padded {
            return packed;
        }
        packed.chunks(8).flat_map(|c| c.iter().copied().chain(std::iter::repeat_n(0, 8))).collect()
    }

    /// The swizzled byte offset of linear box byte `off` placed at shared address `base`:
    /// within each span-sized row group, bits [4, 4+log2(span/16)) are XORed with the row
    /// index bits above the span (CUTLASS Swizzle<B,4,3>; 128B = Swizzle<3,4,3>).
    pub fn swizzle_addr(&self, addr: u64) -> u64 {
        match self.swizzle {
            128 => addr ^ (((addr >> 7) & 7) << 4),
            64 => addr ^ (((addr >> 7) & 3) << 4),
            32 => addr ^ (((addr >> 7) & 1) << 4),
            _ => addr,
        }
    }

    /// For each byte of the box (in shared-memory order, before swizzling): the global address
    /// it maps to, or None when the element lies outside the tensor (zero fill / not stored).
    /// For packed 4-bit data the innermost coordinate and dimension must be even, so bytes
    /// never straddle the edge.
    pub fn box_addresses(&self, coords: &[i64]) -> Vec<Option<u64>> {
        let bits = self.dtype.bits();
        let row_bytes = (u64::from(self.box_dims[0]) * bits / 8) as usize;
        let rows: usize = self.box_dims[1..].iter().map(|&x| x as usize).product();
        let mut out = Vec::with_capacity(row_bytes * rows);
        for r in 0..rows {
            // Coordinates of this row in dims 1..
            let mut rem = r;
            let mut row_off: Option<u64> = Some(0);
            for d in 1..self.dims.len() {
                let idx = (rem % self.box_dims[d] as usize) as i64;
                rem /= self.box_dims[d] as usize;
                let c = coords.get(d).copied().unwrap_or(0) + idx;
                if c < 0 || c as u64 >= self.dims[d] {
                    row_off = None;
                } else if let Some(o) = row_off {
                    row_off = Some(o.wrapping_add((c as u64).wrapping_mul(self.strides[d - 1])));
                }
            }
            for byte in 0..row_bytes {
                let elem = coords[0] + (byte as u64 * 8 / bits) as i64;
                let inside = elem >= 0 && (elem as u64) < self.dims[0];
                out.push(match (row_off, inside) {
                    (Some(o), true) => {
                        let g = coords[0] * bits as i64 / 8 + byte as i64;
                        Some(self.address.wrapping_add(o).wrapping_add(g as u64))
                    }
                    _ => None,
                });
            }
        }
        out
    }
}
