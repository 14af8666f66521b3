//! The Hopper dispatch model judged against autotuner records, and a search for its
//! dequantization figures (`fit-dispatch`). A record is `moe-bench`'s `tune_<variant>.json`
//! for the A16 and A8 variants on both benchmark shapes, every tactic timed at every bucket,
//! committed as `<prefix>-<variant>-<shape>.json`: any model can be judged against it
//! without a GPU, by what its analytic table picks.

use std::path::{Path, PathBuf};

use moegen_dsl::plan::TokenBuckets;
use moegen_dsl::{ActivationFormat, Arch};
use moegen_runtime::layer::{
    DeviceModel, DispatchTable, LayerConfig, MoeLayer, MoeShape, MoeTactic, SPLIT_HANDOFF_CLOCKS,
    SoftwareDequant,
};

use crate::bench::{BenchShape, VARIANTS};
use crate::rng::Rng;

/// A record's A16 variant.
pub const RECORD_A16: &str = "mxfp4-a16";

/// A record's A8 variant: the first of these with a file under the record's prefix (the
/// tuner's records before the Fast recipe hold `mxfp4-a8`, those since `mxfp4-fast-a8`).
pub const RECORD_A8: [&str; 2] = ["mxfp4-a8", "mxfp4-fast-a8"];

/// The benchmark shapes a record holds.
pub const RECORD_SHAPES: [&str; 2] = ["deepseek", "gpt-oss"];

/// Buckets below this many tokens are judged apart: a trial's one routing draw of a few
/// tokens decides which experts it touches.
pub const SMALL_BUCKET: u64 = 32;

/// What went wrong reading a record.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// A record file could not be read or parsed.
    #[error("{path}: {reason}")]
    Record {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The model picked a tactic the record did not time.
    #[error("{path}: no trial of {tactic} at {bucket} tokens")]
    MissingTrial {
        /// The file.
        path: PathBuf,
        /// The tactic.
        tactic: String,
        /// The bucket.
        bucket: u64,
    },
    /// The record timed a tactic twice at one bucket.
    #[error("{path}: {tactic} timed more than once at {bucket} tokens")]
    DuplicateTrial {
        /// The file.
        path: PathBuf,
        /// The tactic.
        tactic: String,
        /// The bucket.
        bucket: u64,
    },
    /// The layer could not be set up (a variant, shape or candidate error).
    #[error("{0}")]
    Layer(String),
}

/// How a model's picks fared against a record over some buckets.
#[derive(Clone, Debug, Default)]
pub struct Fared {
    /// Buckets judged.
    pub buckets: usize,
    /// Picks within 5 % of the bucket's fastest trial.
    pub within: usize,
    /// The worst pick's ratio to the fastest trial, and where (`variant shape bucket: tactic`).
    pub worst: (f64, String),
    /// Σ ln(ratio), for the geometric mean.
    pub log_sum: f64,
}

impl Fared {
    fn add(&mut self, ratio: f64, at: impl FnOnce() -> String) {
        self.buckets += 1;
        self.within += usize::from(ratio <= 1.05);
        self.log_sum += ratio.ln();
        if ratio > self.worst.0 {
            self.worst = (ratio, at());
        }
    }
    /// The geometric mean of the picks' ratios to the fastest trials.
    pub fn geomean(&self) -> f64 {
        (self.log_sum / self.buckets.max(1) as f64).exp()
    }
}

/// One variant on one shape: the layer's candidates and the record's trials.
#[derive(Clone)]
struct Part {
    variant: &'static str,
    shape: &'static str,
    activations: ActivationFormat,
    moe: MoeShape,
    max_tokens: u64,
    tactics: Vec<MoeTactic>,
    path: PathBuf,
    /// (bucket, tactic, ms).
    trials: Vec<(u64, String, f64)>,
}

/// A loaded record.
#[derive(Clone)]
pub struct Records {
    parts: Vec<Part>,
}

