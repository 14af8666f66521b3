//! One device workspace for the whole layer stack: every buffer the routing sort and the
//! GEMMs exchange, sized so that any tile size and any layer of the model can use it.
//! Tile-indexed arrays take the largest tile count (smallest T), row-indexed arrays the
//! largest padded row count (largest T), so no tactic is favoured by its allocation during
//! tuning (FlashInfer PR #3252).

use super::error::{PlanError, Result};
use super::sizing::{expanded_rows, max_permuted_rows, max_tiles};
use crate::abi::Buffer;
use crate::abi::launch::ROUTES_PER_BLOCK;
use crate::formats::Scale128x4;
use crate::options::ActivationFormat;
use crate::tactic::{Arch, TileSize};

/// Words of the device-side error record (layout: [`crate::abi::error_record`]).
pub const ERROR_WORDS: u64 = crate::abi::error_record::WORDS as u64;

/// Alignment of every buffer's offset (TMA needs 16 B; 256 B keeps rows of different
/// buffers off shared cache lines and matches allocator granularity).
pub const BUFFER_ALIGN: u64 = 256;

/// What the workspace must serve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkspaceRequest {
    /// Largest token count a launch may carry.
    pub tokens: u64,
    /// Routes per token.
    pub top_k: u64,
    /// Experts resident on this rank.
    pub local_experts: u64,
    /// Per-expert intermediate size I; adds GEMM1's NVFP4 output and its scales.
    pub intermediate: Option<u64>,
    /// Hidden size H; adds the deterministic finalize scratch `[N·k, H]` bf16.
    pub hidden: Option<u64>,
    /// Tile sizes the workspace must serve.
    pub tile_sizes: Vec<TileSize>,
    /// Include the deterministic finalize's `[N·k, H]` scratch in the shared workspace
    /// (needs `hidden`); otherwise it is only reported.
    pub deterministic_scratch: bool,
    /// The generation whose kernels use it: SM100 exchanges NVFP4 or MXFP8 activations and
    /// h; Hopper exchanges them in bf16 (and E4M3 for A8).
    pub arch: Arch,
    /// What the activations entering GEMM1 are, which decides the buffers between the
    /// routing sort and GEMM2: on SM100 NVFP4 (a byte per two values and a scale per 16) or
    /// MXFP8 (a byte per value, a scale per 32, rows of scales padded to whole 128-wide K
    /// stages); on Hopper A4 (NVFP4: the dequantized bf16 rows), A16 (bf16: none besides
    /// h) or A8 (FP8: E4M3 rows of x and h and their row scales).
    pub activations: ActivationFormat,
}

/// One buffer of a plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BufferPlan {
    /// Which buffer (its kernel-facing name is `buffer.name()`).
    #[serde(rename = "name")]
    pub buffer: Buffer,
    /// Element type as the kernels see it.
    pub dtype: &'static str,
    /// Element count.
    pub elements: u64,
    /// Bytes.
    pub bytes: u64,
    /// Byte offset in the workspace (aligned to [`BUFFER_ALIGN`]).
    pub offset: u64,
}

/// Sizes for one tile size alone.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TilePlan {
    /// Tile rows.
    pub tile_size: u32,
    /// Worst-case routing tiles.
    pub max_tiles: u64,
    /// Worst-case padded rows.
    pub max_permuted_rows: u64,
    /// Buffers, laid out one after another.
    pub buffers: Vec<BufferPlan>,
    /// End of the last buffer.
    pub workspace_bytes: u64,
}

/// The shared plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WorkspacePlan {
    /// N·k.
    pub expanded_rows: u64,
    /// Each tile size on its own.
    pub per_tile: Vec<TilePlan>,
    /// Tile arrays at the largest tile count, row arrays at the largest row count.
    pub shared: Vec<BufferPlan>,
    /// Bytes of the shared workspace (without the deterministic scratch).
    pub workspace_bytes: u64,
    /// The deterministic finalize's `[N·k, H]` bf16 scratch, if `hidden` was given (part of
    /// `shared` when the request asked for it).
    pub deterministic_scratch_bytes: Option<u64>,
}

struct Sizes {
    tokens: u64,
    expanded: u64,
    tiles: u64,
    rows: u64,
    local_experts: u64,
    intermediate: Option<u64>,
    hidden: Option<u64>,
    scratch: bool,
    arch: Arch,
    activations: ActivationFormat,
}

fn check_i32(what: &'static str, value: u64) -> Result<()> {
    if value > i32::MAX as u64 {
        return Err(PlanError::IndexTooLarge { what, value });
    }
    Ok(())
}

