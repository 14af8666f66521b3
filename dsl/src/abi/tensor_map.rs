//! Tensor-map layouts (what `cuTensorMapEncodeTiled` takes) as functions of the problem and
//! the kernel. The box shapes here are the ones the kernels' TMA instructions and
//! `expect_tx` byte counts assume.

use super::param::{Buffer, TensorMap};
use crate::gemm_key::GemmKey;
use crate::options::ActivationFormat;
use crate::tactic::GemmKind;

/// Element type of a tensor map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum TmaElement {
    /// UINT8.
    U8,
    /// UINT16 (scale-factor atoms: 256 u16 per 512-byte atom).
    U16,
    /// Packed 4-bit, two per byte (16U4_ALIGN8B; dimension 0 counts 4-bit elements).
    U4Packed,
    /// Packed 4-bit in global memory, padded to a byte per element in shared memory (16
    /// codes in 8 bytes, then 8 bytes of padding: 16U4_ALIGN16B, PTX `.b4x16_p64`), the
    /// form `kind::mxf8f6f4` reads 4-bit operands in; box rows of exactly 128 elements.
    U4Padded,
}

/// One tiled tensor map, without its base address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct TensorMapLayout {
    /// The buffer it addresses.
    pub buffer: Buffer,
    /// Element type.
    pub element: TmaElement,
    /// Elements per dimension, innermost first.
    pub dims: Vec<u64>,
    /// Byte strides of dimensions 1..
    pub strides: Vec<u64>,
    /// Box elements per dimension.
    pub box_dims: Vec<u32>,
    /// Swizzle span: 0, 32, 64 or 128 bytes.
    pub swizzle: u32,
}

/// The problem sizes a layout depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapDims {
    /// H.
    pub hidden: u64,
    /// I.
    pub intermediate: u64,
    /// L.
    pub local_experts: u64,
    /// Rows of GEMM1's output buffer (the workspace's permuted rows).
    pub permuted_rows: u64,
}

/// A 128x4 scale tensor of `[rows, k/block]` per expert viewed as u16 atoms:
/// {256 u16 per atom, atoms per 128-row block, row blocks, experts}, boxes of `box_atoms`
/// atoms (of a K stage's) × `box_rowblocks` row blocks.
fn scales(
    buffer: Buffer,
    (k, block): (u64, u64),
    rows: u64,
    experts: Option<u64>,
    [box_atoms, box_rowblocks]: [u32; 2],
) -> TensorMapLayout {
    let atoms = (k / block).div_ceil(4);
    let rowblocks = rows.div_ceil(128);
    let mut dims = vec![256, atoms, rowblocks];
    let mut strides = vec![512, atoms * 512];
    let mut box_dims = vec![256, box_atoms, box_rowblocks];
    if let Some(l) = experts {
        dims.push(l);
        strides.push(atoms * 512 * rowblocks);
        box_dims.push(1);
    }
    TensorMapLayout { buffer, element: TmaElement::U16, dims, strides, box_dims, swizzle: 0 }
}

fn fp4(
    buffer: Buffer,
    dims: Vec<u64>,
    strides: Vec<u64>,
    box_dims: Vec<u32>,
    swizzle: u32,
) -> TensorMapLayout {
    TensorMapLayout { buffer, element: TmaElement::U4Packed, dims, strides, box_dims, swizzle }
}

