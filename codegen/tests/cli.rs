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
fn tactics_json_lists_the_tactics_with_the_invariants() {
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
            assert!(t["gemm1_wide"].is_null(), "no SM100 tactic pairs GEMM1 widths");
        }
    }
    // Hopper: 43 tactics, six of them GEMM1 N 128 with N 256 beside it (T 16 and 32), ten
    // splitting K in one GEMM or both, the text table showing the wide kernel on their rows.
    let v = json(&["tactics", "--target", "sm_90a", "--json"]);
    let ts = v["tactics"].as_array().unwrap();
    assert_eq!(ts.len(), 43);
    let split = |t: &&serde_json::Value| {
        ["gemm1", "gemm2"].iter().any(|g| t[g]["split_k"].as_u64() != Some(1))
    };
    assert_eq!(ts.iter().filter(split).count(), 10);
    let paired: Vec<_> = ts.iter().filter(|t| !t["gemm1_wide"].is_null()).collect();
    assert_eq!(paired.len(), 6);
    for t in paired {
        assert_eq!(t["gemm1"]["mma_tiler"][1].as_u64(), Some(128));
        assert_eq!(t["gemm1_wide"]["mma_tiler"][1].as_u64(), Some(256));
        assert!(t["name"].as_str().unwrap().contains("n128|n256:"), "{}", t["name"]);
    }
    let out = gen_cmd(&["tactics", "--target", "sm_90a"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("GEMM1 beside it, by live tiles: 16x256").count(), 3, "{text}");
    assert_eq!(text.matches("GEMM1 beside it, by live tiles: 32x256").count(), 3, "{text}");
}

