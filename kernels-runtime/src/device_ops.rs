//! Host code that runs the generated SIMT kernels on a [`Backend`]: the routing sort,
//! activation quantization and the deterministic finalize. Each returns what its CPU
//! counterpart returns, so results compare directly. Every launch is built from the
//! kernel's typed ABI ([`crate::launch`]).

use half::bf16;
use moegen_dsl::TileSize;
use moegen_dsl::abi::ep::Padding;
use moegen_dsl::abi::launch::ROUTES_PER_BLOCK;
use moegen_dsl::abi::{Buffer, KernelId, KernelInfo, Scalar, SimtFamily};
use moegen_dsl::plan::{PlanError, max_permuted_rows, max_tiles};

use crate::backend::{Backend, BackendError, DevicePtr};
use crate::error::RuntimeError;
use crate::error_record::{RESET, RecordError, decode};
use crate::launch::{Bindings, GridInputs, LaunchError, kernel_args, launch_shape_on};
use crate::reference::Nvfp4Activations;
use crate::routing::{ExpertWindow, SortOutputs};

/// A device-side failure or an invalid input.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DeviceOpError {
    /// Invalid input.
    #[error(transparent)]
    Input(#[from] RuntimeError),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A launch could not be built from the kernel's ABI.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// A kernel this device needs is not in the kernel set (or its cargo feature is off).
    #[error("kernel {0} is not in the kernel set (for sm90 kernels enable the `sm90` feature)")]
    MissingKernel(String),
    /// The routing kernels' error record reports something other than invalid input.
    #[error(transparent)]
    Record(RecordError),
}

impl From<PlanError> for DeviceOpError {
    fn from(e: PlanError) -> Self {
        DeviceOpError::Input(e.into())
    }
}

/// The generated kernel with identity `id`.
pub fn find_kernel(id: &KernelId) -> Result<&'static KernelInfo, DeviceOpError> {
    moegen_kernels::find(id).ok_or_else(|| DeviceOpError::MissingKernel(id.name()))
}

/// The SIMT kernel `family` in the flavour `b` runs.
pub fn simt_kernel(
    b: &dyn Backend,
    family: SimtFamily,
) -> Result<&'static KernelInfo, DeviceOpError> {
    find_kernel(&KernelId::Simt { family, target: b.simt_target() })
}

