//! The benchmark program runs end to end on the CPU (the simulator), prints its table, writes
//! its JSON, and keeps moegen within the derived bound of candle's f32 MoE; bad arguments
//! are refused by name.

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_candle-moe-bench")).args(args).output().unwrap()
}

#[test]
fn bench_writes_a_row_per_token_count_within_the_bound() {
    let json = std::env::temp_dir().join(format!("candle-moe-bench-{}.json", std::process::id()));
    let json = json.to_str().unwrap();
    let out = bench(&[
        "--device", "cpu", "--shape", "small", "--tokens", "2,5", "--iters", "1", "--warmup", "0",
        "--json", json,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().any(|l| l.starts_with("| 2 |")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("| 5 |")), "{stdout}");
    let text = std::fs::read_to_string(json).unwrap();
    std::fs::remove_file(json).unwrap();
    let rows: Vec<&str> = text.split("\"tokens\": ").skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    for row in rows {
        let field = |name: &str| -> f64 {
            let at = row.find(&format!("\"{name}\": ")).unwrap_or_else(|| panic!("{name}: {row}"));
            let rest = &row[at + name.len() + 4..];
            rest[..rest.find([',', '}']).unwrap()].trim().parse().unwrap()
        };
        let err = field("moegen_rel_l2_vs_f32");
        assert!(err > 0.0 && err <= 0.01, "{err}");
        assert!(field("moegen_ms") > 0.0 && field("candle_bf16_ms") > 0.0);
    }
}

#[test]
fn bench_refuses_bad_arguments_by_name() {
    for (args, named) in [
        (&["--shape", "huge"][..], "--shape"),
        (&["--tokens", "4,0"][..], "--tokens"),
        (&["--device", "tpu", "--shape", "small"][..], "--device"),
        (&["--frobnicate"][..], "--frobnicate"),
        (&["--iters"][..], "--iters needs a value"),
    ] {
        let out = bench(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(named), "{args:?}: {stderr}");
    }
}
