//! The tactic space: how each GEMM of the MoE layer is tiled and clustered.
//!
//! The routing sort indexes all metadata by routing tile (T rows), so every kernel's MMA M
//! (128 × CTA-group size) must equal T. Upstream once enumerated 1-CTA GEMM2 tactics for
//! T = 256 and silently dropped half the rows (FlashInfer #3067). Here the MMA M is never a
//! free parameter of a [`MoeTactic`]: it is derived from the tile size, and the 2-CTA mode
//! from the MMA M, so that bug cannot be expressed.

use std::fmt;

use crate::gemm_key::GemmKey;
use crate::options::ActivationFormat;
use crate::sm90_tactics::{
    SM90_MMA_N, SM90_SPLIT_K, sm90_n_granule, sm90_split_k_fits, sm90_tactics,
};

/// Rows of a routing tile.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum TileSize {
    /// 16 rows (Hopper small-batch tiles: the wgmma N of a swap-AB GEMM).
    T16,
    /// 32 rows (Hopper).
    T32,
    /// 64 rows (Hopper).
    T64,
    /// 128 rows: 1-CTA MMA on SM100; a 128-token wgmma N on Hopper.
    T128,
    /// 256 rows: 2-CTA MMA (`cta_group::2`) across a CTA pair (SM100).
    T256,
}

impl TileSize {
    /// Every tile size, ascending.
    pub const ALL: [TileSize; 5] =
        [TileSize::T16, TileSize::T32, TileSize::T64, TileSize::T128, TileSize::T256];
    /// The SM100 tile sizes (MMA M = 128 per CTA).
    pub const SM100: [TileSize; 2] = [TileSize::T128, TileSize::T256];
    /// The Hopper tile sizes (wgmma N of the swap-AB GEMMs).
    pub const SM90: [TileSize; 4] = [TileSize::T16, TileSize::T32, TileSize::T64, TileSize::T128];

    /// Rows per tile.
    pub fn rows(self) -> u32 {
        match self {
            TileSize::T16 => 16,
            TileSize::T32 => 32,
            TileSize::T64 => 64,
            TileSize::T128 => 128,
            TileSize::T256 => 256,
        }
    }

    /// The tile size with `rows` rows.
    pub fn from_rows(rows: u32) -> Result<Self, TacticError> {
        TileSize::ALL
            .into_iter()
            .find(|t| t.rows() == rows)
            .ok_or(TacticError::UnsupportedMmaM { m: rows })
    }

    /// CTAs that cooperate on one SM100 MMA of this tile (one for every Hopper tile).
    pub fn cta_group(self) -> CtaGroup {
        match self {
            TileSize::T256 => CtaGroup::Two,
            _ => CtaGroup::One,
        }
    }
}

impl fmt::Display for TileSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.rows())
    }
}

/// `tcgen05` CTA group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CtaGroup {
    /// `cta_group::1`.
    One,
    /// `cta_group::2`: the even CTA of a pair issues the MMA for both.
    Two,
}

impl CtaGroup {
    /// CTAs in the group.
    pub fn size(self) -> u32 {
        match self {
            CtaGroup::One => 1,
            CtaGroup::Two => 2,
        }
    }
}

/// The two GEMMs of the layer.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum GemmKind {
    /// Gather + FC1 + SwiGLU + NVFP4 requantization.
    Gemm1,
    /// FC2 + router-weighted finalize into the output.
    Gemm2,
}

impl fmt::Display for GemmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GemmKind::Gemm1 => "gemm1",
            GemmKind::Gemm2 => "gemm2",
        })
    }
}

/// Order in which a persistent CTA walks output tiles.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Raster {
    /// N fastest: consecutive tiles share the routing tile (and its gathered A rows).
    #[default]
    AlongN,
    /// M fastest: consecutive tiles share the weight tile.
    AlongM,
}

/// How a Hopper CTA's consumer warpgroups share its work units.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Schedule {
    /// Every consumer takes its part of every unit (one consumer per 128 weight rows), so
    /// their K loops and their epilogues run at the same time (SM100 kernels: always).
    #[default]
    Cooperative,
    /// Two consumers take alternate units of the CTA, each a whole unit of 128 weight rows,
    /// from the one stage ring: one consumer's epilogue runs beside the other's K loop
    /// (Hopper, N 128; docs/hopper-schedule.md).
    PingPong,
}

