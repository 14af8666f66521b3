#!/usr/bin/env bash
# The Python package's GPU run (docs/python.md), from the repository root of a machine with
# a CUDA GPU, Python 3 and torch, and the wheel built elsewhere with
# `maturin build --release --features cuda -m python/Cargo.toml -o .device` (no Rust or
# network needed here). Installs the wheel into a private folder (the system's packages are
# left alone), runs python/tests_gpu/torch_op_h200.py, and leaves its JSON and log in $OUT
# (or the current folder). Exit status: the script's (1 when a check failed).
set -euo pipefail
out="${OUT:-.}"
site="$(mktemp -d)"
wheels=(.device/moegen-*-cp39-abi3-*.whl)
python3 -m pip install -q --no-index --no-deps --target "$site" "${wheels[0]}"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import moegen, torch; print('moegen', moegen.__version__, 'cuda built:', moegen.cuda_built, '| torch', torch.__version__, torch.cuda.get_device_name(0))"
python3 python/tests_gpu/torch_op_h200.py --json "$out/python-torch-op.json" "$@" 2>&1 | tee "$out/python-torch-op.log"
exit "${PIPESTATUS[0]}"
