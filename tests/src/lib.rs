//! Helpers shared by moegen's cross-crate tests.

use std::path::PathBuf;

/// A required tool, or a panic that says how to get it. Tests never skip a check whose
/// tool is missing: a missing tool is a failure, in CI and locally alike.
pub fn require<E: std::fmt::Display>(tool: Result<PathBuf, E>) -> PathBuf {
    match tool {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}