/// MMA N values the kernels implement.
pub const SUPPORTED_MMA_N: [u32; 2] = [128, 256];

/// The GPU generation a tactic is shaped for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Arch {
    /// Blackwell (sm_100 family): tcgen05, MMA M = the routing tile.
    Sm100,
    /// Hopper (sm_90a): wgmma with weights in registers (swap-AB), wgmma N = the routing tile.
    Sm90,
}

/// One GEMM's tiling: `[routing rows, output columns]` per tile (on SM100 the MMA's M and N;
/// on Hopper the swap-AB wgmma's N and the CTA's weight rows), cluster shape, raster order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct GemmTactic {
    arch: Arch,
    kind: GemmKind,
    tile: TileSize,
    mma_n: u32,
    cluster_n: u32,
    raster: Raster,
    schedule: Schedule,
    /// Hopper: CTAs of a cluster that split each unit's K (1: no split).
    split_k: u32,
}

impl GemmTactic {
    /// Validates a GEMM tactic given as CUTLASS spells it: `mma_tiler = [m, n]`,
    /// `cluster = [m, n]`.
    ///
    /// Rules: M ∈ {128, 256}; cluster M equals the CTA-group size M/128 (2-CTA is derived,
    /// never chosen); N ∈ {128, 256}; GEMM1 cannot multicast A along N (its A is gathered
    /// per row), so its cluster N is 1; GEMM2's cluster N is 1 or 2.
    pub fn new(
        kind: GemmKind,
        mma_tiler: [u32; 2],
        cluster: [u32; 2],
        raster: Raster,
    ) -> Result<Self, TacticError> {
        if !TileSize::SM100.iter().any(|t| t.rows() == mma_tiler[0]) {
            return Err(TacticError::UnsupportedMmaM { m: mma_tiler[0] });
        }
        let tile = TileSize::from_rows(mma_tiler[0])?;
        let group = tile.cta_group().size();
        if cluster[0] != group {
            return Err(TacticError::ClusterMNotCtaGroup {
                cluster_m: cluster[0],
                mma_m: mma_tiler[0],
            });
        }
        if !SUPPORTED_MMA_N.contains(&mma_tiler[1]) {
            return Err(TacticError::UnsupportedMmaN { n: mma_tiler[1] });
        }
        match (kind, cluster[1]) {
            (GemmKind::Gemm1, 1) | (GemmKind::Gemm2, 1 | 2) => {}
            (GemmKind::Gemm1, n) => {
                return Err(TacticError::GatherCannotMulticast { cluster_n: n });
            }
            (GemmKind::Gemm2, n) => return Err(TacticError::UnsupportedClusterN { cluster_n: n }),
        }
        Ok(Self {
            arch: Arch::Sm100,
            kind,
            tile,
            mma_n: mma_tiler[1],
            cluster_n: cluster[1],
            raster,
            schedule: Schedule::Cooperative,
            split_k: 1,
        })
    }

    /// A Hopper (swap-AB) GEMM tactic: `tile` routing rows per tile (the wgmma N) and `n`
    /// weight rows per CTA (64 per consumer wgmma M; GEMM1's up and gate halves of a 64-row
    /// interleave block land in one warpgroup when `n` ≥ 128). No clusters.
    pub fn new_sm90(kind: GemmKind, tile: u32, n: u32) -> Result<Self, TacticError> {
        let t = TileSize::from_rows(tile)?;
        if !TileSize::SM90.contains(&t) {
            return Err(TacticError::UnsupportedSm90Tile { tile });
        }
        if !SM90_MMA_N.contains(&n) || (kind == GemmKind::Gemm1 && n < 128) {
            return Err(TacticError::UnsupportedSm90N { gemm: kind, n });
        }
        Ok(Self {
            arch: Arch::Sm90,
            kind,
            tile: t,
            mma_n: n,
            cluster_n: 1,
            raster: Raster::AlongN,
            schedule: Schedule::Cooperative,
            split_k: 1,
        })
    }

