//! `moe-bench`: moegen's side of the peer benchmark (bench/README.md). For each shape it
//! writes synthetic MXFP4 weights and routed inputs in the folder contract, then times
//! moegen's layer in each variant on the GPU (autotuned, CUDA-graph replays, median), prints
//! a table and writes `moegen.json` and moegen's outputs beside the inputs. Then run
//! `bench/peers.py --dir DIR/<shape>` there for the peers, the accuracy gate and the combined
//! table.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use moegen_dsl::{EpilogueSpec, FinalizeMode};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_runtime::layer::{TuneOptions, arch_of};
use moegen_validation::bench::{
    BenchOptions, BenchShape, FLUSH_L2_BYTES, VARIANTS, Variant, Workload, bench_variant,
};

/// Times moegen's MoE layer on this machine's GPU (device 0) beside the peers' inputs.
#[derive(Parser, Debug)]
#[command(name = "moe-bench", version)]
struct Args {
    /// Output folder (one subfolder per shape).
    #[arg(long)]
    dir: PathBuf,
    /// Shapes: deepseek (H 7168, I 2048, 256 experts, 32 local, top-8) and gpt-oss (H = I =
    /// 2880, 32 experts, top-4).
    #[arg(long, value_delimiter = ',', default_values_t = ["deepseek".to_owned(), "gpt-oss".to_owned()])]
    shapes: Vec<String>,
    /// Token counts (default: the shape's own list).
    #[arg(long, value_delimiter = ',')]
    tokens: Option<Vec<usize>>,
    /// Variants (default: every one the device runs with its default recipe): mxfp4-a16,
    /// mxfp4-a8, nvfp4-a16, nvfp4-a4; on Hopper also mxfp4-fast-a16 and mxfp4-fast-a8 (the
    /// Fast recipe, GEMM1s generated at start-up).
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<String>>,
    /// Timed graph replays per token count (median reported).
    #[arg(long, default_value_t = 20)]
    iters: u32,
    /// Untimed replays first.
    #[arg(long, default_value_t = 5)]
    warmup: u32,
    /// Milliseconds the GPU idles before each token count is timed: after the tuner's heavy
    /// buckets an H100 near its power cap runs lower clocks for about a second, which the
    /// peers (a fresh process) do not meet. 0: no pause. Default 1000; refused with `--ep`.
    #[arg(long)]
    settle_ms: Option<u64>,
    /// The autotuner's timed runs per (bucket, tactic).
    #[arg(long, default_value_t = 3)]
    tune_iters: u32,
    /// Keep the analytic dispatch table instead of autotuning (for profiler runs).
    #[arg(long)]
    no_tune: bool,
    /// Time each of these tactics (comma-separated, as the tactic column prints them) as
    /// the only entry of the dispatch table, one after another on every token count, instead
    /// of the table's choice: how tactics compare on each routing draw (rows carry the
    /// draw's local routes and live experts). Needs `--no-tune`.
    #[arg(long, value_delimiter = ',')]
    tactics: Option<Vec<String>>,
    /// Sum routes in a fixed order (the deterministic finalize) instead of the bulk reduce.
    #[arg(long)]
    deterministic: bool,
    /// Zero a 256 MiB buffer before each timed replay, so weights never stay in L2 from one
    /// replay to the next (as inside a model); pass the same flag to bench/peers.py.
    #[arg(long)]
    flush_l2: bool,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// moegen's epilogue: `plain` SwiGLU, or `gpt-oss` (clamped SwiGLU with α 1.702, β 1,
    /// limit 7, and synthetic GEMM1 and GEMM2 biases). bench/peers.py's peers compute plain
    /// SwiGLU, so its output check applies to `plain` only.
    #[arg(long, value_enum, default_value_t = EpilogueArg::Plain)]
    epilogue: EpilogueArg,
    /// Expert parallelism over G GPUs (feature `nccl`): DeepSeek-V3's 256 experts split
    /// over devices 0..G, tokens per rank from `--tokens`, the layer's step (`--ep-mode`)
    /// beside one GPU holding the same experts; writes `DIR/deepseek-ep<G>/moegen-ep.json`
    /// (mode b: `DIR/deepseek-ep<G>-b/`). Runs the analytic dispatch table (`--no-tune`
    /// required), plain epilogue, no L2 flush.
    #[arg(long, value_name = "G")]
    ep: Option<usize>,
    /// With `--ep`: `a`, all-gather tokens, local window, reduce-scatter; `b`, all-to-all
    /// dispatch of each rank's routes, top-1 owner layers, all-to-all combine
    /// (docs/expert-parallel.md). Refused without `--ep`.
    #[arg(long, value_enum)]
    ep_mode: Option<EpModeArg>,
}

