"""moegen's torch op on a CUDA GPU (the H200 run of docs/python.md): for NVFP4 experts in
FlashInfer's layouts and for gpt-oss's MXFP4 experts,

- the op's output is bit-identical to moegen's CPU reference (the Rust path's bit
  specification; the Hopper kernels match it bit for bit in these finalize modes),
- on a side stream as on the default one (the op runs on torch's current stream),
- CUDA-graph replay equals eager, byte for byte, also after new inputs are copied in,
- ``fused_moe_out`` allocates nothing and ``fused_moe`` only its output,
- torch.compile (fullgraph) gives the same bits, and torch.library.opcheck passes,
- bad inputs raise moegen's exception classes with moegen's messages,
- gpt-oss with ``activations="mxfp8"`` runs SM100's kernels on an SM100 GPU (then like the
  cases above) and is refused on any other (``UnsupportedError`` naming the option and the
  generation, before any upload), and runs on CPU tensors on moegen's SM100 simulator,

and times an eager call against a graph replay. Prints a table, writes
``$OUT/python-torch-op.json`` (or ``--json``), exits 1 when a check fails.

Run from the repository root after installing the wheel (docs/python.md):
    python3 -m pip install --no-deps --no-index .device/moegen-*.whl
    python3 python/tests_gpu/torch_op_h200.py
"""

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from common import GptOssCase, Nvfp4Case  # noqa: E402

import moegen  # noqa: E402

RESULTS = []


def check(case, name, ok, detail=""):
    RESULTS.append({"case": case, "check": name, "ok": bool(ok), "detail": str(detail)})
    print(f"{'PASS' if ok else 'FAIL'}  {case:<34} {name:<44} {detail}", flush=True)


def cuda(a):
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def cuda_args(args):
    # torch.from_numpy keeps a view's strides (FlashInfer's 6-D scale view stays a view).
    return {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
            for k, v in args.items()}


def bits(t):
    return t.detach().view(torch.int16).cpu().numpy()


def routing(rng, tokens, experts, top_k):
    ids = np.stack([rng.permutation(experts)[:top_k] for _ in range(tokens)]).astype(np.int32)
    w = rng.uniform(0.1, 1.0, (tokens, top_k))
    return ids, (w / w.sum(1, keepdims=True)).astype(np.float32)


def inputs(rng, tokens, hidden, experts, top_k):
    x = (rng.integers(-12, 13, (tokens, hidden)) / 8).astype(np.float32)
    ids, w = routing(rng, tokens, experts, top_k)
    return x, ids, w


