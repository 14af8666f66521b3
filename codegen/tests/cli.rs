//! The `gen` binary as a user runs it.

use std::process::{Command, Output};

use serde_json::Value;

fn gen_cmd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gen")).args(args).output().expect("run gen")
}

fn json(args: &[&str]) -> Value {
    let out = gen_cmd(args);
    assert!(out.status.success(), "gen {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

#[test]
fn tactics_json_lists_sixteen_tactics_with_the_invariants() {
    for target in ["sm_100f", "sm_100a"] {
        let v = json(&["tactics", "--target", target, "--json"]);
        assert_eq!(v["target"], target);
        let ts = v["tactics"].as_array().unwrap();
        assert_eq!(ts.len(), 16);
        for t in ts {
            let tile = t["tile_size"].as_u64().unwrap();
            for g in ["gemm1", "gemm2"] {
                assert_eq!(t[g]["mma_tiler"][0].as_u64(), Some(tile), "{g} MMA M = tile");
                assert_eq!(t[g]["cluster"][0].as_u64(), Some(tile / 128), "{g} cluster M");
                assert!(t[g]["stages"].as_u64().unwrap() >= 2);
                assert!(t[g]["smem_bytes"].as_u64().unwrap() <= 232_448);
                assert!(t[g]["tmem_columns"].as_u64().unwrap() <= 512);
                if let Some(r) = t[g]["reference"].as_object() {
                    assert!(
                        t[g]["stages"].as_u64() >= r["ab_stages"].as_u64(),
                        "{g} stages ≥ reference"
                    );
                }
            }
            assert_eq!(t["gemm1"]["cluster"][1].as_u64(), Some(1), "GEMM1 cluster N is 1");
        }
    }
}

#[test]
fn bare_gen_prints_the_tactic_table() {
    let out = gen_cmd(&[]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("NVFP4 MoE tactics for sm_100f (16 tactics)"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.contains(" | ") && l.trim_start().starts_with(char::is_numeric))
            .count(),
        16
    );
}

#[test]
fn plan_reports_the_corrected_max_tiles() {
    let v = json(&["plan", "--tokens", "16384", "--top-k", "8", "--local-experts", "32", "--json"]);
    assert_eq!(v["max_tiles"]["128"], 1055);
    assert_eq!(v["max_tiles"]["256"], 543);
    assert_eq!(v["max_permuted_rows"]["128"], 1055 * 128);
    assert_eq!(v["max_permuted_rows"]["256"], 543 * 256);
    assert!(v["workspace_bytes"].as_u64().unwrap() > 0);
    let with_i = json(&[
        "plan",
        "--tokens",
        "16384",
        "--top-k",
        "8",
        "--local-experts",
        "32",
        "--intermediate",
        "2048",
        "--json",
    ]);
    assert!(with_i["workspace_bytes"].as_u64() > v["workspace_bytes"].as_u64());
    let text = String::from_utf8(
        gen_cmd(&["plan", "--tokens", "16", "--top-k", "2", "--local-experts", "4"]).stdout,
    )
    .unwrap();
    assert!(text.contains("tile 128: max_tiles"), "{text}");
}

#[test]
fn bad_arguments_give_one_line_and_exit_code_2() {
    for args in [
        vec!["plan", "--tokens", "0", "--top-k", "8", "--local-experts", "32"],
        vec!["plan", "--tokens", "x", "--top-k", "8", "--local-experts", "32"],
        vec!["plan", "--top-k", "8", "--local-experts", "32"],
        vec![
            "plan",
            "--tokens",
            "8",
            "--top-k",
            "8",
            "--local-experts",
            "32",
            "--intermediate",
            "100",
        ],
        vec!["plan", "--tokens", "4294967296", "--top-k", "8", "--local-experts", "32"],
        vec!["tactics", "--target", "sm_90"],
        vec!["frobnicate"],
    ] {
        let out = gen_cmd(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    let help = gen_cmd(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8(help.stdout).unwrap().contains("tactics"));
}
