#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the CUDA tools the tests need, then
# checks formatting, lints and the API docs, and runs every test. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda-tools.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# The API docs: every intra-doc link resolves and no doc comment is malformed.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --locked
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
# The Python package (python/: moegen-python, PyO3 abi3 + maturin; docs/python.md): its own
# workspace and lock file, like moegen-candle, sharing the examples' target folder. Lints with
# and without `cuda` (the CUDA path must compile; CI has no GPU to run it), then
# `pip install ./python` into a venv and its pytest suite on moegen's simulator. CI installs
# no torch (its Linux wheels pull gigabytes of CUDA libraries): the suite drives the same
# entry points with NumPy and DLPack inputs; the torch op is tested on a GPU machine
# (python/tests_gpu/torch_op_h200.py).
cargo fmt --manifest-path python/Cargo.toml --check
CARGO_TARGET_DIR=target/examples cargo clippy --manifest-path python/Cargo.toml --all-targets --locked -- -D warnings
CARGO_TARGET_DIR=target/examples cargo clippy --manifest-path python/Cargo.toml --all-targets --features cuda --locked -- -D warnings
if [ ! -x target/pyenv/bin/python ]; then
    python3 -m venv target/pyenv
fi
target/pyenv/bin/python -m pip install -q --disable-pip-version-check \
    maturin==1.16.0 numpy==2.4.6 pytest==9.2.0
# `pip install ./python` as a user runs it, built with the dev profile (opt-level 1) into the
# shared target folder instead of a cold release build; maturin comes from the venv.
PATH="$PWD/target/pyenv/bin:$PATH" CARGO_TARGET_DIR=target/examples \
    MATURIN_PEP517_ARGS="--profile dev --locked" \
    target/pyenv/bin/python -m pip install -q --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps ./python
# From the repository root, so that `import moegen` is the installed package, not python/moegen.
target/pyenv/bin/python -c "import moegen; print('moegen', moegen.__version__, 'imported')"
target/pyenv/bin/python -m pytest -q python/tests