def run_case(label, layer, token_counts, seed):
    rng = np.random.default_rng(seed)
    h, e, k = layer.hidden_size, layer.num_experts, layer.top_k
    check(label, "built", True, repr(layer))
    for n in token_counts:
        c = f"{label} n={n}"
        x_np, ids_np, w_np = inputs(rng, n, h, e, k)
        x = cuda(x_np).to(torch.bfloat16)
        ids, w = cuda(ids_np), cuda(w_np)
        out = layer(x, ids, w)
        torch.cuda.synchronize()
        layer.check_errors()
        ref = layer.reference(x_np, ids_np, w_np)
        got = out.float().cpu().numpy()
        diff = int(np.sum(got.view(np.uint32) != ref.view(np.uint32)))
        check(c, "eager == CPU reference (bits)", diff == 0,
              f"{diff} of {got.size} differ; tactic {layer.tactic(n)}")
        check(c, "non-trivial output", bool(np.any(got != 0)), f"max |y| {np.abs(got).max():.4g}")

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out_side = layer(x, ids, w)
        side.synchronize()
        check(c, "side stream == eager (bits)", np.array_equal(bits(out_side), bits(out)))

        buf = torch.empty_like(out)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        layer(x, ids, w, moe_output=buf)
        after = torch.cuda.memory_allocated()
        torch.cuda.synchronize()
        check(c, "fused_moe_out allocates nothing", after == before, f"{after - before} B")
        check(c, "fused_moe_out == eager (bits)", np.array_equal(bits(buf), bits(out)))
        before = torch.cuda.memory_allocated()
        kept = layer(x, ids, w)
        grew = torch.cuda.memory_allocated() - before
        check(c, "fused_moe allocates only its output", grew <= -(-kept.numel() * 2 // 512) * 512,
              f"{grew} B for a {kept.numel() * 2} B output")
        del kept

        # CUDA graph: warm up on a side stream (as torch asks), capture, replay.
        sx, sids, sw = x.clone(), ids.clone(), w.clone()
        warm = torch.cuda.Stream()
        warm.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warm):
            for _ in range(2):
                layer(sx, sids, sw)
        torch.cuda.current_stream().wait_stream(warm)
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                gout = layer(sx, sids, sw)
            g.replay()
            torch.cuda.synchronize()
            check(c, "graph replay == eager (bits)", np.array_equal(bits(gout), bits(out)))
            x2_np, ids2_np, w2_np = inputs(rng, n, h, e, k)
            sx.copy_(cuda(x2_np).to(torch.bfloat16))
            sids.copy_(cuda(ids2_np))
            sw.copy_(cuda(w2_np))
            g.replay()
            eager2 = layer(sx, sids, sw)
            torch.cuda.synchronize()
            check(c, "replay on new inputs == eager (bits)", np.array_equal(bits(gout), bits(eager2)))
            # Timing: an eager call (Python dispatch included) against a replay.
            timings = {}
            for what, fn in (("eager_us", lambda: layer(sx, sids, sw, moe_output=buf)),
                             ("graph_replay_us", g.replay)):
                for _ in range(5):
                    fn()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                iters = 200
                start.record()
                for _ in range(iters):
                    fn()
                end.record()
                end.synchronize()
                timings[what] = start.elapsed_time(end) * 1000 / iters
            check(c, "timed", True, f"eager {timings['eager_us']:.1f} us/call, replay "
                  f"{timings['graph_replay_us']:.1f} us/call")
            RESULTS[-1]["timings"] = timings
        except Exception as ex:  # a capture failure is a failed check, with its reason
            check(c, "graph capture", False, f"{type(ex).__name__}: {ex}")

        if n != token_counts[0]:
            continue
        try:
            torch._dynamo.reset()
            lid = layer.id
            compiled = torch.compile(
                lambda a, b, d: torch.ops.moegen.fused_moe(a, b, d, lid), fullgraph=True)
            cout = compiled(x, ids, w)
            torch.cuda.synchronize()
            check(c, "torch.compile(fullgraph) == eager (bits)", np.array_equal(bits(cout), bits(out)))
        except Exception as ex:
            check(c, "torch.compile(fullgraph)", False, f"{type(ex).__name__}: {ex}")

    # Three tokens: with one, a transposed [1, H] view would still count as contiguous.
    n = 3
    x_np, ids_np, w_np = inputs(rng, n, h, e, k)
    x, ids, w = cuda(x_np).to(torch.bfloat16), cuda(ids_np), cuda(w_np)
    try:
        torch.library.opcheck(torch.ops.moegen.fused_moe.default, (x, ids, w, layer.id))
        check(label, "torch.library.opcheck(fused_moe)", True)
    except Exception as ex:
        check(label, "torch.library.opcheck(fused_moe)", False, f"{type(ex).__name__}: {ex}")
    try:
        buf = torch.empty((n, h), dtype=torch.bfloat16, device="cuda")
        torch.library.opcheck(torch.ops.moegen.fused_moe_out.default, (x, ids, w, layer.id, buf))
        check(label, "torch.library.opcheck(fused_moe_out)", True)
    except Exception as ex:
        check(label, "torch.library.opcheck(fused_moe_out)", False, f"{type(ex).__name__}: {ex}")

    def raises(name, cls, pattern, fn):
        try:
            fn()
            torch.cuda.synchronize()
            check(label, name, False, "no exception")
        except cls as ex:
            msg = str(ex)
            check(label, name, pattern in msg, f"{type(ex).__name__}: {msg}")
        except Exception as ex:
            check(label, name, False, f"{type(ex).__name__}: {ex}")

    raises("x float16 -> InputError", moegen.InputError, "x: dtype float16, expected bfloat16",
           lambda: layer(x.half(), ids, w))
    raises("ids int64 -> InputError", moegen.InputError,
           "token_selected_experts: dtype int64, expected int32", lambda: layer(x, ids.long(), w))
    strided = torch.empty((h, n), dtype=torch.bfloat16, device="cuda").t()
    raises("strided x -> InputError", moegen.InputError, "x: not contiguous",
           lambda: layer(strided, ids, w))
    raises("weights on cpu -> InputError", moegen.InputError, "token_final_scales is on cpu",
           lambda: layer(x, ids, w.cpu()))
    big = layer.max_num_tokens + 1
    bx = torch.zeros((big, h), dtype=torch.bfloat16, device="cuda")
    bids = cuda(np.tile(np.arange(k, dtype=np.int32), (big, 1)))
    bw = torch.ones((big, k), dtype=torch.float32, device="cuda")
    raises("too many tokens -> LayerError", moegen.LayerError,
           f"{big} tokens exceed the workspace's planned maximum", lambda: layer(bx, bids, bw))
    bad = ids.clone()
    bad[0, k - 1] = e + 5

    def routed_badly():
        layer(x, bad, w)
        layer.check_errors()

    raises("id out of range -> RoutingError", moegen.RoutingError,
           f"token 0 slot {k - 1} routes to expert {e + 5}", routed_badly)
    out = layer(x, ids, w)
    torch.cuda.synchronize()
    layer.check_errors()
    check(label, "runs after a routing error", True)


