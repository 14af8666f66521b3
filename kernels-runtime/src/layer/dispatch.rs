//! Which tactic runs for a token count: one choice per token bucket (the hybrid uncapped
//! buckets of `moegen_dsl::plan::TokenBuckets`), from an analytic estimate that needs no
//! tuning, or from the autotuner.

use moegen_dsl::abi::roles::sm90_consumers;
use moegen_dsl::gpu::Gpu;
use moegen_dsl::plan::{MoeShape, TokenBuckets, max_tiles};
use moegen_dsl::resources::plan_gemm_for;
use moegen_dsl::{ActivationFormat, Arch, GemmTactic, MoeTactic, TileSize};

use super::candidates::shape_target;
use super::error::LayerError;
use super::live_tiles::{LIVE_TILE_MASK_BITS, UnitSpread, wide_gemm1_mask};
use super::route_counts::LiveTileSpread;

/// Where a table's choices came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChoiceSource {
    /// [`estimate_us`].
    Analytic,
    /// Timed on the device.
    Tuned,
}

/// A tactic per token bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchTable {
    buckets: TokenBuckets,
    choices: Vec<MoeTactic>,
    source: ChoiceSource,
}

/// The device the estimate ranks tactics for: its GPU's figures ([`Gpu`], the one description
/// of each GPU) and, where it dequantizes weights in software, that cost. Build one with
/// [`DeviceModel::b200`], [`DeviceModel::h200`] or [`DeviceModel::for_arch`] and adjust its
/// fields.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct DeviceModel {
    /// The GPU's SMs, clock, MMA and HBM throughput, and launch cost.
    pub gpu: Gpu,
    /// Where the tensor cores cannot read the 4-bit weights (Hopper), the consumer
    /// warpgroups' dequantization; `None` where the MMA reads them directly (SM100).
    pub software_dequant: Option<SoftwareDequant>,
    /// The activations the kernels read: on Hopper they set the K per pipeline stage, and so
    /// how many CTAs share an SM; on SM100 the MMA kind (MXFP8's is half NVFP4's rate, folded
    /// into `gpu` by [`Self::b200_mx`]).
    pub activations: ActivationFormat,
    /// How the estimate spreads a batch's routes over the experts.
    pub routes: RouteSpread,
}

/// How [`estimate_us`] spreads a batch's routes over the experts: what decides how many
/// routing tiles, each streaming and dequantizing its expert's weights, a tactic runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteSpread {
    /// Every local expert gets the mean count (tokens · top_k / experts) and no tile is
    /// partly empty beyond the rounding of that mean; with fewer local routes than local
    /// experts, that many experts get one route each.
    Even,
    /// Each token takes top_k distinct experts uniformly at random (the autotuner's routing,
    /// `tune::uniform_routing`): an expert's count is Binomial(tokens, top_k / experts), so
    /// a tile sized at the mean spills about half the experts into a second tile, which
    /// dequantizes their weights again. The estimate is the expected time over the
    /// distribution of live tiles, not the time at their mean: how the tiles fall into waves
    /// of persistent units turns on that spread at a few tokens, and a paired GEMM1 gains only
    /// from it.
    UniformRandom,
}

