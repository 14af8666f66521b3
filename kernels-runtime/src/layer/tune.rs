//! The autotuner: times every tactic the layer can run, per token bucket, on the device,
//! with balanced routing and one shared workspace (so no tactic gains from memory the
//! others lack), and persists the winners as JSON keyed by device, driver, layer shape,
//! options and the kernel set's checksum. `MOEGEN_TUNE_CACHE` names the file.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use half::bf16;
use moegen_dsl::MoeTactic;
use moegen_dsl::plan::TokenBuckets;

use super::dispatch::{ChoiceSource, DispatchTable};
use super::error::LayerError;
use super::forward::{ForwardIo, MoeLayer};
use super::memory::{DeviceSlice, Workspace};
use crate::backend::{Backend, DevicePtr};

/// How to tune.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TuneOptions {
    /// Untimed runs per (bucket, tactic) before timing.
    pub warmup: u32,
    /// Timed runs per (bucket, tactic); the mean is compared.
    pub iterations: u32,
    /// Only these tactics (default: every tactic the layer can run).
    pub tactics: Option<Vec<MoeTactic>>,
    /// Cache file to read first and write after (default: `$MOEGEN_TUNE_CACHE`).
    pub cache: Option<PathBuf>,
    /// Show a progress bar (default: when stderr is a terminal).
    pub progress: bool,
}

impl Default for TuneOptions {
    fn default() -> Self {
        Self {
            warmup: 2,
            iterations: 10,
            tactics: None,
            cache: std::env::var_os("MOEGEN_TUNE_CACHE").map(PathBuf::from),
            progress: std::io::stderr().is_terminal(),
        }
    }
}

/// One timed (bucket, tactic).
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// Token bucket.
    pub bucket: u64,
    /// Tactic.
    pub tactic: MoeTactic,
    /// Mean milliseconds per forward pass (simulated work units on the simulator).
    pub ms: f32,
    /// Base of the workspace the trial ran on.
    pub workspace: DevicePtr,
}

/// What tuning produced.
#[derive(Clone, Debug)]
pub struct TuneReport {
    /// The table (also installed into the layer).
    pub table: DispatchTable,
    /// Every trial, in run order (empty when the cache answered).
    pub trials: Vec<Trial>,
    /// Whether the cache file answered.
    pub from_cache: bool,
}

/// What the cache is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TuneKey {
    /// Device, architecture, driver.
    pub device: String,
    /// H, I, experts, local experts, offset, top_k.
    pub shape: [usize; 6],
    /// SwiGLU input, finalize mode, activation format, epilogue recipe, weight format and
    /// epilogue functions.
    pub options: String,
    /// The kernel set's checksum.
    pub kernel_set: String,
    /// The tuned maximum token count.
    pub max_tokens: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CacheEntry {
    key: TuneKey,
    /// (bucket, tactic name).
    table: Vec<(u64, String)>,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct CacheFile {
    version: u32,
    entries: Vec<CacheEntry>,
}

const CACHE_VERSION: u32 = 1;

fn cache_err(path: &Path, reason: impl ToString) -> LayerError {
    LayerError::TuneCache { path: path.display().to_string(), reason: reason.to_string() }
}

fn read_cache(path: &Path) -> Result<CacheFile, LayerError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let f: CacheFile = serde_json::from_str(&text).map_err(|e| cache_err(path, e))?;
            if f.version != CACHE_VERSION {
                return Err(cache_err(
                    path,
                    format!("version {} (expected {CACHE_VERSION})", f.version),
                ));
            }
            Ok(f)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CacheFile::default()),
        Err(e) => Err(cache_err(path, e)),
    }
}

/// The key `layer` is tuned under on `b`.
pub fn tune_key(b: &dyn Backend, layer: &MoeLayer, kernel_set: u64, max_tokens: u64) -> TuneKey {
    let c = layer.config();
    let w = &c.shape.window;
    TuneKey {
        device: b.device_key(),
        shape: [
            c.shape.hidden,
            c.shape.intermediate,
            w.num_experts(),
            w.local(),
            w.offset(),
            w.top_k(),
        ],
        options: format!(
            "{:?}/{:?}/{:?}/{:?}/{:?}/{:?}",
            c.swiglu_input,
            c.finalize,
            c.activations,
            c.recipe,
            layer.weight_format(),
            c.epilogue
        ),
        kernel_set: format!("{kernel_set:016x}"),
        max_tokens,
    }
}