impl Records {
    /// Loads `<prefix>-<variant>-<shape>.json` on both [`RECORD_SHAPES`] for [`RECORD_A16`]
    /// and the first of [`RECORD_A8`] the prefix has a file of (with neither, the error
    /// names the first's file).
    pub fn load(prefix: &Path) -> Result<Self, FitError> {
        let file = |variant: &str, shape: &str| {
            let mut path = prefix.as_os_str().to_owned();
            path.push(format!("-{variant}-{shape}.json"));
            PathBuf::from(path)
        };
        let mut parts = Vec::new();
        for shape in RECORD_SHAPES {
            let a8 = RECORD_A8.iter().find(|v| file(v, shape).is_file()).unwrap_or(&RECORD_A8[0]);
            parts.push((RECORD_A16, shape));
            parts.push((*a8, shape));
        }
        Self::load_parts(prefix, &parts)
    }

    /// The tactics judged, part by part (variant, shape, candidates): the paired and
    /// split-K ones only where the part's record timed them.
    pub fn tactics(&self) -> impl Iterator<Item = (&str, &str, &[MoeTactic])> {
        self.parts.iter().map(|p| (p.variant, p.shape, &p.tactics[..]))
    }

    /// These records and `other`'s, judged together: their buckets counted side by side.
    pub fn merged(mut self, other: Records) -> Self {
        self.parts.extend(other.parts);
        self
    }

    /// Loads `<prefix>-<variant>-<shape>.json` for each `(variant, shape)` of `parts`: a
    /// variant of `bench::VARIANTS` (a Fast one judged with its own kernel set) on
    /// `deepseek` or `gpt-oss`.
    pub fn load_parts(prefix: &Path, parts: &[(&str, &str)]) -> Result<Self, FitError> {
        let mut loaded = Vec::new();
        for &(variant, sname) in parts {
            let v = VARIANTS
                .iter()
                .find(|v| v.name == variant)
                .ok_or_else(|| FitError::Layer(format!("no benchmark variant {variant}")))?;
            let (shape, sname) = match sname {
                "deepseek" => (BenchShape::deepseek(), "deepseek"),
                "gpt-oss" => (BenchShape::gpt_oss(), "gpt-oss"),
                other => return Err(FitError::Layer(format!("no benchmark shape {other}"))),
            };
            let kernels = v.kernels().map_err(|e| FitError::Layer(e.to_string()))?;
            let moe = shape.moe_shape().map_err(|e| FitError::Layer(e.to_string()))?;
            let mut path = prefix.as_os_str().to_owned();
            path.push(format!("-{variant}-{sname}.json"));
            let path = PathBuf::from(path);
            let trials = read_trials(&path)?;
            // The record's largest bucket, as the tuner's workspace planned it.
            let max_tokens = trials.iter().map(|t| t.0).max().ok_or_else(|| FitError::Record {
                path: path.clone(),
                reason: "no trials".into(),
            })?;
            let config = LayerConfig {
                activations: v.activations,
                recipe: v.recipe,
                ..LayerConfig::new(moe)
            };
            // The paired GEMM1 tactics (`MoeTactic::gemm1_wide`) are candidates where the
            // record timed them: records from before them hold no trial of theirs. The model's
            // pick is judged against the record's fastest trial either way. Likewise the
            // split-K tactics (`GemmTactic::split_k`). A trial is recognised by the candidate
            // whose name it carries, not by the name's spelling.
            let candidates =
                MoeLayer::candidates(&config, &kernels, max_tokens, Arch::Sm90, v.format)
                    .map_err(|e| FitError::Layer(e.to_string()))?;
            let timed = |kind: fn(&MoeTactic) -> bool| {
                candidates.iter().filter(|t| kind(t)).any(|t| {
                    let name = t.to_string();
                    trials.iter().any(|trial| trial.1 == name)
                })
            };
            let pairs = timed(|t| t.gemm1_wide().is_some());
            let splits = timed(is_split);
            let tactics: Vec<_> = candidates
                .into_iter()
                .filter(|t| pairs || t.gemm1_wide().is_none())
                .filter(|t| splits || !is_split(t))
                .collect();
            check_complete(&path, &trials, &tactics, max_tokens)?;
            loaded.push(Part {
                variant: v.name,
                shape: sname,
                activations: v.activations,
                moe,
                max_tokens,
                tactics,
                path,
                trials,
            });
        }
        Ok(Self { parts: loaded })
    }