    /// [`GemmTactic::new_sm90`] with the consumers' schedule. Ping-pong needs a unit that is
    /// one consumer's whole width (N 128: two m64 blocks, GEMM1's up and gate), and is built
    /// for GEMM1 only (GEMM2's finalize has not been simulated under it).
    pub fn new_sm90_scheduled(
        kind: GemmKind,
        tile: u32,
        n: u32,
        schedule: Schedule,
    ) -> Result<Self, TacticError> {
        let t = Self::new_sm90(kind, tile, n)?;
        if schedule == Schedule::PingPong && (kind != GemmKind::Gemm1 || n != 128) {
            return Err(TacticError::UnsupportedSchedule { gemm: kind, n, schedule });
        }
        Ok(Self { schedule, ..t })
    }

    /// This Hopper tactic with each unit's K split over a cluster of `split` CTAs
    /// ([`SM90_SPLIT_K`]): each CTA dequantizes and multiplies its stages of K
    /// ([`crate::sm90_tactics::sm90_split_k_range`]), the others hand their fp32
    /// accumulators to rank 0 through distributed shared memory, and rank 0 adds them in
    /// rank order and runs the epilogue (docs/hopper.md, "Split K"). Cooperative tactics only (a ping-pong consumer pair
    /// would hand off two units at once); 1 is no split.
    pub fn with_split_k(self, split: u32) -> Result<Self, TacticError> {
        if split == 1 {
            return Ok(Self { split_k: 1, ..self });
        }
        if self.arch != Arch::Sm90 || !SM90_SPLIT_K.contains(&split) {
            return Err(TacticError::UnsupportedSplitK { tactic: self, split });
        }
        if self.schedule != Schedule::Cooperative {
            return Err(TacticError::UnsupportedSplitK { tactic: self, split });
        }
        Ok(Self { split_k: split, ..self })
    }

    /// The tactic of a kernel identity that [`GemmTactic::new`] or [`GemmTactic::new_sm90`]
    /// already accepted (a built [`crate::KernelDesc`]'s key), so it is not checked again.
    pub(crate) const fn of_validated_key(k: &GemmKey) -> Self {
        Self {
            arch: k.arch(),
            kind: k.gemm,
            tile: k.tile,
            mma_n: k.mma_n,
            cluster_n: k.cluster_n,
            raster: k.raster,
            schedule: k.schedule,
            split_k: k.split_k,
        }
    }

    /// The generation this tactic is shaped for.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Which GEMM.
    pub fn kind(&self) -> GemmKind {
        self.kind
    }
    /// The routing tile size this tactic's MMA M equals.
    pub fn tile(&self) -> TileSize {
        self.tile
    }
    /// `[M, N]` of one MMA tile (M spans the CTA pair in 2-CTA mode).
    pub fn mma_tiler(&self) -> [u32; 2] {
        [self.tile.rows(), self.mma_n]
    }
    /// `[M, N]` cluster shape in CTAs.
    pub fn cluster(&self) -> [u32; 2] {
        [self.tile.cta_group().size(), self.cluster_n]
    }
    /// CTAs per cluster: the CTA group, the N ranks, and (Hopper) the CTAs splitting K.
    pub fn cluster_ctas(&self) -> u32 {
        self.tile.cta_group().size() * self.cluster_n * self.split_k
    }
    /// CTAs that split each unit's K (Hopper; 1: none, [`Self::with_split_k`]).
    pub fn split_k(&self) -> u32 {
        self.split_k
    }
    /// Whether the layer's K for this GEMM (H for GEMM1, I for GEMM2) gives every CTA of a
    /// split at least one K stage: ⌈K / 128⌉ ≥ split (128 is the longest Hopper stage, A8's,
    /// so this holds for every activation format).
    pub fn fits_k(&self, k_dim: u64) -> bool {
        sm90_split_k_fits(k_dim, ActivationFormat::Fp8.sm90_k_stage(), self.split_k)
    }
    /// 1-CTA or 2-CTA MMA.
    pub fn cta_group(&self) -> CtaGroup {
        self.tile.cta_group()
    }
    /// Tile walk order.
    pub fn raster(&self) -> Raster {
        self.raster
    }
    /// How the consumers share units (Hopper; SM100 tactics are cooperative).
    pub fn schedule(&self) -> Schedule {
        self.schedule
    }