/// Looks `key` up in the cache file; a tactic name the layer cannot run makes the entry stale.
fn cached_table(
    path: &Path,
    key: &TuneKey,
    layer: &MoeLayer,
    buckets: &TokenBuckets,
) -> Result<Option<DispatchTable>, LayerError> {
    let file = read_cache(path)?;
    let Some(entry) = file.entries.iter().find(|e| e.key == *key) else { return Ok(None) };
    let tactics = layer.tactics();
    let mut choices = Vec::with_capacity(entry.table.len());
    for (bucket, name) in &entry.table {
        let Some(t) = tactics.iter().find(|t| t.to_string() == *name) else { return Ok(None) };
        if !buckets.buckets().contains(bucket) {
            return Ok(None);
        }
        choices.push(*t);
    }
    DispatchTable::from_choices(buckets.clone(), choices, ChoiceSource::Tuned).map(Some)
}

fn write_cache(path: &Path, key: TuneKey, table: &DispatchTable) -> Result<(), LayerError> {
    let mut file = read_cache(path).unwrap_or_default();
    file.version = CACHE_VERSION;
    file.entries.retain(|e| e.key != key);
    let rows = table.buckets().buckets().iter().copied().zip(table.choices());
    file.entries.push(CacheEntry { key, table: rows.map(|(b, t)| (b, t.to_string())).collect() });
    let text = serde_json::to_string_pretty(&file).map_err(|e| cache_err(path, e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| cache_err(path, e))?;
    }
    std::fs::write(path, text + "\n").map_err(|e| cache_err(path, e))
}

/// Balanced routing for `tokens` tokens: slot j of token t goes to expert
/// (t + j·E/k) mod E, so every expert gets the same load and a token's experts differ.
pub fn balanced_routing(tokens: usize, experts: usize, top_k: usize) -> (Vec<i32>, Vec<f32>) {
    let stride = (experts / top_k.max(1)).max(1);
    let ids = (0..tokens)
        .flat_map(|t| (0..top_k).map(move |j| ((t + j * stride) % experts) as i32))
        .collect();
    (ids, vec![1.0 / top_k as f32; tokens * top_k])
}

/// Tunes `layer` on `b` with workspace `ws` for every bucket up to the workspace's token
/// maximum, installs the table into the layer, and returns it with every trial.
pub fn autotune(
    b: &mut dyn Backend,
    layer: &mut MoeLayer,
    kernel_set: u64,
    ws: &Workspace,
    opts: &TuneOptions,
) -> Result<TuneReport, LayerError> {
    let max_tokens = ws.spec().max_tokens as u64;
    let buckets = TokenBuckets::new(max_tokens)?;
    let key = tune_key(b, layer, kernel_set, max_tokens);
    if let Some(path) = &opts.cache
        && let Some(table) = cached_table(path, &key, layer, &buckets)?
    {
        layer.set_dispatch(table.clone())?;
        return Ok(TuneReport { table, trials: Vec::new(), from_cache: true });
    }
    let served = &ws.spec().tile_sizes;
    let tactics: Vec<MoeTactic> = match &opts.tactics {
        Some(t) => t.clone(),
        None => layer.tactics(),
    }
    .into_iter()
    .filter(|t| served.contains(&t.tile()))
    .collect();
    if tactics.is_empty() {
        return Err(LayerError::NoTactic("nothing to tune for this workspace".into()));
    }
    // Inputs at the largest bucket, allocated once; each bucket uses a prefix. Every
    // scratch buffer is freed before returning, whatever happened.
    let c = *layer.config();
    let h = c.shape.hidden;
    let n = max_tokens as usize;
    let acts: Vec<u8> = (0..n * h)
        .flat_map(|i| bf16::from_f32(((i * 37 % 101) as f32 - 50.0) * 0.02).to_bits().to_le_bytes())
        .collect();
    let act = DeviceSlice::new(b.upload_new(&acts)?, acts.len() as u64);
    let out = match b.alloc(n * h * 2) {
        Ok(p) => DeviceSlice::new(p, (n * h * 2) as u64),
        Err(e) => {
            let _ = b.free(act.ptr);
            return Err(e.into());
        }
    };
    let run = Trials { layer, ws, opts, tactics: &tactics };
    let timed = time_buckets(b, &run, &buckets, act, out);
    let freed = b.free_all(&[act.ptr, out.ptr]);
    let (trials, choices) = timed?;
    freed?;
    let table = DispatchTable::from_choices(buckets, choices, ChoiceSource::Tuned)?;
    if let Some(path) = &opts.cache {
        write_cache(path, key, &table)?;
    }
    layer.set_dispatch(table.clone())?;
    Ok(TuneReport { table, trials, from_cache: false })
}

