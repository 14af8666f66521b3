//! The manifest: every kernel's interface as JSON, for tools and other languages. Rust code
//! uses the typed `KernelInfo` values of the generated crate instead.

use moegen_dsl::abi::{GridRule, KernelId, Param, ParamType, SmemRule};

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
    /// Options: format, SwiGLU input, finalize mode, raster.
    pub options: serde_json::Value,
}

/// One parameter as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ManifestParam {
    /// PTX name.
    pub name: &'static str,
    /// PTX type.
    #[serde(rename = "type")]
    pub ty: ParamType,
    /// What it carries (scalar, buffer or tensor map).
    pub kind: serde_json::Value,
    /// Meaning, units, layout.
    pub meaning: &'static str,
}

impl ManifestParam {
    fn new(p: &Param) -> Self {
        Self {
            name: p.name,
            ty: p.ty(),
            kind: serde_json::to_value(p.kind).unwrap_or(serde_json::Value::Null),
            meaning: p.meaning,
        }
    }
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
    pub params: Vec<ManifestParam>,
    /// Threads per CTA.
    pub threads: u32,
    /// Cluster dims (1, 1, 1 when no cluster).
    pub cluster_dims: [u32; 3],
    /// Dynamic shared memory.
    pub dynamic_smem: SmemRule,
    /// TMEM columns allocated (0 for SIMT kernels).
    pub tmem_columns: u32,
    /// How the grid is sized.
    pub grid: GridRule,
    /// CTAs resident per SM that a persistent grid is sized for (SMs × this, at most one
    /// per work unit).
    pub ctas_per_sm: u32,
    /// Launched with programmatic stream serialization (the kernel waits with
    /// `griddepcontrol.wait` before it touches global memory).
    pub programmatic: bool,
}

/// The manifest entry of a kernel.
pub fn entry(k: &crate::kernel_set::GeneratedKernel) -> ManifestEntry {
    let tactic = match k.id {
        KernelId::Gemm(key) => Some(TacticInfo {
            gemm: key.gemm.to_string(),
            tile_size: key.tile.rows(),
            mma_tiler: [key.tile.rows(), key.mma_n],
            cluster: [key.cta_group(), key.cluster_n],
            ab_stages: key.ab_stages,
            acc_stages: key.acc_stages,
            options: serde_json::json!({
                "format": key.format,
                "swiglu_input": key.swiglu_input,
                "activation": key.activation,
                "bias": key.bias,
                "finalize": key.finalize,
                "raster": key.raster,
                "schedule": key.schedule,
            }),
        }),
        _ => None,
    };
    ManifestEntry {
        name: k.name.clone(),
        file: format!("{}.ptx", k.name),
        family: k.id.family().to_owned(),
        target: k.id.ptx_target().to_owned(),
        ptx_version: crate::kernel_set::PTX_VERSION.to_owned(),
        tactic,
        params: k.params.iter().map(ManifestParam::new).collect(),
        threads: k.launch.threads,
        cluster_dims: [k.launch.cluster, 1, 1],
        dynamic_smem: k.launch.smem,
        tmem_columns: k.launch.tmem_columns,
        grid: k.launch.grid,
        ctas_per_sm: k.launch.ctas_per_sm,
        programmatic: k.launch.programmatic,
    }
}
