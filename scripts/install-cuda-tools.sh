#!/usr/bin/env bash
# Installs the pinned NVIDIA tools the tests need (ptxas and nvdisasm, and the cuda_fp4/fp8
# headers whose host emulation the format tests compare against) from PyPI wheels into
# .tools/cuda. No CUDA toolkit, GPU or network other than PyPI is needed. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.tools/cuda"
stamp="$dest/.installed-v1"
if [ -f "$stamp" ]; then
  exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
  --target "$dest" \
  nvidia-cuda-nvcc==13.5.37 \
  nvidia-cuda-nvdisasm==13.5.37 \
  nvidia-cuda-runtime==13.5.37 \
  nvidia-cuda-crt==13.5.37 \
  nvidia-cuda-cccl==13.3.5.0.6
"$dest/nvidia/cu13/bin/ptxas" --version | tail -1
touch "$stamp"
