#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the CUDA tools the tests need, then
# checks formatting and lints and runs every test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda-tools.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
cargo test --workspace --locked
# moegen-candle: its own workspace and lock file (its `cuda` feature builds candle's CUDA
# kernels with nvcc, so it stays out of the root workspace's `--all-features`); CPU only here.
# It shares the examples' target folder: candle compiles once for both.
cargo fmt --manifest-path candle/Cargo.toml --check
CARGO_TARGET_DIR=target/examples cargo clippy --manifest-path candle/Cargo.toml --all-targets --locked -- -D warnings
CARGO_TARGET_DIR=target/examples cargo test --manifest-path candle/Cargo.toml --locked
# The downstream examples, built as a user builds them (their own workspace and lock file);
# one target folder for both, so their dependencies compile once.
for example in layer-demo build-script macro zero-to-layer candle-moe; do
    manifest="examples/$example/Cargo.toml"
    cargo fmt --manifest-path "$manifest" --check
    CARGO_TARGET_DIR=target/examples cargo clippy --manifest-path "$manifest" --all-targets --locked -- -D warnings
    CARGO_TARGET_DIR=target/examples cargo test --manifest-path "$manifest" --locked
done
