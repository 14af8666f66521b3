//! The schema of `docs/role-stats.json`: per kernel and per warp role, the dynamic PTX
//! instructions the simulator counted (moegen-validation's `role-stats` writes it; `gen stats`
//! and `gen model` read it). Counts are per executing warp: per K block for the roles with a
//! K loop (TMA producer, MMA issuer, gather, relay), per output element and thread for the
//! epilogues (a warp instruction covers 32 rows), with each role's per-tile overhead beside.

use std::collections::BTreeMap;

use moegen_dsl::GemmKind;

/// A warp role of an SM100 GEMM kernel.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The TMA producer warp.
    Producer,
    /// The MMA issuer (the leader CTA's MMA warp).
    Mma,
    /// GEMM1's gather warps.
    Gather,
    /// 2-CTA GEMM1's relay warp (the peer CTA).
    Relay,
    /// The epilogue warps.
    Epilogue,
}

impl Role {
    /// Every role, in table order.
    pub const ALL: [Role; 5] =
        [Role::Producer, Role::Mma, Role::Gather, Role::Relay, Role::Epilogue];
}

/// One role's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoleFigures {
    /// The role.
    pub role: Role,
    /// Warp instructions per unit (K block, or output element for the epilogue) per
    /// executing warp, by the simulator's category names (`alu.f32`, `fence.gpu`, …).
    pub per_unit: BTreeMap<String, f64>,
    /// Warp instructions per tile (work unit) per executing warp, all categories; for the
    /// K-loop roles this excludes the K loop's `per_unit` × K blocks; for the epilogue it is
    /// the whole tile (`per_unit` × columns).
    pub per_tile: f64,
    /// The same by category.
    pub per_tile_categories: BTreeMap<String, f64>,
}

/// Categories that are fences.
const FENCES: [&str; 5] = ["fence.cta", "fence.cluster", "fence.gpu", "fence.sys", "fence.proxy"];
/// Categories that are barrier operations.
const BARRIER_OPS: [&str; 7] = [
    "mbarrier.arrive",
    "mbarrier.expect_tx",
    "mbarrier.wait",
    "bar",
    "barrier.cluster",
    "bar.warp",
    "tcgen05.commit",
];
/// Bulk (asynchronous shared → global) operations.
const BULK_OPS: [&str; 3] = ["bulk.reduce", "bulk.copy", "tma.store"];

fn sum(m: &BTreeMap<String, f64>, keys: &[&str]) -> f64 {
    keys.iter().filter_map(|k| m.get(*k)).sum()
}

impl RoleFigures {
    /// All instructions per unit.
    pub fn total(&self) -> f64 {
        self.per_unit.values().sum()
    }
    /// Instructions of one category per unit.
    pub fn category(&self, name: &str) -> f64 {
        self.per_unit.get(name).copied().unwrap_or(0.0)
    }
    /// Fences (every scope, and proxy fences) per unit.
    pub fn fences(&self) -> f64 {
        sum(&self.per_unit, &FENCES)
    }
    /// GPU- and system-scope fences per unit.
    pub fn wide_fences(&self) -> f64 {
        sum(&self.per_unit, &FENCES[2..4])
    }
    /// Barrier operations (mbarrier arrive/expect_tx/wait, named and cluster barriers,
    /// tcgen05.commit) per unit.
    pub fn barrier_ops(&self) -> f64 {
        sum(&self.per_unit, &BARRIER_OPS)
    }
    /// Fences per tile outside the per-unit figure.
    pub fn fences_per_tile(&self) -> f64 {
        sum(&self.per_tile_categories, &FENCES)
    }
    /// Bulk operations (bulk reduce, bulk copy, TMA store) per tile and executing warp,
    /// outside the per-unit figure (for the epilogue: all of a tile's).
    pub fn bulk_ops_per_tile(&self) -> f64 {
        sum(&self.per_tile_categories, &BULK_OPS)
    }
}

/// One kernel's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KernelRoleStats {
    /// Entry name.
    pub kernel: String,
    /// GEMM1 or GEMM2.
    pub gemm: GemmKind,
    /// FNV-1a 64 of the PTX text measured, hex: the figures are stale when it differs.
    pub ptx_fnv1a64: String,
    /// Output columns per tile and row (N/2 for GEMM1, N for GEMM2).
    pub cols_per_tile: u32,
    /// K blocks of the measured problem's base size (the epilogue's figures include them
    /// nowhere; the K-loop roles' `per_tile` excludes them).
    pub base_k_blocks: u32,
    /// Per role, in [`Role::ALL`] order (roles the kernel lacks are absent).
    pub roles: Vec<RoleFigures>,
}

impl KernelRoleStats {
    /// The figures of one role.
    pub fn role(&self, role: Role) -> Option<&RoleFigures> {
        self.roles.iter().find(|r| r.role == role)
    }
}

/// The whole file.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoleStatsFile {
    /// How the figures were obtained.
    pub method: String,
    /// Every GEMM kernel measured.
    pub kernels: Vec<KernelRoleStats>,
}

impl RoleStatsFile {
    /// The figures of `kernel`, if measured.
    pub fn kernel(&self, kernel: &str) -> Option<&KernelRoleStats> {
        self.kernels.iter().find(|k| k.kernel == kernel)
    }
}

/// FNV-1a 64 of a text, as lowercase hex (the key that ties figures to the PTX measured).
pub fn fnv1a64_hex(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