fn scratch_dir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn emit_writes_the_committed_crate_and_check_catches_drift() {
    let dir = scratch_dir("emit");
    let out = gen_cmd(&["emit", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("287 kernels (290 files)"), "{text}");
    assert!(text.contains("290 written, 0 unchanged"), "{text}");
    let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated");
    for rel in ["manifest.json", "src/lib.rs", "ptx/moegen_sm100_nvfp4_gemm1_t128_n128_c1x1.ptx"] {
        assert_eq!(
            std::fs::read_to_string(dir.join(rel)).unwrap(),
            std::fs::read_to_string(committed.join(rel)).unwrap(),
            "{rel}"
        );
    }
    // Outside the workspace the crate stands alone: its own workspace, an absolute path to
    // moegen-dsl.
    let toml = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    assert!(toml.contains("\n[workspace]\n"), "{toml}");
    assert!(!toml.contains(".workspace = true"), "{toml}");
    // A changed and a stale file make `check` fail before any ptxas run.
    std::fs::write(dir.join("ptx/moegen_sm90_finalize_reduce.ptx"), "edited").unwrap();
    std::fs::write(dir.join("ptx/old_kernel.ptx"), "stale").unwrap();
    let out = gen_cmd(&["check", "--out", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("changed: ptx/moegen_sm90_finalize_reduce.ptx"), "{err}");
    assert!(err.contains("stale: ptx/old_kernel.ptx"), "{err}");
    // Re-emitting repairs it and removes the stale file.
    assert!(gen_cmd(&["emit", "--out", dir.to_str().unwrap()]).status.success());
    assert!(!dir.join("ptx/old_kernel.ptx").exists());
}

fn mtimes(dir: &std::path::Path) -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
    let mut out = Vec::new();
    for sub in ["", "ptx", "src"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap().filter_map(Result::ok) {
            if e.file_type().unwrap().is_file() {
                out.push((e.path(), e.metadata().unwrap().modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn emit_restores_deleted_files_and_rewrites_nothing_that_is_fresh() {
    let dir = scratch_dir("emit_twice");
    let d = dir.to_str().unwrap();
    assert!(gen_cmd(&["emit", "--out", d]).status.success());
    let before = mtimes(&dir);
    assert_eq!(before.len(), 290);
    // A second run touches nothing: every mtime stays, so cargo rebuilds nothing.
    let out = gen_cmd(&["emit", "--out", d]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("0 written, 290 unchanged, 0 stale removed"), "{text}");
    assert_eq!(mtimes(&dir), before);
    // Deleted and corrupted files come back, and only they are written.
    let gemm1: Vec<_> = std::fs::read_dir(dir.join("ptx"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("gemm1"))
        .map(|e| e.path())
        .collect();
    // 16 SM100 (four tactics, Fast and Exact, NVFP4 and MXFP8 × MXFP4), 22 Hopper NVFP4
    // (A16, A4; T 128 N 128 ping-pong and T 16 N 128 split over 2 and 4 among them) and 44
    // Hopper MXFP4 (A16, A8; plain and with gpt-oss's epilogue).
    assert_eq!(gemm1.len(), 82);
    for p in &gemm1 {
        std::fs::remove_file(p).unwrap();
    }
    std::fs::write(dir.join("src/lib.rs"), "garbage").unwrap();
    let out = gen_cmd(&["emit", "--out", d]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("83 written, 207 unchanged"), "{text}");
    let after = mtimes(&dir);
    assert_eq!(after.len(), 290);
    for ((p, t0), (q, t1)) in before.iter().zip(&after) {
        assert_eq!(p, q);
        let rewritten = gemm1.contains(p) || p.ends_with("src/lib.rs");
        assert_eq!(t0 != t1, rewritten, "{}", p.display());
    }
}

#[test]
fn check_passes_on_the_committed_crate() {
    let out = gen_cmd(&["check"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "is fresh; 287 kernels assembled in 403 ptxas runs with 0 spill and 0 stack bytes"
        ),
        "{text}"
    );
}

/// A Hopper GEMM: one wgmma per m64 block and K16 step of the (single, looped) K stage,
/// none serialized away; weights by bulk copy; GEMM1's gather and SwiGLU division, GEMM2's
/// activation TMA and finalize.
fn hopper_gemm(r: &Value, family: &str, kernel: &str, count: &dyn Fn(&Value, &str) -> u64) {
    let n: u64 =
        kernel.rsplit("_n").next().and_then(|x| x.split('_').next()).unwrap().parse().unwrap();
    let blocks = if n == 64 { 1 } else { 2 };
    // A8 kernels multiply E4M3 (QGMMA), four K32 steps per 128-K stage; the others bf16
    // (HGMMA), four K16 steps per 64-K stage.
    let (mma, other) = if kernel.contains("_a8") { ("QGMMA", "HGMMA") } else { ("HGMMA", "QGMMA") };
    assert_eq!(count(r, mma), 4 * blocks, "{kernel}: 4 K steps × {blocks} m64 blocks");
    assert_eq!(count(r, other), 0, "{kernel}");
    assert_eq!(count(r, "UTCOMMA"), 0, "{kernel}");
    assert!(count(r, "SYNCS") > 0, "{kernel}");
    assert_eq!(r["reference"], Value::Null, "{kernel}: no production anchor");
    match family {
        "gemm1" => {
            assert!(count(r, "LDGSTS") >= 1, "{kernel}: gather");
            assert!(count(r, "CALL") >= 8, "{kernel}: div.rn's slow path per h value");
        }
        "gemm2" => {
            assert!(count(r, "UTMALDG") >= 1, "{kernel}: activation TMA");
            assert!(count(r, "UBLKRED") >= 1, "{kernel}: bulk reduce-add finalize");
        }
        "gemm2_deterministic" => {
            assert!(count(r, "UTMALDG") >= 1, "{kernel}: activation TMA");
            assert_eq!(count(r, "UBLKRED"), 0, "{kernel}");
            assert!(count(r, "UBLKCP") >= 1, "{kernel}: bulk store of route rows");
        }
        other => panic!("{kernel}: family {other}"),
    }
}

#[test]
fn stats_reports_the_instruction_families_each_gemm_needs() {
    let v = json(&["stats", "--json"]);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 287);
    // A family the kernel does not have counts 0.
    let count = |r: &Value, f: &str| {
        r["sass"]["families"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p[0] == f)
            .map_or(0, |p| p[1].as_u64().unwrap())
    };
    for r in rows {
        let family = r["family"].as_str().unwrap();
        let kernel = r["kernel"].as_str().unwrap();
        assert_eq!(r["ptxas"]["spill_stores"], 0);
        assert_eq!(r["ptxas"]["stack_frame"], 0);
        if family.starts_with("gemm") && kernel.starts_with("moegen_sm90_") {
            hopper_gemm(r, family, kernel, &count);
            continue;
        }
        // Only the Hopper GEMMs and the wgmma corpus kernel (four K16 steps) use wgmma.
        let hgmma = if kernel == "moegen_sm90_corpus_wgmma" { 4 } else { 0 };
        assert_eq!(count(r, "HGMMA"), hgmma, "{kernel}");
        if family.starts_with("gemm") {
            // Four per whole K stage, and the partial last stage's own four (predicated
            // on its remaining K: docs/kernels.md, "K and N tails"): `UTCOMMA` for NVFP4
            // (`kind::mxf4nvf4`), `UTCQMMA` for MXFP8 × MXFP4 (`kind::mxf8f6f4`), whose
            // stage has one scale atom per 128 rows (NVFP4: four).
            let mx = kernel.ends_with("_mxa8") || kernel.contains("_mxa8_");
            let (mma, other, copies) =
                if mx { ("UTCQMMA", "UTCOMMA", 4) } else { ("UTCOMMA", "UTCQMMA", 8) };
            assert_eq!(count(r, mma), 8, "{kernel}: four block-scaled MMAs per K stage, twice");
            assert_eq!(count(r, other), 0, "{kernel}");
            assert!(count(r, "UTCCP") >= copies, "{kernel}");
            assert!(count(r, "UTMALDG") >= 2, "{}", r["kernel"]);
            assert!(count(r, "SYNCS") > 0, "{}", r["kernel"]);
            let name = r["kernel"].as_str().unwrap();
            if let Some(reference) = r["reference"].as_object() {
                assert!(r["ab_stages"].as_u64() >= reference["ab_stages"].as_u64(), "{name}");
                // The Exact recipe's unrolled IEEE epilogue is larger; the default kernels are
                // compared.
                if !name.ends_with("_exact") {
                    assert!(
                        r["sass"]["total"].as_u64() <= reference["sass_instructions"].as_u64(),
                        "{name}"
                    );
                }
            }
            // Issue 9's static facts: no GPU-scope memory barrier anywhere, no call in the
            // Fast epilogue beyond the two every kernel has, tensor maps prefetched.
            assert_eq!(count(r, "MEMBAR.GPU"), 0, "{name}");
            if !name.ends_with("_exact") {
                assert!(count(r, "CALL") <= 2, "{name}");
            }
            assert!(count(r, "UTMACCTL.PF") >= 3, "{name}");
        }
        match family {
            "gemm1" => {
                assert!(count(r, "LDGSTS") >= 12, "gather");
                assert!(count(r, "UTMASTG") >= 1, "TMA store of h");
            }
            "gemm2" => assert_eq!(count(r, "UBLKRED"), 1, "one bulk reduce-add per row"),
            "gemm2_deterministic" => {
                assert_eq!(count(r, "UBLKRED"), 0);
                assert!(count(r, "UBLKCP") >= 1, "bulk store of route rows");
            }
            _ => assert_eq!(count(r, "UTCOMMA") + count(r, "UTCQMMA"), 0),
        }
    }
    // The table, for a few kernels (the whole set's sweep ran above).
    let out = gen_cmd(&["stats", "--kernel", "sm90_quant"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("kernel"));
    let named: Vec<&str> = lines.map_while(|l| l.split_whitespace().next()).collect();
    assert!(named.len() >= 3, "{text}");
    assert!(named.iter().all(|k| k.contains("sm90_quant")), "{named:?}");
    // An SM100 GEMM1's rows: its resources beside the reference's, its per-role figures,
    // its SASS facts.
    let gemm1 = "moegen_sm100_nvfp4_gemm1_t128_n128_c1x1";
    let text = String::from_utf8(gen_cmd(&["stats", "--kernel", gemm1]).stdout).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("{gemm1} "))).collect();
    assert_eq!(rows.len(), 3, "resources, roles, SASS facts:\n{text}");
    // anchors.md §A: 168 registers, 0 spill, 6 stages, 2272 SASS.
    assert_eq!(rows[0].split_whitespace().last(), Some("168/0/6/2272"), "{}", rows[0]);
    assert!(text.contains("per warp role") && text.contains("SASS facts"), "{text}");
    let out = gen_cmd(&["stats", "--kernel", "no_such_kernel"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "error: --kernel \"no_such_kernel\": no kernel of the default set has this in its name"
    );
}

#[test]
fn plan_reports_the_corrected_max_tiles() {
    let v = json(&[
        "plan",
        "--tokens",
        "16384",
        "--top-k",
        "8",
        "--experts",
        "256",
        "--local-experts",
        "32",
        "--json",
    ]);
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
        "--experts",
        "256",
        "--local-experts",
        "32",
        "--intermediate",
        "2048",
        "--json",
    ]);
    assert!(with_i["workspace_bytes"].as_u64() > v["workspace_bytes"].as_u64());
    let text = String::from_utf8(
        gen_cmd(&[
            "plan",
            "--tokens",
            "16",
            "--top-k",
            "2",
            "--experts",
            "8",
            "--local-experts",
            "4",
        ])
        .stdout,
    )
    .unwrap();
    assert!(text.contains("tile 128: max_tiles"), "{text}");
}

/// gpt-oss's 2880 (a multiple of 64, not of 128 or 256) plans for SM100, the workspace
/// holding h at I = 2880 exactly.
#[test]
fn plan_takes_gpt_oss_2880_on_sm100() {
    let base = ["plan", "--tokens", "64", "--top-k", "4", "--experts", "32"];
    let args = |i: &'static str| {
        let mut v = base.to_vec();
        v.extend(["--local-experts", "32", "--hidden", "2880", "--intermediate", i]);
        v.extend(["--target", "sm_100f", "--json"]);
        v
    };
    let v = json(&args("2880"));
    let smaller = json(&args("2816"));
    let bytes = |v: &serde_json::Value| v["workspace_bytes"].as_u64().unwrap();
    assert!(bytes(&v) > bytes(&smaller), "{v}");
}

#[test]
fn plan_sizes_mxfp8_activations_and_h() {
    let args = |acts: &'static str| {
        let mut v = vec!["plan", "--tokens", "64", "--top-k", "4", "--experts", "32"];
        v.extend(["--local-experts", "32", "--hidden", "2880", "--intermediate", "2880"]);
        v.extend(["--activations", acts, "--json"]);
        v
    };
    let buffer = |v: &serde_json::Value, name: &str| {
        v["plan"]["shared"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == name)
            .map(|b| b["bytes"].as_u64().unwrap())
            .unwrap()
    };
    let (nv, mx) = (json(&args("a4")), json(&args("mxa8")));
    // E4M3 codes: a byte per value against NVFP4's half; scales per 32 of H padded to 128.
    assert_eq!(buffer(&mx, "activations"), 64 * 2880, "{mx}");
    assert_eq!(buffer(&nv, "activations"), 64 * 2880 / 2, "{nv}");
    assert_eq!(buffer(&mx, "activation_scales"), 64 * 2944 / 32, "{mx}");
    assert_eq!(2 * buffer(&nv, "gemm1_output"), buffer(&mx, "gemm1_output"));
    // h's scales: 128x4 atoms of [rows, I/16] (NVFP4) against [rows, Kp(I)/32] (MXFP8).
    let rows = nv["plan"]["shared"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "permuted_idx_to_expanded_idx")
        .map(|b| b["elements"].as_u64().unwrap())
        .unwrap();
    let atoms = |cols: u64| rows.div_ceil(128) * cols.div_ceil(4) * 512;
    assert_eq!(buffer(&nv, "gemm1_output_scales"), atoms(2880 / 16));
    assert_eq!(buffer(&mx, "gemm1_output_scales"), atoms(2944 / 32));
    let out = gen_cmd(&args("e4m3"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not one of a4, a16, a8, mxa8"));
    let hopper = gen_cmd(&[args("mxa8"), vec!["--target", "sm_90a"]].concat());
    assert_eq!(hopper.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&hopper.stderr).contains("do not take Mxfp8"));
}

fn plan_args(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = vec!["plan", "--tokens", "64", "--top-k", "8", "--experts", "256"];
    v.extend(["--local-experts", "32"]);
    v.extend(extra);
    v
}

#[test]
fn invalid_values_give_one_error_line_naming_the_value_and_exit_code_2() {
    for (args, needle) in [
        (plan_args(&["--intermediate", "100"]), "intermediate size = 100 is not a multiple of 64"),
        (plan_args(&["--hidden", "272"]), "hidden size = 272 is not a multiple of 64"),
        (plan_args(&["--hidden", "0"]), "hidden size must be positive"),
        (plan_args(&["--expert-offset", "250"]), "local experts [250, 250+32) exceed the 256"),
        (plan_args(&["--deterministic"]), "hidden size (the deterministic scratch needs it)"),
        (
            vec!["plan", "--tokens", "8", "--top-k", "9", "--experts", "8", "--local-experts", "8"],
            "top_k 9 exceeds the 8 experts",
        ),
        (
            vec!["plan", "--tokens", "0", "--top-k", "8", "--experts", "8", "--local-experts", "8"],
            "tokens must be positive",
        ),
        (
            vec!["plan", "--tokens", "4294967296", "--top-k", "8", "--experts", "256"]
                .into_iter()
                .chain(["--local-experts", "32"])
                .collect(),
            "does not fit the kernels' 32-bit indices",
        ),
    ] {
        let out = gen_cmd(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error:") && err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn argument_errors_show_clap_s_whole_message() {
    for (args, needles) in [
        (
            vec!["plan", "--top-k", "8", "--local-experts", "32"],
            vec![
                "the following required arguments were not provided",
                "--tokens",
                "--experts",
                "Usage:",
            ],
        ),
        (
            vec!["plan", "--tokens", "x", "--top-k", "8", "--experts", "8", "--local-experts", "8"],
            vec!["invalid value 'x' for '--tokens <TOKENS>'", "--help"],
        ),
        (vec!["tactics", "--target", "sm_90"], vec!["unknown target 'sm_90'"]),
        (vec!["frobnicate"], vec!["unrecognized subcommand 'frobnicate'", "Usage:"]),
    ] {
        let out = gen_cmd(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        for n in needles {
            assert!(err.contains(n), "{args:?}: missing {n:?} in {err}");
        }
        assert!(err.starts_with("error:"), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    let help = gen_cmd(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8(help.stdout).unwrap().contains("tactics"));
}

#[test]
fn model_puts_moegen_at_or_below_the_reference_at_every_deepseek_batch() {
    let v = json(&["model", "--json"]);
    let batches = v["batches"].as_array().unwrap();
    let tokens: Vec<u64> =
        batches.iter().map(|b| b["workload"]["tokens"].as_u64().unwrap()).collect();
    assert_eq!(tokens, [16, 128, 1024, 4096, 16384]);
    for b in batches {
        assert_eq!(b["tactics"].as_array().unwrap().len(), 16);
        let ours = b["moegen_best"][1].as_f64().unwrap();
        let theirs = b["reference_best"][1].as_f64().unwrap();
        assert!(
            ours > 0.0 && ours <= theirs,
            "N = {}: {ours} µs vs {theirs} µs",
            b["workload"]["tokens"]
        );
    }
    let out = gen_cmd(&["model", "--tokens", "0"]);
    assert_eq!(out.status.code(), Some(2));
}
