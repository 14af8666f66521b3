//! Per-role dynamic instruction counts of the generated SM100 GEMMs, measured in moegen-sim
//! (what `role-stats` writes to docs/role-stats.json, and `gen stats`/`gen model` read).
//!
//! Every GEMM kernel of the default set runs inside the whole layer (routing sort → GEMM1 →
//! GEMM2) with the per-warp profile on, at three problem sizes that differ in one GEMM
//! dimension each: (H, I) = (512, 512), (1024, 512) and (512, 1024). For GEMM1 (K = H,
//! N = 2I) the second doubles K at the same tiles and the third doubles the tiles at the same
//! K; for GEMM2 (K = I, N = H) the other way round. Differences between runs are marginal
//! costs, free of one-time set-up: per K block for the roles with a K loop, per tile for
//! their work outside it, per output element for the epilogues (whose marginal tile includes
//! everything a tile costs). A figure is per executing warp: the producer and the gather run
//! in every CTA, the MMA issuer in the leader, the relay in the peer. The MXFP8 × MXFP4
//! kernels run the same problems with their MXFP4 weights and MXFP8 activations; their K
//! block is their stage of 128 (NVFP4's: 256).

use std::collections::BTreeMap;

use moegen_codegen::perf::role_stats::{
    KernelRoleStats, Role, RoleFigures, RoleStatsFile, fnv1a64_hex,
};
use moegen_dsl::abi::{GemmKey, KernelId, gemm_roles};
use moegen_dsl::formats::{FormatError, block_amax, nvfp4_global_scale};
use moegen_dsl::plan::{ExpertWindow, PlanError};
use moegen_dsl::{FinalizeMode, GemmKind, MoeTactic, nvfp4_tactics};
use moegen_runtime::RuntimeError;
use moegen_runtime::backend::sim::SimBackend;
use moegen_runtime::device_ops::DeviceOpError;
use moegen_runtime::reference::{
    MoeShape, ReferenceOptions, Routing, Sm100MxWeights, prepare_weights, quantize_activations,
};
use moegen_sim::{Category, Profile, WarpProfile};

use crate::device_layer::{LayerInputs, device_moe_layer, gemm_key};
use crate::device_layer_mx::{MxActivations, MxLayerInputs, device_mx_layer};

/// The measured problem's fixed parts: experts, the local window, routes per token, tokens.
pub const EXPERTS: usize = 8;
/// Local experts (offset 0).
pub const LOCAL: usize = 4;
/// Routes per token.
pub const TOP_K: usize = 2;
/// Tokens.
pub const TOKENS: usize = 160;
/// The base (H, I); the other two runs double one of them.
pub const BASE: (usize, usize) = (512, 512);

/// What can go wrong while measuring.
#[derive(Debug, thiserror::Error)]
pub enum RoleStatsError {
    /// The synthetic problem of one size could not be built.
    #[error("problem H={hidden} I={intermediate}: {source}")]
    Problem {
        /// Hidden size.
        hidden: usize,
        /// Intermediate size.
        intermediate: usize,
        /// The shape's, quantizer's or reference's error (boxed: it is large).
        source: Box<RuntimeError>,
    },
    /// The layer failed to run.
    #[error("{tactic}: {source}")]
    Run {
        /// Tactic being measured.
        tactic: String,
        /// What failed.
        source: Box<DeviceOpError>,
    },
    /// The routing sort reported a negative count of live tiles.
    #[error("{tactic}: {count} live tiles")]
    LiveTiles {
        /// Tactic being measured.
        tactic: String,
        /// The count read back.
        count: i32,
    },
    /// A launch of the kernel left no profile.
    #[error("{0}: no profile recorded")]
    NoProfile(String),
    /// A GEMM kernel of the set that no tactic and option of the layer runs.
    #[error("{0}: no tactic runs this kernel")]
    Unreachable(String),
}

/// The launch profile and work of one GEMM in one run.
struct Sample {
    profile: Profile,
    /// Work units (routing tiles × cluster-wide N blocks).
    units: u64,
    /// K blocks.
    k_blocks: u64,
}

/// The three runs of one GEMM kernel: base, doubled K, doubled N (in that GEMM's terms).
struct Runs {
    base: Sample,
    more_k: Sample,
    more_n: Sample,
}

/// Deterministic pseudo-random numbers (xorshift64*), so the measurement is repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// The layer inputs of one size, in both SM100 formats.
struct Problem {
    shape: MoeShape,
    acts: moegen_runtime::reference::Nvfp4Activations,
    weights: moegen_runtime::reference::PreparedWeights,
    /// The bf16 activations the MXFP8 layer quantizes itself.
    x: Vec<half::bf16>,
    /// The same weights quantized to MXFP4 for the MXFP8 × MXFP4 GEMMs.
    mx: Sm100MxWeights,
    routing: Routing,
}

