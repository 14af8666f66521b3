#!/usr/bin/env python3
"""Peer side of the moegen MoE benchmark (NVIDIA H200): the layer run as engines run it.

On the inputs `moe-bench` wrote into --dir, runs the MoE layer with each engine-style peer
(bench/README.md, "The peers"): triton_kernels matmul_ogs in both EP modes (`triton-dispatched`,
`triton-allgather`), torch._grouped_mm bf16 on compacted local routes (`torch-bf16`), the FP8 grouped
GEMMs alone as a lower bound (`torch-fp8-gemms`), and Humming W4A16 / W4A8 (`humming-w4a16`,
`humming-w4a8`). Each is checked against an fp32 reference, timed with CUDA-graph replay, and printed in
one table beside moegen's figures from moegen.json; everything is written to bench_results.json.

Exit codes: 0 all good; 1 error (one line on stderr); 2 results written but a peer failed to run a
case or failed its accuracy gate.
"""

import argparse
import json
import math
import os
import statistics
import sys
import traceback
import types

from peer_io import BenchError, need, SHAPE_KEYS, load_inputs, load_moegen, load_npy
from peer_numerics import dequant_experts, reference, rel_l2, weight_bytes, fmt_of_variant, fp8_weight_bytes
from peer_report import device_facts, triton_kernels_source, humming_version, print_table, fastest_by_class

PEERS = ("triton-dispatched", "triton-allgather", "torch-bf16", "torch-fp8-gemms", "humming-w4a16", "humming-w4a8",
         "moegen-torch-op")


def make_peer(name, ctx):
    if name.startswith("triton-"):
        from peer_triton import TritonPeer
        return TritonPeer(ctx, name.split("-", 1)[1])
    if name == "torch-bf16":
        from peer_torch import TorchBf16Peer
        return TorchBf16Peer(ctx)
    if name == "torch-fp8-gemms":
        from peer_torch import TorchFp8GemmsPeer
        return TorchFp8GemmsPeer(ctx)
    if name == "moegen-torch-op":
        from peer_moegen_op import MoegenTorchOpPeer
        return MoegenTorchOpPeer(ctx)
    from peer_humming import HummingPeer
    return HummingPeer(ctx, name.split("-", 1)[1])


