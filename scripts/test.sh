#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the CUDA tools the tests need, then
# checks formatting and lints and runs every test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda-tools.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
cargo test --workspace --locked
