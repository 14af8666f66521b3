//! Planning arithmetic shared by codegen, the runtime and `gen plan`: worst-case tile and
//! row counts, the one workspace that serves every tactic, token buckets, and the expert
//! window and shape of a layer, and the problem shapes a target's GEMM kernels accept. Pure
//! functions: no device, no allocation on a device.

mod buckets;
mod error;
mod shape;
mod sizing;
mod window;
mod workspace;

pub use buckets::TokenBuckets;
pub use error::{PlanError, Result};
pub use shape::{check_gemm_dim, check_gemm_shape, gemm_shape_multiple};
pub use sizing::{expanded_rows, max_permuted_rows, max_tiles};
pub use window::{ExpertWindow, MoeShape, SWIGLU_INTERLEAVE};
pub use workspace::{
    BUFFER_ALIGN, BufferPlan, ERROR_WORDS, TilePlan, WorkspacePlan, WorkspaceRequest,
    plan_workspace,
};
