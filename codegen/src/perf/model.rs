//! An analytic B200 model of the two SM100 GEMMs: from a workload (tokens, shape, uniform
//! routing) and each kernel's per-role issue costs, an estimated time per tactic. Pure
//! arithmetic; every assumption is a named constant or field, and docs/perf.md states them.
//!
//! Per kernel: work units (routing tiles × N blocks) are dealt round-robin over the
//! persistent clusters, so the busiest cluster runs `waves` units. A unit's period is the
//! slowest of: the tensor cores (2·N cycles per K block per CTA), each K-loop role's issue
//! per K block (MMA issuer, producer, gather, relay: instructions × CPI), and the epilogue
//! (instructions per thread × CPI), combined by how the accumulators overlap (two buffers:
//! max; one buffer released after the tile: sum; early release: the next mainloop waits
//! for a fraction of the epilogue). The kernel's time is a fixed launch/fill cost, plus the
//! larger of that compute and its HBM traffic at the achievable bandwidth, plus the last
//! tile's epilogue, which nothing overlaps.

use moegen_dsl::gpu::Gpu;
use moegen_dsl::{GemmKind, GemmTactic, MoeTactic, TileSize};

use super::role_stats::{KernelRoleStats, Role, RoleFigures};

/// The machine as the model sees it: the GPU's figures ([`Gpu`]) and the issue costs the
/// model assumes on it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Machine {
    /// SMs.
    pub sms: u32,
    /// Clock (GHz).
    pub clock_ghz: f64,
    /// Dense FP4 (block-scaled) MACs per clock per SM.
    pub fp4_mac_per_clk_per_sm: f64,
    /// HBM bandwidth (bytes/s).
    pub hbm_bytes_per_s: f64,
    /// Fraction of it a streaming kernel achieves.
    pub hbm_efficiency: f64,
    /// Launch, prologue and pipeline fill per kernel (µs).
    pub fixed_us: f64,
    /// Cycles per issued instruction of one warp (latency-limited: one warp of a role per
    /// SM sub-partition, dependent chains of 4-cycle ALU operations with ~2-way ILP).
    pub cpi: f64,
    /// Cycles per instruction of an epilogue whose element loop holds a call: `div.rn.f32`
    /// compiles to a fast path with a CALL to its slow path inside BSSY/BSYNC, and ptxas
    /// does not move one element's instructions across another's call, so each element's
    /// dependent chain runs at its latency.
    pub cpi_serialized: f64,
    /// Issue slots of one `div.rn.f32` (its fast path in SASS: MUFU.RCP, FFMAs, FCHK, …).
    pub div_slots: f64,
    /// Issue slots per lane iteration of a bulk operation whose operands differ per lane
    /// (ptxas serialises it over the lanes: one UBLKRED/UBLKCP per iteration plus the loop).
    pub bulk_lane_slots: f64,
}

impl Machine {
    /// The B200 ([`Gpu::B200`]) with the issue costs above: CPI 2, 4 in a serialised
    /// epilogue, 10 slots per `div.rn.f32`, 6 per lane iteration of a bulk operation.
    pub const B200: Machine = Machine::on(Gpu::B200, 2.0, 4.0, 10.0, 6.0);

    /// `gpu`'s figures with these issue costs (the fields of the same names).
    const fn on(
        gpu: Gpu,
        cpi: f64,
        cpi_serialized: f64,
        div_slots: f64,
        bulk_lane_slots: f64,
    ) -> Machine {
        Machine {
            sms: gpu.sms,
            clock_ghz: gpu.clock_ghz,
            fp4_mac_per_clk_per_sm: gpu.macs_per_clock_per_sm,
            hbm_bytes_per_s: gpu.hbm_bytes_per_s,
            hbm_efficiency: gpu.hbm_efficiency,
            fixed_us: gpu.launch_us,
            cpi,
            cpi_serialized,
            div_slots,
            bulk_lane_slots,
        }
    }
}

/// The layer and batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Workload {
    /// Tokens N.
    pub tokens: u64,
    /// Hidden size H.
    pub hidden: u64,
    /// Intermediate size I.
    pub intermediate: u64,
    /// Experts in the model.
    pub experts: u64,
    /// Routes per token.
    pub top_k: u64,
    /// Experts on this rank.
    pub local_experts: u64,
}

