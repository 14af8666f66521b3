//! `gen`: moegen's command line. See the README for every subcommand and flag.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use moegen_codegen::report::{plan_report, render_plan, render_tactics, tactics_report};
use moegen_dsl::{Target, TileSize};
use moegen_runtime::workspace::WorkspaceRequest;

/// moegen: NVFP4 Mixture-of-Experts kernels for NVIDIA Blackwell, generated ahead of time.
#[derive(Parser, Debug)]
#[command(name = "gen", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the tactic space with each kernel's pipeline depths and shared-memory/TMEM budget.
    Tactics {
        /// PTX target: sm_100f (default) or sm_100a.
        #[arg(long, default_value = "sm_100f")]
        target: Target,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Size the routing and GEMM workspace for a maximum batch.
    Plan {
        /// Largest token count per launch.
        #[arg(long)]
        tokens: u64,
        /// Routes per token.
        #[arg(long)]
        top_k: u64,
        /// Experts held on this rank.
        #[arg(long)]
        local_experts: u64,
        /// Per-expert intermediate size I (adds GEMM1's output buffers).
        #[arg(long)]
        intermediate: Option<u64>,
        /// Hidden size H (sizes the deterministic finalize scratch).
        #[arg(long)]
        hidden: Option<u64>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn run(cli: Cli) -> Result<String, String> {
    match cli.command {
        None => {
            tactics_report(Target::default()).map(|r| render_tactics(&r)).map_err(|e| e.to_string())
        }
        Some(Command::Tactics { target, json }) => {
            let r = tactics_report(target).map_err(|e| e.to_string())?;
            if json {
                serde_json::to_string_pretty(&r).map_err(|e| e.to_string())
            } else {
                Ok(render_tactics(&r))
            }
        }
        Some(Command::Plan { tokens, top_k, local_experts, intermediate, hidden, json }) => {
            let req = WorkspaceRequest {
                tokens,
                top_k,
                local_experts,
                intermediate,
                hidden,
                tile_sizes: TileSize::ALL.to_vec(),
            };
            let r = plan_report(&req).map_err(|e| e.to_string())?;
            if json {
                serde_json::to_string_pretty(&r).map_err(|e| e.to_string())
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
            let rendered = e.render().to_string();
            eprintln!("{}", rendered.lines().next().unwrap_or("error: invalid arguments"));
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
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
