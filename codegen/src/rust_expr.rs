//! ABI values written as Rust constant expressions, for the generated crate and for a build
//! script's output. Paths are absolute (`::moegen_dsl::…`) so the text compiles wherever it
//! is included.

use moegen_dsl::abi::{GridRule, KernelId, LaunchFacts};

const ABI: &str = "::moegen_dsl::abi";

/// `KernelId` as a constant expression.
pub fn kernel_id(id: &KernelId) -> String {
    match id {
        KernelId::Gemm(k) => format!(
            "{ABI}::KernelId::Gemm({ABI}::GemmKey {{ target: ::moegen_dsl::Target::{:?}, \
             gemm: ::moegen_dsl::GemmKind::{:?}, tile: ::moegen_dsl::TileSize::{:?}, \
             mma_n: {}, cluster_n: {}, raster: ::moegen_dsl::Raster::{:?}, \
             schedule: ::moegen_dsl::Schedule::{:?}, split_k: {}, \
             format: {ABI}::WeightFormat::{:?}, swiglu_input: ::moegen_dsl::SwigluInput::{:?}, \
             activation: ::moegen_dsl::Activation::{:?}, bias: {}, \
             recipe: ::moegen_dsl::EpilogueRecipe::{:?}, finalize: ::moegen_dsl::FinalizeMode::{:?}, \
             activations: ::moegen_dsl::ActivationFormat::{:?}, ab_stages: {}, acc_stages: {}, \
             planned_depths: {} }})",
            k.target,
            k.gemm,
            k.tile,
            k.mma_n,
            k.cluster_n,
            k.raster,
            k.schedule,
            k.split_k,
            k.format,
            k.swiglu_input,
            k.activation,
            k.bias,
            k.recipe,
            k.finalize,
            k.activations,
            k.ab_stages,
            k.acc_stages,
            k.planned_depths
        ),
        KernelId::Simt { family, target } => format!(
            "{ABI}::KernelId::Simt {{ family: {ABI}::SimtFamily::{family:?}, target: {ABI}::SimtTarget::{target:?} }}"
        ),
        KernelId::Corpus(c) => format!("{ABI}::KernelId::Corpus({ABI}::CorpusKernel::{c:?})"),
    }
}

fn grid_rule(g: &GridRule) -> String {
    match g {
        GridRule::Persistent => format!("{ABI}::GridRule::Persistent"),
        GridRule::PerRoutes { per_block } => {
            format!("{ABI}::GridRule::PerRoutes {{ per_block: {per_block} }}")
        }
        GridRule::Single => format!("{ABI}::GridRule::Single"),
        GridRule::GridStride { values_per_thread, max_blocks } => format!(
            "{ABI}::GridRule::GridStride {{ values_per_thread: {values_per_thread}, max_blocks: {max_blocks} }}"
        ),
        GridRule::OneCluster => format!("{ABI}::GridRule::OneCluster"),
        GridRule::PerRows { rows, rows_per_block, max_blocks } => format!(
            "{ABI}::GridRule::PerRows {{ rows: {ABI}::RowCount::{rows:?}, rows_per_block: {rows_per_block}, max_blocks: {max_blocks} }}"
        ),
    }
}

/// `LaunchFacts` as a constant expression.
pub fn launch_facts(l: &LaunchFacts) -> String {
    format!(
        "{ABI}::LaunchFacts {{ threads: {}, cluster: {}, smem: {ABI}::SmemRule {{ fixed: {}, \
         per_local_expert: {} }}, tmem_columns: {}, grid: {}, ctas_per_sm: {}, programmatic: {} }}",
        l.threads,
        l.cluster,
        l.smem.fixed,
        l.smem.per_local_expert,
        l.tmem_columns,
        grid_rule(&l.grid),
        l.ctas_per_sm,
        l.programmatic
    )
}
