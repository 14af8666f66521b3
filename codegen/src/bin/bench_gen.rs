//! `bench-gen`: how long generating the default kernel set takes (PTX text and the crate's
//! files, no ptxas), printed as a table beside the production reference's JIT time, and
//! written as JSON. Run it in a release build:
//! `cargo run --release -p moegen-codegen --bin bench-gen -- [--runs N] [--json PATH]`.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use moegen_codegen::emit::{CrateOptions, default_out_dir, render_files};
use moegen_codegen::kernel_set::default_kernel_set;

/// Times generation of the default kernel set.
#[derive(Parser, Debug)]
#[command(name = "bench-gen", about)]
struct Args {
    /// Timed runs (after one warm-up).
    #[arg(long, default_value_t = 20)]
    runs: u32,
    /// Where to write the JSON result.
    #[arg(long, default_value = "target/bench/generation.json")]
    json: std::path::PathBuf,
}

/// The production reference's compile time per kernel (CuTe DSL 4.8.1 JIT, anchors.md §A);
/// quoted, not re-measured here.
const REFERENCE_SECONDS_PER_KERNEL: (f64, f64) = (1.0, 3.0);

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => {
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!(
                "{}",
                e.render().to_string().lines().next().unwrap_or("error: invalid arguments")
            );
            return ExitCode::from(2);
        }
    };
    if args.runs == 0 {
        eprintln!("error: --runs must be positive");
        return ExitCode::from(2);
    }
    let once = || -> Result<(usize, usize), Box<dyn std::error::Error>> {
        let kernels = default_kernel_set()?;
        let files = render_files(&kernels, &CrateOptions::for_dir(&default_out_dir()))?;
        Ok((kernels.len(), files.values().map(String::len).sum()))
    };
    let (kernels, bytes) = match once() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut times = Vec::with_capacity(args.runs as usize);
    for _ in 0..args.runs {
        let t = Instant::now();
        if let Err(e) = once() {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let min = times[0];
    let per_kernel = median / kernels as f64;
    let (rlo, rhi) = REFERENCE_SECONDS_PER_KERNEL;
    println!(
        "generation of the default kernel set ({kernels} kernels, {bytes} bytes), {} runs",
        args.runs
    );
    println!("{:<34} {:>12} {:>14}", "", "whole set", "per kernel");
    println!("{:<34} {:>10.1} ms {:>11.2} ms", "moegen (median)", median * 1e3, per_kernel * 1e3);
    println!(
        "{:<34} {:>10.1} ms {:>11.2} ms",
        "moegen (min)",
        min * 1e3,
        min / kernels as f64 * 1e3
    );
    println!(
        "{:<34} {:>7.0}-{:.0} s {:>9.0}-{:.0} s",
        "reference CuTe DSL JIT (quoted)",
        rlo * kernels as f64,
        rhi * kernels as f64,
        rlo,
        rhi
    );
    let json = serde_json::json!({
        "what": "generation of the default kernel set without ptxas",
        "kernels": kernels,
        "bytes": bytes,
        "runs": args.runs,
        "median_seconds": median,
        "min_seconds": min,
        "per_kernel_seconds": per_kernel,
        "reference_seconds_per_kernel": [rlo, rhi],
        "reference_source": "anchors.md §A (CuTe DSL 4.8.1 JIT), quoted",
    });
    if let Some(parent) = args.json.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if let Err(e) = std::fs::write(&args.json, format!("{json:#}\n")) {
        eprintln!("error: writing {}: {e}", args.json.display());
        return ExitCode::from(1);
    }
    println!("wrote {}", args.json.display());
    ExitCode::SUCCESS
}