fn problem(h: usize, i: usize) -> Result<Problem, RoleStatsError> {
    let e = |e: RuntimeError| RoleStatsError::Problem {
        hidden: h,
        intermediate: i,
        source: Box::new(e),
    };
    let plan = |x: PlanError| e(x.into());
    let format = |x: FormatError| e(x.into());
    let window = ExpertWindow::new(EXPERTS, 0, LOCAL, TOP_K).map_err(plan)?;
    let shape = MoeShape::new(h, i, window).map_err(plan)?;
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let x: Vec<f32> = (0..TOKENS * h).map(|_| r.unit()).collect();
    let s = 1.0 / (h as f32).sqrt();
    let up: Vec<f32> = (0..LOCAL * i * h).map(|_| r.unit() * s).collect();
    let gate: Vec<f32> = (0..LOCAL * i * h).map(|_| r.unit() * s).collect();
    let down: Vec<f32> = (0..LOCAL * h * i).map(|_| r.unit() / (i as f32).sqrt()).collect();
    // Token t's slot j goes to expert (t + 3j) mod 8: half the routes are local, spread
    // evenly over the four local experts (several partial routing tiles per tactic).
    let experts: Vec<i32> =
        (0..TOKENS * TOP_K).map(|j| ((j / TOP_K + 3 * (j % TOP_K)) % EXPERTS) as i32).collect();
    let weights: Vec<f32> = (0..TOKENS * TOP_K).map(|j| 0.25 + (j % TOP_K) as f32 * 0.5).collect();
    let gs_x = nvfp4_global_scale(block_amax(&x)).map_err(format)?;
    let acts = quantize_activations(&x, TOKENS, h, gs_x).map_err(e)?;
    let weights_p =
        prepare_weights(&shape, &up, &gate, &down, gs_x, 448.0 * 6.0 / 4.0).map_err(e)?;
    let (mx, _) = Sm100MxWeights::quantize(&shape, &up, &gate, &down).map_err(e)?;
    Ok(Problem {
        shape,
        acts,
        weights: weights_p,
        x: x.iter().map(|&v| half::bf16::from_f32(v)).collect(),
        mx,
        routing: Routing { tokens: TOKENS, experts, weights },
    })
}

/// The key of the kernel a tactic's GEMM runs with `opts`, NVFP4 or (`mx`) MXFP8 × MXFP4.
fn key_of(g: &moegen_dsl::GemmTactic, opts: ReferenceOptions, mx: bool) -> Option<GemmKey> {
    if !mx {
        return gemm_key(g, opts).ok();
    }
    let d = moegen_dsl::KernelDescBuilder::new(*g)
        .format(moegen_dsl::WeightFormat::Mxfp4)
        .activations(moegen_dsl::ActivationFormat::Mxfp8);
    let d = match g.kind() {
        GemmKind::Gemm1 => d.swiglu_input(opts.swiglu_input).recipe(opts.recipe),
        GemmKind::Gemm2 => d.finalize(opts.finalize),
    };
    d.build().ok().map(|d| d.key())
}

/// The option sets the layer runs the GEMM kernels with: both finalize modes with the
/// default recipe, and the Exact recipe.
fn option_sets() -> Vec<ReferenceOptions> {
    let mut v: Vec<ReferenceOptions> = [FinalizeMode::BulkReduceAdd, FinalizeMode::Deterministic]
        .into_iter()
        .map(|finalize| ReferenceOptions { finalize, ..Default::default() })
        .collect();
    v.push(ReferenceOptions { recipe: moegen_dsl::EpilogueRecipe::Exact, ..Default::default() });
    v
}