/// What every trial shares: the layer, its one workspace, the options and the tactics.
struct Trials<'a> {
    layer: &'a MoeLayer,
    ws: &'a Workspace,
    opts: &'a TuneOptions,
    tactics: &'a [MoeTactic],
}

/// Times every tactic at every bucket on `act` and `out` (the largest bucket's inputs);
/// returns the trials and the fastest tactic per bucket. Each bucket's routing is uploaded
/// for its trials and freed after them.
fn time_buckets(
    b: &mut dyn Backend,
    run: &Trials<'_>,
    buckets: &TokenBuckets,
    act: DeviceSlice,
    out: DeviceSlice,
) -> Result<(Vec<Trial>, Vec<MoeTactic>), LayerError> {
    let (opts, tactics) = (run.opts, run.tactics);
    let c = *run.layer.config();
    let (k, e) = (c.shape.top_k(), c.shape.window.num_experts());
    let mut trials = Vec::new();
    let mut choices = Vec::with_capacity(buckets.buckets().len());
    let bar = opts.progress.then(|| {
        let bar = indicatif::ProgressBar::new((buckets.buckets().len() * tactics.len()) as u64);
        bar.set_message("moegen autotune");
        bar
    });
    for &bucket in buckets.buckets() {
        let tokens = bucket as usize;
        let (ids, weights) = balanced_routing(tokens, e, k);
        // Ids then weights in one buffer (both 4-byte elements, so the weights stay aligned).
        let mut routing: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
        let ids_len = routing.len() as u64;
        routing.extend(weights.iter().flat_map(|v| v.to_le_bytes()));
        let d = b.upload_new(&routing)?;
        let io = ForwardIo {
            tokens,
            activations: act,
            expert_ids: DeviceSlice::new(d, ids_len),
            expert_weights: DeviceSlice::new(
                DevicePtr(d.0 + ids_len),
                routing.len() as u64 - ids_len,
            ),
            output: out,
        };
        let best = time_tactics(b, run, &io, bar.as_ref(), &mut trials);
        let freed = b.free(d);
        let best = best?;
        freed?;
        choices.push(best);
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok((trials, choices))
}

/// Times each tactic on `io` (appending to `trials`); returns the fastest.
fn time_tactics(
    b: &mut dyn Backend,
    run: &Trials<'_>,
    io: &ForwardIo,
    bar: Option<&indicatif::ProgressBar>,
    trials: &mut Vec<Trial>,
) -> Result<MoeTactic, LayerError> {
    let Trials { layer, ws, opts, tactics } = *run;
    let bucket = io.tokens as u64;
    let mut best: Option<(f32, MoeTactic)> = None;
    for t in tactics {
        for _ in 0..opts.warmup {
            layer.forward_with(b, ws, io, t)?;
        }
        let start = b.record_event()?;
        for _ in 0..opts.iterations.max(1) {
            layer.forward_with(b, ws, io, t)?;
        }
        let end = b.record_event()?;
        let ms = b.elapsed_ms(start, end)? / opts.iterations.max(1) as f32;
        trials.push(Trial { bucket, tactic: *t, ms, workspace: ws.memory().ptr });
        if best.is_none_or(|(m, _)| ms < m) {
            best = Some((ms, *t));
        }
        if let Some(bar) = bar {
            bar.inc(1);
        }
    }
    layer.check_errors(b, ws)?;
    best.map(|(_, t)| t).ok_or_else(|| LayerError::NoTactic("no trial".into()))
}
