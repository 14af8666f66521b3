//! `gpu-check`: runs moegen's kernels on a CUDA GPU and checks them three ways: the SIMT
//! kernels against their CPU counterparts byte for byte, the differential corpus against the
//! simulator byte for byte, and the whole layer (the runtime's `MoeLayer`, every tactic the
//! kernel set holds for the device) against the CPU reference of the device's generation and
//! the f64 oracle, with a few tactics also against the simulator and, with the deterministic
//! finalize, the dispatched tactic's CUDA-graph replay against its eager run; and the MUFU sweep
//! (`ex2.approx`, `rcp.approx`) against the simulator's models over every f32 input (or a
//! spread of them with `--mufu-step`); and how many clusters (CTAs, without clusters) of each
//! persistent GEMM the device runs at once (the driver's count, which sizes those grids)
//! beside the dispatch model's GPC layout, failing where a kernel fits no cluster or, without
//! clusters, fewer CTAs per SM than the resource model says. Prints a table per part,
//! writes every figure as JSON, exits 1 on an error and 2 when a check fails.
//!
//! Build here with `cargo build --release -p moegen-validation --bin gpu-check`; run on any
//! machine with a CUDA driver (it needs no toolkit).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use moegen_dsl::abi::WeightFormat;
use moegen_dsl::plan::PlanError;
use moegen_dsl::{ActivationFormat, Arch, EpilogueRecipe, EpilogueSpec, FinalizeMode};
use moegen_runtime::backend::Backend;
use moegen_runtime::backend::cuda::CudaBackend;
use moegen_runtime::layer::{KernelSet, arch_of};
use moegen_runtime::reference::MoeShape;
use moegen_runtime::routing::ExpertWindow;
use moegen_validation::layer_check::{
    GraphCheck, LayerCase, RoutePattern, TacticRow, builtin_with_hopper_fast,
    check_graph_replay_in, check_tactics_picked, problem,
};
use moegen_validation::mufu_check::{self, MAX_CHUNK, Sweep};
use moegen_validation::mufu_tally::OpTally;
use moegen_validation::simt_check::{self, CASES, SimtRow, simulator_for};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    /// Routing sort, quantization and finalize against the CPU.
    Simt,
    /// The differential corpus against the simulator.
    Corpus,
    /// The whole layer, every tactic, against the reference, the oracle and the simulator.
    Layer,
    /// `ex2.approx`/`rcp.approx` (ftz and not) against the simulator's models.
    Mufu,
    /// The clusters (CTAs, without clusters) the device runs at once of each persistent GEMM
    /// (one kernel per occupancy key: cluster size, CTAs per SM, shared memory, threads,
    /// register cap), beside the model's count.
    Clusters,
}

/// Checks moegen's kernels on this machine's GPU (device 0).
#[derive(Parser, Debug)]
#[command(name = "gpu-check", version)]
struct Args {
    /// Where to write the JSON record.
    #[arg(long, default_value = "gpu-check.json")]
    json: PathBuf,
    /// The parts to run (comma separated).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Part::Clusters, Part::Simt, Part::Corpus, Part::Layer, Part::Mufu])]
    parts: Vec<Part>,
    /// At most this many tactics per layer case (spread over the list; over the single-width
    /// tactics unless `--layer-tactic` names only paired GEMM1s); default: all.
    #[arg(long)]
    layer_tactics: Option<usize>,
    /// Only the layer cases whose label contains this text (e.g. `mxfp4 bulk`).
    #[arg(long)]
    layer_case: Option<String>,
    /// Only the tactics whose name contains this text (e.g. `_pp`: the Hopper ping-pong
    /// GEMM1s), before `--layer-tactics` spreads; the simulated tactics are picked the same way,
    /// and the graph-replay check (the dispatch table's tactic) is left out.
    #[arg(long)]
    layer_tactic: Option<String>,
    /// Tactics per small layer case that are also simulated and compared byte for byte.
    #[arg(long, default_value_t = 2)]
    sim_tactics: usize,
    /// MUFU sweep stride: 1 compares every f32 input (2^32), s > 1 the ⌈2^32 / s⌉ inputs
    /// 0, s, 2s, ….
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    mufu_step: u32,
    /// MUFU sweep inputs per launch (16 bytes of results each), 2^16 ..= 2^30.
    #[arg(
        long,
        default_value_t = Sweep::EXHAUSTIVE.chunk,
        value_parser = clap::value_parser!(u32).range(1 << 16..=i64::from(MAX_CHUNK))
    )]
    mufu_chunk: u32,
}