/// Runs the layer once and returns each GEMM's sample, keyed by kernel name.
fn run_once(
    p: &Problem,
    tactic: &MoeTactic,
    opts: ReferenceOptions,
    mx: bool,
) -> Result<BTreeMap<String, Sample>, RoleStatsError> {
    let mut sim = SimBackend::new().with_profile();
    let failed = |e| RoleStatsError::Run { tactic: tactic.to_string(), source: Box::new(e) };
    let sort = if mx {
        let inputs = MxLayerInputs {
            shape: &p.shape,
            acts: MxActivations::Bf16(&p.x),
            weights: &p.mx,
            routing: &p.routing,
        };
        device_mx_layer(&mut sim, &inputs, tactic, opts, 1).map_err(failed)?.sort
    } else {
        let inputs = LayerInputs {
            shape: &p.shape,
            acts: &p.acts,
            weights: &p.weights,
            routing: &p.routing,
        };
        device_moe_layer(&mut sim, &inputs, tactic, opts, 1).map_err(failed)?.sort
    };
    let count = sort.num_non_exiting_tiles;
    let live = u64::try_from(count)
        .map_err(|_| RoleStatsError::LiveTiles { tactic: tactic.to_string(), count })?;
    let (h, i) = (p.shape.hidden as u64, p.shape.intermediate as u64);
    let mut out = BTreeMap::new();
    for g in [tactic.gemm1(), tactic.gemm2()] {
        let Some(key) = key_of(g, opts, mx) else { continue };
        let name = key.name();
        let (k_dim, n_dim) = match g.kind() {
            GemmKind::Gemm1 => (h, 2 * i),
            GemmKind::Gemm2 => (i, h),
        };
        let [_, n] = g.mma_tiler();
        let cn = u64::from(g.cluster()[1]);
        let units = live * n_dim.div_ceil(u64::from(n)).div_ceil(cn);
        let profile = sim
            .profiles
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| RoleStatsError::NoProfile(name.clone()))?;
        let k_stage = if mx { 128 } else { 256 };
        out.insert(name, Sample { profile, units, k_blocks: k_dim.div_ceil(k_stage) });
    }
    Ok(out)
}

/// Which warps play `role` in `key`'s kernel, and how many of the role's warps run per
/// CTA-unit (the producer and gather in every CTA, the MMA issuer in the leader, the relay
/// in the peer).
fn role_warps(key: &GemmKey, role: Role) -> Option<(Vec<usize>, f64)> {
    let r = gemm_roles(key);
    let cm = f64::from(key.cta_group());
    let w = |x: u32| x as usize;
    match role {
        Role::Producer => Some((vec![w(r.tma_warp)], 1.0)),
        Role::Mma => Some((vec![w(r.mma_warp)], 1.0 / cm)),
        Role::Gather => r.gather_warp.map(|g| ((w(g)..w(g) + 4).collect(), 1.0)),
        Role::Relay => r.relay_warp.map(|x| (vec![w(x)], (cm - 1.0) / cm)),
        Role::Epilogue => Some(((0..w(r.epilogue_warps)).collect(), 1.0)),
    }
}

fn counts(p: &WarpProfile) -> BTreeMap<String, f64> {
    Category::ALL.iter().map(|&c| (c.name().to_owned(), p.count(c) as f64)).collect()
}

/// `(a − b) / d` per category, dropping zeros.
fn marginal(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>, d: f64) -> BTreeMap<String, f64> {
    a.iter()
        .filter_map(|(k, &x)| {
            let v = (x - b.get(k).copied().unwrap_or(0.0)) / d;
            // Round away float noise: counts are integers divided by small integers.
            let v = (v * 1e4).round() / 1e4;
            (v != 0.0).then(|| (k.clone(), v))
        })
        .collect()
}