    /// How the analytic tables of `model` (applied to `DeviceModel::for_layer` of each
    /// variant) fared: `[from SMALL_BUCKET tokens up, below]`.
    pub fn judge(
        &self,
        model: impl Fn(DeviceModel) -> DeviceModel,
    ) -> Result<[Fared; 2], FitError> {
        let mut fared = [Fared::default(), Fared::default()];
        for p in &self.parts {
            let dev = model(DeviceModel::for_layer(Arch::Sm90, p.activations));
            let table = DispatchTable::analytic(&p.moe, p.max_tokens, &p.tactics, &dev)
                .map_err(|e| FitError::Layer(e.to_string()))?;
            for &bucket in table.buckets().buckets() {
                let at = |b: u64| p.trials.iter().filter(move |t| t.0 == b);
                let best = at(bucket).map(|t| t.2).fold(f64::INFINITY, f64::min);
                let picked =
                    table.choose(bucket).map_err(|e| FitError::Layer(e.to_string()))?.1.to_string();
                let ms = at(bucket).find(|t| t.1 == picked).map(|t| t.2).ok_or_else(|| {
                    FitError::MissingTrial { path: p.path.clone(), tactic: picked.clone(), bucket }
                })?;
                fared[usize::from(bucket < SMALL_BUCKET)]
                    .add(ms / best, || format!("{} {} {bucket}: {picked}", p.variant, p.shape));
            }
        }
        Ok(fared)
    }
}

/// Every candidate timed exactly once at every bucket the tables choose for: a record
/// missing some would be judged on the rest only, and a duplicate would be ambiguous.
fn check_complete(
    path: &Path,
    trials: &[(u64, String, f64)],
    tactics: &[MoeTactic],
    max_tokens: u64,
) -> Result<(), FitError> {
    let buckets = TokenBuckets::new(max_tokens).map_err(|e| FitError::Layer(e.to_string()))?;
    for &bucket in buckets.buckets() {
        for t in tactics {
            let tactic = t.to_string();
            match trials.iter().filter(|r| r.0 == bucket && r.1 == tactic).count() {
                1 => {}
                0 => return Err(FitError::MissingTrial { path: path.to_owned(), tactic, bucket }),
                _ => {
                    return Err(FitError::DuplicateTrial { path: path.to_owned(), tactic, bucket });
                }
            }
        }
    }
    Ok(())
}