fn buffers(s: &Sizes) -> Result<Vec<BufferPlan>> {
    let mut specs: Vec<(Buffer, &'static str, u64, u64)> = vec![
        (Buffer::TileIdxToExpertIdx, "i32", s.tiles, 4),
        (Buffer::TileIdxToMnLimit, "i32", s.tiles, 4),
        (Buffer::ExpandedIdxToPermutedIdx, "i32", s.expanded, 4),
        (Buffer::PermutedIdxToExpandedIdx, "i32", s.rows, 4),
        (Buffer::NumNonExitingTiles, "i32", 1, 4),
        (Buffer::TotalNumPaddedTokens, "i32", 1, 4),
        (Buffer::ErrorFlags, "u32", ERROR_WORDS, 4),
    ];
    let overflow = PlanError::Overflow { what: "routing sort scratch" };
    let blocks = s.expanded.div_ceil(u64::from(ROUTES_PER_BLOCK));
    let counts = blocks.checked_mul(s.local_experts).ok_or(overflow)?;
    specs.push((Buffer::SortBlockCounts, "i32", counts, 4));
    if let Some(h) = s.hidden {
        let overflow = PlanError::Overflow { what: "quantized activations size" };
        let values = s.tokens.checked_mul(h).ok_or(overflow.clone())?;
        if s.arch == Arch::Sm90 {
            // A4: the quantize-dequantize's bf16 rows; A8: E4M3 rows padded to whole
            // 128-wide K stages; A16 reads the caller's bf16 rows.
            match s.activations {
                ActivationFormat::Nvfp4 => {
                    specs.push((Buffer::ActivationsDequantized, "bf16", values, 2))
                }
                ActivationFormat::Fp8 => {
                    let row = h.checked_next_multiple_of(128).ok_or(overflow.clone())?;
                    let padded = s.tokens.checked_mul(row).ok_or(overflow.clone())?;
                    specs.push((Buffer::ActivationsFp8, "e4m3", padded, 1));
                }
                _ => {}
            }
        } else if s.activations == ActivationFormat::Mxfp8 {
            specs.push((Buffer::Activations, "e4m3", values, 1));
            let row = h.checked_next_multiple_of(128).ok_or(overflow.clone())? / 32;
            let scales = s.tokens.checked_mul(row).ok_or(overflow.clone())?;
            specs.push((Buffer::ActivationScales, "ue8m0 (linear)", scales, 1));
        } else {
            specs.push((Buffer::Activations, "e2m1x2", values / 2, 1));
            specs.push((Buffer::ActivationScales, "ue4m3 (linear)", values / 16, 1));
        }
        if s.scratch {
            let overflow = PlanError::Overflow { what: "deterministic scratch size" };
            let rows = s.expanded.checked_mul(h).ok_or(overflow)?;
            specs.push((Buffer::FinalizeScratch, "bf16", rows, 2));
        }
    }
    if let Some(i) = s.intermediate {
        let overflow = PlanError::Overflow { what: "GEMM1 output size" };
        if s.arch == Arch::Sm90 {
            let values = s.rows.checked_mul(i).ok_or(overflow.clone())?;
            specs.push((Buffer::Gemm1OutputBf16, "bf16", values, 2));
            if s.activations == ActivationFormat::Fp8 {
                // A8: h in E4M3 (rows padded to whole 128-wide K stages) and both GEMMs'
                // row scales.
                let row = i.checked_next_multiple_of(128).ok_or(overflow.clone())?;
                let padded = s.rows.checked_mul(row).ok_or(overflow)?;
                specs.push((Buffer::Gemm1OutputFp8, "e4m3", padded, 1));
                specs.push((Buffer::Gemm1OutputRowScales, "f32", s.rows, 4));
                specs.push((Buffer::ActivationRowScales, "f32", s.rows, 4));
            }
        } else {
            // NVFP4: two values a byte, a scale per 16; MXFP8: a value a byte, a scale per
            // 32 of I padded to 128.
            let (values, cols, dtypes) = if s.activations == ActivationFormat::Mxfp8 {
                let row = i.checked_next_multiple_of(128).ok_or(overflow.clone())?;
                (i, row / 32, ("e4m3", "ue8m0 (128x4)"))
            } else {
                (i / 2, i / 16, ("e2m1x2", "ue4m3 (128x4)"))
            };
            let bytes = s.rows.checked_mul(values).ok_or(overflow.clone())?;
            let rows = usize::try_from(s.rows).map_err(|_| overflow.clone())?;
            let cols = usize::try_from(cols).map_err(|_| overflow.clone())?;
            let scales = Scale128x4::new(rows, cols).map_err(|_| overflow.clone())?.bytes() as u64;
            specs.push((Buffer::Gemm1Output, dtypes.0, bytes, 1));
            specs.push((Buffer::Gemm1OutputScales, dtypes.1, scales, 1));
        }
    }
    let mut out = Vec::with_capacity(specs.len());
    let mut offset = 0u64;
    let overflow = PlanError::Overflow { what: "workspace size" };
    for (buffer, dtype, elements, size) in specs {
        let bytes = elements.checked_mul(size).ok_or(overflow.clone())?;
        out.push(BufferPlan { buffer, dtype, elements, bytes, offset });
        offset = offset
            .checked_add(bytes)
            .and_then(|e| e.checked_next_multiple_of(BUFFER_ALIGN))
            .ok_or(overflow.clone())?;
    }
    Ok(out)
}