#[derive(serde::Serialize)]
struct CorpusRow {
    case: String,
    bytes: usize,
    identical: bool,
    first_difference: Option<usize>,
}

#[derive(serde::Serialize)]
struct LayerRow {
    #[serde(flatten)]
    row: TacticRow,
    /// The simulator's output equals the GPU's bit for bit (`None`: not simulated).
    sim_identical: Option<bool>,
    /// The rule the row was judged by, and the verdict.
    rule: &'static str,
    pass: bool,
}

/// What a layer row must meet: every element bit-exact, or (a bulk reduce of more than two
/// routes, whose order the GPU chooses) within the order slack derived in docs/reference.md.
fn verdict(case: &LayerCase, row: &TacticRow) -> (&'static str, bool) {
    let exact_order = case.finalize == FinalizeMode::Deterministic || case.shape.top_k() <= 2;
    if let Some(f) = row.fast_h {
        // Hopper's Fast recipe (docs/reference.md): GEMM1 within the MUFU tolerance, the
        // rest exactly the reference on the device's own h.
        let rest = if exact_order { row.identical == row.elements } else { row.beyond_slack == 0 };
        return ("h within the Fast tolerance, then as the reference", f.outside == 0 && rest);
    }
    if exact_order {
        ("bit-exact", row.identical == row.elements)
    } else {
        ("within the bulk-order slack", row.beyond_slack == 0)
    }
}

/// How many clusters (CTAs, without clusters) of one persistent GEMM the device runs at once.
#[derive(serde::Serialize)]
struct ClusterRow {
    kernel: &'static str,
    cluster: u32,
    ctas_per_sm: u32,
    dynamic_smem: u32,
    /// The driver's count (`cuOccupancyMaxActiveClusters`), which the runtime's grid takes.
    driver: u32,
    /// The dispatch model's (`Gpu::resident_clusters`: a driver's count recorded for this
    /// part where there is one, otherwise `gpc`).
    model: u32,
    /// The GPC layout's bound (`Gpu::gpc_clusters`: whole clusters per GPC, where the model
    /// has a layout for this SM count; otherwise the SMs as one pool).
    gpc: u32,
    /// SMs × CTAs per SM / cluster: the grid before GPCs were counted.
    slots: u32,
    /// Why the driver gave no count.
    error: Option<String>,
    /// A count, at least one cluster, and without clusters at least `slots`.
    pass: bool,
}

