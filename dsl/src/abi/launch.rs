//! Launch facts: threads, cluster, shared memory, TMEM and how the grid is sized. Codegen
//! writes them into the kernel's directives and the manifest; the runtime launches with them.

use super::identity::{CorpusKernel, KernelId, SimtFamily};
use super::roles::gemm_roles;
use crate::gemm_key::GemmKey;
use crate::kernel_desc::DescError;

/// Threads per block of the routing sort's histogram and scatter passes.
pub const SORT_THREADS: u32 = 256;
/// Routes each histogram/scatter block handles.
pub const ROUTES_PER_BLOCK: u32 = 1024;
/// Threads of the routing sort's one-block offsets pass.
pub const SORT_OFFSET_THREADS: u32 = 256;
/// Threads per block of the activation quantizer.
pub const QUANTIZE_THREADS: u32 = 256;
/// NVFP4 values one quantizer thread handles (one scale block).
pub const QUANTIZE_VALUES_PER_THREAD: u32 = 16;
/// Threads per block of the deterministic finalize.
pub const FINALIZE_THREADS: u32 = 256;
/// bf16 columns one finalize thread handles.
pub const FINALIZE_COLUMNS_PER_THREAD: u32 = 2;
/// Threads per block of the A8 row quantizers (one block per row).
pub const QUANT_FP8_THREADS: u32 = 256;
/// Threads of the expert-parallel dispatch pack (one block: it scans every route in
/// expanded order, `EP_PACK_THREADS` at a time).
pub const EP_PACK_THREADS: u32 = 256;
/// Threads per block of the expert-parallel row copies (gather and combine unpack).
pub const EP_COPY_THREADS: u32 = 256;
/// bf16 columns one row-copy thread handles (one 32-bit word).
pub const EP_COPY_COLUMNS_PER_THREAD: u32 = 2;
/// Most blocks a grid-stride kernel is launched with.
pub const GRID_STRIDE_MAX_BLOCKS: u32 = 4096;

/// Dynamic shared memory: `fixed + per_local_expert · L` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct SmemRule {
    /// Constant part.
    pub fixed: u32,
    /// Bytes per local expert.
    pub per_local_expert: u32,
}

impl SmemRule {
    /// Bytes for `local_experts` experts, or `None` on overflow.
    pub fn bytes(&self, local_experts: usize) -> Option<u32> {
        let l = u32::try_from(local_experts).ok()?;
        self.per_local_expert.checked_mul(l)?.checked_add(self.fixed)
    }
}

/// How a kernel's grid is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum GridRule {
    /// Persistent: any positive multiple of the cluster size, up to one CTA per work unit;
    /// typically `ctas_per_sm` CTAs per SM. Work units: [`persistent_units`].
    Persistent,
    /// `ceil(routes / per_block)` blocks.
    PerRoutes {
        /// Routes per block.
        per_block: u32,
    },
    /// Exactly one block.
    Single,
    /// Grid-stride over `tokens · hidden / values_per_thread` items, one per thread, at most
    /// `max_blocks` blocks.
    GridStride {
        /// Values each thread handles.
        values_per_thread: u32,
        /// Block cap.
        max_blocks: u32,
    },
    /// One cluster (validation kernels).
    OneCluster,
    /// Grid-stride over rows, `rows_per_block` per block at a time, at most `max_blocks`
    /// blocks.
    PerRows {
        /// Which rows.
        rows: RowCount,
        /// Rows one block handles at once.
        rows_per_block: u32,
        /// Block cap.
        max_blocks: u32,
    },
}

/// The row count a [`GridRule::PerRows`] kernel covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum RowCount {
    /// The launch's tokens.
    Tokens,
    /// The workspace's permuted rows (`max_tiles · T`).
    PermutedRows,
}

/// Everything needed to launch a kernel besides its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct LaunchFacts {
    /// Threads per CTA (`.reqntid`).
    pub threads: u32,
    /// CTAs per cluster along x (`.reqnctapercluster`; 1 without clusters).
    pub cluster: u32,
    /// Dynamic shared memory.
    pub smem: SmemRule,
    /// TMEM columns allocated (0 when none).
    pub tmem_columns: u32,
    /// Grid sizing.
    pub grid: GridRule,
    /// CTAs resident per SM that a persistent grid is sized for (1 but for Hopper GEMMs
    /// that share their SM: `abi::sm90_residency`).
    pub ctas_per_sm: u32,
    /// Launched with programmatic stream serialization (programmatic dependent launch): the
    /// kernel may start while the kernel before it in the stream runs, because it runs
    /// `griddepcontrol.wait` before it reads anything an earlier kernel of the layer writes,
    /// and on every path before it exits (so a kernel that waits on it has also waited on
    /// the one before it). The GEMMs and the deterministic finalize wait before their first
    /// global access: their set-up and block placement overlap the previous kernel's tail.
    /// The activation quantizers before GEMM1 (`quantize_nvfp4`, `quantize_mxfp8`,
    /// `qdq_nvfp4`, `quant_fp8_tokens`) read only the layer's input activations, which every
    /// earlier kernel of the stream has finished writing once the routing sort (never
    /// programmatic) has started: they quantize beside the sort and wait before
    /// `quant_fp8_tokens` places its scales by the sort's output, and before exiting
    /// (docs/kernels.md, "Programmatic launches").
    pub programmatic: bool,
}

