#!/usr/bin/env bash
# Builds examples/candle-moe's `candle-moe-bench` with candle's CUDA device (feature `cuda`)
# into .device/ for a GPU machine, on a machine with no CUDA toolkit, driver or GPU.
#
# Why not the tools of scripts/install-cuda-tools.sh: candle compiles its CUDA kernels to PTX
# with nvcc at build time, and a driver loads PTX only up to the ISA version of its own CUDA
# release. The H200 machine's driver is CUDA 13.0 (docs/validation.md), so candle's kernels
# are compiled by PyPI's CUDA 13.0 nvcc (and NVVM's cicc), installed into .tools/cuda-13.0.
# candle links the CUDA libraries (cudarc `dynamic-linking`): the link here is against stub
# libraries carrying only the exported names and the real SONAMEs, written from cudarc's
# own declarations; the GPU machine's libraries are the ones loaded at run time
# (LD_LIBRARY_PATH=/usr/local/cuda/lib64 there). Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.tools/cuda-13.0"
tk="$dest/nvidia/cu13"
stamp="$dest/.installed-v1"
if [ ! -f "$stamp" ]; then
  rm -rf "$dest"
  mkdir -p "$dest"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-compile \
    --target "$dest" \
    nvidia-cuda-nvcc==13.0.88 \
    nvidia-cuda-runtime==13.0.88 \
    nvidia-cuda-crt==13.0.88 \
    nvidia-cuda-cccl==13.0.85 \
    nvidia-nvvm==13.0.88
  touch "$stamp"
fi
"$tk/bin/nvcc" --version | tail -1

# Link stubs: every function cudarc declares for a library, under that library's SONAME.
cudarc=$(cd "$root/examples/candle-moe" && cargo metadata --format-version 1 --locked --features cuda \
  | python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"]=="cudarc").rsplit("/",1)[0])')
stubs="$dest/stubs"
mkdir -p "$stubs"
for spec in driver:cuda:1 nvrtc:nvrtc:13 curand:curand:10 cublas:cublas:13 cublaslt:cublasLt:13; do
  IFS=: read -r module lib major <<<"$spec"
  grep -oE '^pub unsafe fn [A-Za-z0-9_]+' "$cudarc/src/$module/sys/mod.rs" \
    | awk '{print "void " $4 "(void) {}"}' | sort -u >"$stubs/$lib.c"
  cc -shared -fPIC -Wl,-soname,"lib$lib.so.$major" -o "$stubs/lib$lib.so" "$stubs/$lib.c"
done
# candle-kernels' MoE kernels are a static library of CUDA code that links the runtime:
# the wheel's real libcudart serves (same SONAME as the GPU machine's).
ln -sf "$tk/lib/libcudart.so.13" "$stubs/libcudart.so"

cd "$root/examples/candle-moe"
PATH="$tk/bin:$PATH" CUDA_HOME="$tk" CUDA_PATH="$tk" CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}" \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/candle-cuda-bench}" \
  RUSTFLAGS="-L native=$stubs" \
  cargo build --release --locked --features cuda --bin candle-moe-bench
mkdir -p "$root/.device"
cp "${CARGO_TARGET_DIR:-$root/target/candle-cuda-bench}/release/candle-moe-bench" "$root/.device/"
echo "built .device/candle-moe-bench"