    /// Whether a grid over `n_dim` output columns can be covered by this tactic's clusters:
    /// at least one N tile per cluster rank. The last N tile may be partial (SM100 clips its
    /// tail; Hopper blocks cover whole weight-row tiles, so there `n_dim` must be a multiple
    /// of [`sm90_n_granule`], whatever N is). A GEMM2 cluster's last group may hold a tile
    /// wholly past H, whose epilogue stores nothing; GEMM1 (no cluster-N tactics: gathered
    /// A cannot be multicast) keeps whole groups.
    pub fn fits_n(&self, n_dim: u64) -> bool {
        if self.arch == Arch::Sm90 && !n_dim.is_multiple_of(u64::from(sm90_n_granule(self.kind))) {
            return false;
        }
        let n_tiles = n_dim.div_ceil(u64::from(self.mma_n));
        let cn = u64::from(self.cluster_n);
        n_tiles >= cn && (self.kind == GemmKind::Gemm2 || n_tiles.is_multiple_of(cn))
    }
}

impl fmt::Display for GemmTactic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [m, n] = self.mma_tiler();
        let [cm, cn] = self.cluster();
        match self.arch {
            Arch::Sm100 => write!(f, "{}_m{m}n{n}_c{cm}x{cn}", self.kind),
            Arch::Sm90 => {
                write!(f, "{}_sm90_t{m}n{n}", self.kind)?;
                if self.schedule == Schedule::PingPong {
                    f.write_str("_pp")?;
                }
                if self.split_k > 1 {
                    write!(f, "_k{}", self.split_k)?;
                }
                Ok(())
            }
        }
    }
}

/// A whole-layer tactic: routing tile size and the two GEMM tactics built for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct MoeTactic {
    tile: TileSize,
    gemm1: GemmTactic,
    gemm2: GemmTactic,
    /// A wider GEMM1 launched beside `gemm1`: each forward pass runs whichever of the two
    /// spreads its units over the SMs more evenly for the live tiles the routing left (the
    /// kernels read the live-tile mask; [`MoeTactic::with_gemm1_wide`]).
    gemm1_wide: Option<GemmTactic>,
}

impl MoeTactic {
    /// Pairs two GEMM tactics under one routing tile size; both MMA Ms must equal it.
    pub fn new(tile: TileSize, gemm1: GemmTactic, gemm2: GemmTactic) -> Result<Self, TacticError> {
        if gemm1.arch != gemm2.arch {
            return Err(TacticError::MixedArch);
        }
        for (want, g) in [(GemmKind::Gemm1, gemm1), (GemmKind::Gemm2, gemm2)] {
            if g.kind != want {
                return Err(TacticError::WrongGemmKind { expected: want, actual: g.kind });
            }
            if g.tile != tile {
                return Err(TacticError::MmaMNotTileSize {
                    gemm: want,
                    mma_m: g.tile.rows(),
                    tile: tile.rows(),
                });
            }
        }
        Ok(Self { tile, gemm1, gemm2, gemm1_wide: None })
    }

    /// This tactic with `wide`, a GEMM1 of the same tile, schedule and generation and a wider
    /// N than [`Self::gemm1`], launched beside it: at each forward pass the live-tile count
    /// (known on the device only) picks which of the two does GEMM1's units, by which puts
    /// fewer weight rows on its busiest SM (`moegen_runtime::layer::wide_gemm1_mask`; from 63
    /// live tiles up one choice for all counts). The other runs no unit. Only Hopper tactics,
    /// whose routing tiles are small enough for the waves to matter, are offered so
    /// (`sm90_tactics`).
    pub fn with_gemm1_wide(self, wide: GemmTactic) -> Result<Self, TacticError> {
        let g = self.gemm1;
        if wide.kind != GemmKind::Gemm1 {
            return Err(TacticError::WrongGemmKind {
                expected: GemmKind::Gemm1,
                actual: wide.kind,
            });
        }
        if wide.arch != g.arch
            || wide.tile != g.tile
            || wide.schedule != g.schedule
            || wide.cluster_n != g.cluster_n
            || wide.raster != g.raster
            || wide.split_k != g.split_k
            || wide.mma_n <= g.mma_n
        {
            return Err(TacticError::NotAWiderSibling { gemm1: g, wide });
        }
        Ok(Self { gemm1_wide: Some(wide), ..self })
    }

