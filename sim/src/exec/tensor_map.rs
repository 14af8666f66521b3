//! The simulator's tensor-map encoding. On a GPU the 128-byte CUtensorMap is opaque and made
//! by `cuTensorMapEncodeTiled`; the simulator's backend writes the same parameters into
//! this documented layout instead, and TMA instructions read them back.
//!
//! Layout (little endian): 0 magic "MGTM"; 4 data type (u8: 0 UINT8, 1 UINT16, 13
//! 16U4_ALIGN8B); 5 rank (u8, 1..=5); 6 swizzle (u8: 0 none, 1 32B, 2 64B, 3 128B); 7 unused;
//! 8 global address (u64); 16 dims[5] (u64, elements); 56 strides[4] (u64, bytes, of dims 1..);
//! 88 box[5] (u32, elements).

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
}

impl TmaDataType {
    /// Bits per element.
    pub fn bits(self) -> u64 {
        match self {
            TmaDataType::U8 => 8,
            TmaDataType::U16 => 16,
            TmaDataType::U4Packed => 4,
        }
    }
    fn code(self) -> u8 {
        match self {
            TmaDataType::U8 => 0,
            TmaDataType::U16 => 1,
            TmaDataType::U4Packed => 13,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(TmaDataType::U8),
            1 => Some(TmaDataType::U16),
            13 => Some(TmaDataType::U4Packed),
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

    /// Bytes of one box.
    pub fn box_bytes(&self) -> usize {
        let elems: u64 = self.box_dims.iter().map(|&x| u64::from(x)).product();
        (elems * self.dtype.bits() / 8) as usize
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
