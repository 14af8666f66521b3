//! Host code that runs the generated SIMT kernels on a [`Backend`]: the routing sort,
//! activation quantization and the deterministic finalize. Each returns what its CPU
//! counterpart returns, so results compare directly.

use half::bf16;
use moegen_dsl::TileSize;

use crate::backend::{Backend, BackendError, DevicePtr, KernelArg, LaunchShape};
use crate::error::RuntimeError;
use crate::reference::Nvfp4Activations;
use crate::routing::{ExpertWindow, SortOutputs};
use crate::sizing::{max_permuted_rows, max_tiles};

/// Routes per histogram/scatter block (the kernels' constant).
const ROUTES_PER_BLOCK: usize = 1024;

/// A device-side failure or an invalid input.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DeviceOpError {
    /// Invalid input.
    #[error(transparent)]
    Input(#[from] RuntimeError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A kernel of the default set is missing.
    #[error("kernel {0} is not in moegen-kernels")]
    MissingKernel(String),
    /// The kernels flagged invalid input (bit 0: expert id out of range; bit 1: capacity).
    #[error("the routing kernels raised error flags {0:#x}")]
    Flags(u32),
}

pub(crate) fn kernel(
    b: &dyn Backend,
    family: &str,
) -> Result<(&'static str, &'static str), DeviceOpError> {
    let name = format!("moegen_{}_{family}", b.kernel_tag());
    moegen_kernels::kernel(&name).map(|k| (k.ptx, k.name)).ok_or(DeviceOpError::MissingKernel(name))
}

