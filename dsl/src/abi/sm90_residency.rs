//! How many CTAs of a Hopper GEMM share one SM, and the register split that follows.
//!
//! A Hopper GEMM has one producer warpgroup and one or two consumer warpgroups; at small
//! token tiles the consumers' dequantize-and-wgmma chain is latency-bound (ncu on an H200,
//! docs/perf.md 2026-12-02: 1–3 active warps per scheduler, 42–65 % of issue slots busy), so
//! kernels whose consumers need few registers run two or three CTAs per SM. The register
//! file and shared memory are split evenly between the resident CTAs; the resource model
//! (`resources::plan_sm90`) picks the count, the kernel's `.maxnreg` and `setmaxnreg` follow
//! from it here, and the runtime sizes the persistent grid with it.

use super::roles::Sm90Roles;

/// 32-bit registers per SM.
pub const SM_REGISTERS: u32 = 65_536;
/// Shared memory per SM (228 KiB), of which the system reserves [`CTA_RESERVED_SMEM`] per
/// resident CTA.
pub const SM_SHARED_MEMORY: u32 = 233_472;
/// Shared memory the system reserves for each resident CTA.
pub const CTA_RESERVED_SMEM: u32 = 1024;
/// Registers per thread at launch are capped here: what 384 threads can all hold at one
/// CTA per SM (65536 / 384, rounded down to 8), so every one-CTA kernel launches alike.
pub const MAX_LAUNCH_REGS: u32 = 168;
/// The producer warpgroup's registers after `setmaxnreg.dec` (it only computes addresses).
pub const PRODUCER_REGS: u32 = 40;
/// The most a consumer thread asks for with `setmaxnreg.inc` (more than any tile needs).
pub const MAX_CONSUMER_REGS: u32 = 240;
/// The most CTAs of one GEMM per SM.
pub const MAX_CTAS_PER_SM: u32 = 3;
/// Registers are allocated in multiples of this per thread.
const REG_GRANULE: u32 = 8;

/// The register split of a Hopper GEMM at some CTAs per SM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Sm90Registers {
    /// CTAs of the kernel resident on one SM.
    pub ctas_per_sm: u32,
    /// Registers per thread at launch (`.maxnreg`).
    pub launch: u32,
    /// The producer warpgroup's registers after `setmaxnreg.dec`.
    pub producer: u32,
    /// Each consumer's registers after `setmaxnreg.inc`: what the producer gives up, shared
    /// among the consumers, at most [`MAX_CONSUMER_REGS`].
    pub consumer: u32,
}

/// The register split of a kernel with `roles` at `ctas_per_sm` CTAs per SM.
pub fn sm90_registers(roles: &Sm90Roles, ctas_per_sm: u32) -> Sm90Registers {
    let threads = roles.warps * 32;
    let wg = super::roles::WARPGROUP_WARPS * 32;
    let p = ctas_per_sm.max(1);
    let launch = (SM_REGISTERS / (p * threads) / REG_GRANULE * REG_GRANULE).min(MAX_LAUNCH_REGS);
    let pool = (launch * threads).saturating_sub(PRODUCER_REGS * wg);
    let consumer =
        (pool / (roles.consumers.max(1) * wg) / REG_GRANULE * REG_GRANULE).min(MAX_CONSUMER_REGS);
    Sm90Registers { ctas_per_sm: p, launch, producer: PRODUCER_REGS, consumer }
}

/// Registers a consumer thread is planned to need: its f32 accumulators (T/2 per m64 block
/// of weight rows) plus the dequantization, addressing and epilogue working set, which grows
/// with the tile (the epilogues are unrolled over the accumulators). The working set is a
/// margin over the most ptxas used at each tile size when registers were not scarce
/// (docs/hopper.md's resource table of 2026-12-01: at most accumulators + 75 at T 16 and
/// 32, + 98 at T 64, + 114 at T 128). `gen check` holds every kernel to zero spill, so a
/// margin that turned out short fails there, not silently.
pub fn sm90_consumer_regs_needed(tile: u32, rows_per_consumer: u32) -> u32 {
    let acc = rows_per_consumer / 64 * tile / 2;
    let working_set = match tile {
        0..=32 => 80,
        33..=64 => 100,
        _ => 120,
    };
    acc + working_set
}

/// Shared memory one CTA may request when `ctas_per_sm` of them share an SM.
pub fn sm90_smem_per_cta(ctas_per_sm: u32, max_dynamic_smem: u32) -> u32 {
    (SM_SHARED_MEMORY / ctas_per_sm.max(1)).saturating_sub(CTA_RESERVED_SMEM).min(max_dynamic_smem)
}
