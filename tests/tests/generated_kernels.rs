//! The committed generated/ crate: fresh, complete, consistent with its manifest; every
//! kernel assembles for each architecture it targets with no spill and no stack.

use std::collections::BTreeSet;

use moegen_codegen::check::{assemble_all, assembly_targets};
use moegen_codegen::emit::{CrateOptions, default_out_dir, diff_files, render_files};
use moegen_codegen::kernel_set::default_kernel_set;
use moegen_dsl::nvfp4_tactics;
use moegen_tests::require;

#[test]
fn generated_is_fresh() {
    let kernels = default_kernel_set().unwrap();
    let dir = default_out_dir();
    let files = render_files(&kernels, &CrateOptions::for_dir(&dir)).unwrap();
    let diff = diff_files(&dir, &files);
    assert!(diff.is_empty(), "generated/ is stale, run `cargo run --bin gen`: {diff:?}");
}

#[test]
fn the_set_covers_every_tactic_and_simt_kernel() {
    let names: BTreeSet<&str> = moegen_kernels::kernels().map(|k| k.name).collect();
    assert_eq!(names.len(), moegen_kernels::kernels().count(), "unique names");
    // SM100: NVFP4 × NVFP4 and MXFP4 × MXFP8 (`_mxa8`) for every tactic.
    for t in nvfp4_tactics() {
        for g in [t.gemm1(), t.gemm2()] {
            let [m, n] = g.mma_tiler();
            let [cm, cn] = g.cluster();
            for (format, acts) in [("nvfp4", ""), ("mxfp4", "_mxa8")] {
                let name = format!("moegen_sm100_{format}_{}_t{m}_n{n}_c{cm}x{cn}{acts}", g.kind());
                assert!(names.contains(name.as_str()), "{name} missing");
                let variant = match g.kind() {
                    moegen_dsl::GemmKind::Gemm1 => "_exact",
                    moegen_dsl::GemmKind::Gemm2 => "_det",
                };
                let v = format!("{name}{variant}");
                assert!(names.contains(v.as_str()), "{v} missing");
            }
        }
    }
    for tag in ["sm100", "sm90"] {
        for f in [
            "moe_sort_histogram",
            "moe_sort_offsets",
            "moe_sort_scatter",
            "moe_sort_single",
            "quantize_nvfp4",
            "finalize_reduce",
            "ep_dispatch_pack",
            "ep_gather_rows",
            "ep_combine_unpack",
        ] {
            let name = format!("moegen_{tag}_{f}");
            assert!(names.contains(name.as_str()), "{name} missing");
        }
    }
    assert!(names.contains("moegen_sm90_qdq_nvfp4"), "the Hopper A4 quantize-dequantize");
    assert!(names.contains("moegen_sm100_quantize_mxfp8"), "the SM100 MXFP8 quantizer");
    for f in ["quant_fp8_tokens", "quant_fp8_rows"] {
        let name = format!("moegen_sm90_{f}");
        assert!(names.contains(name.as_str()), "{name}: the Hopper A8 quantizers");
    }
    for f in ["alu", "warp", "pipeline", "tma", "cluster", "wgmma", "mufu"] {
        let name = format!("moegen_sm90_corpus_{f}");
        assert!(names.contains(name.as_str()), "{name} missing");
    }
    // Hopper: every tactic's GEMMs for NVFP4 weights with both activation formats, and the
    // MXFP4 subset with bf16 activations; each GEMM2 in both finalize modes.
    let hopper_with = |format: &str, act: &str, t: &moegen_dsl::MoeTactic, g1: &str, g2: &str| {
        for g in [t.gemm1(), t.gemm2()] {
            let [m, n] = g.mma_tiler();
            let suffix = if g.kind() == moegen_dsl::GemmKind::Gemm1 { g1 } else { g2 };
            let pp = if g.schedule() == moegen_dsl::Schedule::PingPong { "_pp" } else { "" };
            let base = format!("moegen_sm90_{format}_{}_t{m}_n{n}_c1x1_{act}{pp}", g.kind());
            let name = format!("{base}{suffix}");
            assert!(names.contains(name.as_str()), "{name} missing");
            if g.kind() == moegen_dsl::GemmKind::Gemm2 {
                let det = format!("{base}_det{suffix}");
                assert!(names.contains(det.as_str()), "{det} missing");
            }
        }
    };
    let hopper = |format: &str, act: &str, t: &moegen_dsl::MoeTactic| {
        hopper_with(format, act, t, "", "");
    };
    for t in moegen_dsl::sm90_tactics() {
        hopper("nvfp4", "a16", &t);
        hopper("nvfp4", "a4", &t);
    }
    let mx = moegen_codegen::kernel_set::sm90_mxfp4_tactics();
    assert_eq!(
        mx.len(),
        18,
        "two MXFP4 tactics per tile size (N 256/128 and 128/64), T 128 ping-pong N 128 with GEMM2 N 64 and 128, and T 16's eight split-K N 128/64 ones"
    );
    for t in &mx {
        for act in ["a16", "a8"] {
            hopper("mxfp4", act, t);
            // gpt-oss's epilogue: clamped SwiGLU and both biases.
            hopper_with("mxfp4", act, t, "_swiglu_clamped_bias", "_bias");
        }
    }
    // NVFP4, A16 and A4: 11 GEMM1 (4 tiles × N 128, 256; T 128 N 128 ping-pong; T 16 N 128
    // split over 2 and 4) and 16 GEMM2 (4 tiles × 3 N; T 16 N 64 and 128 split over 2 and 4)
    // × 2 modes. MXFP4, A16 and A8 each, plain and with gpt-oss's epilogue: 11 GEMM1 and 10
    // GEMM2 (4 tiles × N 64, 128; T 16 N 64 split over 2 and 4) × 2 modes.
    let sm90_gemms = 2 * (11 + 16 * 2) + 2 * 2 * (11 + 10 * 2);
    // SM100 per format: 4 GEMM1 × 2 recipes, 8 GEMM2 × 2 modes; SIMT 9 per target, with
    // SM100's MXFP8 quantizer and Hopper's quantize-dequantize and two A8 quantizers; the
    // 7 corpus kernels.
    let sm100_gemms = 2 * (4 * 2 + 8 * 2);
    assert_eq!(names.len(), sm100_gemms + 18 + 1 + 1 + 2 + 7 + sm90_gemms);
    let manifest: serde_json::Value = serde_json::from_str(moegen_kernels::MANIFEST_JSON).unwrap();
    let listed: BTreeSet<&str> = manifest["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, names);
    for k in moegen_kernels::kernels() {
        assert_eq!(k.name, k.id.name());
        assert!(k.ptx.contains(&format!(".visible .entry {}(", k.name)), "{}", k.name);
        assert!(k.ptx.contains(&format!(".target {}", k.ptx_target)), "{}", k.name);
    }
    let hopper = moegen_kernels::kernel("moegen_sm90_nvfp4_gemm1_t16_n256_c1x1_a4").unwrap();
    let entry =
        manifest["kernels"].as_array().unwrap().iter().find(|k| k["name"] == hopper.name).unwrap();
    assert_eq!(entry["threads"], 384, "a producer and two consumer warpgroups");
    assert_eq!(entry["target"], "sm_90a");
    assert!(hopper.ptx.contains(".maxnreg 168"), "setmaxnreg needs the launch register count");
    let gemm = moegen_kernels::kernel("moegen_sm100_nvfp4_gemm2_t256_n256_c2x2").unwrap();
    assert_eq!(gemm.id.family(), "gemm2");
    let entry =
        manifest["kernels"].as_array().unwrap().iter().find(|k| k["name"] == gemm.name).unwrap();
    assert_eq!(entry["cluster_dims"], serde_json::json!([4, 1, 1]));
    assert_eq!(entry["threads"], 192);
    assert_eq!(entry["params"][0]["name"], "tmap_a");
    assert_eq!(entry["params"][0]["type"], "TensorMap");
    assert_eq!(entry["params"][0]["kind"], serde_json::json!({"TensorMap": "Gemm1OutputLoad"}));
}

#[test]
fn every_kernel_assembles_without_spills_for_each_architecture() {
    require(moegen_codegen::tools::ptxas());
    let kernels = default_kernel_set().unwrap();
    let runs = assemble_all(&kernels).unwrap_or_else(|e| panic!("{e}"));
    let expected: usize = kernels.iter().map(|k| assembly_targets(k).len()).sum();
    assert_eq!(runs.len(), expected);
    let archs: BTreeSet<&str> = runs.iter().map(|r| r.arch.as_str()).collect();
    assert_eq!(archs, BTreeSet::from(["sm_100a", "sm_100f", "sm_103f", "sm_90a"]));
    for r in &runs {
        assert_eq!(r.report.spill_stores + r.report.spill_loads + r.report.stack_frame, 0, "{r:?}");
        assert!(r.report.registers > 0, "{r:?}: ptxas reported no registers, the parse failed");
    }
}

/// The body of a kernel's PTX (after the opening brace), one instruction or label per line,
/// comments and guard predicates (`@%p0`, `@!%p0`) dropped.
fn body_lines(ptx: &str) -> Vec<&str> {
    let body = ptx.split_once('{').map_or("", |(_, b)| b);
    body.lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
        .map(|l| {
            if l.starts_with('@') {
                l.split_once(char::is_whitespace).map_or("", |(_, r)| r.trim_start())
            } else {
                l
            }
        })
        .filter(|l| !l.is_empty())
        .collect()
}

const MEMORY: [&str; 7] = ["ld.", "st.", "atom.", "red.", "cp.", "prefetch", "tensormap"];

/// No `griddepcontrol.wait` of the kernel sits under a guard predicate: a wait that some
/// threads skip waits for nothing on their paths.
fn assert_waits_unguarded(name: &str, ptx: &str) {
    for line in ptx.lines().map(|l| l.split("//").next().unwrap_or("").trim()) {
        let guarded = line.starts_with('@') && line.contains("griddepcontrol.wait");
        assert!(!guarded, "{name}: `{line}` is guarded");
    }
}

/// A kernel launched with programmatic dependent launch may start before the kernel ahead
/// of it finishes, so every path must run `griddepcontrol.wait` before it touches global
/// memory or the copy engines: before the wait, branches only go to labels that are also
/// before it, and the only memory instructions are shared-memory, parameter and local ones
/// (barrier set-up, TMEM allocation and register moves are fine). The activation quantizers
/// that run beside the routing sort (`abi::launch::simt_overlaps_sort`) are the exception,
/// checked by the next test.
#[test]
fn programmatic_launches_wait_before_touching_memory() {
    const ALLOWED: [&str; 3] = [".shared", ".param", ".local"];
    let (mut programmatic, mut simt) = (0, 0);
    for k in moegen_kernels::kernels() {
        if !k.launch.programmatic || overlaps_sort(k) {
            continue;
        }
        if matches!(k.id, moegen_dsl::abi::KernelId::Simt { .. }) {
            simt += 1;
        }
        let at = k.ptx.find("griddepcontrol.wait");
        let Some(at) = at else { panic!("{}: launched programmatically without a wait", k.name) };
        programmatic += 1;
        assert_waits_unguarded(k.name, k.ptx);
        let lines = body_lines(&k.ptx[..at]);
        let labels: Vec<&str> = lines.iter().filter_map(|l| l.strip_suffix(':')).collect();
        for line in &lines {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if first.starts_with("bra") {
                let target = words.next().unwrap_or("").trim_end_matches(';');
                assert!(labels.contains(&target), "{}: `{line}` jumps past the wait", k.name);
            }
            if MEMORY.iter().any(|m| first.starts_with(m)) {
                assert!(
                    ALLOWED.iter().any(|a| first.contains(a)),
                    "{}: `{line}` before griddepcontrol.wait",
                    k.name
                );
            }
            // Leaving before the wait would let a kernel waiting on this one run before the
            // one before it has finished.
            assert!(!["ret", "exit"].iter().any(|r| first.starts_with(r)), "{}: `{line}`", k.name);
        }
    }
    assert!(programmatic > 0, "the GEMMs are launched programmatically");
    // finalize_reduce on both targets; quant_fp8_rows, between A8's GEMMs, is a plain launch
    // (docs/perf.md, 2026-12-07 session 12: launched programmatically it timed slower).
    assert_eq!(simt, 2, "the SIMT kernels that wait first");
    let rows = moegen_kernels::kernels().find(|k| k.name.ends_with("quant_fp8_rows"));
    assert!(!rows.expect("quant_fp8_rows is generated").launch.programmatic);
}

fn overlaps_sort(k: &moegen_dsl::abi::KernelInfo) -> bool {
    matches!(k.id, moegen_dsl::abi::KernelId::Simt { family, .. }
        if moegen_dsl::abi::launch::simt_overlaps_sort(family))
}

/// The quantizers launched programmatically after the routing sort run beside it: before
/// their first `griddepcontrol.wait` they may hold only the pointers of the layer's input
/// activations (and NVFP4's global scale) and of their own outputs, which no earlier kernel
/// of the layer reads or writes; any other buffer's pointer is loaded only in straight-line
/// code right after an (unguarded) wait, so every path to its use has waited; and they
/// leave only through a wait, so the GEMM that waits on them has also waited on the sort.
/// The check is of which pointers are in hand where, not of what is done through them
/// (reading rather than writing the input is the kernels' own code).
#[test]
fn the_quantizers_beside_the_sort_touch_only_the_input_before_their_wait() {
    use moegen_dsl::abi::{Buffer, ParamKind, params};
    const BEFORE_WAIT: [Buffer; 6] = [
        Buffer::ActivationsBf16,
        Buffer::ActivationGlobalScale,
        Buffer::Activations,
        Buffer::ActivationScales,
        Buffer::ActivationsDequantized,
        Buffer::ActivationsFp8,
    ];
    let mut beside = 0;
    for k in moegen_kernels::kernels().filter(|k| overlaps_sort(k)) {
        assert!(k.launch.programmatic, "{}", k.name);
        beside += 1;
        assert_waits_unguarded(k.name, k.ptx);
        let lines = body_lines(k.ptx);
        let wait = lines.iter().position(|l| *l == "griddepcontrol.wait;");
        let Some(wait) = wait else { panic!("{}: no griddepcontrol.wait", k.name) };
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.strip_prefix("ld.param.") else { continue };
            let name = rest.rsplit_once('[').map_or("", |(_, n)| n.trim_end_matches("];"));
            let param = params(&k.id).iter().find(|p| p.name == name);
            let Some(param) = param else { panic!("{}: `{line}` loads no parameter", k.name) };
            let ParamKind::Buffer(buf) = param.kind else { continue };
            if BEFORE_WAIT.contains(&buf) {
                continue;
            }
            // Over the parameter loads just before it, the line before must be a wait (no
            // label between them: nothing jumps in past the wait).
            let before = lines[..i].iter().rev().find(|l| !l.starts_with("ld.param."));
            assert_eq!(
                before.copied(),
                Some("griddepcontrol.wait;"),
                "{}: `{line}` ({buf:?}) not right after a wait",
                k.name
            );
        }
        for line in &lines[..wait] {
            let first = line.split_whitespace().next().unwrap_or("");
            assert!(
                !["atom.", "red.", "cp.", "tensormap"].iter().any(|m| first.starts_with(m)),
                "{}: `{line}` before griddepcontrol.wait",
                k.name
            );
        }
        let rets: Vec<usize> =
            lines.iter().enumerate().filter(|(_, l)| **l == "ret;").map(|(i, _)| i).collect();
        assert!(!rets.is_empty(), "{}: no ret", k.name);
        for i in rets {
            assert_eq!(lines[i - 1], "griddepcontrol.wait;", "{}: a ret without a wait", k.name);
        }
        assert!(!lines.iter().any(|l| l.starts_with("exit")), "{}: exit", k.name);
    }
    // quantize_nvfp4 (both targets), quantize_mxfp8 (SM100), qdq_nvfp4 and quant_fp8_tokens
    // (Hopper).
    assert_eq!(beside, 5, "the quantizers before GEMM1");
}

/// Every SIMT kernel triggers its dependents first: the GEMM launched after the routing
/// sort or a quantizer (programmatically) can then set up while that kernel runs, and waits
/// on `griddepcontrol.wait` for its output (the test above).
#[test]
fn simt_kernels_trigger_their_dependents_first() {
    let mut simt = 0;
    for k in moegen_kernels::kernels() {
        if !matches!(k.id, moegen_dsl::abi::KernelId::Simt { .. }) {
            continue;
        }
        simt += 1;
        let lines = body_lines(k.ptx);
        let first = lines
            .iter()
            .find(|l| !l.starts_with(".reg") && !l.starts_with(".shared"))
            .copied()
            .unwrap_or("");
        assert_eq!(first, "griddepcontrol.launch_dependents;", "{}: first instruction", k.name);
    }
    assert!(simt > 0, "the set holds SIMT kernels");
}