pub(crate) fn to_bytes_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn from_bytes_i32(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Device buffers of the routing sort's outputs.
#[derive(Clone, Copy, Debug)]
pub struct SortBuffers {
    /// Tile arrays' length.
    pub max_tiles: usize,
    /// Row arrays' length.
    pub max_rows: usize,
    /// Routes (N·k).
    pub routes: usize,
    /// `tile_idx_to_expert_idx`.
    pub tile_expert: DevicePtr,
    /// `tile_idx_to_mn_limit`.
    pub tile_limit: DevicePtr,
    /// `expanded_idx_to_permuted_idx`.
    pub e2p: DevicePtr,
    /// `permuted_idx_to_expanded_idx`.
    pub p2e: DevicePtr,
    /// `num_non_exiting_tiles`.
    pub live: DevicePtr,
    /// `total_num_padded_tokens`.
    pub padded: DevicePtr,
}

/// Runs the three routing-sort kernels, leaving the outputs on the device.
pub fn device_moe_sort_buffers(
    b: &mut dyn Backend,
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
) -> Result<SortBuffers, DeviceOpError> {
    let routes = tokens
        .checked_mul(window.top_k)
        .ok_or(RuntimeError::Overflow { what: "tokens × top_k" })?;
    if tokens == 0 {
        return Err(RuntimeError::Zero { what: "tokens" }.into());
    }
    if experts.len() != routes {
        return Err(RuntimeError::BufferLength {
            what: "routing experts",
            expected: routes,
            actual: experts.len(),
        }
        .into());
    }
    let t = tile.rows() as usize;
    let tiles = max_tiles(routes as u64, window.local as u64, t as u64)? as usize;
    let rows = max_permuted_rows(routes as u64, window.local as u64, t as u64)? as usize;
    let blocks = routes.div_ceil(ROUTES_PER_BLOCK);
    let l = window.local;
    let d_experts = b.upload_new(&to_bytes_i32(experts))?;
    let d_counts = b.alloc(blocks * l * 4)?;
    let out = SortBuffers {
        max_tiles: tiles,
        max_rows: rows,
        routes,
        tile_expert: b.alloc(tiles * 4)?,
        tile_limit: b.alloc(tiles * 4)?,
        e2p: b.alloc(routes * 4)?,
        p2e: b.alloc(rows * 4)?,
        live: b.alloc(4)?,
        padded: b.alloc(4)?,
    };
    let d_flags = b.alloc(4)?;
    let u = |v: usize| KernelArg::U32(v as u32);
    let p = KernelArg::Ptr;
    let common =
        [p(d_experts), u(routes), u(window.num_experts), u(window.offset), u(l), p(d_counts)];
    let (ptx, name) = kernel(b, "moe_sort_histogram")?;
    let mut args = common.to_vec();
    args.push(p(d_flags));
    b.launch(
        ptx,
        name,
        LaunchShape { grid: blocks as u32, block: 256, dynamic_smem: (4 * l) as u32 },
        &args,
    )?;
    let (ptx, name) = kernel(b, "moe_sort_offsets")?;
    let args = [
        u(blocks),
        u(l),
        u(t),
        u(tiles),
        p(d_counts),
        p(out.tile_expert),
        p(out.tile_limit),
        p(out.p2e),
        p(out.live),
        p(out.padded),
        p(d_flags),
    ];
    b.launch(
        ptx,
        name,
        LaunchShape { grid: 1, block: 256, dynamic_smem: (8 * l + 4) as u32 },
        &args,
    )?;
    let (ptx, name) = kernel(b, "moe_sort_scatter")?;
    let mut args = common.to_vec();
    args.extend([p(out.e2p), p(out.p2e), u(rows), p(d_flags)]);
    b.launch(
        ptx,
        name,
        LaunchShape { grid: blocks as u32, block: 256, dynamic_smem: 4096 },
        &args,
    )?;
    let flags = from_bytes_i32(&b.download(d_flags, 4)?)[0] as u32;
    if flags != 0 {
        return Err(DeviceOpError::Flags(flags));
    }
    Ok(out)
}

/// Reads the routing sort's outputs back.
pub fn read_sort(
    b: &mut dyn Backend,
    s: &SortBuffers,
    tile: TileSize,
) -> Result<SortOutputs, DeviceOpError> {
    let read = |b: &mut dyn Backend, ptr: DevicePtr, n: usize| {
        b.download(ptr, n * 4).map(|v| from_bytes_i32(&v))
    };
    Ok(SortOutputs {
        tile,
        tile_idx_to_expert_idx: read(b, s.tile_expert, s.max_tiles)?,
        tile_idx_to_mn_limit: read(b, s.tile_limit, s.max_tiles)?,
        expanded_idx_to_permuted_idx: read(b, s.e2p, s.routes)?,
        permuted_idx_to_expanded_idx: read(b, s.p2e, s.max_rows)?,
        num_non_exiting_tiles: read(b, s.live, 1)?[0],
        total_num_padded_tokens: read(b, s.padded, 1)?[0],
    })
}

/// Runs the three routing-sort kernels and reads the six outputs back.
pub fn device_moe_sort(
    b: &mut dyn Backend,
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
) -> Result<SortOutputs, DeviceOpError> {
    let s = device_moe_sort_buffers(b, experts, tokens, window, tile)?;
    read_sort(b, &s, tile)
}

/// Quantizes bf16 activations on the device (global scale passed through device memory).
pub fn device_quantize(
    b: &mut dyn Backend,
    x: &[bf16],
    tokens: usize,
    hidden: usize,
    global_scale: f32,
) -> Result<Nvfp4Activations, DeviceOpError> {
    if tokens == 0 || hidden == 0 {
        return Err(RuntimeError::Zero { what: "activation shape" }.into());
    }
    if !hidden.is_multiple_of(16) {
        return Err(
            RuntimeError::Alignment { what: "hidden size", value: hidden, multiple: 16 }.into()
        );
    }
    let n = tokens.checked_mul(hidden).ok_or(RuntimeError::Overflow { what: "activation size" })?;
    if x.len() != n {
        return Err(RuntimeError::BufferLength {
            what: "activations",
            expected: n,
            actual: x.len(),
        }
        .into());
    }
    if !(global_scale.is_finite() && global_scale > 0.0) {
        return Err(RuntimeError::BadScale { what: "global scale", value: global_scale }.into());
    }
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    let d_x = b.upload_new(&bytes)?;
    let d_out = b.alloc(n / 2)?;
    let d_sf = b.alloc(n / 16)?;
    let d_g = b.upload_new(&global_scale.to_le_bytes())?;
    let (ptx, name) = kernel(b, "quantize_nvfp4")?;
    let blocks = (n / 16).div_ceil(256).min(4096) as u32;
    let args = [
        KernelArg::Ptr(d_x),
        KernelArg::Ptr(d_out),
        KernelArg::Ptr(d_sf),
        KernelArg::Ptr(d_g),
        KernelArg::U32(tokens as u32),
        KernelArg::U32(hidden as u32),
    ];
    b.launch(ptx, name, LaunchShape { grid: blocks, block: 256, dynamic_smem: 0 }, &args)?;
    Ok(Nvfp4Activations {
        tokens,
        hidden,
        packed: b.download(d_out, n / 2)?,
        scales: b.download(d_sf, n / 16)?,
        global_scale,
    })
}

/// The deterministic finalize on the device: `contributions` is `[N·k, H]` (the reference's
/// per-route bf16 values as f32); non-local routes (e2p < 0) are skipped.
pub fn device_finalize_reduce(
    b: &mut dyn Backend,
    contributions: &[f32],
    expanded_idx_to_permuted_idx: &[i32],
    tokens: usize,
    top_k: usize,
    hidden: usize,
) -> Result<Vec<bf16>, DeviceOpError> {
    let routes = tokens * top_k;
    if contributions.len() != routes * hidden
        || expanded_idx_to_permuted_idx.len() != routes
        || !hidden.is_multiple_of(2)
    {
        return Err(RuntimeError::BufferLength {
            what: "finalize inputs",
            expected: routes * hidden,
            actual: contributions.len(),
        }
        .into());
    }
    let scratch: Vec<u8> =
        contributions.iter().flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes()).collect();
    let d_s = b.upload_new(&scratch)?;
    let d_e2p = b.upload_new(&to_bytes_i32(expanded_idx_to_permuted_idx))?;
    let d_out = b.alloc(tokens * hidden * 2)?;
    let (ptx, name) = kernel(b, "finalize_reduce")?;
    let args = [
        KernelArg::Ptr(d_s),
        KernelArg::Ptr(d_e2p),
        KernelArg::Ptr(d_out),
        KernelArg::U32(tokens as u32),
        KernelArg::U32(hidden as u32),
        KernelArg::U32(top_k as u32),
    ];
    let blocks = (tokens * hidden / 2).div_ceil(256).min(4096) as u32;
    b.launch(ptx, name, LaunchShape { grid: blocks, block: 256, dynamic_smem: 0 }, &args)?;
    let out = b.download(d_out, tokens * hidden * 2)?;
    Ok(out.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect())
}