def cpu_tensors():
    """The op on CPU tensors (moegen's simulator): the same bits as the CPU reference,
    opcheck, torch.compile."""
    label = "cpu tensors (simulator) nvfp4 H256"
    c = Nvfp4Case(seed=7)
    args = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
            for k, v in c.layer_args().items()}
    layer = moegen.MoeLayer.from_flashinfer_nvfp4(**args, device="cpu", max_num_tokens=16,
                                                  keep_host_weights=True)
    x = torch.from_numpy(c.x).to(torch.bfloat16)
    ids, w = torch.from_numpy(c.ids), torch.from_numpy(c.weights)
    out = layer(x, ids, w)
    ref = layer.reference(c.x, c.ids, c.weights)
    check(label, "op == CPU reference (bits)", np.array_equal(out.float().numpy(), ref))
    try:
        torch.library.opcheck(torch.ops.moegen.fused_moe.default, (x, ids, w, layer.id))
        check(label, "torch.library.opcheck(fused_moe)", True)
    except Exception as ex:
        check(label, "torch.library.opcheck(fused_moe)", False, f"{type(ex).__name__}: {ex}")
    try:
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, b, d: layer(a, b, d), fullgraph=True)
        check(label, "torch.compile(MoeLayer.__call__)", torch.equal(compiled(x, ids, w), out))
    except Exception as ex:
        check(label, "torch.compile(MoeLayer.__call__)", False, f"{type(ex).__name__}: {ex}")