/// The cost of dequantizing weights in registers before each wgmma (Hopper): every token
/// tile dequantizes its expert's weights again, in series with its wgmmas, on one consumer
/// warpgroup per 128 weight rows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftwareDequant {
    /// Weights one consumer warpgroup dequantizes per clock.
    pub weights_per_clock_per_warpgroup: f64,
    /// Fixed clocks per K16 step and consumer (wgmma fence, commit and wait, the stage
    /// barrier): what makes one 128-row unit cheaper than two 64-row units.
    pub step_clocks: f64,
    /// Weights an SM dequantizes per clock at most (an effective rate, fitted): the ceiling
    /// that the consumer warpgroups resident on one SM (CTAs per SM × consumers per CTA)
    /// share.
    pub weights_per_clock_per_sm: f64,
    /// The share of the shorter of the dequantization-and-MMA time and the weight traffic
    /// that adds to the longer: 0 is perfect overlap, 1 is none (the two add). Fitted; at 0
    /// the A8 model saw every tactic at a few tokens as equally weight-bound and took the
    /// list's first (docs/perf.md, "A8 dispatch"). At 1 the weight traffic, the same for
    /// every tactic at a token count, adds to each estimate alike, so the HBM and clock
    /// figures cannot move a pick.
    pub exposed: f64,
    /// Activation bytes an SM brings from L2 into its stages per clock (an effective rate,
    /// fitted; 0: not counted). Each work unit reads its routing tile's T × K activations
    /// (2 bytes a value, 1 for FP8) whatever its N, so a narrow N block reads them again for
    /// every extra unit; the CTAs resident on an SM share the rate, and a unit's reads add
    /// to its MMA and dequantization time. Without it the model took GEMM2 N 64 and GEMM1
    /// N 128 at large tiles where the tuner's fastest were N 128 and N 256 (docs/perf.md,
    /// 2026-12-07, session 12).
    pub activation_bytes_per_clock_per_sm: f64,
    /// Clocks a split-K unit spends per rank besides rank 0 handing its fp32 accumulators to
    /// rank 0 (the distributed-shared-memory stores, the cluster-scope release and acquire,
    /// rank 0's loads and adds) and waiting on rank 0's epilogue.
    pub split_handoff_clocks: f64,
}

/// [`SoftwareDequant::split_handoff_clocks`] of the shipped Hopper models, set by hand from
/// the first split-K timings (H100, 2026-12-07 session 14, docs/perf.md): at DeepSeek's one
/// token the layer with both GEMMs split gained about 3 µs (split of 2) and 7 µs (split of 4)
/// less than its shorter K loops explain. The model charges 5000 clocks per rank besides
/// rank 0 in each split GEMM (2.7 and 8.2 µs at its clock), so that layer 5.5 and 16.4 µs:
/// more than measured, which keeps the split of 4 (1.7–2.3× slower than unsplit wherever its
/// clusters have several units) to the one-token buckets. Not a search over a tuner record
/// (none holds the shipped split kernels yet).
pub const SPLIT_HANDOFF_CLOCKS: f64 = 5000.0;

