//! moegen-validation: the checks that need the generated kernels running somewhere, kept out
//! of the runtime's API.
//!
//! - [`device_layer`]: the whole layer through the generated kernels of one tactic on a
//!   backend (uploads and allocates per call), compared with the CPU reference by the tests;
//!   [`device_layer_mx`] the same for the SM100 MXFP8 × MXFP4 kernels.
//! - [`bench`](mod@bench): moe-bench's synthetic weights and inputs (the peers' folder contract) and
//!   moegen's layer timed through the tuner and CUDA-graph replays.
//! - [`corpus`]: the differential corpus (ALU, pipelines, TMA, clusters, bulk ops), run on an
//!   H200 and in the simulator and compared byte for byte.
//! - `ep_run` (feature `nccl`): expert parallelism over NCCL on CUDA devices, for `ep-check`
//!   and `moe-bench --ep`.
//! - [`layer_check`]: the runtime's `MoeLayer` with every applicable tactic on a backend,
//!   compared with the reference of the device's generation and the f64 oracle.
//! - [`mufu_check`]: the MUFU sweep, `ex2.approx`/`rcp.approx` on a backend over a strided
//!   range of inputs or all 2^32; [`mufu_tally`] judges the results against the
//!   simulator's models.
//! - [`role_stats`]: per-role dynamic instruction counts of the SM100 GEMMs (docs/role-stats.json).
//! - [`simt_check`]: the SIMT kernels on a backend against their CPU counterparts.
//! - Binaries: `gpu-check` and `moe-bench` (feature `cuda`), `sim-bench` and `role-stats`.

pub mod bench;
pub mod corpus;
pub mod device_layer;
pub mod device_layer_mx;
pub mod dispatch_fit;
#[cfg(feature = "nccl")]
pub mod ep_run;
pub mod layer_check;
pub mod mufu_check;
pub mod mufu_tally;
pub mod npy;
mod rng;
pub mod role_stats;
pub mod simt_check;