def capture(torch, fn):
    """Eager runs (compilation, workspace), then one CUDA graph of fn()."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    torch.cuda.synchronize()
    return g, out


def time_graph(torch, g, warmup, iters, flush):
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        if flush is not None:
            flush.zero_()
        st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        st.record()
        g.replay()
        en.record()
        en.synchronize()
        times.append(st.elapsed_time(en))
    return statistics.median(times), times


def run_peer_case(torch, peer, x, ids, w, ref, args, flush, N, H):
    """One peer on one case: capture, gate, time. Returns the result record."""
    if peer.lower_bound:
        gate = peer.max_gemm_err
    else:
        gate = args.max_rel_err_a8 if getattr(peer, "a_bits", 16) == 8 else args.max_rel_err
    try:
        fn, check, meta = peer.case(x, ids, w)
        if fn is None:
            return {"status": "skipped", "error": "no local rows on this rank for this case", **meta}
        g, out = capture(torch, fn)
        g.replay()
        torch.cuda.synchronize()
        if not peer.lower_bound and peer.name != "triton-dispatched" and tuple(out.shape) != (N, H):
            raise RuntimeError(f"output {tuple(out.shape)}, expected ({N}, {H})")
        err = check(out, ref)
    except BenchError:
        raise
    except Exception as e:  # a peer that cannot run this case is reported, not hidden
        if args.traceback:
            traceback.print_exc()
        return {"status": "error", "error": f"{type(e).__name__}: {e}".splitlines()[0]}
    rec = {"rel_l2_err": err, "gate": gate, **meta}
    if not math.isfinite(err) or err > gate:
        del g
        return {"status": "fail", **rec}
    ms, times = time_graph(torch, g, args.warmup, args.iters, flush)
    del g
    return {"status": "ok", "ms": ms, "times_ms": times, **rec}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder moe-bench wrote (inputs.json, *.npy, *.npz, moegen.json)")
    ap.add_argument("--iters", type=int, default=20, help="timed graph replays per case (median reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed graph replays before timing")
    ap.add_argument("--max-rel-err", type=float, default=0.05, help="accuracy gate (relative L2 vs fp32 reference)")
    ap.add_argument("--max-rel-err-a8", type=float, default=0.08,
                    help="accuracy gate for peers with FP8 activations (humming-w4a8): x and h each rounded to "
                         "e4m3, about 3.3 %% relative L2 each (bench/README.md)")
    ap.add_argument("--max-rel-err-a4", type=float, default=0.25,
                    help="accuracy gate for moegen variants with NVFP4 activations (name ends in -a4)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma list of peers (default all): {', '.join(PEERS)}")
    ap.add_argument("--moegen-variant", default=None, help="moegen variant the ratios use (default: see README)")
    ap.add_argument("--without-moegen", action="store_true", help="peers-only run when moegen.json is absent")
    ap.add_argument("--flush-l2", action="store_true", help="zero a 256 MiB buffer before each timed replay")
    ap.add_argument("--out", default=None, help="results file (default: DIR/bench_results.json)")
    ap.add_argument("--triton-kernels-source", default=None,
                    help="provenance string of triton_kernels (default: read from .peers/SOURCE.txt)")
    ap.add_argument("--allow-version-mismatch", action="store_true",
                    help="run although triton is not 3.6.0 / torch not 2.11 / humming not 0.1.20 (recorded)")
    ap.add_argument("--traceback", action="store_true", help="print full tracebacks of errors")
    args = ap.parse_args()

    peer_names = [p.strip() for p in args.peers.split(",") if p.strip()]
    need(peer_names and all(p in PEERS for p in peer_names), f"--peers: unknown entry in {args.peers!r} ({PEERS})")
    need(len(set(peer_names)) == len(peer_names), f"--peers: duplicate entry in {args.peers!r}")
    need(args.iters >= 1 and args.warmup >= 0, "--iters must be >= 1 and --warmup >= 0")

    import numpy as np
    import torch
    import triton
    need(torch.cuda.is_available(), "CUDA is not available to torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    versions = {"torch": torch.__version__, "python": sys.version.split()[0], "numpy": np.__version__,
                "triton": triton.__version__}
    need(triton.__version__.split("+")[0] == "3.6.0" or args.allow_version_mismatch,
         f"triton {triton.__version__} is not 3.6.0, the release the triton_kernels copy belongs to "
         "(--allow-version-mismatch to run anyway)")
    need(torch.__version__.startswith("2.11") or args.allow_version_mismatch,
         f"torch {torch.__version__} is not 2.11 (--allow-version-mismatch to run anyway)")
    tk_source = None
    if any(p.startswith("triton-") for p in peer_names):
        tk_source = triton_kernels_source(args.triton_kernels_source)
        versions["triton_kernels"] = tk_source
    if any(p.startswith("humming-") for p in peer_names):
        versions["humming"] = humming_version(args.allow_version_mismatch)

    shape, cases, wts, seed = load_inputs(np, args.dir)
    moegen = load_moegen(args.dir, required=not args.without_moegen)
    H, I, E, L, O, K = (shape[k] for k in SHAPE_KEYS)
    dev = torch.device("cuda", 0)
    device = device_facts(torch)
    print(f"device: {device['name']} (sm_{device['capability'][0]}{device['capability'][1]}, {device['sms']} SMs), "
          f"driver {device['driver']}, CUDA {device['cuda_runtime']}; versions {versions}")
    print(f"shape: H={H} I={I} E={E} local={L} offset={O} top_k={K}; npz keys {wts['keys']}")
    if moegen is not None:
        # Side by side means timed alike: L2 flushed before each replay on both sides or on neither.
        need(bool(moegen.get("flush_l2", False)) == args.flush_l2,
             f"moegen.json was timed with flush_l2={bool(moegen.get('flush_l2', False))}; "
             f"run peers.py {'with' if moegen.get('flush_l2') else 'without'} --flush-l2")
        # A `moe-bench --tactics` sweep times named tactics one by one: ranking its fastest row
        # against the peers would pick the best tactic for each draw after the fact.
        need(not moegen.get("tactics"),
             "moegen.json is a `moe-bench --tactics` sweep, not the layer's dispatch; "
             "rerun moe-bench without --tactics (or pass --without-moegen after removing moegen.json)")
        if moegen.get("device") and str(moegen["device"]) != device["name"]:
            print(f"note: moegen.json was measured on '{moegen['device']}', this is '{device['name']}'")

    primary, variants = None, []
    if moegen is not None:
        variants = sorted({str(r["variant"]) for r in moegen["rows"]})
        if args.moegen_variant is not None:
            need(args.moegen_variant in variants, f"--moegen-variant {args.moegen_variant!r} not in moegen.json {variants}")
            primary = args.moegen_variant
        elif len(variants) == 1:
            primary = variants[0]
        else:
            mx = [v for v in variants if fmt_of_variant(v) == "mxfp4"]
            need(len(mx) == 1, f"moegen.json has variants {variants}; choose one with --moegen-variant")
            primary = mx[0]
        print(f"moegen variants: {variants}; ratios against '{primary}'")

    w1v, w1s = (torch.from_numpy(a).to(dev) for a in wts["w1"])
    w2v, w2s = (torch.from_numpy(a).to(dev) for a in wts["w2"])
    ctx = types.SimpleNamespace(torch=torch, shape=shape, w1v=w1v, w1s=w1s, w2v=w2v, w2s=w2s,
                                max_tokens=max(c["tokens"] for c in cases),
                                W1f=dequant_experts(torch, w1v, w1s, torch.float32),
                                W2f=dequant_experts(torch, w2v, w2s, torch.float32))
    peers = {}
    for name in peer_names:
        peers[name] = make_peer(name, ctx)
        print(f"{name}: {peers[name].info['mode']}; {peers[name].info['engine']}")
    lower_bounds = {n for n, p in peers.items() if p.lower_bound}
    # moegen through its own torch op is moegen, not a peer: never the "fastest peer".
    not_peers = lower_bounds | {n for n, p in peers.items() if getattr(p, "is_moegen", False)}
    classes = {n: "a8" if getattr(p, "a_bits", 16) == 8 else "a16" for n, p in peers.items()}

    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev) if args.flush_l2 else None
    results, any_fail = [], False
    for c in cases:
        N = c["tokens"]
        ids = torch.from_numpy(c["ids"]).to(dev)
        w = torch.from_numpy(c["weights"]).to(dev)
        x = torch.from_numpy(c["x"].view(np.int16)).to(dev).view(torch.bfloat16)
        local = c["ids"].astype(np.int64) - O
        is_local = (local >= 0) & (local < L)
        routes, touched = int(is_local.sum()), int(np.unique(local[is_local]).size)
        flops, act_bytes = 6 * H * I * routes, 2 * N * H * 2 + N * K * 8
        ref = reference(torch, shape, x, ids, w, ctx.W1f, ctx.W2f)
        row = {"tokens": N, "local_routes": routes, "experts_touched": touched, "flop": flops,
               "activation_bytes": act_bytes, "peers": {}}
        for name, peer in peers.items():
            rec = run_peer_case(torch, peer, x, ids, w, ref, args, flush, N, H)
            wb = fp8_weight_bytes(H, I) if peer.weight_format == "fp8" else weight_bytes(peer.weight_format, H, I)
            rec["bytes"] = touched * wb + act_bytes
            if rec["status"] == "ok":
                rec["tflops"] = flops / (rec["ms"] * 1e-3) / 1e12
                rec["gbps"] = rec["bytes"] / (rec["ms"] * 1e-3) / 1e9
            elif rec["status"] in ("error", "fail"):
                any_fail = True
                print(f"tokens {N}: {name} {rec['status'].upper()}: "
                      + (rec.get("error") or f"rel L2 error {rec['rel_l2_err']:.4%} > {rec['gate']:.2%}"))
            row["peers"][name] = rec
        row["fastest_peer"] = fastest_by_class(row, classes, not_peers)
        any_fail |= moegen_rows(torch, np, args, row, moegen, primary, ref, N, H, I, touched, act_bytes, flops, dev)
        results.append(row)

    print_table(results, list(peers), classes, lower_bounds, primary, args.iters, args.warmup)
    doc = {"device": device, "versions": versions, "triton_kernels_source": tk_source,
           "peers": {n: {**p.info, "lower_bound": p.lower_bound, "activation_class": classes[n]}
                     for n, p in peers.items()},
           "shape": shape, "seed": seed, "iters": args.iters, "warmup": args.warmup, "flush_l2": args.flush_l2,
           "max_rel_err": args.max_rel_err, "max_rel_err_a8": args.max_rel_err_a8,
           "moegen_device": None if moegen is None else moegen.get("device"),
           "moegen_variants": variants, "moegen_primary_variant": primary, "npz_keys": wts["keys"],
           "cases": results}
    out_path = args.out or os.path.join(args.dir, "bench_results.json")
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out_path}")
    return 2 if any_fail else 0


def moegen_rows(torch, np, args, row, moegen, primary, ref, N, H, I, touched, act_bytes, flops, dev):
    """moegen's rows for this case: each output (out_<variant>_<N>.npy) gated like a peer's, the
    primary variant's fastest row kept for the table and the ratios. Returns True if one fails."""
    failed = False
    mrows = [] if moegen is None else [dict(r) for r in moegen["rows"] if r["tokens"] == N]
    for r in mrows:
        op = os.path.join(args.dir, f"out_{r['variant']}_{N}.npy")
        if not os.path.exists(op):
            r["output_check"] = "missing"
            continue
        mo = torch.from_numpy(load_npy(np, op, np.uint16, (N, H)).view(np.int16)).to(dev).view(torch.bfloat16)
        merr = rel_l2(torch, mo, ref)
        v = str(r["variant"])
        gate = args.max_rel_err_a4 if v.endswith("-a4") else args.max_rel_err_a8 if v.endswith("-a8") else args.max_rel_err
        r["rel_l2_err"], r["gate"] = merr, gate
        r["output_check"] = "ok" if math.isfinite(merr) and merr <= gate else "fail"
        print(f"tokens {N}: moegen {r['variant']} rel L2 error {merr:.4%} (gate {gate:.0%})")
        if r["output_check"] == "fail":
            failed = True
            print(f"tokens {N}: moegen {r['variant']} FAILS the accuracy gate: rel L2 error {merr:.4%} > {gate:.2%}")
    row["moegen_rows"] = mrows
    # Per activation class, the moegen figure the class's peers are compared with: the primary
    # variant for a16 (and for a8 when moegen.json has no FP8-activation variant), the fastest
    # passing '-a8' variant for a8.
    a8 = [r for r in mrows if str(r["variant"]).endswith("-a8") and r.get("output_check") == "ok"]
    row["moegen_a8"] = None if not a8 else {k: min(a8, key=lambda r: r["ms"])[k] for k in ("variant", "ms", "tactic")}
    prim = [r for r in mrows if str(r["variant"]) == primary]
    row["moegen"] = None
    if prim:
        best = min(prim, key=lambda r: r["ms"])
        fmt = fmt_of_variant(primary)
        mb = None if fmt is None else touched * weight_bytes(fmt, H, I) + act_bytes
        row["moegen"] = {"variant": primary, "ms": best["ms"], "tactic": best.get("tactic"),
                         "rows_for_variant": len(prim), "weight_format": fmt, "bytes": mb,
                         "tflops": flops / (best["ms"] * 1e-3) / 1e12 if best["ms"] > 0 else None,
                         "gbps": None if mb is None or best["ms"] <= 0 else mb / (best["ms"] * 1e-3) / 1e9}
        row["ratio_peer_over_moegen"] = {
            name: (p["ms"] / best["ms"]) if p.get("status") == "ok" and best["ms"] > 0 else None
            for name, p in row["peers"].items()}
    return failed


if __name__ == "__main__":
    tb = "--traceback" in sys.argv
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 - one line, exit 1, as the contract asks
        if tb:
            traceback.print_exc()
        msg = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        sys.exit(1)