def mxfp8_activations():
    """gpt-oss with ``activations="mxfp8"``: SM100's ``kind::mxf8f6f4`` kernels. On CPU
    tensors moegen's SM100 simulator runs them; a CUDA GPU of another generation refuses the
    layer by name."""
    label = "cpu tensors (simulator) gpt-oss mxfp8"
    c = GptOssCase(seed=9, hidden=128, inter=128)
    args = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
            for k, v in c.layer_args().items()}
    layer = moegen.MoeLayer.from_gpt_oss_mxfp4(**args, device="cpu", max_num_tokens=16,
                                               activations="mxfp8", keep_host_weights=True)
    out = layer(torch.from_numpy(c.x).to(torch.bfloat16), torch.from_numpy(c.ids),
                torch.from_numpy(c.weights))
    ref = layer.reference(c.x, c.ids, c.weights)
    check(label, "op == MXFP8 CPU reference (bits)", np.array_equal(out.float().numpy(), ref),
          f"arch {layer.arch}, activations {layer.activations}")
    label = "gpt-oss mxfp8 H512 I512 E8 k4 det"
    go = GptOssCase(seed=10, hidden=512, inter=512, experts=8, top_k=4, tokens=1)

    def build():
        return moegen.MoeLayer.from_gpt_oss_mxfp4(
            **cuda_args(go.layer_args()), max_num_tokens=256, use_fused_finalize=False,
            activations="mxfp8", keep_host_weights=True)

    if torch.cuda.get_device_capability(0)[0] == 10:
        run_case(label, build(), [1, 16, 200], seed=200)
        return
    try:
        build()
        check(label, "refused off SM100", False, "built")
    except moegen.UnsupportedError as ex:
        want = 'activations="mxfp8" on cuda:0 (sm90)'
        check(label, "refused off SM100 (UnsupportedError)", want in str(ex), str(ex))
    except Exception as ex:
        check(label, "refused off SM100 (UnsupportedError)", False, f"{type(ex).__name__}: {ex}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "python-torch-op.json"))
    ap.add_argument("--quick", action="store_true", help="small shapes only")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, torch {torch.__version__}, moegen {moegen.__version__} "
          f"(cuda built: {moegen.cuda_built})", flush=True)
    t0 = time.time()
    cases = []
    small = Nvfp4Case(seed=7, hidden=512, inter=256, experts=8, top_k=2, tokens=1)
    cases.append(("nvfp4 H512 I256 E8 k2 bulk", lambda: moegen.MoeLayer.from_flashinfer_nvfp4(
        **cuda_args(small.layer_args()), max_num_tokens=512, keep_host_weights=True), [1, 37, 300]))
    det = Nvfp4Case(seed=8, hidden=1024, inter=512, experts=16, top_k=4, tokens=1, offset=4, local=8)
    cases.append(("nvfp4 H1024 I512 E4..12/16 k4 det", lambda: moegen.MoeLayer.from_flashinfer_nvfp4(
        **cuda_args(det.layer_args()), max_num_tokens=256, use_fused_finalize=False,
        keep_host_weights=True), [1, 64, 256]))
    go = GptOssCase(seed=3, hidden=512, inter=512, experts=8, top_k=4, tokens=1)
    cases.append(("gpt-oss mxfp4 H512 I512 E8 k4 det", lambda: moegen.MoeLayer.from_gpt_oss_mxfp4(
        **cuda_args(go.layer_args()), max_num_tokens=256, use_fused_finalize=False,
        keep_host_weights=True), [1, 16, 200]))
    if not args.quick:
        real = GptOssCase(seed=4, hidden=2880, inter=2880, experts=32, top_k=4, tokens=1)
        cases.append(("gpt-oss mxfp4 2880 E32 k4 det", lambda: moegen.MoeLayer.from_gpt_oss_mxfp4(
            **cuda_args(real.layer_args()), max_num_tokens=64, use_fused_finalize=False,
            keep_host_weights=True), [1, 16]))
    try:
        cpu_tensors()
    except Exception as ex:
        check("cpu tensors", "ran", False, f"{type(ex).__name__}: {ex}")
        traceback.print_exc()
    try:
        mxfp8_activations()
    except Exception as ex:
        check("mxfp8 activations", "ran", False, f"{type(ex).__name__}: {ex}")
        traceback.print_exc()
    for i, (label, build, tokens) in enumerate(cases):
        try:
            layer = build()
        except Exception as ex:
            check(label, "built", False, f"{type(ex).__name__}: {ex}")
            traceback.print_exc()
            continue
        try:
            run_case(label, layer, tokens, seed=100 + i)
        except Exception as ex:
            check(label, "ran", False, f"{type(ex).__name__}: {ex}")
            traceback.print_exc()
    failed = [r for r in RESULTS if not r["ok"]]
    summary = {
        "device": props.name,
        "torch": torch.__version__,
        "moegen": moegen.__version__,
        "seconds": round(time.time() - t0, 1),
        "checks": len(RESULTS),
        "failed": len(failed),
        "results": RESULTS,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\n{len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed in "
          f"{summary['seconds']} s; JSON: {args.json}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
