//! Executing one launch. Clusters run one after another (a legal schedule: moegen's kernels
//! never wait on another cluster); inside a cluster, [`scheduler`] interleaves warps.
//!
//! Asynchronous copies (cp.async, TMA, multicast) land at once but are *unpublished* until
//! the mbarrier phase they complete on has completed: reading such bytes from shared memory
//! (ld.shared, tcgen05.cp, tcgen05.mma, bulk stores) is reported as a race. That is how a
//! dropped wait shows up even when the bytes happen to be right.

mod alu;
mod copies;
mod descriptors;
mod exact;
mod matrix;
mod mbarrier;
mod mma;
mod mxf8f6f4;
mod nvfp4;
mod scheduler;
mod setmaxnreg;
mod simt;
mod spaces;
mod state;
mod tcgen05;
pub mod tensor_map;
mod tma;
mod tmem;
mod values;
mod warp;
mod wgmma;
mod wgmma_fp8;
mod wgmma_math;

use self::state::{Cluster, Cta, State, Thread};
use self::tmem::Tmem;
use self::wgmma::Warpgroup;
pub use self::wgmma_fp8::{FP8_KEEP_BITS, FP8_RESULT_BITS, wgmma_k32_e4m3_model};
pub use self::wgmma_math::wgmma_k16_model;
use crate::error::SimError;
use crate::memory::Device;
use crate::parse::{Kernel, Module};
use crate::profile::Profile;

/// A kernel argument.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// `.u32`.
    U32(u32),
    /// `.u64` (pointers).
    U64(u64),
    /// `.f32`.
    F32(f32),
    /// Raw bytes (a by-value struct such as a tensor map).
    Bytes(Vec<u8>),
}

/// Launch configuration.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    /// Grid size (x only), in CTAs.
    pub grid: u32,
    /// Threads per CTA (x only).
    pub block: u32,
    /// Dynamic shared memory bytes.
    pub dynamic_smem: usize,
    /// CTAs per cluster (x only); the grid must be a multiple.
    pub cluster: u32,
    /// Thread-instructions after which the launch is stopped as a runaway.
    pub step_limit: u64,
    /// Schedule fuzzing: with a seed, each round visits the warps in a shuffled order and
    /// gives each a random quantum (1..=96); the run is still deterministic for the seed.
    pub seed: Option<u64>,
    /// Collect the per-warp instruction profile ([`LaunchStats::profile`]).
    pub profile: bool,
}

impl LaunchConfig {
    /// A launch without clusters, with the default step limit (10^10) and no profile.
    pub fn new(grid: u32, block: u32, dynamic_smem: usize) -> Self {
        Self {
            grid,
            block,
            dynamic_smem,
            cluster: 1,
            step_limit: 10_000_000_000,
            seed: None,
            profile: false,
        }
    }
}

/// Counters of one launch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Thread-instructions executed.
    pub thread_instructions: u64,
    /// `tcgen05.mma` and `wgmma.mma_async` instructions executed (a `.cta_group::2` MMA and a
    /// wgmma, which all 128 threads of a warpgroup issue, count once).
    pub mma_instructions: u64,
    /// The per-warp profile, when [`LaunchConfig::profile`] asked for it.
    pub profile: Option<Profile>,
}

/// The largest shared memory per CTA of any target (228 KB on sm_100), with room to spare:
/// a launch asking for more is malformed.
const MAX_SHARED: usize = 1 << 20;