impl Workload {
    /// DeepSeek-V3's expert-parallel slice: H 7168, I 2048, 256 experts, top-8, 32 local.
    pub fn deepseek_v3_ep(tokens: u64) -> Self {
        Self { tokens, hidden: 7168, intermediate: 2048, experts: 256, top_k: 8, local_experts: 32 }
    }
    /// Routes that land on local experts (uniform routing, rounded up).
    pub fn local_routes(&self) -> u64 {
        (self.tokens * self.top_k * self.local_experts).div_ceil(self.experts.max(1))
    }
    /// Local experts with at least one route, the routes spread evenly (balanced routing,
    /// the tuner's profile input).
    pub fn touched_experts(&self) -> u64 {
        self.local_experts.min(self.local_routes())
    }
    /// Routing tiles of `t` rows.
    pub fn tiles(&self, t: u64) -> u64 {
        let e = self.touched_experts();
        if e == 0 {
            return 0;
        }
        e * self.local_routes().div_ceil(e).div_ceil(t)
    }
}

/// How a kernel's epilogue overlaps the next tile's mainloop.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum Overlap {
    /// One accumulator, released after the whole tile: mainloop and epilogue in sequence.
    None,
    /// Two accumulators: the next mainloop runs during this epilogue.
    Full,
    /// Two accumulators sharing columns: the next mainloop starts once this fraction of the
    /// epilogue has read the shared columns and released them.
    EarlyRelease(f64),
}

/// A GEMM kernel's per-role costs in issue slots (≈ SASS instructions), per executing warp.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct GemmCosts {
    /// MMA issuer per K block.
    pub mma_per_k_block: f64,
    /// TMA producer per K block.
    pub producer_per_k_block: f64,
    /// Gather per thread per K block (GEMM1).
    pub gather_per_k_block: f64,
    /// Relay per K block (2-CTA GEMM1).
    pub relay_per_k_block: f64,
    /// Epilogue per output element per thread.
    pub epilogue_per_element: f64,
    /// Epilogue per tile per thread, outside the element loop.
    pub epilogue_per_tile: f64,
    /// Whether the epilogue's element loop holds a call (`div.rn.f32`): it then runs at
    /// [`Machine::cpi_serialized`].
    pub epilogue_serialized: bool,
    /// Accumulator overlap.
    pub overlap: Overlap,
}

/// Issue slots of one role's per-unit figures: dynamic PTX instructions except `mov`
/// (ptxas turns register-pair packing and unpacking into pair operands, and immediates and
/// copies into operands or renamed registers), with `div.rn.f32` and lane-serialised bulk
/// operations expanded as [`Machine`] says.
fn slots(r: &RoleFigures, m: &Machine, lanes_per_bulk: f64) -> f64 {
    let div = r.category("div.f32");
    let bulk = r.category("bulk.reduce") + r.category("bulk.copy");
    r.total() - r.category("mov")
        + div * (m.div_slots - 1.0)
        + bulk * (lanes_per_bulk * m.bulk_lane_slots - 1.0)
}

impl GemmCosts {
    /// moegen's costs from its measured per-role figures; `overlap` from its accumulator
    /// layout. Bulk reduce/copy instructions are issued by every epilogue lane (one row
    /// each) and serialised by ptxas, so each costs 32 lane iterations.
    pub fn from_role_stats(s: &KernelRoleStats, m: &Machine, overlap: Overlap) -> Self {
        let per = |role: Role| s.role(role).map_or(0.0, |r| slots(r, m, 32.0));
        GemmCosts {
            mma_per_k_block: per(Role::Mma),
            producer_per_k_block: per(Role::Producer),
            gather_per_k_block: per(Role::Gather),
            relay_per_k_block: per(Role::Relay),
            // The epilogue's per-element figure is the marginal cost of a tile divided by
            // its elements: it already holds the per-tile work.
            epilogue_per_element: per(Role::Epilogue),
            epilogue_per_tile: 0.0,
            epilogue_serialized: s
                .role(Role::Epilogue)
                .is_some_and(|r| r.category("div.f32") > 0.0),
            overlap,
        }
    }
}

/// One GEMM kernel's estimate.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct GemmEstimate {
    /// Work units (routing tiles × N blocks of the cluster).
    pub units: u64,
    /// Units of the busiest cluster.
    pub waves: u64,
    /// Cycles per unit.
    pub period_cycles: f64,
    /// The epilogue of one unit (cycles).
    pub epilogue_cycles: f64,
    /// HBM traffic (bytes).
    pub hbm_bytes: f64,
    /// Compute up to the last unit's epilogue ((waves − 1) × period + one mainloop), µs.
    pub compute_us: f64,
    /// HBM traffic at the achievable bandwidth, µs.
    pub memory_us: f64,
    /// The estimate, µs.
    pub total_us: f64,
    /// What bounds it: `memory`, `tensor`, `epilogue` or `issue`.
    pub bound: &'static str,
}

/// Bytes per FP4 value with its share of one-byte scales per 16 values.
const NVFP4_BYTES: f64 = 0.5 + 1.0 / 16.0;