fn end_of(buffers: &[BufferPlan]) -> u64 {
    buffers.last().map_or(0, |b| b.offset + b.bytes)
}

/// Plans the workspace; every count is checked to fit the kernels' i32 indices.
pub fn plan_workspace(req: &WorkspaceRequest) -> Result<WorkspacePlan> {
    let expanded = expanded_rows(req.tokens, req.top_k)?;
    check_i32("tokens × top_k", expanded)?;
    if req.tile_sizes.is_empty() {
        return Err(PlanError::Zero { what: "tile size count" });
    }
    let sm100 = matches!(req.activations, ActivationFormat::Nvfp4 | ActivationFormat::Mxfp8);
    if req.arch == Arch::Sm100 && !sm100
        || req.arch == Arch::Sm90 && req.activations == ActivationFormat::Mxfp8
    {
        return Err(PlanError::Activations { arch: req.arch, activations: req.activations });
    }
    if let Some(i) = req.intermediate {
        if i == 0 {
            return Err(PlanError::Zero { what: "intermediate size" });
        }
        if !i.is_multiple_of(64) {
            return Err(PlanError::Alignment {
                what: "intermediate size",
                value: i,
                multiple: 64,
                why: " (W1's up/gate interleave)",
            });
        }
    }
    if req.deterministic_scratch && req.hidden.is_none() {
        return Err(PlanError::Zero { what: "hidden size (the deterministic scratch needs it)" });
    }
    if let Some(h) = req.hidden
        && h != 0
        && !h.is_multiple_of(16)
    {
        return Err(PlanError::Alignment {
            what: "hidden size",
            value: h,
            multiple: 16,
            why: " (NVFP4 scale blocks)",
        });
    }
    let mut tiles = req.tile_sizes.clone();
    tiles.sort();
    tiles.dedup();
    let mut per_tile = Vec::with_capacity(tiles.len());
    for t in tiles {
        let tile = u64::from(t.rows());
        let sizes = Sizes {
            tokens: req.tokens,
            expanded,
            tiles: max_tiles(expanded, req.local_experts, tile)?,
            rows: max_permuted_rows(expanded, req.local_experts, tile)?,
            local_experts: req.local_experts,
            intermediate: req.intermediate,
            hidden: req.hidden,
            scratch: req.deterministic_scratch,
            arch: req.arch,
            activations: req.activations,
        };
        check_i32("max_permuted_rows", sizes.rows)?;
        let b = buffers(&sizes)?;
        per_tile.push(TilePlan {
            tile_size: t.rows(),
            max_tiles: sizes.tiles,
            max_permuted_rows: sizes.rows,
            workspace_bytes: end_of(&b),
            buffers: b,
        });
    }
    // The maxima, taken explicitly rather than assumed from the tile order.
    let shared_sizes = Sizes {
        tokens: req.tokens,
        expanded,
        tiles: per_tile.iter().map(|p| p.max_tiles).max().unwrap_or(0),
        rows: per_tile.iter().map(|p| p.max_permuted_rows).max().unwrap_or(0),
        local_experts: req.local_experts,
        intermediate: req.intermediate,
        hidden: req.hidden,
        scratch: req.deterministic_scratch,
        arch: req.arch,
        activations: req.activations,
    };
    let shared = buffers(&shared_sizes)?;
    let deterministic_scratch_bytes = match req.hidden {
        None => None,
        Some(0) => return Err(PlanError::Zero { what: "hidden size" }),
        Some(h) => Some(
            expanded
                .checked_mul(h)
                .and_then(|v| v.checked_mul(2))
                .ok_or(PlanError::Overflow { what: "deterministic scratch size" })?,
        ),
    };
    Ok(WorkspacePlan {
        expanded_rows: expanded,
        per_tile,
        workspace_bytes: end_of(&shared),
        shared,
        deterministic_scratch_bytes,
    })
}

impl WorkspacePlan {
    /// The shared buffer `b`, if the plan has it.
    pub fn buffer(&self, b: Buffer) -> Option<&BufferPlan> {
        self.shared.iter().find(|p| p.buffer == b)
    }
    /// The most tiles any served tile size can need (the tile arrays' length).
    pub fn tile_capacity(&self) -> u64 {
        self.per_tile.iter().map(|p| p.max_tiles).max().unwrap_or(0)
    }
    /// The most permuted rows any served tile size can need (the row arrays' length).
    pub fn row_capacity(&self) -> u64 {
        self.per_tile.iter().map(|p| p.max_permuted_rows).max().unwrap_or(0)
    }
    /// The plan for tile size `t`, if served.
    pub fn tile(&self, t: TileSize) -> Option<&TilePlan> {
        self.per_tile.iter().find(|p| p.tile_size == t.rows())
    }
}
