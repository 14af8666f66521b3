//! Every binary that needs the CUDA driver says so in one line and exits 1 when there is
//! none; `MOEGEN_NO_CUDA` makes the machine look driverless, so this runs everywhere.

use std::process::Command;

fn check(bin: &str, args: &[&str]) {
    let out = Command::new(bin).args(args).env("MOEGEN_NO_CUDA", "1").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(out.status.code(), Some(1), "{bin}: {stderr}");
    assert_eq!(lines.len(), 1, "{bin}: one line, got {stderr:?}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains("no CUDA driver"),
        "{bin}: {stderr}"
    );
    assert!(out.stdout.is_empty(), "{bin} printed before failing");
}

#[test]
fn gpu_check_without_a_driver() {
    check(env!("CARGO_BIN_EXE_gpu-check"), &[]);
    check(env!("CARGO_BIN_EXE_gpu-check"), &["--parts", "layer"]);
}

#[test]
fn moe_bench_without_a_driver() {
    let dir = std::env::temp_dir().join("moegen-no-driver-bench");
    check(env!("CARGO_BIN_EXE_moe-bench"), &["--dir", dir.to_str().unwrap()]);
    assert!(!dir.exists(), "nothing written before the driver check");
}
