//! `fit-dispatch`: judges the Hopper dispatch model against autotuner records (every tactic
//! timed at every bucket, `moe-bench`'s `tune_<variant>.json` for `mxfp4-a16` and an A8
//! variant on both shapes, committed as `<prefix>-<variant>-<shape>.json`), then searches
//! the dequantization and activation figures that pick best on all of them together, and
//! prints both, record by record. No GPU:
//! `cargo run --release -p moegen-validation --bin fit-dispatch -- [--record PREFIX]…
//! [--steps N] [--from shipped|before] [--seed S] [--json PATH]` (docs/perf.md, "the
//! dispatch model recalibrated").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use moegen_runtime::layer::DeviceModel;
use moegen_validation::dispatch_fit::{Fared, Figures, FitError, Records, SMALL_BUCKET, search};

#[derive(Parser)]
#[command(about = "Judge and refit the Hopper dispatch model's figures on autotuner records")]
struct Args {
    /// A record's path prefix (files `<prefix>-<variant>-<shape>.json`); repeat it to judge
    /// and fit several records together. Default: the two H100 records the shipped figures
    /// were fitted to.
    #[arg(long, default_values_t = [
        concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/perf-2026-12-06-h100-uniform-tune").to_string(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/perf-2026-12-07-h100-s11-tune").to_string(),
    ])]
    record: Vec<String>,
    /// Search steps (0: judge the shipped figures only).
    #[arg(long, default_value_t = 2000)]
    steps: usize,
    /// Where the search starts: the shipped figures or those before the recalibration.
    #[arg(long, value_enum, default_value_t = Start::Shipped)]
    from: Start,
    /// The search's seed.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    seed: u64,
    /// Where to write the rows as JSON.
    #[arg(long, default_value = "fit-dispatch.json")]
    json: PathBuf,
}

/// Prints one row and returns it as JSON.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Start {
    /// `DeviceModel::h200` / `h200_a8`'s figures.
    Shipped,
    /// The figures of 2026-12-03, before the recalibration.
    Before,
}

fn row(name: &str, f: &Figures, [large, small]: &[Fared; 2]) -> serde_json::Value {
    let a = f.a16;
    println!(
        "{name:18} {:>7.2} {:>6.2} {:>7.2} {:>6.2} {:>7.3} {:>6.3} | {:>3}/{:<3} {:.3} {:.3} ({}) | {:>2}/{:<2}",
        a.weights_per_clock_per_warpgroup,
        a.step_clocks,
        a.weights_per_clock_per_sm,
        a.activation_bytes_per_clock_per_sm,
        a.exposed,
        f.a8_ratio,
        large.within,
        large.buckets,
        large.geomean(),
        large.worst.0,
        large.worst.1,
        small.within,
        small.buckets,
    );
    let fared = |x: &Fared| {
        serde_json::json!({
            "buckets": x.buckets, "within_5_percent": x.within, "geomean": x.geomean(),
            "worst": x.worst.0, "worst_at": x.worst.1,
        })
    };
    serde_json::json!({
        "figures": name,
        "weights_per_clock_per_warpgroup": a.weights_per_clock_per_warpgroup,
        "step_clocks": a.step_clocks,
        "weights_per_clock_per_sm": a.weights_per_clock_per_sm,
        "activation_bytes_per_clock_per_sm": a.activation_bytes_per_clock_per_sm,
        "exposed": a.exposed,
        "a8_ratio": f.a8_ratio,
        "from_32_tokens": fared(large),
        "below_32_tokens": fared(small),
    })
}

/// The rows of one set of figures: each record alone, then all of them together.
fn rows(
    name: &str,
    f: &Figures,
    each: &[(String, Records)],
    all: &Records,
    model: &dyn Fn(DeviceModel) -> DeviceModel,
) -> Result<Vec<serde_json::Value>, FitError> {
    let mut out = Vec::new();
    for (prefix, records) in each {
        let short = prefix.rsplit('/').next().unwrap_or(prefix);
        let mut r = row(&format!("{name} {short}"), f, &records.judge(model)?);
        r["record"] = serde_json::json!(prefix);
        out.push(r);
    }
    if each.len() > 1 {
        let mut r = row(&format!("{name} all"), f, &all.judge(model)?);
        r["record"] = serde_json::json!("all");
        out.push(r);
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let run = || -> Result<(), Box<dyn std::error::Error>> {
        let mut each = Vec::new();
        let mut all: Option<Records> = None;
        for prefix in &args.record {
            let records = Records::load(Path::new(prefix))?;
            all = Some(match all {
                None => records.clone(),
                Some(a) => a.merged(records.clone()),
            });
            each.push((prefix.clone(), records));
        }
        let all = all.ok_or("no --record")?;
        // Opened first, so that a path that cannot be written fails before the search.
        let mut json = std::fs::File::create(&args.json)
            .map_err(|e| format!("{}: {e}", args.json.display()))?;
        let shipped = Figures::shipped()
            .ok_or("the shipped Hopper models are not of the form fit-dispatch searches")?;
        println!(
            "figures (record): weights/clk per warpgroup, step clocks, weights/clk per SM, \
             activation bytes/clk per SM, exposed, A8 ratio | from {SMALL_BUCKET} tokens: \
             within 5 %, geometric mean, worst (where) | below: within 5 %"
        );
        // The shipped rows judge the models themselves (`Figures::shipped` checks they are
        // these figures).
        let mut out_rows = rows("shipped", &shipped, &each, &all, &|d| d)?;
        if args.steps > 0 {
            let start = match args.from {
                Start::Shipped => shipped,
                Start::Before => Figures::before(),
            };
            let (best, _) = search(&all, start, args.steps, args.seed)?;
            out_rows.extend(rows("searched", &best, &each, &all, &|d| best.apply(d))?);
        }
        let out =
            serde_json::json!({ "records": args.record, "seed": args.seed, "rows": out_rows });
        let text = serde_json::to_string_pretty(&out)? + "\n";
        json.write_all(text.as_bytes()).map_err(|e| format!("{}: {e}", args.json.display()))?;
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
