//! Warp roles of the GEMM kernels: which warps run the epilogue, the gather, the MMA, the
//! TMA producer and the 2-CTA relay. Part of the ABI because the thread count follows.

use crate::gemm_key::GemmKey;
use crate::tactic::{GemmKind, Schedule};

/// Epilogue warps: one per TMEM lane quarter (thread t owns accumulator row t).
pub const EPILOGUE_WARPS: u32 = 4;
/// Gather warps of GEMM1: one thread per A row of a 128-row tile.
pub const GATHER_WARPS: u32 = 4;

/// Where each role runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GemmRoles {
    /// Warps `0..EPILOGUE_WARPS` run the epilogue.
    pub epilogue_warps: u32,
    /// First gather warp (GEMM1), `GATHER_WARPS` of them.
    pub gather_warp: Option<u32>,
    /// The MMA issuer (also allocates TMEM).
    pub mma_warp: u32,
    /// The TMA producer.
    pub tma_warp: u32,
    /// 2-CTA GEMM1: relays the peer's gather completion to the leader.
    pub relay_warp: Option<u32>,
    /// Warps per CTA.
    pub warps: u32,
}

/// Warps of one Hopper warpgroup.
pub const WARPGROUP_WARPS: u32 = 4;

/// Warp roles of a Hopper GEMM: warpgroup 0 produces (warp 0 issues the weights' bulk
/// copies and, for GEMM2, the activation TMA; for GEMM1 all four warps gather activation
/// rows with cp.async), and one consumer warpgroup per 128 weight rows (at least one)
/// dequantizes weights into registers, issues wgmma and runs the epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Sm90Roles {
    /// Consumer warpgroups (warpgroups 1..=consumers).
    pub consumers: u32,
    /// Weight rows each consumer warpgroup owns (64 or 128: one or two m64 wgmma rows).
    pub rows_per_consumer: u32,
    /// Warps per CTA.
    pub warps: u32,
}

impl Sm90Roles {
    /// The warpgroup that produces (weight bulk copies, activation loads); the consumers
    /// are the warpgroups after it.
    pub const PRODUCER_WARPGROUP: u32 = 0;
}

/// Consumer warpgroups of a Hopper GEMM with `mma_n` weight rows per CTA: one per 128.
pub fn sm90_consumers(mma_n: u32) -> u32 {
    mma_n.div_ceil(128).max(1)
}

/// The roles of a Hopper GEMM kernel.
pub fn sm90_roles(key: &GemmKey) -> Sm90Roles {
    sm90_roles_for(key.mma_n, key.schedule)
}

/// The roles of a Hopper GEMM kernel with `mma_n` weight rows per unit: cooperative, one
/// consumer per 128 of them; ping-pong, two consumers that each own whole units.
pub fn sm90_roles_for(mma_n: u32, schedule: Schedule) -> Sm90Roles {
    let (consumers, rows_per_consumer) = match schedule {
        Schedule::Cooperative => {
            let c = sm90_consumers(mma_n);
            (c, mma_n / c)
        }
        Schedule::PingPong => (2, mma_n),
    };
    Sm90Roles { consumers, rows_per_consumer, warps: WARPGROUP_WARPS * (1 + consumers) }
}

/// The roles of a GEMM kernel.
pub fn gemm_roles(key: &GemmKey) -> GemmRoles {
    let e = EPILOGUE_WARPS;
    match key.gemm {
        GemmKind::Gemm1 => {
            let mma = e + GATHER_WARPS;
            let relay = (key.cta_group() == 2).then_some(mma + 2);
            GemmRoles {
                epilogue_warps: e,
                gather_warp: Some(e),
                mma_warp: mma,
                tma_warp: mma + 1,
                relay_warp: relay,
                warps: mma + 2 + u32::from(relay.is_some()),
            }
        }
        GemmKind::Gemm2 => GemmRoles {
            epilogue_warps: e,
            gather_warp: None,
            mma_warp: e,
            tma_warp: e + 1,
            relay_warp: None,
            warps: e + 2,
        },
    }
}