impl DeviceModel {
    /// A B200 ([`Gpu::B200`]): the MMA reads the 4-bit weights. Routes are spread evenly,
    /// as when its figures were set: no B200 tuner record exists to calibrate a random
    /// spread against.
    pub fn b200() -> Self {
        Self {
            gpu: Gpu::B200,
            software_dequant: None,
            activations: ActivationFormat::default(),
            routes: RouteSpread::Even,
        }
    }
    /// An H200 ([`Gpu::H200`]) with the tuner's routing ([`RouteSpread::UniformRandom`]).
    /// The figures are fitted, per clock, to the autotuner's trials of every tactic at every
    /// bucket on an H100, on two records judged together (2026-12-06 and 2026-12-07, session
    /// 11: A16 and A8, both benchmark shapes, uniform random routing; docs/perf.md, "the
    /// dispatch model recalibrated" and "activation reads"): an SM dequantizes 17 weights per
    /// clock whatever number of consumer warpgroups share it (15 for one warpgroup alone),
    /// plus 6 clocks per K16 step, brings 32 activation bytes per clock from L2, and nothing
    /// of that time hides behind the weight stream (`exposed` 1: the two add). They are
    /// effective rates, not instruction counts: they fold in the wgmma issue and the stage
    /// barriers. With them the model picks a tactic within 5 % of the tuner's fastest at 63
    /// and 67 of each record's 68 buckets from 32 tokens up (62 and 52 with the figures
    /// before, which counted no activation reads), and out of sample at 67 of sessions 6
    /// and 7's each and all 68 of session 13's; validation/tests/hopper_dispatch.rs holds
    /// that.
    pub fn h200() -> Self {
        Self {
            gpu: Gpu::H200,
            activations: ActivationFormat::default(),
            software_dequant: Some(SoftwareDequant {
                weights_per_clock_per_warpgroup: 15.0,
                step_clocks: 6.0,
                weights_per_clock_per_sm: 17.0,
                exposed: 1.0,
                activation_bytes_per_clock_per_sm: 32.0,
                split_handoff_clocks: SPLIT_HANDOFF_CLOCKS,
            }),
            routes: RouteSpread::UniformRandom,
        }
    }
    /// An H200 running the A8 kernels (FP8 activations): the E4M3 wgmma does twice the
    /// MACs per clock of the bf16 one, the expansion to E4M3 (20 thread instructions per 16
    /// weights, docs/hopper.md "W4A8", against about 1.9 per weight for bf16) runs at 1.375
    /// times the A16 model's weights per clock, the same fit as [`Self::h200`], an
    /// activation byte holds one value instead of half of one, and `step_clocks` stays per
    /// K16 of work (a K32 step costs two).
    pub fn h200_a8() -> Self {
        let mut m = Self::h200();
        m.gpu.macs_per_clock_per_sm *= 2.0;
        m.activations = ActivationFormat::Fp8;
        m.software_dequant = Some(SoftwareDequant {
            weights_per_clock_per_warpgroup: 20.625,
            step_clocks: 3.0,
            weights_per_clock_per_sm: 23.375,
            exposed: 1.0,
            activation_bytes_per_clock_per_sm: 32.0,
            split_handoff_clocks: SPLIT_HANDOFF_CLOCKS,
        });
        m
    }
    /// The model of a GPU generation: [`DeviceModel::b200`] for SM100,
    /// [`DeviceModel::h200`] for Hopper.
    pub fn for_arch(arch: Arch) -> Self {
        match arch {
            Arch::Sm100 => Self::b200(),
            Arch::Sm90 => Self::h200(),
        }
    }
    /// A B200 running the MXFP8 × MXFP4 kernels: `kind::mxf8f6f4` does half the MACs per
    /// clock of `kind::mxf4nvf4` (dense FP8 against FP4 on Blackwell); the weights stream
    /// the same 4-bit codes.
    pub fn b200_mx() -> Self {
        let mut m = Self::b200();
        m.gpu.macs_per_clock_per_sm /= 2.0;
        m.activations = ActivationFormat::Mxfp8;
        m
    }
    /// The model of a GPU generation for kernels over `activations`: [`Self::h200_a8`] for
    /// Hopper's FP8 activations, [`Self::b200_mx`] for SM100's MXFP8, else
    /// [`Self::for_arch`].
    pub fn for_layer(arch: Arch, activations: ActivationFormat) -> Self {
        match (arch, activations) {
            (Arch::Sm90, ActivationFormat::Fp8) => Self::h200_a8(),
            (Arch::Sm100, ActivationFormat::Mxfp8) => Self::b200_mx(),
            _ => Self::for_arch(arch),
        }
    }
    /// The same device with `sms` SMs (`Gpu::with_sms`: its GPC layout and measured cluster
    /// counts only if that is its count).
    pub fn with_sms(mut self, sms: u32) -> Self {
        self.gpu = self.gpu.with_sms(sms);
        self
    }
}

/// Estimated µs of one layer with `tactic` for `tokens` tokens, their routes spread as
/// `dev.routes` says (with [`RouteSpread::UniformRandom`], the expectation over the live-tile
/// counts; a paired GEMM1 runs at each count the width the device's mask gives it): each
/// GEMM is the slower of its weight traffic and its padded MMA work (plus, where the device
/// dequantizes weights in software, that work and the unit's activation reads per unit, and
/// the `exposed` share of the faster of the two) spread over whole waves of persistent
/// clusters, plus a fixed cost per launch. GEMM1 is costed as a gated layer's
/// (N = 2I): for ReLU² (N = I) its units and weight bytes are counted twice, which moves
/// only the ranking of tactics, never what a tactic computes.
pub fn estimate_us(shape: &MoeShape, tactic: &MoeTactic, tokens: u64, dev: &DeviceModel) -> f64 {
    let spread = Spread::new(shape, tactic.tile().rows(), tokens, dev);
    estimate_spread_us(shape, tactic, &spread, dev)
}

/// Where a batch's routes land, as the estimate sees them: the same for every tactic of a
/// tile size.
struct Spread {
    tile_rows: u32,
    /// The pass's bound on live tiles (what the runtime sizes grids and the pair's mask by).
    bound: u64,
    /// Experts with at least one route (each streams its weights once).
    touched: f64,
    /// (live tiles, probability).
    live: Vec<(f64, f64)>,
}

