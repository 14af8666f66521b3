//! The crate graph keeps generated code a leaf: the generator never depends on what it
//! generates (so a broken generated/ can always be regenerated), and the runtime builds
//! without the simulator. Read from `cargo tree`, as a user would check it.

use std::process::Command;

fn tree(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--offline", "--prefix", "none", "--format", "{p}", "-e", "normal"])
        .args(args)
        .output()
        .expect("run cargo tree");
    assert!(out.status.success(), "cargo tree {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn crates(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect()
}

#[test]
fn the_generator_depends_on_no_generated_code_and_no_runtime() {
    let deps = crates(&tree(&["-p", "moegen-codegen"]));
    assert!(deps.iter().any(|c| c == "moegen-dsl"), "{deps:?}");
    for c in ["moegen-kernels", "moegen-runtime", "moegen-sim", "moegen-validation"] {
        assert!(!deps.iter().any(|d| d == c), "moegen-codegen depends on {c}: {deps:?}");
    }
}

#[test]
fn the_runtime_builds_without_the_simulator_or_the_validation_corpus() {
    let deps = crates(&tree(&["-p", "moegen-runtime", "--no-default-features"]));
    assert!(deps.iter().any(|c| c == "moegen-kernels"), "{deps:?}");
    for c in ["moegen-sim", "moegen-codegen", "moegen-validation", "cudarc"] {
        assert!(!deps.iter().any(|d| d == c), "moegen-runtime depends on {c}: {deps:?}");
    }
    // Default features: the CUDA backend, still no simulator.
    let deps = crates(&tree(&["-p", "moegen-runtime"]));
    assert!(deps.iter().any(|c| c == "cudarc"), "{deps:?}");
    assert!(!deps.iter().any(|d| d == "moegen-sim"), "{deps:?}");
}

#[test]
fn generated_code_depends_on_the_abi_only() {
    let deps = crates(&tree(&["-p", "moegen-kernels"]));
    let ours: Vec<&String> = deps.iter().filter(|c| c.starts_with("moegen-")).collect();
    assert_eq!(ours, ["moegen-kernels", "moegen-dsl"], "{deps:?}");
}

#[test]
fn a_users_binary_does_not_embed_the_validation_or_hopper_kernels_by_default() {
    // moegen-kernels' default features compile only the sm100 group.
    let features = |extra: &[&str]| {
        let out = Command::new(env!("CARGO"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["tree", "--offline", "-p", "moegen-runtime", "--no-default-features", "-e"])
            .args(["features", "--prefix", "none", "-i", "moegen-kernels"])
            .args(extra)
            .output()
            .expect("run cargo tree");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = features(&[]);
    assert!(text.contains("moegen-kernels feature \"default\""), "{text}");
    assert!(!text.contains("moegen-kernels feature \"corpus\""), "{text}");
    assert!(!text.contains("moegen-kernels feature \"sm90\""), "{text}");
    // The Hopper kernels come with the runtime's `sm90` feature.
    assert!(features(&["--features", "sm90"]).contains("moegen-kernels feature \"sm90\""));
}
