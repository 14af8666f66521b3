//! `gen`: moegen's command line. See the README for every subcommand and flag.

use std::process::ExitCode;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use moegen_codegen::check::{CheckError, assemble_all, render_stats, stats};
use moegen_codegen::emit::{
    CrateOptions, EmitError, default_out_dir, diff_files, render_files, write_files,
};
use moegen_codegen::kernel_set::{default_kernel_set, kernel_set};
use moegen_codegen::perf::model::Workload;
use moegen_codegen::perf::{
    PerfError, load_role_stats, model_report, render_model, render_roles, render_sass_facts,
};
use moegen_codegen::report::{plan_report, render_plan, render_tactics, tactics_report};
use moegen_dsl::plan::check_gemm_dim;
use moegen_dsl::plan::{ExpertWindow, WorkspaceRequest};
use moegen_dsl::{ActivationFormat, Arch, Target, TileSize};

/// moegen: NVFP4 Mixture-of-Experts kernels for NVIDIA Blackwell, generated ahead of time.
#[derive(Parser, Debug)]
#[command(name = "gen", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write the default kernel set (PTX + manifest + the moegen-kernels crate); what bare
    /// `gen` does.
    Emit {
        /// Output folder (default: the workspace's generated/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Target of the GEMM kernels: sm_100f (default, what generated/ holds) or sm_100a.
        #[arg(long, default_value = "sm_100f")]
        target: Target,
    },
    /// Regenerate in memory, fail if the output folder differs, and assemble every kernel
    /// with ptxas (sm_100f, sm_103f, sm_100a; sm_90a for the Hopper SIMT kernels), failing on
    /// any error, spill or stack frame.
    Check {
        /// Folder to compare with (default: the workspace's generated/).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print per-kernel ptxas registers, spills, stack, shared memory, stage counts, SASS
    /// instruction counts and SASS facts, and the per-role dynamic instruction counts of
    /// docs/role-stats.json, beside the production reference's figures.
    Stats {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only the kernels whose name contains this text (e.g. `sm90_gemm1`); refused when
        /// none does.
        #[arg(long, value_name = "TEXT")]
        kernel: Option<String>,
    },
    /// Estimate each tactic's B200 time with the analytic model (docs/perf.md) from the
    /// per-role figures of docs/role-stats.json, beside the production reference's under the
    /// same model. Defaults: DeepSeek-V3's expert-parallel slice at N = 16, 128, 1024, 4096,
    /// 16384.
    Model {
        /// Token counts (repeat or comma-separate).
        #[arg(long, value_delimiter = ',', default_values_t = [16u64, 128, 1024, 4096, 16384])]
        tokens: Vec<u64>,
        /// Hidden size H.
        #[arg(long, default_value_t = 7168)]
        hidden: u64,
        /// Intermediate size I.
        #[arg(long, default_value_t = 2048)]
        intermediate: u64,
        /// Experts in the model.
        #[arg(long, default_value_t = 256)]
        experts: u64,
        /// Routes per token.
        #[arg(long, default_value_t = 8)]
        top_k: u64,
        /// Experts on this rank.
        #[arg(long, default_value_t = 32)]
        local_experts: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the tactic space with each kernel's pipeline depths and shared-memory/TMEM budget.
    Tactics {
        /// PTX target: sm_100f (default) or sm_100a.
        #[arg(long, default_value = "sm_100f")]
        target: Target,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Size the routing and GEMM workspace for a maximum batch; H and I are checked against
    /// the target's GEMM kernels.
    Plan {
        /// Largest token count per launch.
        #[arg(long)]
        tokens: u64,
        /// Routes per token (at most --experts).
        #[arg(long)]
        top_k: u64,
        /// Experts in the model.
        #[arg(long)]
        experts: u64,
        /// Experts held on this rank.
        #[arg(long)]
        local_experts: u64,
        /// First expert held on this rank.
        #[arg(long, default_value_t = 0)]
        expert_offset: u64,
        /// Per-expert intermediate size I (adds GEMM1's output buffers).
        #[arg(long)]
        intermediate: Option<u64>,
        /// Hidden size H (adds the quantized activations; sizes the deterministic scratch).
        #[arg(long)]
        hidden: Option<u64>,
        /// Include the deterministic finalize's scratch in the workspace (needs --hidden).
        #[arg(long)]
        deterministic: bool,
        /// Target whose GEMM kernels H and I must suit.
        #[arg(long, default_value = "sm_100f")]
        target: Target,
        /// What the activations entering GEMM1 are: a4 (NVFP4), mxa8 (MXFP8, SM100 with
        /// MXFP4 weights), a16 or a8 (Hopper). On SM100 it sizes the quantized activations
        /// and GEMM1's output.
        #[arg(long, default_value = "a4", value_parser = activations_arg)]
        activations: ActivationFormat,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `--activations`: a format's tag (`ActivationFormat::tag`).
fn activations_arg(s: &str) -> Result<ActivationFormat, String> {
    use ActivationFormat as A;
    [A::Nvfp4, A::Bf16, A::Fp8, A::Mxfp8]
        .into_iter()
        .find(|a| a.tag() == s)
        .ok_or_else(|| format!("`{s}` is not one of a4, a16, a8, mxa8"))
}

/// A failure after the arguments were accepted: the message and the exit code.
struct Failure(String, u8);

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s, 1)
    }
}

/// The library's typed errors end here, as their message with exit code 1.
macro_rules! failure_from {
    ($($e:ty),*) => {$(
        impl From<$e> for Failure {
            fn from(e: $e) -> Self {
                Failure(e.to_string(), 1)
            }
        }
    )*};
}
failure_from!(EmitError, CheckError, PerfError);

fn emit(out: Option<PathBuf>, target: Target) -> Result<String, Failure> {
    if target != Target::default() && out.is_none() {
        return Err(Failure(
            format!("--target {target} needs --out: generated/ holds the default set"),
            2,
        ));
    }
    let dir = out.unwrap_or_else(default_out_dir);
    let kernels = kernel_set(target).map_err(|e| e.to_string())?;
    let files = render_files(&kernels, &CrateOptions::for_dir(&dir))?;
    let w = write_files(&dir, &files)?;
    Ok(format!(
        "{} kernels ({} files) in {}: {} written, {} unchanged, {} stale removed",
        kernels.len(),
        files.len(),
        dir.display(),
        w.written.len(),
        w.unchanged,
        w.removed.len()
    ))
}

fn check(out: Option<PathBuf>) -> Result<String, Failure> {
    let dir = out.unwrap_or_else(default_out_dir);
    let kernels = default_kernel_set().map_err(|e| e.to_string())?;
    let files = render_files(&kernels, &CrateOptions::for_dir(&dir))?;
    let diff = diff_files(&dir, &files);
    if !diff.is_empty() {
        return Err(Failure(
            format!("{} is stale (run `cargo run --bin gen`): {}", dir.display(), diff.join(", ")),
            1,
        ));
    }
    let runs = assemble_all(&kernels)?;
    Ok(format!(
        "{} is fresh; {} kernels assembled in {} ptxas runs with 0 spill and 0 stack bytes",
        dir.display(),
        kernels.len(),
        runs.len()
    ))
}

fn run(cli: Cli) -> Result<String, Failure> {
    let bad = |e: String| Failure(e, 2);
    match cli.command {
        None => emit(None, Target::default()),
        Some(Command::Emit { out, target }) => emit(out, target),
        Some(Command::Check { out }) => check(out),
        Some(Command::Stats { json, kernel }) => {
            let mut kernels = default_kernel_set().map_err(|e| e.to_string())?;
            if let Some(text) = &kernel {
                kernels.retain(|k| k.name.contains(text.as_str()));
                if kernels.is_empty() {
                    return Err(bad(format!(
                        "--kernel {text:?}: no kernel of the default set has this in its name"
                    )));
                }
            }
            let roles = load_role_stats()?;
            let rows = stats(&kernels, roles.as_ref())?;
            if json {
                serde_json::to_string_pretty(&rows).map_err(|e| Failure(e.to_string(), 1))
            } else {
                Ok(format!(
                    "{}\n{}\n{}",
                    render_stats(&rows),
                    render_roles(&rows),
                    render_sass_facts(&rows)
                ))
            }
        }
        Some(Command::Model {
            tokens,
            hidden,
            intermediate,
            experts,
            top_k,
            local_experts,
            json,
        }) => {
            let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            ExpertWindow::new(size(experts), 0, size(local_experts), size(top_k))
                .map_err(|e| bad(e.to_string()))?;
            for (what, v) in [("hidden size", hidden), ("intermediate size", intermediate)] {
                check_gemm_dim(Target::Sm100f, what, v).map_err(|e| bad(e.to_string()))?;
            }
            if tokens.is_empty() || tokens.contains(&0) {
                return Err(bad("--tokens: give one or more counts above 0".into()));
            }
            let file = load_role_stats()?.ok_or_else(|| {
                Failure(
                    "docs/role-stats.json is missing: run \
                     `cargo run --release -p moegen-validation --bin role-stats`"
                        .into(),
                    1,
                )
            })?;
            let workloads: Vec<Workload> = tokens
                .iter()
                .map(|&n| Workload {
                    tokens: n,
                    hidden,
                    intermediate,
                    experts,
                    top_k,
                    local_experts,
                })
                .collect();
            let r = model_report(&workloads, &file)?;
            if json {
                serde_json::to_string_pretty(&r).map_err(|e| Failure(e.to_string(), 1))
            } else {
                Ok(render_model(&r))
            }
        }
        Some(Command::Tactics { target, json }) => {
            let r = tactics_report(target).map_err(|e| bad(e.to_string()))?;
            if json {
                serde_json::to_string_pretty(&r).map_err(|e| Failure(e.to_string(), 1))
            } else {
                Ok(render_tactics(&r))
            }
        }
        Some(Command::Plan {
            tokens,
            top_k,
            experts,
            local_experts,
            expert_offset,
            intermediate,
            hidden,
            deterministic,
            target,
            activations,
            json,
        }) => {
            let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            ExpertWindow::new(size(experts), size(expert_offset), size(local_experts), size(top_k))
                .map_err(|e| bad(e.to_string()))?;
            for (what, v) in [("hidden size", hidden), ("intermediate size", intermediate)] {
                if let Some(v) = v {
                    check_gemm_dim(target, what, v).map_err(|e| bad(e.to_string()))?;
                }
            }
            let req = WorkspaceRequest {
                tokens,
                top_k,
                local_experts,
                intermediate,
                hidden,
                tile_sizes: match target.arch() {
                    Arch::Sm100 => TileSize::SM100.to_vec(),
                    Arch::Sm90 => TileSize::SM90.to_vec(),
                },
                deterministic_scratch: deterministic,
                arch: target.arch(),
                activations,
            };
            let r = plan_report(&req).map_err(|e| bad(e.to_string()))?;
            if json {
                serde_json::to_string_pretty(&r).map_err(|e| Failure(e.to_string(), 1))
            } else {
                Ok(render_plan(&r))
            }
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's whole message: what is wrong, the usage line and where to find help.
            eprint!("{}", e.render());
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(out) => {
            print!("{out}");
            if !out.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(Failure(e, code)) => {
            eprintln!("error: {e}");
            ExitCode::from(code)
        }
    }
}
