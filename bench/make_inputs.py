#!/usr/bin/env python3
"""Synthetic inputs in moe-bench's format, for running bench/peers.py without moe-bench
(dry runs, or checking the peers on a shape moe-bench does not write yet).

Writes into --dir: inputs.json, ids_N.npy, w_N.npy, x_N.npy, w1_mxfp4.npz, w2_mxfp4.npz (keys 'values'
and 'scales'). It writes no moegen.json: run peers.py with --without-moegen on such a folder.

The weights are random MXFP4 codes directly (not quantized from anything): e2m1 codes uniform over all
16, ue8m0 scales 2^-8..2^-6 per 32-block, so that W1 x and W2 h stay O(1) for Gaussian x. Rows are
already in moegen's order (W1: up/gate in blocks of 64), which for random codes is only a label.
"""

import argparse
import json
import os
import sys

PRESETS = {
    # the gpt-oss-like shape of bench/gpt_oss_shape.md: gpt-oss-20b's MoE layer, all 32 experts on one rank
    "gpt-oss": dict(hidden=2880, intermediate=2880, experts=32, local_experts=32, expert_offset=0, top_k=4),
    # DeepSeek-V3's MoE layer sliced for one of 8 EP ranks, as moe-bench's `deepseek` shape
    "deepseek-slice": dict(hidden=7168, intermediate=2048, experts=256, local_experts=32, expert_offset=0, top_k=8),
    # gpt-oss-120b's MoE layer (128 experts, top-4) on one rank
    "gpt-oss-120b": dict(hidden=2880, intermediate=2880, experts=128, local_experts=128, expert_offset=0, top_k=4),
    # a small shape for quick checks
    "small": dict(hidden=256, intermediate=128, experts=8, local_experts=4, expert_offset=2, top_k=2),
}


def bf16_bits(np, a):
    """float32 -> bf16 bit patterns (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u >> 16) & 1) + 0x7FFF
    return ((u + r) >> 16).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--shape", default="gpt-oss", help=f"preset: {', '.join(PRESETS)} (or give all six numbers)")
    for k in ("hidden", "intermediate", "experts", "local_experts", "expert_offset", "top_k"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None)
    ap.add_argument("--tokens", default="1,16,128,1024,8192", help="comma list of token counts")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    import numpy as np

    if args.shape not in PRESETS:
        print(f"error: unknown --shape {args.shape!r} (presets: {', '.join(PRESETS)})", file=sys.stderr)
        return 1
    shape = dict(PRESETS[args.shape])
    for k in shape:
        v = getattr(args, k)
        if v is not None:
            shape[k] = v
    H, I, E, L, O, K = (shape[k] for k in ("hidden", "intermediate", "experts", "local_experts", "expert_offset",
                                           "top_k"))
    if not (H % 32 == 0 and I % 64 == 0 and O + L <= E and 0 < K <= E):
        print(f"error: bad shape {shape}", file=sys.stderr)
        return 1
    try:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    except ValueError:
        print(f"error: bad --tokens {args.tokens!r}", file=sys.stderr)
        return 1
    if not tokens or min(tokens) <= 0:
        print(f"error: bad --tokens {args.tokens!r}", file=sys.stderr)
        return 1

    rng = np.random.default_rng(args.seed)
    os.makedirs(args.dir, exist_ok=True)
    cases = []
    for N in tokens:
        ids = np.argsort(rng.random((N, E)), axis=1)[:, :K].astype(np.int32)
        logits = rng.standard_normal((N, K)).astype(np.float32)
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        w = (w / w.sum(axis=1, keepdims=True)).astype(np.float32)
        x = bf16_bits(np, rng.standard_normal((N, H)).astype(np.float32))
        f = {"ids": f"ids_{N}.npy", "weights": f"w_{N}.npy", "x": f"x_{N}.npy"}
        np.save(os.path.join(args.dir, f["ids"]), ids)
        np.save(os.path.join(args.dir, f["weights"]), w)
        np.save(os.path.join(args.dir, f["x"]), x)
        cases.append({"tokens": N, **f})

    def mxfp4(rows, cols):
        values = rng.integers(0, 256, size=(L, rows, cols // 2), dtype=np.uint8)
        scales = rng.integers(127 - 8, 127 - 6 + 1, size=(L, rows, cols // 32), dtype=np.uint8)
        return values, scales

    v1, s1 = mxfp4(2 * I, H)
    v2, s2 = mxfp4(H, I)
    np.savez(os.path.join(args.dir, "w1_mxfp4.npz"), values=v1, scales=s1)
    np.savez(os.path.join(args.dir, "w2_mxfp4.npz"), values=v2, scales=s2)
    with open(os.path.join(args.dir, "inputs.json"), "w") as fp:
        json.dump({"shape": shape, "cases": cases, "seed": args.seed, "generator": "bench/make_inputs.py"}, fp,
                  indent=1)
    print(f"wrote {args.dir}: shape {shape}, tokens {tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
