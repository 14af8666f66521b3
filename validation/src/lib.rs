//! moegen-validation: the checks that need the generated kernels running somewhere, kept out
//! of the runtime's API.
//!
//! - [`device_layer`]: the whole layer through the generated kernels of one tactic on a
//!   backend (uploads and allocates per call), compared with the CPU reference by the tests.
//! - [`corpus`]: the differential corpus (ALU, pipelines, TMA, clusters, bulk ops), run on an
//!   H200 and in the simulator and compared byte for byte.
//! - [`role_stats`]: per-role dynamic instruction counts of the SM100 GEMMs (docs/role-stats.json).
//! - Binaries: `gpu-check` (feature `cuda`), `sim-bench` and `role-stats`.

pub mod corpus;
pub mod device_layer;
pub mod npy;
pub mod role_stats;