    /// The wider GEMM1 launched beside [`Self::gemm1`], if any.
    pub fn gemm1_wide(&self) -> Option<&GemmTactic> {
        self.gemm1_wide.as_ref()
    }

    /// Routing tile size.
    pub fn tile(&self) -> TileSize {
        self.tile
    }
    /// GEMM1 tactic.
    pub fn gemm1(&self) -> &GemmTactic {
        &self.gemm1
    }
    /// GEMM2 tactic.
    pub fn gemm2(&self) -> &GemmTactic {
        &self.gemm2
    }
    /// The generation both GEMMs are shaped for.
    pub fn arch(&self) -> Arch {
        self.gemm1.arch
    }

    /// The applicability guard: both GEMMs' grids must be coverable by their clusters for a
    /// layer with intermediate size `intermediate` (GEMM1 has N = 2·I) and hidden size
    /// `hidden` (GEMM2 has N = H), and the layer must have at least one routing tile. A gated
    /// layer's view: an ungated GEMM1 (ReLU², N = I) is judged with its activation by the
    /// runtime's candidate check (`moegen_runtime::layer::CandidateReport`), which every
    /// `MoeLayer` applies to its dispatch table.
    pub fn applies_to(&self, max_tiles: u64, intermediate: u64, hidden: u64) -> bool {
        max_tiles >= 1
            && self.gemm1.fits_n(intermediate.saturating_mul(2))
            && self.gemm1_wide.is_none_or(|w| w.fits_n(intermediate.saturating_mul(2)))
            && self.gemm2.fits_n(hidden)
            && self.gemm1.fits_k(hidden)
            && self.gemm2.fits_k(intermediate)
    }
}

impl fmt::Display for MoeTactic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}:{}", self.tile.rows(), self.gemm1)?;
        if let Some(w) = self.gemm1_wide {
            write!(f, "|n{}", w.mma_n)?;
        }
        write!(f, ":{}", self.gemm2)
    }
}

/// The distinct GEMM kernels of the NVFP4 tactic space (4 GEMM1 + 8 GEMM2), ordered by name.
pub fn nvfp4_gemms() -> Vec<GemmTactic> {
    let mut v: Vec<GemmTactic> =
        nvfp4_tactics().iter().flat_map(|t| [*t.gemm1(), *t.gemm2()]).collect();
    v.sort_by_key(|g| g.to_string());
    v.dedup();
    v
}

/// The NVFP4 tactic space of moe-pipeline.md §6: T ∈ {128, 256}; GEMM1 N ∈ {128, 256} with
/// cluster (T/128, 1); GEMM2 N ∈ {128, 256} × cluster N ∈ {1, 2}. 2 · 2 · 4 = 16 tactics, in
/// a fixed order (tile, GEMM1 N, GEMM2 N, GEMM2 cluster N).
pub fn nvfp4_tactics() -> Vec<MoeTactic> {
    let mut out = Vec::with_capacity(16);
    for tile in TileSize::SM100 {
        let m = tile.rows();
        let cm = tile.cta_group().size();
        for n1 in SUPPORTED_MMA_N {
            for n2 in SUPPORTED_MMA_N {
                for cn2 in [1, 2] {
                    // The space is built from values `GemmTactic::new` accepts by definition;
                    // a rejection here would be a bug in this table, surfaced by the tests.
                    let g1 = GemmTactic::new(GemmKind::Gemm1, [m, n1], [cm, 1], Raster::AlongN);
                    let g2 = GemmTactic::new(GemmKind::Gemm2, [m, n2], [cm, cn2], Raster::AlongN);
                    if let (Ok(g1), Ok(g2)) = (g1, g2)
                        && let Ok(t) = MoeTactic::new(tile, g1, g2)
                    {
                        out.push(t);
                    }
                }
            }
        }
    }
    out
}

/// The tactic space of a generation.
pub fn tactics_for(arch: Arch) -> Vec<MoeTactic> {
    match arch {
        Arch::Sm100 => nvfp4_tactics(),
        Arch::Sm90 => sm90_tactics(),
    }
}

/// The tactics of `tactics` that the guard admits for a problem.
pub fn applicable_tactics(
    tactics: &[MoeTactic],
    max_tiles_for: impl Fn(TileSize) -> u64,
    intermediate: u64,
    hidden: u64,
) -> Vec<MoeTactic> {
    tactics
        .iter()
        .copied()
        .filter(|t| t.applies_to(max_tiles_for(t.tile()), intermediate, hidden))
        .collect()
}

