//! The README's "From zero to a layer" is this crate's `main`: it must run to the end and
//! find the simulated layer bit-identical to the CPU reference.

use std::process::Command;

#[test]
fn the_readme_layer_runs_and_equals_the_cpu_reference() {
    let out = Command::new(env!("CARGO_BIN_EXE_moegen-example-zero-to-layer")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("4 tokens through t"), "{stdout}");
    assert!(stdout.contains("bit-identical to the CPU reference"), "{stdout}");
}