fn simt(threads: u32, fixed: u32, per_local_expert: u32, grid: GridRule) -> LaunchFacts {
    LaunchFacts {
        threads,
        cluster: 1,
        smem: SmemRule { fixed, per_local_expert },
        tmem_columns: 0,
        grid,
        ctas_per_sm: 1,
        programmatic: false,
    }
}

impl LaunchFacts {
    fn launched_programmatically(self) -> Self {
        Self { programmatic: true, ..self }
    }
}

/// Whether a SIMT kernel is launched programmatically ([`LaunchFacts::programmatic`]): the
/// activation quantizers before GEMM1 and the deterministic finalize. The routing sort's
/// passes and the expert-parallel copies are not: the sort, started only once everything
/// before the layer has finished, is what lets the quantizers read the layer's input early.
/// Nor is `quant_fp8_rows`, between A8's GEMMs: in a build that launched it programmatically
/// gpt-oss's A8 layer took 7–8 % longer at 16 and 128 tokens on an H100 (docs/perf.md,
/// 2026-12-07 session 12; the cause not profiled), so it stays the plain launch it was.
pub const fn simt_programmatic(family: SimtFamily) -> bool {
    simt_overlaps_sort(family) || matches!(family, SimtFamily::FinalizeReduce)
}

/// The programmatic SIMT kernels that run beside the routing sort: the activation quantizers
/// launched right after it, which before their `griddepcontrol.wait` read only the layer's
/// input activations (and NVFP4's global scale) and write only their own outputs.
pub const fn simt_overlaps_sort(family: SimtFamily) -> bool {
    matches!(
        family,
        SimtFamily::QuantizeNvfp4
            | SimtFamily::QuantizeMxfp8
            | SimtFamily::QdqNvfp4
            | SimtFamily::QuantFp8Tokens
    )
}

/// Launch facts of a GEMM kernel, from its resource budget and warp roles.
pub fn gemm_launch_facts(key: &GemmKey) -> Result<LaunchFacts, DescError> {
    let desc = key.desc()?;
    let budget = desc.budget();
    Ok(LaunchFacts {
        threads: match key.target.arch() {
            crate::tactic::Arch::Sm100 => gemm_roles(key).warps * 32,
            crate::tactic::Arch::Sm90 => super::roles::sm90_roles(key).warps * 32,
        },
        cluster: key.cluster_ctas(),
        smem: SmemRule { fixed: budget.smem_bytes, per_local_expert: 0 },
        tmem_columns: budget.tmem_alloc_columns,
        grid: GridRule::Persistent,
        ctas_per_sm: budget.ctas_per_sm,
        programmatic: true,
    })
}

/// Launch facts of any kernel.
pub fn launch_facts(id: &KernelId) -> Result<LaunchFacts, DescError> {
    Ok(match id {
        KernelId::Gemm(k) => gemm_launch_facts(k)?,
        KernelId::Simt { family, .. } => {
            let facts = simt_launch_facts(*family);
            if simt_programmatic(*family) { facts.launched_programmatically() } else { facts }
        }
        KernelId::Corpus(c) => {
            let one = GridRule::OneCluster;
            let (threads, cluster, smem, grid) = match c {
                CorpusKernel::Alu => (64, 1, 0, one),
                CorpusKernel::Pipeline => (96, 1, 2048, one),
                CorpusKernel::Tma => (32, 1, 5120, one),
                CorpusKernel::Cluster => (32, 2, 2048, one),
                CorpusKernel::Warp => (128, 1, 128, one),
                CorpusKernel::Wgmma => (128, 1, 32 * 128, one),
                // One input per thread: GridInputs::tokens = count, hidden = 1.
                CorpusKernel::Mufu => (
                    super::mufu_sweep::SWEEP_THREADS,
                    1,
                    0,
                    GridRule::GridStride {
                        values_per_thread: 1,
                        max_blocks: GRID_STRIDE_MAX_BLOCKS,
                    },
                ),
            };
            LaunchFacts {
                threads,
                cluster,
                smem: SmemRule { fixed: smem, per_local_expert: 0 },
                tmem_columns: 0,
                grid,
                ctas_per_sm: 1,
                programmatic: false,
            }
        }
    })
}

