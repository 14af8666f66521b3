//! `ep-check`: expert parallelism over NCCL on this machine's GPUs. First the collective's
//! three operations (all-gather, bf16 reduce-scatter, all-to-all) on known bytes; then the
//! `ExpertParallel` layer over G ranks in the mode `--ep-mode` names (one process driving G GPUs, or one process per rank
//! through `MOEGEN_EP_RANK`, `MOEGEN_EP_WORLD`, `MOEGEN_EP_ID_FILE`, `MOEGEN_EP_DEVICE`)
//! against the single-GPU layer holding every expert, on synthetic MXFP4 experts: bit for
//! bit with the deterministic finalize, within the bulk-order slack otherwise, and each
//! rank's CUDA graph of the step against the eager step. Exit 1 on an error, 2 on a failed
//! check.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use moegen_runtime::ep::{EpMode, NcclCollective, open_devices};
use moegen_validation::bench::{BenchShape, Variant};
use moegen_validation::ep_run::{check_collectives, check_ranks, env_rank, mode_name};

/// Checks the G-rank expert-parallel layer against the single-GPU layer.
#[derive(Parser, Debug)]
#[command(name = "ep-check", version)]
struct Args {
    /// Ranks, one GPU each (devices 0..G; refused when fewer are visible). With
    /// MOEGEN_EP_RANK set, MOEGEN_EP_WORLD gives the ranks and this must be 1 or equal it.
    #[arg(long, default_value_t = 1)]
    ranks: usize,
    /// Tokens per rank.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 16, 128, 1000])]
    tokens: Vec<usize>,
    /// H.
    #[arg(long, default_value_t = 1024)]
    hidden: usize,
    /// I.
    #[arg(long, default_value_t = 512)]
    intermediate: usize,
    /// Experts of the model (a multiple of the ranks).
    #[arg(long, default_value_t = 32)]
    experts: usize,
    /// Routes per token.
    #[arg(long, default_value_t = 8)]
    top_k: usize,
    /// mxfp4-a16, mxfp4-a8, nvfp4-a16, nvfp4-a4, mxfp4-fast-a16 or mxfp4-fast-a8 (the device
    /// must run it; the Fast ones on Hopper, their GEMM1s generated at start-up).
    #[arg(long, default_value = "mxfp4-a16")]
    variant: String,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Write the cases as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// `a`: all-gather tokens, local window, reduce-scatter; `b`: all-to-all dispatch of each
    /// rank's routes, top-1 owner layers, all-to-all combine (docs/expert-parallel.md).
    #[arg(long, value_enum, default_value_t = ModeArg::A)]
    ep_mode: ModeArg,
}

/// `--ep-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    A,
    B,
}

impl From<ModeArg> for EpMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::A => EpMode::AllGather,
            ModeArg::B => EpMode::AllToAll,
        }
    }
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    if args.tokens.contains(&0) {
        return Err("--tokens: a token count must be positive".into());
    }
    let v = Variant::named(&args.variant).map_err(|e| format!("--variant: {e}"))?;
    let full = BenchShape {
        name: "ep-check",
        hidden: args.hidden,
        intermediate: args.intermediate,
        experts: args.experts,
        local_experts: args.experts,
        expert_offset: 0,
        top_k: args.top_k,
        tokens: args.tokens.clone(),
    };
    full.moe_shape()?;
    let (mut backends, mut coll) = match env_rank()? {
        Some((b, c)) => {
            use moegen_runtime::ep::Collective;
            if args.ranks != 1 && args.ranks != c.world() {
                return Err(format!(
                    "--ranks {} differs from MOEGEN_EP_WORLD {}",
                    args.ranks,
                    c.world()
                )
                .into());
            }
            (vec![b], c)
        }
        None => {
            let backends = open_devices(args.ranks)?;
            let refs: Vec<_> = backends.iter().collect();
            let coll = NcclCollective::from_devices(&refs)?;
            (backends, coll)
        }
    };
    println!("device: {} ({} SMs)", backends[0].name, {
        use moegen_runtime::backend::Backend;
        backends[0].sm_count()
    });
    let failed = check_collectives(&mut backends, &mut coll)?;
    println!(
        "collectives (all_gather, all_to_all, reduce_scatter_bf16): {}",
        if failed.is_empty() { "as specified".to_owned() } else { format!("WRONG: {failed:?}") }
    );
    let mut log = |m: &str| eprintln!("{m}");
    let mode = EpMode::from(args.ep_mode);
    let (cases, _, _) =
        check_ranks(backends, coll, &full, v, mode, &args.tokens, args.seed, &mut log)?;
    println!(
        "{:>5} {:<14} {:>7} {:>10} {:>10} {:>8} {:>8}",
        "ranks", "finalize", "N/rank", "elements", "mismatch", "graph", "worst"
    );
    let mut ok = failed.is_empty();
    for c in &cases {
        ok &= c.mismatches == 0 && c.graph_mismatches == 0;
        println!(
            "{:>5} {:<14} {:>7} {:>10} {:>10} {:>8} {:>8.3}",
            c.ranks,
            c.finalize,
            c.tokens_per_rank,
            c.elements,
            c.mismatches,
            c.graph_mismatches,
            c.worst
        );
    }
    if let Some(path) = &args.json {
        let json = serde_json::json!({ "variant": v.name, "mode": mode_name(mode), "shape": {
            "hidden": args.hidden, "intermediate": args.intermediate, "experts": args.experts,
            "top_k": args.top_k }, "collectives_failed": failed, "cases": cases, "pass": ok });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!("{}", if ok { "PASS" } else { "FAIL" });
    Ok(ok)
}