#[derive(serde::Serialize)]
struct Record {
    device: String,
    compute_capability: (i32, i32),
    kernels: String,
    sm_count: u32,
    simt: Vec<SimtRow>,
    corpus: Vec<CorpusRow>,
    mufu_sweep: Option<Sweep>,
    mufu: Vec<OpTally>,
    layer: Vec<LayerRow>,
    graph: Vec<GraphCheck>,
    clusters: Vec<ClusterRow>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn shape(
    h: usize,
    i: usize,
    e: usize,
    off: usize,
    l: usize,
    k: usize,
) -> Result<MoeShape, PlanError> {
    MoeShape::new(h, i, ExpertWindow::new(e, off, l, k)?)
}

/// The layer cases for a device of generation `arch`: `(case, simulate)`. Shapes with H and
/// I not powers of two (and on Hopper not multiples of 128: gpt-oss's 2880), both activation
/// modes and weight formats (on Hopper also FP8 activations), both finalize modes, and the
/// routing edge cases.
fn layer_cases(arch: Arch) -> Result<Vec<(LayerCase, bool)>, PlanError> {
    use ActivationFormat::{Bf16, Fp8, Nvfp4};
    use FinalizeMode::{BulkReduceAdd as Bulk, Deterministic as Det};
    use RoutePattern::{NoneLocal, OneExpert, SomeEmpty, Spread};
    use WeightFormat::{Mxfp4, Nvfp4 as W4};
    let case = LayerCase::new;
    let gpt = |c: LayerCase| c.with_epilogue(EpilogueSpec::GPT_OSS);
    let fast = |c: LayerCase| c.with_recipe(EpilogueRecipe::Fast);
    Ok(match arch {
        Arch::Sm90 => {
            let small = shape(320, 192, 8, 2, 4, 2)?;
            let mid = shape(768, 448, 16, 4, 8, 4)?;
            let gpt_oss = shape(2880, 2880, 32, 0, 32, 4)?;
            vec![
                (case(small, 37, Nvfp4, W4, Det, 3, Spread), true),
                (case(small, 37, Bf16, W4, Bulk, 5, Spread), true),
                (case(small, 37, Bf16, Mxfp4, Det, 7, Spread), true),
                (case(small, 29, Bf16, Mxfp4, Det, 8, OneExpert), true),
                (case(mid, 150, Nvfp4, W4, Det, 9, SomeEmpty), false),
                (case(mid, 150, Bf16, Mxfp4, Bulk, 10, SomeEmpty), false),
                (case(mid, 64, Bf16, W4, Det, 12, NoneLocal), false),
                (case(mid, 300, Bf16, W4, Det, 14, OneExpert), false),
                (case(gpt_oss, 48, Bf16, Mxfp4, Det, 11, Spread), false),
                // Planned for a large batch, run with one token (moe-bench's decode case).
                (case(gpt_oss, 1, Bf16, Mxfp4, Bulk, 13, Spread).planned(16384), false),
                (case(gpt_oss, 1, Bf16, Mxfp4, Det, 15, Spread).planned(16384), false),
                (case(mid, 5, Nvfp4, W4, Det, 16, Spread).planned(4096), true),
                // A8: FP8 activations on the E4M3 tensor cores (MXFP4 weights).
                (case(small, 37, Fp8, Mxfp4, Det, 17, Spread), true),
                (case(small, 29, Fp8, Mxfp4, Bulk, 18, OneExpert), true),
                (case(mid, 150, Fp8, Mxfp4, Det, 19, SomeEmpty), false),
                (case(gpt_oss, 48, Fp8, Mxfp4, Det, 20, Spread), false),
                (case(gpt_oss, 1, Fp8, Mxfp4, Det, 21, Spread).planned(16384), false),
                // gpt-oss's epilogue: clamped SwiGLU (per-expert α, β, limit) and both biases.
                (gpt(case(small, 37, Bf16, Mxfp4, Det, 22, Spread)), true),
                (gpt(case(small, 29, Fp8, Mxfp4, Bulk, 23, OneExpert)), true),
                (gpt(case(mid, 150, Bf16, Mxfp4, Bulk, 24, SomeEmpty)), false),
                (gpt(case(gpt_oss, 48, Bf16, Mxfp4, Det, 25, Spread)), false),
                (gpt(case(gpt_oss, 48, Fp8, Mxfp4, Det, 26, Spread)), false),
                (gpt(case(gpt_oss, 1, Bf16, Mxfp4, Bulk, 27, Spread).planned(16384)), false),
                // The Fast recipe (MUFU ex2/rcp in GEMM1's activation; A16 and A8): h within
                // the recipe's tolerance of the model, the rest as the reference.
                (fast(case(small, 37, Bf16, Mxfp4, Det, 30, Spread)), true),
                (fast(case(small, 29, Fp8, Mxfp4, Bulk, 31, OneExpert)), true),
                (fast(gpt(case(mid, 150, Bf16, Mxfp4, Det, 32, SomeEmpty))), false),
                (fast(gpt(case(gpt_oss, 48, Bf16, Mxfp4, Det, 33, Spread))), false),
                (fast(gpt(case(gpt_oss, 48, Fp8, Mxfp4, Det, 34, Spread))), false),
                (fast(case(gpt_oss, 48, Fp8, Mxfp4, Bulk, 35, Spread)), false),
            ]
        }
        Arch::Sm100 => {
            let small = shape(512, 256, 8, 2, 4, 2)?;
            vec![
                (case(small, 37, Nvfp4, W4, Det, 3, Spread), true),
                (case(small, 37, Nvfp4, W4, Bulk, 5, SomeEmpty), true),
                (case(small, 29, Nvfp4, W4, Det, 8, OneExpert), true),
                (case(small, 3, Nvfp4, W4, Bulk, 16, Spread).planned(4096), true),
            ]
        }
    })
}

/// One row per persistent GEMM of the device's generation with a new occupancy key: cluster
/// size, CTAs per SM, shared memory, threads and the PTX's register cap (`.maxnreg`), which
/// with the kernel's resources decide what the driver answers. A failed query is a row that
/// fails, not the end of the run.
fn clusters(gpu: &mut CudaBackend) -> Result<Vec<ClusterRow>, Box<dyn std::error::Error>> {
    use moegen_dsl::abi::{GridRule, KernelId};
    let arch = arch_of(gpu);
    let model = moegen_dsl::gpu::Gpu::for_arch(arch).with_sms(gpu.sm_count());
    let mut seen = std::collections::BTreeSet::new();
    let mut rows = Vec::new();
    for k in moegen_kernels::kernels() {
        let f = &k.launch;
        let KernelId::Gemm(key) = k.id else { continue };
        if key.arch() != arch || f.grid != GridRule::Persistent {
            continue;
        }
        let smem = f.smem.bytes(0).ok_or("shared memory overflows")?;
        let maxnreg = k.ptx.lines().find_map(|l| l.trim().strip_prefix(".maxnreg ")).map(str::trim);
        if !seen.insert((f.cluster, f.ctas_per_sm, smem, f.threads, maxnreg)) {
            continue;
        }
        let slots = moegen_dsl::gpu::clusters_on_gpcs(&[gpu.sm_count()], f.ctas_per_sm, f.cluster);
        let (driver, error) = match gpu.resident_clusters(k, smem) {
            Ok(Some(n)) => (n, None),
            Ok(None) => (0, Some("the CUDA backend gave no count".to_owned())),
            Err(e) => (0, Some(e.to_string())),
        };
        // A kernel the device cannot hold one cluster of would fail every launch; without
        // clusters the count is the resource model's CTAs per SM on every SM, and fewer is an
        // error of that model (the grid follows the driver, the dispatch model does not).
        // With clusters the GPCs decide: the row shows the driver's count beside the model's.
        let pass = error.is_none() && driver > 0 && (f.cluster > 1 || driver >= slots);
        rows.push(ClusterRow {
            kernel: k.name,
            cluster: f.cluster,
            ctas_per_sm: f.ctas_per_sm,
            dynamic_smem: smem,
            driver,
            model: model.resident_clusters(f.ctas_per_sm, f.cluster),
            gpc: model.gpc_clusters(f.ctas_per_sm, f.cluster),
            slots,
            error,
            pass,
        });
    }
    Ok(rows)
}

fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let mut gpu = CudaBackend::new(0)?;
    let target = gpu.simt_target();
    println!(
        "device: {} (sm_{}{}, {} SMs), kernels: {target}",
        gpu.name,
        gpu.compute_capability.0,
        gpu.compute_capability.1,
        gpu.sm_count()
    );
    let mut ok = true;
    let mut record = Record {
        device: gpu.name.clone(),
        compute_capability: gpu.compute_capability,
        kernels: target.to_string(),
        sm_count: gpu.sm_count(),
        simt: Vec::new(),
        corpus: Vec::new(),
        mufu_sweep: None,
        mufu: Vec::new(),
        layer: Vec::new(),
        graph: Vec::new(),
        clusters: Vec::new(),
    };
    let show = |b: bool| if b { "identical" } else { "DIFFERS" };
    // The record is rewritten after each part, so a run cut short keeps what it finished.
    let save = |record: &Record| -> Result<(), Box<dyn std::error::Error>> {
        let text = serde_json::to_string_pretty(record)?;
        std::fs::write(&args.json, text)
            .map_err(|e| format!("writing {}: {e}", args.json.display()).into())
    };
    if args.parts.contains(&Part::Clusters) {
        record.clusters = clusters(&mut gpu)?;
        println!(
            "\n{:<52} {:>7} {:>6} {:>7} {:>7} {:>6} {:>6} {:>6} verdict",
            "persistent GEMM", "cluster", "/SM", "smem", "driver", "model", "gpc", "slots"
        );
        for r in &record.clusters {
            ok &= r.pass;
            println!(
                "{:<52} {:>7} {:>6} {:>7} {:>7} {:>6} {:>6} {:>6} {}",
                r.kernel,
                r.cluster,
                r.ctas_per_sm,
                r.dynamic_smem,
                r.driver,
                r.model,
                r.gpc,
                r.slots,
                match (&r.error, r.pass) {
                    (Some(e), _) => format!("FAIL: {e}"),
                    (None, true) => "ok".to_owned(),
                    (None, false) => "FAIL".to_owned(),
                }
            );
        }
        save(&record)?;
    }
    if args.parts.contains(&Part::Simt) {
        println!("\n{:<52} {:>12} {:>12}", "SIMT kernel case", "GPU = CPU", "sim = CPU");
        for &(case, simulate) in CASES {
            let row = simt_check::check(&mut gpu, case, simulate)?;
            ok &= row.device_equal && row.sim_equal != Some(false);
            let sim = row.sim_equal.map_or("-", show);
            println!("{:<52} {:>12} {:>12}", row.case, show(row.device_equal), sim);
            record.simt.push(row);
        }
        save(&record)?;
    }
    if args.parts.contains(&Part::Corpus) {
        let g = moegen_validation::corpus::run_corpus_logged(&mut gpu, &mut |k| {
            eprintln!("running {k} on the GPU")
        })
        .map_err(|e| format!("corpus on the GPU: {e}"))?;
        let s = moegen_validation::corpus::run_corpus(&mut simulator_for(target))
            .map_err(|e| format!("corpus on the simulator: {e}"))?;
        println!("\n{:<52} {:>12}", "corpus case (GPU = simulator, bytes)", "");
        for ((name, gb), (_, sb)) in g.iter().zip(&s) {
            let first_difference = gb.iter().zip(sb).position(|(x, y)| x != y);
            let identical = gb == sb;
            ok &= identical;
            println!("{:<52} {:>12}", format!("{name} ({} B)", gb.len()), show(identical));
            record.corpus.push(CorpusRow {
                case: name.clone(),
                bytes: gb.len(),
                identical,
                first_difference,
            });
        }
        save(&record)?;
    }
    if args.parts.contains(&Part::Layer) {
        println!(
            "\n{:<40} {:<28} {:>9} {:>8} {:>10} {:>10} {:>6} verdict",
            "layer case", "tactic", "identical", "max ulp", "vs ref", "vs oracle", "sim"
        );
        let wanted =
            |c: &LayerCase| args.layer_case.as_ref().is_none_or(|f| c.label().contains(f.as_str()));
        // The built-in set and Hopper's Fast GEMM1s (generated here, as a build script would).
        let builtin = match arch_of(&gpu) {
            Arch::Sm90 => builtin_with_hopper_fast()?,
            Arch::Sm100 => KernelSet::builtin(),
        };
        for (case, simulate) in layer_cases(arch_of(&gpu))?.into_iter().filter(|(c, _)| wanted(c)) {
            eprintln!("layer case {}", case.label());
            let p = problem(case)?;
            let named = args.layer_tactic.as_deref();
            let rows = check_tactics_picked(&mut gpu, &p, args.layer_tactics, named, &builtin)?;
            let sim_rows = if simulate && args.sim_tactics > 0 {
                let mut sim = simulator_for(target).with_sm_count(gpu.sm_count().min(8));
                check_tactics_picked(&mut sim, &p, Some(args.sim_tactics), named, &builtin)?
            } else {
                Vec::new()
            };
            for row in rows {
                let sim_identical = sim_rows
                    .iter()
                    .find(|s| s.tactic == row.tactic)
                    .map(|s| s.output == row.output);
                let (rule, pass) = verdict(&case, &row);
                // The simulator is the Fast recipe's model, which the device is not (within
                // 2 and 1 ulp): a difference there is shown, not a failure.
                ok &= (row.fast_h.is_some() || sim_identical != Some(false)) && pass;
                println!(
                    "{:<40} {:<28} {:>9} {:>8} {:>10.2e} {:>10.4} {:>6} {}",
                    row.case,
                    row.tactic,
                    format!("{:.1}%", 100.0 * row.identical as f64 / row.elements.max(1) as f64),
                    row.max_ulp,
                    row.rel_l2_vs_reference,
                    row.rel_l2_vs_oracle,
                    sim_identical.map_or("-", |b| if b { "same" } else { "DIFF" }),
                    if pass { "ok" } else { "FAIL" }
                );
                record.layer.push(LayerRow { row, sim_identical, rule, pass });
            }
            // Graph replay runs the dispatch table's tactic, not a picked one: skipped when
            // tactics are picked by name.
            if case.finalize == FinalizeMode::Deterministic && named.is_none() {
                let g = check_graph_replay_in(&mut gpu, &p, &builtin)?;
                ok &= g.identical && g.counted;
                println!(
                    "{:<40} {:<28} graph replay = eager: {}; launches per pass {}, counters {}",
                    g.case,
                    g.tactic,
                    if g.identical { "identical" } else { "DIFFERS" },
                    g.eager_launches,
                    if g.counted { "agree" } else { "DISAGREE" }
                );
                record.graph.push(g);
            }
            save(&record)?;
        }
        // A filter that ran nothing is an error, not a pass.
        if record.layer.is_empty() {
            let filters = format!(
                "--layer-case {:?} --layer-tactic {:?}",
                args.layer_case, args.layer_tactic
            );
            return Err(format!("no layer row ran ({filters}): nothing matched").into());
        }
    }
    // Last: its result buffer (4 GiB at the default chunk) stays allocated to the end.
    if args.parts.contains(&Part::Mufu) {
        let sweep = Sweep::spread(args.mufu_step, args.mufu_chunk).map_err(|e| e.to_string())?;
        let tallies = mufu_check::sweep(&mut gpu, sweep, &mut |done| {
            eprintln!("MUFU sweep: {done} of {} inputs", sweep.count)
        })
        .map_err(|e| format!("MUFU sweep: {e}"))?;
        println!(
            "\n{:<20} {:>12} {:>12} {:>11} {:>9} {:>9}  mismatches by class",
            "MUFU op (GPU = model)", "inputs", "identical", "bit-exact", "finite d", "verdict"
        );
        for t in &tallies {
            ok &= t.within_bound();
            let classes: Vec<String> =
                t.classes.iter().map(|(c, n)| format!("{c:?} {}", n.count)).collect();
            println!(
                "{:<20} {:>12} {:>12} {:>11} {:>9} {:>9}  {}",
                t.op,
                t.inputs,
                t.identical,
                if t.bit_exact() { "yes" } else { "no" },
                t.finite_ulps(),
                if t.within_bound() { "ok" } else { "FAIL" },
                classes.join(", ")
            );
        }
        record.mufu_sweep = Some(sweep);
        record.mufu = tallies;
        save(&record)?;
    }
    save(&record)?;
    println!("\nwrote {}", args.json.display());
    Ok(ok)
}