fn figures(key: &GemmKey, runs: &Runs, role: Role) -> Option<RoleFigures> {
    let (warps, per_cta_unit) = role_warps(key, role)?;
    let ctas_per_unit = f64::from(key.cluster_ctas());
    let sum = |s: &Sample| counts(&s.profile.sum(warps.iter().copied()));
    let (base, more_k, more_n) = (sum(&runs.base), sum(&runs.more_k), sum(&runs.more_n));
    // Role warp-units: CTA-units × the role's warps per CTA-unit.
    let warp_units =
        |s: &Sample| s.units as f64 * ctas_per_unit * per_cta_unit * warps.len() as f64;
    if role == Role::Epilogue {
        // Per output element per thread: a warp instruction covers 32 rows' elements.
        let cols = f64::from(match key.gemm {
            GemmKind::Gemm1 => key.mma_n / 2,
            GemmKind::Gemm2 => key.mma_n,
        });
        let tiles = warp_units(&runs.more_n) - warp_units(&runs.base);
        let per_tile = marginal(&more_n, &base, tiles);
        let per_unit = per_tile.iter().map(|(k, v)| (k.clone(), v / cols)).collect();
        return Some(RoleFigures {
            role,
            per_unit,
            per_tile: per_tile.values().sum(),
            per_tile_categories: per_tile,
        });
    }
    let k_iters = |s: &Sample| warp_units(s) * s.k_blocks as f64;
    let per_unit = marginal(&more_k, &base, k_iters(&runs.more_k) - k_iters(&runs.base));
    let tiles = warp_units(&runs.more_n) - warp_units(&runs.base);
    let per_tile_all = marginal(&more_n, &base, tiles);
    let kb = runs.base.k_blocks as f64;
    let per_tile_categories: BTreeMap<String, f64> = per_tile_all
        .iter()
        .map(|(k, v)| (k.clone(), v - kb * per_unit.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| v.abs() > 1e-9)
        .collect();
    Some(RoleFigures {
        role,
        per_unit,
        per_tile: per_tile_categories.values().sum(),
        per_tile_categories,
    })
}

/// Measures every SM100 GEMM kernel of the default set; `progress` hears each kernel as it
/// is done.
pub fn measure(progress: &mut dyn FnMut(&str)) -> Result<RoleStatsFile, RoleStatsError> {
    let (h0, i0) = BASE;
    let sizes = [(h0, i0), (2 * h0, i0), (h0, 2 * i0)];
    let problems: Vec<Problem> =
        sizes.iter().map(|&(h, i)| problem(h, i)).collect::<Result<_, _>>()?;
    let wanted: Vec<(GemmKey, &'static str)> = moegen_kernels::kernels()
        .filter_map(|k| match k.id {
            KernelId::Gemm(key) if key.target.arch() == moegen_dsl::Arch::Sm100 => {
                Some((key, k.ptx))
            }
            _ => None,
        })
        .collect();
    let mut runs: BTreeMap<String, Runs> = BTreeMap::new();
    for (tactic, mx) in nvfp4_tactics().into_iter().flat_map(|t| [(t, false), (t, true)]) {
        for opts in option_sets() {
            let names: Vec<String> = [tactic.gemm1(), tactic.gemm2()]
                .iter()
                .filter_map(|g| key_of(g, opts, mx).map(|k| k.name()))
                .collect();
            if names.iter().all(|n| runs.contains_key(n)) {
                continue;
            }
            let mut samples = Vec::with_capacity(3);
            for p in &problems {
                samples.push(run_once(p, &tactic, opts, mx)?);
            }
            for name in names {
                if runs.contains_key(&name) {
                    continue;
                }
                let mut take = |i: usize| {
                    samples[i].remove(&name).ok_or_else(|| RoleStatsError::NoProfile(name.clone()))
                };
                let (s0, s1, s2) = (take(0)?, take(1)?, take(2)?);
                // Runs 1 and 2 double H and I: K and N of GEMM1 are (H, 2I), of GEMM2 (I, H).
                let gemm1 = name.contains("_gemm1_");
                let r = if gemm1 {
                    Runs { base: s0, more_k: s1, more_n: s2 }
                } else {
                    Runs { base: s0, more_k: s2, more_n: s1 }
                };
                progress(&name);
                runs.insert(name, r);
            }
        }
    }
    let mut kernels = Vec::with_capacity(wanted.len());
    for (key, ptx) in wanted {
        let name = key.name();
        let r = runs.get(&name).ok_or_else(|| RoleStatsError::Unreachable(name.clone()))?;
        kernels.push(KernelRoleStats {
            kernel: name,
            gemm: key.gemm,
            ptx_fnv1a64: fnv1a64_hex(ptx),
            cols_per_tile: match key.gemm {
                GemmKind::Gemm1 => key.mma_n / 2,
                GemmKind::Gemm2 => key.mma_n,
            },
            base_k_blocks: r.base.k_blocks as u32,
            roles: Role::ALL.iter().filter_map(|&role| figures(&key, r, role)).collect(),
        });
    }
    Ok(RoleStatsFile { method: METHOD.to_owned(), kernels })
}

/// How the file was made (stored in it).
pub const METHOD: &str = "moegen-sim per-warp profile (warp-instruction issues), whole layer \
     with 160 tokens, 8 experts of which 4 local, top-2, one persistent cluster; runs at \
     (H, I) = (512, 512), (1024, 512), (512, 1024); per K block = marginal of doubling K, per \
     tile = marginal of doubling the tiles (less the K loop), per output element = per tile / \
     columns; per executing warp (epilogue: per thread). `cargo run --release -p \
     moegen-validation --bin role-stats` regenerates it.";

/// Which kernels of the default set the committed file no longer describes: missing, or
/// measured on other PTX.
pub fn stale_kernels(file: &RoleStatsFile) -> Vec<String> {
    moegen_kernels::kernels()
        .filter(
            |k| matches!(k.id, KernelId::Gemm(key) if key.target.arch() == moegen_dsl::Arch::Sm100),
        )
        .filter(|k| file.kernel(k.name).is_none_or(|s| s.ptx_fnv1a64 != fnv1a64_hex(k.ptx)))
        .map(|k| k.name.to_owned())
        .collect()
}
