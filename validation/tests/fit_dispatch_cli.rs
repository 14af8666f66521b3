//! `fit-dispatch` as a user runs it: judging the shipped figures on the committed record,
//! and a record that is not there.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fit-dispatch");

#[test]
fn judges_the_shipped_figures_on_the_committed_record() {
    let json = std::env::temp_dir().join(format!("fit-dispatch-{}.json", std::process::id()));
    let out = Command::new(BIN).args(["--steps", "0", "--json"]).arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("shipped") && table.contains("63/68"), "{table}");
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    // The two default records (2026-12-06, session 11), then both together.
    let rows = rows["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "each record and both; no search at 0 steps");
    let within = |r: &serde_json::Value| r["from_32_tokens"]["within_5_percent"].clone();
    assert_eq!(within(&rows[0]), 63);
    assert!(rows[0]["record"].as_str().unwrap().ends_with("perf-2026-12-06-h100-uniform-tune"));
    assert_eq!(within(&rows[1]), 67);
    assert!(rows[1]["record"].as_str().unwrap().ends_with("perf-2026-12-07-h100-s11-tune"));
    assert_eq!((within(&rows[2]), rows[2]["record"].as_str()), (130.into(), Some("all")));
}

#[test]
fn one_record_alone_gives_one_row() {
    let docs = format!("{}/../docs/perf-2026-12-07-h100-s11-tune", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(BIN)
        .args(["--steps", "0", "--json", "/dev/null", "--record", &docs])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    // The A8 half of this record is the Fast variant's (`mxfp4-fast-a8`).
    assert_eq!(table.lines().filter(|l| l.starts_with("shipped")).count(), 1, "{table}");
    assert!(table.contains("67/68"), "{table}");
}

#[test]
fn a_missing_record_is_an_error_naming_the_file() {
    let out =
        Command::new(BIN).args(["--record", "/nonexistent/rec", "--steps", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/rec-mxfp4-a16-deepseek.json"), "{err}");
}

#[test]
fn an_incomplete_record_is_an_error_naming_tactic_and_bucket() {
    let dir = std::env::temp_dir().join(format!("fit-dispatch-incomplete-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let docs = format!("{}/../docs", env!("CARGO_MANIFEST_DIR"));
    for part in ["a16-deepseek", "a16-gpt-oss", "a8-deepseek", "a8-gpt-oss"] {
        let from = format!("{docs}/perf-2026-12-06-h100-uniform-tune-mxfp4-{part}.json");
        let mut rows: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(from).unwrap()).unwrap();
        if part == "a8-gpt-oss" {
            rows.retain(|r| {
                !(r["bucket"] == 64 && r["tactic"].as_str().unwrap().starts_with("t32"))
            });
        }
        let to = dir.join(format!("rec-mxfp4-{part}.json"));
        std::fs::write(to, serde_json::to_string(&rows).unwrap()).unwrap();
    }
    let out = Command::new(BIN)
        .args(["--steps", "0", "--json", "/dev/null", "--record"])
        .arg(dir.join("rec"))
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rec-mxfp4-a8-gpt-oss.json: no trial of t32") && err.contains("at 64"),
        "{err}"
    );
}

#[test]
fn seed_zero_is_refused() {
    let out = Command::new(BIN).args(["--seed", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
}
