//! The Hopper dispatch model judged against autotuner records, and a search for its
//! dequantization figures (`fit-dispatch`). A record is `moe-bench`'s `tune_<variant>.json`
//! for the A16 and A8 variants on both benchmark shapes, every tactic timed at every bucket,
//! committed as `<prefix>-<variant>-<shape>.json`: any model can be judged against it
//! without a GPU, by what its analytic table picks.

use std::path::{Path, PathBuf};

use moegen_dsl::{ActivationFormat, Arch};
use moegen_runtime::layer::{
    DeviceModel, DispatchTable, LayerConfig, MoeLayer, MoeShape, MoeTactic, SoftwareDequant,
};

use crate::bench::{BenchShape, VARIANTS};
use crate::rng::Rng;

/// The variants a record holds.
pub const RECORD_VARIANTS: [&str; 2] = ["mxfp4-a16", "mxfp4-a8"];

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
    /// The layer could not be set up (a shape or candidate error).
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
pub struct Records {
    parts: Vec<Part>,
}

impl Records {
    /// Loads `<prefix>-<variant>-<shape>.json` for both [`RECORD_VARIANTS`] on both shapes.
    pub fn load(prefix: &Path) -> Result<Self, FitError> {
        let parts: Vec<(&str, &str)> =
            RECORD_VARIANTS.iter().flat_map(|v| [(*v, "deepseek"), (*v, "gpt-oss")]).collect();
        Self::load_parts(prefix, &parts)
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
            let shape = match sname {
                "deepseek" => BenchShape::deepseek(),
                "gpt-oss" => BenchShape::gpt_oss(),
                other => return Err(FitError::Layer(format!("no benchmark shape {other}"))),
            };
            let kernels = v.kernels().map_err(|e| FitError::Layer(e.to_string()))?;
            let moe = shape.moe_shape().map_err(|e| FitError::Layer(e.to_string()))?;
            let max_tokens = shape.tokens.iter().copied().max().unwrap_or(1) as u64;
            let config = LayerConfig {
                activations: v.activations,
                recipe: v.recipe,
                ..LayerConfig::new(moe)
            };
            let tactics = MoeLayer::candidates(&config, &kernels, max_tokens, Arch::Sm90, v.format)
                .map_err(|e| FitError::Layer(e.to_string()))?;
            let mut path = prefix.as_os_str().to_owned();
            path.push(format!("-{variant}-{sname}.json"));
            let path = PathBuf::from(path);
            let trials = read_trials(&path)?;
            loaded.push(Part {
                variant: v.name,
                shape: if sname == "deepseek" { "deepseek" } else { "gpt-oss" },
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

/// The figures a search varies: A16's dequantization, with A8 at `a8_ratio` times its rates
/// and half its step clocks (a K16 step of A8's K32 work), as [`DeviceModel::h200_a8`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    /// A16's dequantization.
    pub a16: SoftwareDequant,
    /// A8's rates over A16's.
    pub a8_ratio: f64,
}

impl Figures {
    /// The shipped models' figures.
    pub fn shipped() -> Self {
        let a16 = DeviceModel::h200().software_dequant.unwrap_or(SoftwareDequant {
            weights_per_clock_per_warpgroup: 1.0,
            step_clocks: 0.0,
            weights_per_clock_per_sm: 1.0,
            exposed: 1.0,
        });
        let a8 = DeviceModel::h200_a8().software_dequant.unwrap_or(a16);
        Self { a16, a8_ratio: a8.weights_per_clock_per_sm / a16.weights_per_clock_per_sm }
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

/// A random search from `start`: each step scales one to three figures by e^(σ·z), z
/// roughly standard normal, σ from 0.5 shrinking by 0.6 every fifth of the steps, `exposed` kept in
/// [0, 1]; a step is kept when it ranks no worse. Deterministic for a `seed`.
pub fn search(
    records: &Records,
    start: Figures,
    steps: usize,
    seed: u64,
) -> Result<(Figures, Fared), FitError> {
    let mut rng = Rng(seed.max(1));
    let judge = |f: &Figures| records.judge(|d| f.apply(d)).map(|[large, _]| large);
    let (mut best, mut fared) = (start, judge(&start)?);
    let mut sigma = 0.5;
    for step in 0..steps {
        let mut f = best;
        let count = 1 + (rng.next() % 3) as usize;
        for _ in 0..count {
            let scale = (sigma * f64::from(rng.normal())).exp();
            let a = &mut f.a16;
            match rng.next() % 5 {
                0 => a.weights_per_clock_per_warpgroup *= scale,
                1 => a.step_clocks *= scale,
                2 => a.weights_per_clock_per_sm *= scale,
                3 => a.exposed = (a.exposed * scale).clamp(0.0, 1.0),
                _ => f.a8_ratio *= scale,
            }
        }
        let got = judge(&f)?;
        if rank(&got) <= rank(&fared) {
            (best, fared) = (f, got);
        }
        if steps >= 5 && (step + 1) % (steps / 5) == 0 {
            sigma *= 0.6;
        }
    }
    Ok((best, fared))
}