/// A tactic that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TacticError {
    /// MMA M outside {128, 256}.
    #[error(
        "MMA M {m} is not supported (block-scaled FP4 MMAs have M = 128 per CTA; use 128 or 256)"
    )]
    UnsupportedMmaM {
        /// The M given.
        m: u32,
    },
    /// MMA N outside the supported set.
    #[error("MMA N {n} is not supported (expected 128 or 256)")]
    UnsupportedMmaN {
        /// The N given.
        n: u32,
    },
    /// Cluster M must equal the CTA-group size implied by MMA M.
    #[error("cluster M {cluster_m} does not match MMA M {mma_m}: cluster M must be MMA M / 128")]
    ClusterMNotCtaGroup {
        /// Cluster M given.
        cluster_m: u32,
        /// MMA M given.
        mma_m: u32,
    },
    /// GEMM1 gathers A per row, so it cannot multicast A across an N cluster.
    #[error(
        "GEMM1 cluster N {cluster_n} is invalid: gathered A rows cannot be multicast, cluster N must be 1"
    )]
    GatherCannotMulticast {
        /// Cluster N given.
        cluster_n: u32,
    },
    /// GEMM2 cluster N outside {1, 2}.
    #[error("GEMM2 cluster N {cluster_n} is not supported (expected 1 or 2)")]
    UnsupportedClusterN {
        /// Cluster N given.
        cluster_n: u32,
    },
    /// [`MoeTactic::with_gemm1_wide`] given a GEMM1 that is not the same kernel family with
    /// a wider N.
    #[error(
        "{wide} is not a wider sibling of {gemm1} (same generation, tile, schedule and cluster, larger N)"
    )]
    NotAWiderSibling {
        /// The tactic's GEMM1.
        gemm1: GemmTactic,
        /// The GEMM1 given as its wider sibling.
        wide: GemmTactic,
    },
    /// A K split a tactic cannot have.
    #[error(
        "{tactic} cannot split K over {split} CTAs (Hopper cooperative tactics split over 2 or 4)"
    )]
    UnsupportedSplitK {
        /// The tactic.
        tactic: GemmTactic,
        /// The split given.
        split: u32,
    },
    /// A GEMM tactic of the wrong kind in a slot.
    #[error("expected a {expected} tactic, got a {actual} tactic")]
    WrongGemmKind {
        /// Slot's kind.
        expected: GemmKind,
        /// Tactic's kind.
        actual: GemmKind,
    },
    /// A Hopper tile size outside {16, 32, 64, 128}.
    #[error("Hopper routing tile {tile} is not supported (expected 16, 32, 64 or 128 tokens)")]
    UnsupportedSm90Tile {
        /// The tile given.
        tile: u32,
    },
    /// A Hopper N outside the supported set.
    #[error(
        "Hopper {gemm} N {n} is not supported (64, 128 or 256 weight rows per CTA; GEMM1 needs ≥ 128 to hold an up/gate pair)"
    )]
    UnsupportedSm90N {
        /// Which GEMM.
        gemm: GemmKind,
        /// The N given.
        n: u32,
    },
    /// A consumer schedule the tactic's GEMM or width does not have.
    #[error(
        "Hopper {gemm} N {n} has no {schedule:?} schedule (ping-pong is built for GEMM1 at N 128: one unit per consumer)"
    )]
    UnsupportedSchedule {
        /// Which GEMM.
        gemm: GemmKind,
        /// The N given.
        n: u32,
        /// The schedule asked for.
        schedule: Schedule,
    },
    /// GEMM tactics of two generations in one layer tactic.
    #[error("GEMM1 and GEMM2 tactics are shaped for different GPU generations")]
    MixedArch,
    /// The routing-tile invariant.
    #[error(
        "{gemm} MMA M {mma_m} differs from the routing tile size {tile}: metadata is indexed per routing tile"
    )]
    MmaMNotTileSize {
        /// Which GEMM.
        gemm: GemmKind,
        /// Its MMA M.
        mma_m: u32,
        /// The routing tile size.
        tile: u32,
    },
}