impl Spread {
    fn new(shape: &MoeShape, tile_rows: u32, tokens: u64, dev: &DeviceModel) -> Self {
        let w = &shape.window;
        let t = f64::from(tile_rows);
        let local = w.local() as f64;
        let (touched, live) = match dev.routes {
            RouteSpread::Even => {
                let routes = tokens * w.top_k() as u64;
                let local_routes = routes as f64 * local / w.num_experts() as f64;
                let per_expert = (local_routes / local).max(1.0);
                let touched = local_routes.min(local).max(1.0);
                (touched, vec![((per_expert / t).ceil() * touched, 1.0)])
            }
            RouteSpread::UniformRandom => {
                let (k, e) = (w.top_k() as u64, w.num_experts() as u64);
                let s = LiveTileSpread::uniform(tokens, k, e, w.local() as u64, tile_rows.into());
                (s.touched, s.pmf.into_iter().map(|(l, p)| (l as f64, p)).collect())
            }
        };
        let routes = tokens.saturating_mul(w.top_k() as u64);
        let bound = max_tiles(routes, w.local() as u64, tile_rows.into()).unwrap_or(0);
        Self { tile_rows, bound, touched, live }
    }
}

/// [`estimate_us`] on a spread made for the tactic's tile size.
fn estimate_spread_us(
    shape: &MoeShape,
    tactic: &MoeTactic,
    spread: &Spread,
    dev: &DeviceModel,
) -> f64 {
    debug_assert_eq!(spread.tile_rows, tactic.tile().rows(), "a spread of another tile size");
    let (h, i) = (shape.hidden as f64, shape.intermediate as f64);
    let t = f64::from(spread.tile_rows);
    let Spread { touched, live, .. } = spread;
    let touched = *touched;
    let expect = |f: &dyn Fn(f64) -> f64| live.iter().map(|&(l, p)| p * f(l)).sum::<f64>();
    // The resource model's CTAs per SM, once per GEMM rather than per live-tile count.
    let per_sm = |g: &GemmTactic| f64::from(ctas_per_sm(g, dev.activations));
    let gemm_us = |g: &GemmTactic, per_sm: f64, n_dim: f64, k_dim: f64, live_tiles: f64| {
        let [_, n] = g.mma_tiler();
        let cn = f64::from(g.cluster()[1]);
        let ctas = f64::from(g.cluster_ctas());
        let units = live_tiles * units_per_tile(g, n_dim) as f64;
        // A persistent grid holds as many clusters as the device runs at once (the runtime's
        // grid): the driver's recorded count, else the GPCs' bound.
        let clusters = f64::from(dev.gpu.resident_clusters(per_sm as u32, g.cluster_ctas()));
        // A split-K unit takes as long as its CTA with the most of K's stages.
        let split = f64::from(g.split_k());
        let k_cta = if g.split_k() > 1 {
            let stage = f64::from(dev.activations.sm90_k_stage());
            ((k_dim / stage).ceil() / split).ceil() * stage
        } else {
            k_dim
        };
        let waves = (units / clusters).ceil();
        // One unit: T × N·cn × K MACs on `ctas` SMs.
        let unit_macs = t * f64::from(n) * cn * k_dim;
        let unit_s = unit_macs / (ctas * dev.gpu.macs_per_clock_per_sm * dev.gpu.clock_ghz * 1e9);
        // Each unit dequantizes its N·cn × K weights again, whatever its token count, its
        // consumers in parallel, each K16 step at a fixed cost plus its rows' weights.
        // Only Hopper tactics dequantize in software, whatever model they are ranked with.
        let software = dev.software_dequant.filter(|_| g.arch() == Arch::Sm90);
        let dequant_s = software.map_or(0.0, |d| {
            let consumers = f64::from(sm90_consumers(n));
            let rows = f64::from(n) / consumers;
            // The consumers resident on one SM share its issue slots; with fewer units than
            // SMs × CTAs per SM the persistent grid leaves CTAs alone on their SMs.
            let sms = f64::from(dev.gpu.sms);
            let resident = per_sm.min((units * ctas / sms).ceil()).max(1.0);
            let rate = d
                .weights_per_clock_per_warpgroup
                .min(d.weights_per_clock_per_sm / (resident * consumers));
            let step = d.step_clocks + rows * 16.0 / rate;
            // Rank 0 takes the other ranks' partials one rank after another, and its epilogue
            // sets the cluster's pace: ranks 1.. store their next unit's only once rank 0
            // has read the last.
            let handoff = (split - 1.0) * d.split_handoff_clocks;
            ((k_cta / 16.0).ceil() * step + handoff) / (dev.gpu.clock_ghz * 1e9)
        });
        let activations_s = software.map_or(0.0, |d| {
            if d.activation_bytes_per_clock_per_sm <= 0.0 {
                return 0.0;
            }
            let bytes = if dev.activations == ActivationFormat::Fp8 { 1.0 } else { 2.0 };
            let sms = f64::from(dev.gpu.sms);
            let resident = per_sm.min((units * ctas / sms).ceil()).max(1.0);
            t * k_cta * bytes * resident
                / (d.activation_bytes_per_clock_per_sm * dev.gpu.clock_ghz * 1e9)
        });
        let mma_s = waves * (unit_s + dequant_s + activations_s);
        // Each touched expert's weights are read once (L2 keeps them across its tiles), at
        // NVFP4's 0.5 + 1/16 bytes per weight (Hopper MXFP4 streams 0.5 + 1/32). The Hopper
        // models hold `exposed` at 1, where max(mma, stream) + min(mma, stream) is their sum:
        // the stream, the same for every tactic, moves no pick.
        let weight_s = touched * n_dim * k_dim * 0.5625 / dev.gpu.achievable_hbm_bytes_per_s();
        let exposed = software.map_or(0.0, |d| d.exposed) * mma_s.min(weight_s);
        (mma_s.max(weight_s) + exposed) * 1e6 + dev.gpu.launch_us
    };
    let (g1, g2) = (tactic.gemm1(), tactic.gemm2());
    let (s1, s2) = (per_sm(g1), per_sm(g2));
    let gemm1 = match tactic.gemm1_wide() {
        // A paired GEMM1 runs, at each live-tile count, the width the device's rule gives it
        // (`wide_gemm1_mask`, the runtime's mask for this pass's bound), and pays the other
        // width's launch: the rule, not the faster of the two, since on gpt-oss's shape its
        // ties go to the slower width.
        Some(wide) => {
            let sw = per_sm(wide);
            let sms = u64::from(dev.gpu.sms);
            let spread_of = |g: &GemmTactic, per_sm: f64, n_dim: f64| {
                let [_, n] = g.mma_tiler();
                let per_tile = units_per_tile(g, n_dim);
                let cluster = u64::from(g.cluster_ctas()).max(1);
                let clusters =
                    u64::from(dev.gpu.resident_clusters(per_sm as u32, g.cluster_ctas()));
                let ctas = per_tile.saturating_mul(spread.bound).clamp(1, clusters) * cluster;
                UnitSpread { rows_per_unit: u64::from(n), units_per_tile: per_tile, ctas }
            };
            let mask = wide_gemm1_mask(
                spread_of(g1, s1, 2.0 * i),
                spread_of(wide, sw, 2.0 * i),
                sms,
                spread.bound,
            );
            let wide_at = |l: f64| mask >> (l.round() as u64).min(LIVE_TILE_MASK_BITS - 1) & 1 == 1;
            expect(&|l| {
                if wide_at(l) {
                    gemm_us(wide, sw, 2.0 * i, h, l)
                } else {
                    gemm_us(g1, s1, 2.0 * i, h, l)
                }
            }) + dev.gpu.launch_us
        }
        None => expect(&|l| gemm_us(g1, s1, 2.0 * i, h, l)),
    };
    gemm1 + expect(&|l| gemm_us(g2, s2, h, i, l))
}