/// The layout of `map` as kernel `key` uses it.
pub fn layout(map: TensorMap, key: &GemmKey, d: &MapDims) -> TensorMapLayout {
    if key.activations == ActivationFormat::Mxfp8 {
        return mx_layout(map, key, d);
    }
    let (h, i, l, rows) = (d.hidden, d.intermediate, d.local_experts, d.permuted_rows);
    let n = key.mma_n;
    // Each CTA of a 2-CTA pair loads N / 2 rows of B, and half of a K stage's SFB, which it
    // multicasts to both: its own 128-row block at N = 256, two of the four atoms at N = 128.
    let b_rows = n / key.cta_group();
    let sfb_box = match (key.cta_group(), n.div_ceil(128)) {
        (1, blocks) => [4, blocks],
        (_, 1) => [2, 1],
        _ => [4, 1],
    };
    // W1's rows per expert: 2I gated, I for ReLU² (`Activation::w1_rows`).
    let w1_rows = match key.gemm {
        GemmKind::Gemm1 if !key.activation.gated() => i,
        _ => 2 * i,
    };
    match map {
        TensorMap::W1 => fp4(
            Buffer::W1,
            vec![h, w1_rows, l],
            vec![h / 2, w1_rows * h / 2],
            vec![256, b_rows, 1],
            128,
        ),
        TensorMap::W1Scales => scales(Buffer::W1Scales, (h, 16), w1_rows, Some(l), sfb_box),
        TensorMap::Gemm1OutputStore => {
            fp4(Buffer::Gemm1Output, vec![i, rows], vec![i / 2], vec![n / 2, 32], 0)
        }
        TensorMap::Gemm1OutputLoad => {
            fp4(Buffer::Gemm1Output, vec![i, rows], vec![i / 2], vec![256, 128], 128)
        }
        TensorMap::Gemm1OutputScales => {
            scales(Buffer::Gemm1OutputScales, (i, 16), rows, None, [4, 1])
        }
        TensorMap::W2 => {
            fp4(Buffer::W2, vec![i, h, l], vec![i / 2, h * i / 2], vec![256, b_rows, 1], 128)
        }
        TensorMap::W2Scales => scales(Buffer::W2Scales, (i, 16), h, Some(l), sfb_box),
        TensorMap::Gemm1HiddenLoad => TensorMapLayout {
            buffer: Buffer::Gemm1OutputBf16,
            element: TmaElement::U16,
            dims: vec![i, rows],
            strides: vec![i * 2],
            box_dims: vec![64, key.tile.rows()],
            swizzle: 128,
        },
        TensorMap::Gemm1HiddenFp8Load => {
            let ip = i.next_multiple_of(128);
            TensorMapLayout {
                buffer: Buffer::Gemm1OutputFp8,
                element: TmaElement::U8,
                dims: vec![ip, rows],
                strides: vec![ip],
                box_dims: vec![128, key.tile.rows()],
                swizzle: 128,
            }
        }
    }
}

/// [`layout`] for the MXFP8 × MXFP4 kernels (docs/sm100-mxf8f6f4.md): weights padded to
/// Kp(K) = K rounded up to 128 codes per row and loaded through the padding type; E4M3
/// h; UE8M0 scales one per 32, so a K stage of 128 takes one atom per 128 rows. A 2-CTA
/// pair splits SFB by row block at N = 256 and each CTA loads the stage's one atom itself
/// at N ≤ 128 (nothing to split).
fn mx_layout(map: TensorMap, key: &GemmKey, d: &MapDims) -> TensorMapLayout {
    let (h, i, l, rows) = (d.hidden, d.intermediate, d.local_experts, d.permuted_rows);
    let (hp, ip) = (h.next_multiple_of(128), i.next_multiple_of(128));
    let n = key.mma_n;
    let b_rows = n / key.cta_group();
    let sfb_box = match key.cta_group() {
        1 => [1, n.div_ceil(128)],
        _ => [1, 1],
    };
    let w1_rows = match key.gemm {
        GemmKind::Gemm1 if !key.activation.gated() => i,
        _ => 2 * i,
    };
    let padded = |buffer, k: u64, rows: u64| TensorMapLayout {
        buffer,
        element: TmaElement::U4Padded,
        dims: vec![k, rows, l],
        strides: vec![k / 2, rows * k / 2],
        box_dims: vec![128, b_rows, 1],
        swizzle: 128,
    };
    let fp8 = |box_dims: Vec<u32>, swizzle| TensorMapLayout {
        buffer: Buffer::Gemm1Output,
        element: TmaElement::U8,
        dims: vec![i, rows],
        strides: vec![i],
        box_dims,
        swizzle,
    };
    match map {
        TensorMap::W1 => padded(Buffer::W1, hp, w1_rows),
        TensorMap::W1Scales => scales(Buffer::W1Scales, (hp, 32), w1_rows, Some(l), sfb_box),
        TensorMap::Gemm1OutputStore => fp8(vec![n / 2, 32], 0),
        TensorMap::Gemm1OutputLoad => fp8(vec![128, 128], 128),
        TensorMap::Gemm1OutputScales => {
            scales(Buffer::Gemm1OutputScales, (ip, 32), rows, None, [1, 1])
        }
        TensorMap::W2 => padded(Buffer::W2, ip, h),
        TensorMap::W2Scales => scales(Buffer::W2Scales, (ip, 32), h, Some(l), sfb_box),
        // Hopper's maps: the NVFP4 form (no MXFP8 kernel binds them).
        TensorMap::Gemm1HiddenLoad | TensorMap::Gemm1HiddenFp8Load => {
            let nv = GemmKey { activations: ActivationFormat::Nvfp4, ..*key };
            layout(map, &nv, d)
        }
    }
}