fn read_trials(path: &Path) -> Result<Vec<(u64, String, f64)>, FitError> {
    let err = |reason: String| FitError::Record { path: path.to_owned(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    let rows = json.as_array().ok_or_else(|| err("not an array of trials".into()))?;
    rows.iter()
        .map(|r| {
            let bucket = r["bucket"].as_u64();
            let tactic = r["tactic"].as_str();
            let ms = r["ms"].as_f64().filter(|m| m.is_finite() && *m > 0.0);
            match (bucket, tactic, ms) {
                (Some(b), Some(t), Some(m)) => Ok((b, t.to_owned(), m)),
                _ => Err(err(format!("a trial without bucket, tactic or positive ms: {r}"))),
            }
        })
        .collect()
}

/// The figures a search varies: A16's dequantization and activation reads, with A8 at
/// `a8_ratio` times its dequantization rates, half its step clocks (a K16 step of A8's K32
/// work) and the same activation bytes per clock, as [`DeviceModel::h200_a8`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    /// A16's dequantization.
    pub a16: SoftwareDequant,
    /// A8's rates over A16's.
    pub a8_ratio: f64,
}

impl Figures {
    /// The shipped models' figures (`DeviceModel::h200`, `h200_a8`); `None` if either model
    /// stopped dequantizing in software or their A8 figures stopped being A16's scaled as
    /// [`Figures::apply`] scales them.
    pub fn shipped() -> Option<Self> {
        let a16 = DeviceModel::h200().software_dequant?;
        let a8 = DeviceModel::h200_a8().software_dequant?;
        let f = Self { a16, a8_ratio: a8.weights_per_clock_per_sm / a16.weights_per_clock_per_sm };
        let ok = f.apply(DeviceModel::h200()) == DeviceModel::h200()
            && f.apply(DeviceModel::h200_a8()) == DeviceModel::h200_a8();
        ok.then_some(f)
    }
    /// The figures before the recalibration (2026-12-03): 17.7 weights per clock per
    /// warpgroup, 35.3 per SM, 32 clocks per K16 step, a fifth exposed, A8 at 2.64× the
    /// rates.
    pub fn before() -> Self {
        Self {
            a16: SoftwareDequant {
                weights_per_clock_per_warpgroup: 64.0 / 3.625,
                step_clocks: 32.0,
                weights_per_clock_per_sm: 128.0 / 3.625,
                exposed: 0.2,
                activation_bytes_per_clock_per_sm: 0.0,
                split_handoff_clocks: SPLIT_HANDOFF_CLOCKS,
            },
            a8_ratio: 3.625 / 1.375,
        }
    }
    /// `d` with these figures for its activations.
    pub fn apply(&self, mut d: DeviceModel) -> DeviceModel {
        let a = self.a16;
        d.software_dequant = Some(if d.activations == ActivationFormat::Fp8 {
            SoftwareDequant {
                weights_per_clock_per_warpgroup: a.weights_per_clock_per_warpgroup * self.a8_ratio,
                step_clocks: a.step_clocks / 2.0,
                weights_per_clock_per_sm: a.weights_per_clock_per_sm * self.a8_ratio,
                exposed: a.exposed,
                activation_bytes_per_clock_per_sm: a.activation_bytes_per_clock_per_sm,
                split_handoff_clocks: a.split_handoff_clocks,
            }
        } else {
            a
        });
        d
    }
}

/// Ranks a judgement: more buckets within 5 % from `SMALL_BUCKET` up, then a smaller worst
/// ratio, then a smaller geometric mean.
fn rank(f: &Fared) -> (i64, f64, f64) {
    (-(f.within as i64), f.worst.0, f.geomean())
}

/// A random search from `start`: each step scales one to three of the five rates and clocks
/// (weights per warpgroup and per SM, clocks per K16 step, activation bytes per SM — a
/// figure at 0 stays 0 —, A8's ratio) by e^(σ·z), z roughly standard normal,
/// σ = 0.5 · 0.6^⌊5 · step / steps⌋; a step is kept when it ranks no worse from
/// [`SMALL_BUCKET`] tokens up and, over all the records together, picks within 5 % at no
/// fewer buckets below it than `start` does (else the rates drift towards zero, where the
/// weight stream stops moving picks and the small buckets are lost). `exposed` is held
/// at `start`'s: at 1 the weight stream adds to every tactic alike, so the GPU's bandwidth
/// and clock cannot move a pick and figures fitted on one GPU's record rank for another
/// (varied, it drifts towards 0 on an H100 record judged with the H200's figures).
/// Deterministic for a `seed` (0 is taken as 1: the generator's state must be nonzero).
pub fn search(
    records: &Records,
    start: Figures,
    steps: usize,
    seed: u64,
) -> Result<(Figures, Fared), FitError> {
    let mut rng = Rng(seed.max(1));
    let judge = |f: &Figures| records.judge(|d| f.apply(d));
    let [mut fared, start_small] = judge(&start)?;
    let mut best = start;
    for step in 0..steps {
        let sigma = 0.5 * 0.6f64.powi((5 * step / steps) as i32);
        let mut f = best;
        let count = 1 + (rng.next() % 3) as usize;
        for _ in 0..count {
            let scale = (sigma * f64::from(rng.normal())).exp();
            let a = &mut f.a16;
            match rng.next() % 5 {
                0 => a.weights_per_clock_per_warpgroup *= scale,
                1 => a.step_clocks *= scale,
                2 => a.weights_per_clock_per_sm *= scale,
                3 => a.activation_bytes_per_clock_per_sm *= scale,
                _ => f.a8_ratio *= scale,
            }
        }
        let [got, small] = judge(&f)?;
        if small.within >= start_small.within && rank(&got) <= rank(&fared) {
            (best, fared) = (f, got);
        }
    }
    Ok((best, fared))
}

/// Whether a tactic splits either GEMM's K over a cluster.
fn is_split(t: &MoeTactic) -> bool {
    t.gemm1().split_k() > 1 || t.gemm2().split_k() > 1
}
