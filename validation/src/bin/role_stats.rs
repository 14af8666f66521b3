//! `role-stats`: measures every SM100 GEMM kernel of the default set per warp role in
//! moegen-sim and writes docs/role-stats.json (which `gen stats` and `gen model` read, and a
//! test checks against the current PTX). Build in release:
//! `cargo run --release -p moegen-validation --bin role-stats -- [--out PATH]`.

use std::path::PathBuf;
use std::process::ExitCode;

use moegen_validation::role_stats::measure;

fn main() -> ExitCode {
    let out = std::env::args().skip_while(|a| a != "--out").nth(1).map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/role-stats.json"),
        PathBuf::from,
    );
    let file = match measure(&mut |k| eprintln!("measured {k}")) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let text = match serde_json::to_string_pretty(&file) {
        Ok(t) => t + "\n",
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = std::fs::write(&out, text) {
        eprintln!("error: writing {}: {e}", out.display());
        return ExitCode::from(1);
    }
    println!("{} kernels measured; written to {}", file.kernels.len(), out.display());
    ExitCode::SUCCESS
}