/// Estimates one GEMM of `kind` with routing tile `tile`, MMA N `n`, cluster N `cn`.
pub fn estimate_gemm(
    m: &Machine,
    w: &Workload,
    kind: GemmKind,
    tile: TileSize,
    n: u32,
    cn: u32,
    c: &GemmCosts,
) -> GemmEstimate {
    let t = u64::from(tile.rows());
    let cm = u64::from(tile.cta_group().size());
    let (h, i) = (w.hidden as f64, w.intermediate as f64);
    let (k_dim, n_dim) = match kind {
        GemmKind::Gemm1 => (w.hidden, 2 * w.intermediate),
        GemmKind::Gemm2 => (w.intermediate, w.hidden),
    };
    let tiles = w.tiles(t);
    let units = tiles * n_dim.div_ceil(u64::from(n) * u64::from(cn));
    let clusters = (u64::from(m.sms) / (cm * u64::from(cn))).max(1);
    let waves = units.div_ceil(clusters);
    let k = k_dim.div_ceil(256) as f64;
    let nf = f64::from(n);
    // Tensor cycles per K block: 128 rows per CTA × N × 256 K per SM.
    let tensor_per_k = 128.0 * nf * 256.0 / m.fp4_mac_per_clk_per_sm;
    let role_per_k = [c.mma_per_k_block, c.producer_per_k_block, c.gather_per_k_block]
        .into_iter()
        .chain([c.relay_per_k_block])
        .fold(0.0f64, f64::max)
        * m.cpi;
    let mainloop = k * tensor_per_k.max(role_per_k);
    let cols = match kind {
        GemmKind::Gemm1 => nf / 2.0,
        GemmKind::Gemm2 => nf,
    };
    let cpi_epi = if c.epilogue_serialized { m.cpi_serialized } else { m.cpi };
    let epi = cpi_epi * (c.epilogue_per_element * cols + c.epilogue_per_tile);
    let period = match c.overlap {
        Overlap::None => mainloop + epi,
        Overlap::Full => mainloop.max(epi),
        Overlap::EarlyRelease(f) => (mainloop + f * epi).max(epi),
    };
    // Every unit but the last at the period; the last unit's mainloop, then its epilogue,
    // which nothing overlaps (it follows the last loads too).
    let body = waves.saturating_sub(1) as f64 * period + mainloop;
    let cycles_to_us = |cy: f64| cy / (m.clock_ghz * 1e3);
    let touched = w.touched_experts() as f64;
    let rows = (tiles * t) as f64;
    let tokens = w.tokens.min(w.local_routes()) as f64;
    let hbm_bytes = match kind {
        // Weights of every touched expert once, the gathered tokens, h and its scales.
        GemmKind::Gemm1 => {
            touched * 2.0 * i * h * NVFP4_BYTES + tokens * h * NVFP4_BYTES + rows * i * NVFP4_BYTES
        }
        // Weights, h, and the bf16 output read and written by the reduce-add.
        GemmKind::Gemm2 => {
            touched * h * i * NVFP4_BYTES + rows * i * NVFP4_BYTES + 2.0 * tokens * h * 2.0
        }
    };
    let memory_us = hbm_bytes / (m.hbm_bytes_per_s * m.hbm_efficiency) * 1e6;
    let compute_us = cycles_to_us(body);
    let total_us = if units == 0 {
        m.fixed_us
    } else {
        m.fixed_us + compute_us.max(memory_us) + cycles_to_us(epi)
    };
    let bound = if memory_us >= compute_us {
        "memory"
    } else if epi >= mainloop && c.overlap != Overlap::None {
        "epilogue"
    } else if role_per_k > tensor_per_k {
        "issue"
    } else {
        "tensor"
    };
    GemmEstimate {
        units,
        waves,
        period_cycles: period,
        epilogue_cycles: epi,
        hbm_bytes,
        compute_us,
        memory_us,
        total_us,
        bound,
    }
}

/// A tactic's estimate: both GEMMs.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct TacticEstimate {
    /// GEMM1.
    pub gemm1: GemmEstimate,
    /// GEMM2.
    pub gemm2: GemmEstimate,
    /// Their sum, µs.
    pub total_us: f64,
}

/// Estimates a tactic from the costs of its two kernels.
pub fn estimate_tactic(
    m: &Machine,
    w: &Workload,
    t: &MoeTactic,
    gemm1: &GemmCosts,
    gemm2: &GemmCosts,
) -> TacticEstimate {
    let est = |g: &GemmTactic, c: &GemmCosts| {
        let [_, n] = g.mma_tiler();
        estimate_gemm(m, w, g.kind(), g.tile(), n, g.cluster()[1], c)
    };
    let (a, b) = (est(t.gemm1(), gemm1), est(t.gemm2(), gemm2));
    TacticEstimate { gemm1: a, gemm2: b, total_us: a.total_us + b.total_us }
}