/// Launch facts of a SIMT kernel, before [`simt_programmatic`] is applied.
fn simt_launch_facts(family: SimtFamily) -> LaunchFacts {
    match family {
        SimtFamily::MoeSortHistogram => {
            simt(SORT_THREADS, 0, 4, GridRule::PerRoutes { per_block: ROUTES_PER_BLOCK })
        }
        SimtFamily::MoeSortOffsets => simt(SORT_OFFSET_THREADS, 4, 8, GridRule::Single),
        // Shared memory: the block's local experts and their ranks (4 bytes a route
        // each), then one counter per local expert.
        SimtFamily::MoeSortScatter => simt(
            SORT_THREADS,
            8 * ROUTES_PER_BLOCK,
            4,
            GridRule::PerRoutes { per_block: ROUTES_PER_BLOCK },
        ),
        // One block; shared memory: the staged experts and their ranks (4 bytes a route
        // each), the live tile count, then per local expert its count, first tile, rank
        // counter and first row.
        SimtFamily::MoeSortSingle => {
            simt(SORT_THREADS, 8 * ROUTES_PER_BLOCK + 4, 16, GridRule::Single)
        }
        SimtFamily::QuantizeNvfp4 => simt(
            QUANTIZE_THREADS,
            0,
            0,
            GridRule::GridStride {
                values_per_thread: QUANTIZE_VALUES_PER_THREAD,
                max_blocks: GRID_STRIDE_MAX_BLOCKS,
            },
        ),
        // One thread per 32 values (the grid-stride loop also covers the padding blocks).
        SimtFamily::QuantizeMxfp8 => simt(
            QUANTIZE_THREADS,
            0,
            0,
            GridRule::GridStride { values_per_thread: 32, max_blocks: GRID_STRIDE_MAX_BLOCKS },
        ),
        SimtFamily::QdqNvfp4 => simt(
            QUANTIZE_THREADS,
            0,
            0,
            GridRule::GridStride {
                values_per_thread: QUANTIZE_VALUES_PER_THREAD,
                max_blocks: GRID_STRIDE_MAX_BLOCKS,
            },
        ),
        // Shared memory: one word per warp (the warps' largest magnitudes).
        SimtFamily::QuantFp8Tokens | SimtFamily::QuantFp8Rows => simt(
            QUANT_FP8_THREADS,
            4 * (QUANT_FP8_THREADS / 32),
            0,
            GridRule::PerRows {
                rows: if family == SimtFamily::QuantFp8Tokens {
                    RowCount::Tokens
                } else {
                    RowCount::PermutedRows
                },
                rows_per_block: 1,
                max_blocks: GRID_STRIDE_MAX_BLOCKS,
            },
        ),
        // One block; shared memory: the chunk's experts, then one counter per expert
        // of the model (the launch passes E as its per-expert count).
        SimtFamily::EpDispatchPack => {
            simt(EP_PACK_THREADS, 4 * EP_PACK_THREADS, 4, GridRule::Single)
        }
        // Grid-stride over `slots · H / 2` words (the launch passes the slots as tokens).
        SimtFamily::EpGatherRows | SimtFamily::EpCombineUnpack => simt(
            EP_COPY_THREADS,
            0,
            0,
            GridRule::GridStride {
                values_per_thread: EP_COPY_COLUMNS_PER_THREAD,
                max_blocks: GRID_STRIDE_MAX_BLOCKS,
            },
        ),
        SimtFamily::FinalizeReduce => simt(
            FINALIZE_THREADS,
            0,
            0,
            GridRule::GridStride {
                values_per_thread: FINALIZE_COLUMNS_PER_THREAD,
                max_blocks: GRID_STRIDE_MAX_BLOCKS,
            },
        ),
    }
}

/// Work units of a persistent GEMM: routing tiles × cluster-wide N blocks, where the N
/// dimension is 2I for GEMM1 and H for GEMM2. `None` when the clusters do not cover the
/// dimension (at least one N tile per cluster rank; GEMM1 whole groups: the cluster part of
/// [`crate::GemmTactic::fits_n`]) or on overflow.
pub fn persistent_units(
    key: &GemmKey,
    max_tiles: u64,
    hidden: u64,
    intermediate: u64,
) -> Option<u64> {
    let n_dim = match key.gemm {
        crate::tactic::GemmKind::Gemm1 => intermediate.checked_mul(2)?,
        crate::tactic::GemmKind::Gemm2 => hidden,
    };
    let n_tiles = n_dim.div_ceil(u64::from(key.mma_n));
    let cn = u64::from(key.cluster_n);
    let whole_groups = key.gemm == crate::tactic::GemmKind::Gemm2 || n_tiles.is_multiple_of(cn);
    if n_tiles == 0 || n_tiles < cn || !whole_groups {
        return None;
    }
    max_tiles.checked_mul(n_tiles.div_ceil(cn))
}