/// `--settle-ms` when not given.
const DEFAULT_SETTLE_MS: u64 = 1000;

/// `--ep-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EpModeArg {
    A,
    B,
}

/// `--epilogue`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum EpilogueArg {
    Plain,
    GptOss,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(g) = args.ep {
        if args.tactics.is_some() {
            return Err("--tactics runs on one GPU: it is refused with --ep".into());
        }
        if args.settle_ms.is_some() {
            return Err("--settle-ms paces the one-GPU benchmark: it is refused with --ep".into());
        }
        return run_ep(args, g);
    }
    if args.ep_mode.is_some() {
        return Err("--ep-mode needs --ep G".into());
    }
    let mut shapes = Vec::new();
    for name in &args.shapes {
        let mut s = BenchShape::by_name(name)
            .ok_or_else(|| format!("unknown shape {name:?} (deepseek, gpt-oss)"))?;
        if let Some(t) = &args.tokens {
            if t.contains(&0) {
                return Err("--tokens: a token count must be positive".into());
            }
            s.tokens = t.clone();
        }
        s.moe_shape()?;
        shapes.push(s);
    }
    if args.tactics.is_some() && !args.no_tune {
        return Err("--tactics times the tactics it names: pass --no-tune".into());
    }
    let mut gpu = CudaBackend::new(0)?;
    let arch = arch_of(&gpu);
    let variants: Vec<Variant> = match &args.variants {
        Some(names) => names.iter().map(|n| Variant::named(n)).collect::<Result<_, _>>()?,
        None => VARIANTS.iter().copied().filter(|v| v.by_default(arch)).collect(),
    };
    if let Some(v) = variants.iter().find(|v| !v.runs_on(arch)) {
        return Err(format!("variant {} does not run on {arch:?}", v.name).into());
    }
    let device = format!(
        "{} (sm_{}{}, {} SMs)",
        gpu.name,
        gpu.compute_capability.0,
        gpu.compute_capability.1,
        gpu.sm_count()
    );
    println!("device: {device}");
    let opts = BenchOptions {
        warmup: args.warmup,
        iters: args.iters,
        tune: (!args.no_tune).then(|| TuneOptions {
            warmup: 1,
            iterations: args.tune_iters.max(1),
            tactics: None,
            cache: None,
            progress: false,
        }),
        finalize: if args.deterministic {
            FinalizeMode::Deterministic
        } else {
            FinalizeMode::BulkReduceAdd
        },
        flush_l2: args.flush_l2.then_some(FLUSH_L2_BYTES),
        epilogue: match args.epilogue {
            EpilogueArg::Plain => EpilogueSpec::PLAIN,
            EpilogueArg::GptOss => EpilogueSpec::GPT_OSS,
        },
        tactics: args.tactics.clone(),
        settle_ms: args.settle_ms.unwrap_or(DEFAULT_SETTLE_MS),
    };
    let mut log = |m: &str| eprintln!("{m}");
    for shape in &shapes {
        let dir = args.dir.join(shape.name);
        log(&format!("{}: synthesizing weights and inputs", shape.name));
        let work = Workload::synth(shape.clone(), args.seed);
        work.write(&dir)?;
        let mut rows = Vec::new();
        for v in &variants {
            rows.extend(bench_variant(&mut gpu, &dir, &work, *v, &opts, &mut log)?);
        }
        println!(
            "\n{} (H {}, I {}, {} experts, {} local, top-{})",
            shape.name,
            shape.hidden,
            shape.intermediate,
            shape.experts,
            shape.local_experts,
            shape.top_k
        );
        println!(
            "{:>7} {:>6} {:>6} {:<10} {:>10} tactic",
            "tokens", "routes", "live", "variant", "ms"
        );
        for r in &rows {
            println!(
                "{:>7} {:>6} {:>6} {:<10} {:>10.4} {}",
                r.tokens, r.local_routes, r.live_experts, r.variant, r.ms, r.tactic
            );
        }
        let json = serde_json::json!({
            "device": device,
            "finalize": format!("{:?}", opts.finalize),
            "iters": args.iters,
            "warmup": args.warmup,
            "flush_l2": args.flush_l2,
            "epilogue": format!("{:?}", opts.epilogue),
            "settle_ms": opts.settle_ms,
            // A `--tactics` sweep times each named tactic alone: its rows are not the layer's
            // dispatch, and bench/peers.py refuses to rank them against the peers.
            "tactics": args.tactics,
            "rows": rows,
        });
        let path = dir.join("moegen.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(gpu.synchronize()?)
}

/// `--ep G`.
#[cfg(feature = "nccl")]
fn run_ep(args: &Args, g: usize) -> Result<(), Box<dyn std::error::Error>> {
    use moegen_runtime::ep::{EpMode, EpPartition, NcclCollective, open_devices};
    use moegen_validation::bench::synth_weights;
    use moegen_validation::ep_run::{mode_name, time_ranks, window_shape};

    let mode = match args.ep_mode {
        None | Some(EpModeArg::A) => EpMode::AllGather,
        Some(EpModeArg::B) => EpMode::AllToAll,
    };

    if args.shapes != ["deepseek"] && args.shapes != ["deepseek".to_owned(), "gpt-oss".to_owned()] {
        return Err("--ep runs the deepseek shape only (--shapes deepseek)".into());
    }
    if !args.no_tune {
        return Err("--ep times the analytic dispatch table: pass --no-tune".into());
    }
    if args.flush_l2 || args.epilogue != EpilogueArg::Plain {
        return Err("--ep runs without --flush-l2 and with the plain epilogue".into());
    }
    let mut full = BenchShape::deepseek();
    full.local_experts = full.experts;
    if let Some(t) = &args.tokens {
        if t.contains(&0) {
            return Err("--tokens: a token count must be positive".into());
        }
        full.tokens = t.clone();
    }
    let p = EpPartition::new(full.experts, g, full.top_k)?;
    let backends = open_devices(g)?;
    let arch = arch_of(&backends[0]);
    let names = args.variants.clone().unwrap_or_else(|| vec!["mxfp4-a16".to_owned()]);
    let variants: Vec<Variant> =
        names.iter().map(|n| Variant::named(n)).collect::<Result<_, _>>()?;
    if let Some(v) = variants.iter().find(|v| !v.runs_on(arch)) {
        return Err(format!("variant {} does not run on {arch:?}", v.name).into());
    }
    let device = format!("{} x{g} ({} SMs each)", backends[0].name, backends[0].sm_count());
    println!("device: {device}");
    let refs: Vec<_> = backends.iter().collect();
    let mut coll = NcclCollective::from_devices(&refs)?;
    let mut backends = backends;
    let finalize =
        if args.deterministic { FinalizeMode::Deterministic } else { FinalizeMode::BulkReduceAdd };
    let mut log = |m: &str| eprintln!("{m}");
    let mut rows = Vec::new();
    for v in variants {
        let weights = |r: usize| synth_weights(&window_shape(&full, &p, r), args.seed);
        let timing = (args.warmup, args.iters, args.seed);
        let (r, b, c) = time_ranks(
            backends,
            coll,
            &full,
            &weights,
            v,
            (mode, finalize),
            &full.tokens,
            timing,
            &mut log,
        )?;
        (backends, coll) = (b, c);
        rows.extend(r.into_iter().map(|r| (v.name, r)));
    }
    println!(
        "\ndeepseek over {g} ranks (H {}, I {}, {} experts, {} per rank, top-{}), {}, \
         {finalize:?}",
        full.hidden,
        full.intermediate,
        full.experts,
        p.local_experts(),
        full.top_k,
        mode_name(mode)
    );
    println!(
        "{:>7} {:<10} {:>10} {:>10} {:>10} {:>7} {:>9} tactic",
        "N/rank", "variant", "step ms", "local ms", "1-GPU ms", "comm", "step/1GPU"
    );
    for (v, r) in &rows {
        println!(
            "{:>7} {:<10} {:>10.4} {:>10.4} {:>10.4} {:>6.1}% {:>9.2} {}",
            r.tokens_per_rank,
            v,
            r.step_ms,
            r.local_ms,
            r.one_gpu_ms,
            100.0 * r.comm_share,
            r.step_over_one_gpu,
            r.tactic
        );
    }
    // Mode (a) keeps the directory its earlier records used.
    let dir = match mode {
        EpMode::AllGather => args.dir.join(format!("deepseek-ep{g}")),
        EpMode::AllToAll => args.dir.join(format!("deepseek-ep{g}-b")),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::json!({
        "device": device,
        "ranks": g,
        "mode": mode_name(mode),
        "finalize": format!("{finalize:?}"),
        "iters": args.iters,
        "warmup": args.warmup,
        "rows": rows.iter().map(|(v, r)| serde_json::json!({ "variant": v, "row": r })).collect::<Vec<_>>(),
    });
    let path = dir.join("moegen-ep.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// `--ep G` without feature `nccl`.
#[cfg(not(feature = "nccl"))]
fn run_ep(_: &Args, _: usize) -> Result<(), Box<dyn std::error::Error>> {
    Err("--ep needs moe-bench built with feature nccl (cargo build --release -p \
         moegen-validation --features nccl --bin moe-bench)"
        .into())
}
