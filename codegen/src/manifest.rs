//! The manifest: what a runtime needs to launch each generated kernel.

use crate::ptx::Param;

/// Tactic facts of a GEMM kernel.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TacticInfo {
    /// `gemm1` or `gemm2`.
    pub gemm: String,
    /// Routing tile rows.
    pub tile_size: u32,
    /// `[M, N]`.
    pub mma_tiler: [u32; 2],
    /// `[M, N]` cluster shape.
    pub cluster: [u32; 2],
    /// A/B pipeline stages.
    pub ab_stages: u32,
    /// Accumulator stages.
    pub acc_stages: u32,
}

/// Dynamic shared memory: `fixed + per_local_expert · L` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SmemRule {
    /// Constant part.
    pub fixed: u32,
    /// Bytes per local expert.
    pub per_local_expert: u32,
}

/// One kernel.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ManifestEntry {
    /// Entry name (also the file stem).
    pub name: String,
    /// File under `ptx/`.
    pub file: String,
    /// Kernel family.
    pub family: String,
    /// `.target`.
    pub target: String,
    /// `.version`.
    pub ptx_version: String,
    /// GEMM tactic, for GEMM kernels.
    pub tactic: Option<TacticInfo>,
    /// Parameters in ABI order, with types and meaning.
    pub params: Vec<Param>,
    /// Threads per CTA.
    pub threads: u32,
    /// Cluster dims (1, 1, 1 when no cluster).
    pub cluster_dims: [u32; 3],
    /// Dynamic shared memory.
    pub dynamic_smem: SmemRule,
    /// TMEM columns allocated (0 for SIMT kernels).
    pub tmem_columns: u32,
    /// How the grid is sized.
    pub grid: String,
}
