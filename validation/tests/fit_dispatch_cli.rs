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
    assert_eq!(rows["rows"][0]["from_32_tokens"]["within_5_percent"], 63);
    assert_eq!(rows["rows"].as_array().unwrap().len(), 1, "no search at 0 steps");
}

#[test]
fn a_missing_record_is_an_error_naming_the_file() {
    let out =
        Command::new(BIN).args(["--record", "/nonexistent/rec", "--steps", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/rec-mxfp4-a16-deepseek.json"), "{err}");
}
