#!/usr/bin/env bash
# Compiles and lints moegen-candle's `cuda` feature (candle's CUDA device) without a system
# CUDA toolkit: candle-kernels' build runs nvcc, whose front end needs NVVM's `cicc`, which
# the wheels of scripts/install-cuda-tools.sh do not carry. This adds PyPI's `nvidia-nvvm`
# (same CUDA release as that nvcc), puts NVVM beside that nvcc, and runs clippy
# with `--features cuda` for sm_90. Not part of scripts/test.sh: candle's kernels take tens
# of minutes of nvcc on two cores. Idempotent; the build goes to target/candle-cuda (or $CARGO_TARGET_DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-cuda-tools.sh"
tk="$root/.tools/cuda/nvidia/cu13"
# nvcc finds cicc at ../nvvm/bin next to its own (real) location: NVVM goes into that folder.
if [ ! -x "$tk/nvvm/bin/cicc" ]; then
  nvvm="$root/.tools/nvvm"
  rm -rf "$nvvm"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
    --target "$nvvm" nvidia-nvvm==13.5.37
  cp -r "$nvvm/nvidia/cu13/nvvm" "$tk/nvvm"
  cp "$nvvm"/nvidia/cu13/lib/* "$tk/lib/"
  rm -rf "$nvvm"
fi
cd "$root/candle"
PATH="$tk/bin:$PATH" CUDA_HOME="$tk" CUDA_PATH="$tk" CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/candle-cuda}" \
  cargo clippy --features cuda --all-targets --locked -- -D warnings