fn layout_params(k: &Kernel, args: &[Arg]) -> Result<Vec<u8>, SimError> {
    if args.len() != k.params.len() || k.param_offsets.len() != k.params.len() {
        return Err(SimError::Launch(format!(
            "{} takes {} arguments, {} given",
            k.name,
            k.params.len(),
            args.len()
        )));
    }
    let mut buf = Vec::new();
    for ((p, &off), a) in k.params.iter().zip(&k.param_offsets).zip(args) {
        let bytes = match a {
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::U64(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
            Arg::Bytes(b) => b.clone(),
        };
        if bytes.len() != p.size {
            return Err(SimError::Launch(format!(
                "argument {} has {} bytes, the kernel declares {}",
                p.name,
                bytes.len(),
                p.size
            )));
        }
        if buf.len() > off {
            return Err(SimError::Launch(format!(
                "parameter {} overlaps the previous one",
                p.name
            )));
        }
        buf.resize(off, 0);
        buf.extend(bytes);
    }
    Ok(buf)
}

fn check_config(kernel: &Kernel, cfg: &LaunchConfig) -> Result<(), SimError> {
    let name = &kernel.name;
    if cfg.block == 0
        || cfg.block > 1024
        || cfg.grid == 0
        || cfg.cluster == 0
        || cfg.cluster > 16
        || !cfg.grid.is_multiple_of(cfg.cluster)
        || cfg.dynamic_smem > MAX_SHARED
    {
        return Err(SimError::Launch(format!(
            "grid {} × block {} with clusters of {} and {} B of shared memory is not a valid launch",
            cfg.grid, cfg.block, cfg.cluster, cfg.dynamic_smem
        )));
    }
    if let Some(n) = kernel.reqntid
        && n != cfg.block
    {
        return Err(SimError::Launch(format!(
            "{name} requires {n} threads per CTA, launched with {}",
            cfg.block
        )));
    }
    if kernel.reqnctapercluster.unwrap_or(1) != cfg.cluster {
        return Err(SimError::Launch(format!(
            "{name} requires clusters of {}, launched with {}",
            kernel.reqnctapercluster.unwrap_or(1),
            cfg.cluster
        )));
    }
    Ok(())
}

/// Runs `name` from `module` on `device`.
pub fn launch(
    device: &mut Device,
    module: &Module,
    name: &str,
    cfg: &LaunchConfig,
    args: &[Arg],
) -> Result<LaunchStats, SimError> {
    let kernel = module
        .kernels
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| SimError::Launch(format!("no kernel {name}")))?;
    check_config(kernel, cfg)?;
    let params = layout_params(kernel, args)?;
    let warps = (cfg.block as usize).div_ceil(32);
    let nregs = kernel.registers();
    let mut stats = LaunchStats {
        profile: cfg.profile.then(|| Profile::new(warps, cfg.grid)),
        ..LaunchStats::default()
    };
    for cluster_id in 0..cfg.grid / cfg.cluster {
        let ctas = (0..cfg.cluster)
            .map(|r| Cta {
                ctaid: cluster_id * cfg.cluster + r,
                arrivals: [0; 16],
                shared: vec![0; cfg.dynamic_smem],
                tags: vec![0; cfg.dynamic_smem],
                threads: (0..cfg.block)
                    .map(|_| Thread {
                        regs: vec![0; nregs],
                        pc: 0,
                        state: State::Running,
                        cp_async: Vec::new(),
                        cp_groups: Vec::new(),
                    })
                    .collect(),
                tmem: Tmem::new(),
                relinquished: false,
                warpgroups: if kernel.warpgroups {
                    (0..warps.div_ceil(4)).map(|_| Warpgroup::new(nregs, kernel.maxnreg)).collect()
                } else {
                    Vec::new()
                },
                wg_locks: if kernel.warpgroups { vec![0; cfg.dynamic_smem] } else { Vec::new() },
                reg_pool: 0,
            })
            .collect();
        let mut cl = Cluster {
            kernel,
            params: &params,
            ctas,
            mbars: Default::default(),
            next_id: 1,
            pending: Default::default(),
            block: cfg.block,
            grid: cfg.grid,
            cluster_size: cfg.cluster,
            cluster_id,
            step_limit: cfg.step_limit,
            thread_instructions: stats.thread_instructions,
            mma_instructions: stats.mma_instructions,
            profile: stats.profile.take(),
            rng: cfg
                .seed
                .map(|s| s ^ (u64::from(cluster_id) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
        };
        cl.run(device)?;
        stats.thread_instructions = cl.thread_instructions;
        stats.mma_instructions = cl.mma_instructions;
        stats.profile = cl.profile.take();
    }
    Ok(stats)
}