/// Builds and runs one launch.
pub fn run(
    b: &mut dyn Backend,
    k: &'static KernelInfo,
    bind: &Bindings,
    grid: &GridInputs,
) -> Result<(), DeviceOpError> {
    let args = kernel_args(b, k, bind)?;
    let shape = launch_shape_on(b, k, grid)?;
    b.launch(k, shape, &args)?;
    Ok(())
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

impl SortBuffers {
    /// Binds the six outputs.
    pub fn bind(&self, b: Bindings) -> Bindings {
        b.buffer(Buffer::TileIdxToExpertIdx, self.tile_expert)
            .buffer(Buffer::TileIdxToMnLimit, self.tile_limit)
            .buffer(Buffer::ExpandedIdxToPermutedIdx, self.e2p)
            .buffer(Buffer::PermutedIdxToExpandedIdx, self.p2e)
            .buffer(Buffer::NumNonExitingTiles, self.live)
            .buffer(Buffer::TotalNumPaddedTokens, self.padded)
    }
}

/// Runs the three routing-sort kernels with `accept_padding` from `padding`, leaving the
/// outputs on the device.
pub fn device_moe_sort_buffers(
    b: &mut dyn Backend,
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
    padding: Padding,
) -> Result<SortBuffers, DeviceOpError> {
    let routes = tokens
        .checked_mul(window.top_k())
        .ok_or(PlanError::Overflow { what: "tokens × top_k" })?;
    if tokens == 0 {
        return Err(PlanError::Zero { what: "tokens" }.into());
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
    let l = window.local();
    let tiles = max_tiles(routes as u64, l as u64, t as u64)? as usize;
    let rows = max_permuted_rows(routes as u64, l as u64, t as u64)? as usize;
    let blocks = routes.div_ceil(ROUTES_PER_BLOCK as usize);
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
    // The standalone sort has no router weights to check: it binds 1.0 for every route.
    let d_weights = b.upload_new(&1f32.to_le_bytes().repeat(routes))?;
    let d_flags = b.upload_new(&reset_record())?;
    let bind = out
        .bind(Bindings::new())
        .buffer(Buffer::RoutedExperts, d_experts)
        .buffer(Buffer::RouterWeights, d_weights)
        .buffer(Buffer::SortBlockCounts, d_counts)
        .buffer(Buffer::ErrorFlags, d_flags)
        .scalar(Scalar::NumRoutes, routes as u64)?
        .scalar(Scalar::TopK, window.top_k() as u64)?
        .scalar(Scalar::NumExperts, window.num_experts() as u64)?
        .scalar(Scalar::LocalOffset, window.offset() as u64)?
        .scalar(Scalar::LocalExperts, l as u64)?
        .scalar(Scalar::AcceptPadding, padding.scalar())?
        .scalar(Scalar::SortBlocks, blocks as u64)?
        .scalar(Scalar::TileSize, t as u64)?
        .scalar(Scalar::MaxTiles, tiles as u64)?
        .scalar(Scalar::MaxPermutedRows, rows as u64)?;
    let grid =
        GridInputs { routes: routes as u64, local_experts: l as u64, ..GridInputs::default() };
    // As the layer's forward: one launch when one block holds every route.
    let families: &[SimtFamily] = if blocks <= 1 {
        &[SimtFamily::MoeSortSingle]
    } else {
        &[SimtFamily::MoeSortHistogram, SimtFamily::MoeSortOffsets, SimtFamily::MoeSortScatter]
    };
    for &family in families {
        let k = simt_kernel(b, family)?;
        run(b, k, &bind, &grid)?;
    }
    let record: Vec<u32> =
        from_bytes_i32(&b.download(d_flags, RESET.len() * 4)?).iter().map(|&v| v as u32).collect();
    decode(&record, window.top_k(), window.num_experts()).map_err(|e| match e {
        RecordError::Input(e) => DeviceOpError::Input(e),
        other => DeviceOpError::Record(other),
    })?;
    Ok(out)
}

/// The error record's reset value as bytes.
fn reset_record() -> Vec<u8> {
    RESET.iter().flat_map(|w| w.to_le_bytes()).collect()
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

/// Runs the three routing-sort kernels and reads the six outputs back: the device side of
/// `moe_sort` ([`Padding::Refuse`]).
pub fn device_moe_sort(
    b: &mut dyn Backend,
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
) -> Result<SortOutputs, DeviceOpError> {
    device_moe_sort_padding(b, experts, tokens, window, tile, Padding::Refuse)
}

/// [`device_moe_sort`] under `padding`: the device side of `moe_sort_padding`.
pub fn device_moe_sort_padding(
    b: &mut dyn Backend,
    experts: &[i32],
    tokens: usize,
    window: &ExpertWindow,
    tile: TileSize,
    padding: Padding,
) -> Result<SortOutputs, DeviceOpError> {
    let s = device_moe_sort_buffers(b, experts, tokens, window, tile, padding)?;
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
        return Err(PlanError::Zero { what: "activation shape" }.into());
    }
    if !hidden.is_multiple_of(16) {
        return Err(PlanError::Alignment {
            what: "hidden size",
            value: hidden as u64,
            multiple: 16,
            why: " (NVFP4 scale blocks)",
        }
        .into());
    }
    let n = tokens.checked_mul(hidden).ok_or(PlanError::Overflow { what: "activation size" })?;
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
    let bind = Bindings::new()
        .buffer(Buffer::ActivationsBf16, d_x)
        .buffer(Buffer::Activations, d_out)
        .buffer(Buffer::ActivationScales, d_sf)
        .buffer(Buffer::ActivationGlobalScale, d_g)
        .scalar(Scalar::Tokens, tokens as u64)?
        .scalar(Scalar::Hidden, hidden as u64)?;
    let k = simt_kernel(b, SimtFamily::QuantizeNvfp4)?;
    let grid = GridInputs { tokens: tokens as u64, hidden: hidden as u64, ..GridInputs::default() };
    run(b, k, &bind, &grid)?;
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
    let routes = tokens.checked_mul(top_k).ok_or(PlanError::Overflow { what: "routes" })?;
    let elements = routes.checked_mul(hidden).ok_or(PlanError::Overflow { what: "scratch" })?;
    if !hidden.is_multiple_of(2) {
        return Err(PlanError::Alignment {
            what: "hidden size",
            value: hidden as u64,
            multiple: 2,
            why: " (bf16 pairs)",
        }
        .into());
    }
    if contributions.len() != elements {
        return Err(RuntimeError::BufferLength {
            what: "finalize contributions",
            expected: elements,
            actual: contributions.len(),
        }
        .into());
    }
    if expanded_idx_to_permuted_idx.len() != routes {
        return Err(RuntimeError::BufferLength {
            what: "expanded_idx_to_permuted_idx",
            expected: routes,
            actual: expanded_idx_to_permuted_idx.len(),
        }
        .into());
    }
    let scratch: Vec<u8> =
        contributions.iter().flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes()).collect();
    let d_s = b.upload_new(&scratch)?;
    let d_e2p = b.upload_new(&to_bytes_i32(expanded_idx_to_permuted_idx))?;
    let d_out = b.alloc(tokens * hidden * 2)?;
    let bind = Bindings::new()
        .buffer(Buffer::FinalizeScratch, d_s)
        .buffer(Buffer::ExpandedIdxToPermutedIdx, d_e2p)
        .buffer(Buffer::Output, d_out)
        .scalar(Scalar::Tokens, tokens as u64)?
        .scalar(Scalar::Hidden, hidden as u64)?
        .scalar(Scalar::TopK, top_k as u64)?;
    let k = simt_kernel(b, SimtFamily::FinalizeReduce)?;
    let grid = GridInputs { tokens: tokens as u64, hidden: hidden as u64, ..GridInputs::default() };
    run(b, k, &bind, &grid)?;
    let out = b.download(d_out, tokens * hidden * 2)?;
    Ok(out.chunks_exact(2).map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect())
}
