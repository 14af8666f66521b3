//! The NVIDIA tools the SM100 checks rely on are present and of the pinned major version.

use std::process::Command;

use moegen_codegen::tools::{nvdisasm, ptxas};
use moegen_tests::require;

fn version_of(tool: std::path::PathBuf) -> String {
    let out = Command::new(&tool).arg("--version").output().expect("run tool");
    assert!(out.status.success(), "{} --version failed", tool.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ptxas_is_release_13() {
    let v = version_of(require(ptxas()));
    assert!(v.contains("release 13."), "{v}");
}

#[test]
fn nvdisasm_is_release_13() {
    let v = version_of(require(nvdisasm()));
    assert!(v.contains("release 13."), "{v}");
}