/// Work units of `g` per routing tile over an N of `n_dim`: whole cluster groups (a GEMM2
/// cluster's last group may hold a tile past H), as `abi::persistent_units` counts them.
fn units_per_tile(g: &GemmTactic, n_dim: f64) -> u64 {
    let [_, n] = g.mma_tiler();
    let cn = u64::from(g.cluster()[1]).max(1);
    ((n_dim / f64::from(n)).ceil() as u64).div_ceil(cn)
}

/// CTAs of `g` resident per SM: the resource model's (1 for a GEMM it cannot plan, which
/// never reaches a candidate list).
fn ctas_per_sm(g: &GemmTactic, activations: ActivationFormat) -> u32 {
    plan_gemm_for(shape_target(g.arch()), g, activations).map_or(1, |b| b.ctas_per_sm)
}

impl DispatchTable {
    /// The analytic choice per bucket among `tactics` (each must apply to the layer).
    pub fn analytic(
        shape: &MoeShape,
        max_tokens: u64,
        tactics: &[MoeTactic],
        dev: &DeviceModel,
    ) -> Result<Self, LayerError> {
        let buckets = TokenBuckets::new(max_tokens)?;
        let choices = buckets
            .buckets()
            .iter()
            .map(|&n| {
                // One spread per tile size: it costs more than a tactic's estimate on it.
                let mut spreads: Vec<Spread> = Vec::new();
                tactics
                    .iter()
                    .map(|t| {
                        let rows = t.tile().rows();
                        let at = match spreads.iter().position(|s| s.tile_rows == rows) {
                            Some(at) => at,
                            None => {
                                spreads.push(Spread::new(shape, rows, n, dev));
                                spreads.len() - 1
                            }
                        };
                        (estimate_spread_us(shape, t, &spreads[at], dev), *t)
                    })
                    .min_by(|a, b| a.0.total_cmp(&b.0))
                    .map(|(_, t)| t)
                    .ok_or_else(|| {
                        LayerError::NoTactic(
                            "the candidate list is empty (MoeLayer::candidates says why)".into(),
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { buckets, choices, source: ChoiceSource::Analytic })
    }

    /// A table from explicit choices, one per bucket of `buckets`.
    pub fn from_choices(
        buckets: TokenBuckets,
        choices: Vec<MoeTactic>,
        source: ChoiceSource,
    ) -> Result<Self, LayerError> {
        if choices.len() != buckets.buckets().len() {
            return Err(LayerError::NoTactic(format!(
                "{} choices for {} buckets",
                choices.len(),
                buckets.buckets().len()
            )));
        }
        Ok(Self { buckets, choices, source })
    }

    /// The bucket and tactic for `tokens` (above the tuned maximum: the largest bucket's).
    pub fn choose(&self, tokens: u64) -> Result<(u64, MoeTactic), LayerError> {
        let bucket = self.buckets.bucket_for(tokens)?;
        let idx = self.buckets.buckets().partition_point(|&b| b < bucket);
        let i = idx.min(self.choices.len().saturating_sub(1));
        let t = self
            .choices
            .get(i)
            .copied()
            .ok_or_else(|| LayerError::NoTactic("empty table".into()))?;
        Ok((bucket, t))
    }

    /// The buckets.
    pub fn buckets(&self) -> &TokenBuckets {
        &self.buckets
    }
    /// The choice per bucket.
    pub fn choices(&self) -> &[MoeTactic] {
        &self.choices
    }
    /// Analytic or tuned.
    pub fn source(&self) -> ChoiceSource {
        self.source
    }
    /// Tile sizes the table uses (what the workspace must serve).
    pub fn tile_sizes(&self) -> Vec<TileSize> {
        let mut t: Vec<TileSize> = self.choices.iter().map(MoeTactic::tile).collect();
        t.sort();
        t.dedup();
        t
    }
}

/// The tactics of `candidates` that apply to a layer with up to `max_tokens` tokens, as a
/// gated layer (GEMM1 N = 2I, [`MoeTactic::applies_to`]); [`super::CandidateReport`] judges
/// with the layer's activation (ReLU²: N = I) and is what `MoeLayer::new` applies.
pub fn applicable(shape: &MoeShape, max_tokens: u64, candidates: &[MoeTactic]) -> Vec<MoeTactic> {
    let routes = max_tokens.saturating_mul(shape.top_k() as u64);
    candidates
        .iter()
        .copied()
        .filter(|t| {
            let tiles = max_tiles(routes, shape.local_experts() as u64, u64::from(t.tile().rows()));
            tiles.is_ok_and(|m| t.applies_to(m, shape.intermediate as u64, shape.hidden as u64))
        })
        .collect()
}
