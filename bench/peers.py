#!/usr/bin/env python3
"""Peer side of the moegen MoE benchmark (NVIDIA H200).

Runs, on the inputs `moe-bench` wrote into --dir, the MoE layer with
  (a) torch._grouped_mm in bf16 (weights: the exact bf16 dequantization of the MXFP4 weights), and
  (b) triton_kernels' matmul_ogs with the same MXFP4 weights in its Hopper layout,
checks both against an fp32 torch reference, times both with CUDA-graph replay and prints one
table beside moegen's figures from moegen.json. See bench/README.md.

Exit codes: 0 all good; 1 error (one line on stderr); 2 results written but a peer failed the
accuracy check (relative L2 error above --max-rel-err).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import traceback


class BenchError(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise BenchError(msg)


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------

SHAPE_KEYS = ("hidden", "intermediate", "experts", "local_experts", "expert_offset", "top_k")


def load_npy(np, path, dtype, shape):
    need(os.path.isfile(path), f"missing file {path}")
    a = np.load(path, allow_pickle=False)
    need(a.dtype == np.dtype(dtype), f"{path}: dtype {a.dtype}, expected {np.dtype(dtype)}")
    need(tuple(a.shape) == tuple(shape), f"{path}: shape {tuple(a.shape)}, expected {tuple(shape)}")
    return a


def load_mxfp4_npz(np, path, rows, cols, L):
    """Packed e2m1 [L, rows, cols/2] and ue8m0 scales [L, rows, cols/32], both uint8.

    Keys 'values' and 'scales' are used when present; otherwise the npz must hold exactly two
    uint8 arrays, told apart by their shapes."""
    need(os.path.isfile(path), f"missing file {path}")
    z = np.load(path, allow_pickle=False)
    names = list(z.files)
    vshape, sshape = (L, rows, cols // 2), (L, rows, cols // 32)
    if "values" in names and "scales" in names:
        vk, sk = "values", "scales"
    else:
        need(len(names) == 2, f"{path}: expected keys 'values' and 'scales' (or exactly two arrays), found {names}")
        by_shape = {tuple(z[n].shape): n for n in names}
        need(vshape in by_shape and sshape in by_shape,
             f"{path}: arrays {[(n, tuple(z[n].shape)) for n in names]} do not match values {vshape} / scales {sshape}")
        vk, sk = by_shape[vshape], by_shape[sshape]
    v, s = z[vk], z[sk]
    need(v.dtype == np.uint8 and s.dtype == np.uint8, f"{path}: values/scales must be uint8, got {v.dtype}/{s.dtype}")
    need(tuple(v.shape) == vshape, f"{path}: '{vk}' shape {tuple(v.shape)}, expected {vshape}")
    need(tuple(s.shape) == sshape, f"{path}: '{sk}' shape {tuple(s.shape)}, expected {sshape}")
    need(not (s == 0xFF).any(), f"{path}: scale code 0xFF (NaN in ue8m0)")
    return np.ascontiguousarray(v), np.ascontiguousarray(s), (vk, sk)


def load_inputs(np, d):
    p = os.path.join(d, "inputs.json")
    need(os.path.isfile(p), f"missing {p}")
    with open(p) as f:
        spec = json.load(f)
    need(isinstance(spec.get("shape"), dict), "inputs.json: no 'shape' object")
    shape = {}
    for k in SHAPE_KEYS:
        v = spec["shape"].get(k)
        need(isinstance(v, int) and not isinstance(v, bool), f"inputs.json: shape.{k} must be an integer, got {v!r}")
        shape[k] = v
    H, I, E, L, O, K = (shape[k] for k in SHAPE_KEYS)
    need(H > 0 and I > 0 and E > 0 and L > 0 and K > 0 and O >= 0, f"inputs.json: bad shape {shape}")
    need(O + L <= E, f"inputs.json: expert_offset + local_experts = {O + L} > experts = {E}")
    need(K <= E, f"inputs.json: top_k {K} > experts {E}")
    need(H % 32 == 0 and I % 64 == 0, f"inputs.json: need hidden % 32 == 0 and intermediate % 64 == 0, got {H}, {I}")
    need(isinstance(spec.get("cases"), list) and spec["cases"], "inputs.json: 'cases' must be a non-empty list")
    cases = []
    for c in spec["cases"]:
        N = c.get("tokens")
        need(isinstance(N, int) and N > 0, f"inputs.json: bad case {c}")
        for key in ("ids", "weights", "x"):
            need(isinstance(c.get(key), str), f"inputs.json: case tokens={N} lacks '{key}'")
        ids = load_npy(np, os.path.join(d, c["ids"]), np.int32, (N, K))
        w = load_npy(np, os.path.join(d, c["weights"]), np.float32, (N, K))
        x = load_npy(np, os.path.join(d, c["x"]), np.uint16, (N, H))
        need(((ids >= 0) & (ids < E)).all(), f"{c['ids']}: expert id outside [0, {E})")
        if K > 1:
            srt = np.sort(ids, axis=1)
            need((srt[:, 1:] != srt[:, :-1]).all(), f"{c['ids']}: a token routes twice to one expert")
        need(np.isfinite(w).all(), f"{c['weights']}: non-finite router weight")
        xe = (x >> 7) & 0xFF
        need(not (xe == 0xFF).any(), f"{c['x']}: inf/NaN activation")
        cases.append({"tokens": N, "ids": ids, "weights": w, "x": x, "files": {k: c[k] for k in ("ids", "weights", "x")}})
    w1v, w1s, k1 = load_mxfp4_npz(np, os.path.join(d, "w1_mxfp4.npz"), 2 * I, H, L)
    w2v, w2s, k2 = load_mxfp4_npz(np, os.path.join(d, "w2_mxfp4.npz"), H, I, L)
    weights = {"w1": (w1v, w1s), "w2": (w2v, w2s), "keys": {"w1_mxfp4.npz": k1, "w2_mxfp4.npz": k2}}
    return shape, cases, weights, spec.get("seed")


def load_moegen(d, required):
    p = os.path.join(d, "moegen.json")
    if not os.path.isfile(p):
        need(not required, f"missing {p} (run moe-bench first, or pass --without-moegen for a peers-only run)")
        return None
    with open(p) as f:
        m = json.load(f)
    need(isinstance(m.get("rows"), list), "moegen.json: no 'rows' list")
    for r in m["rows"]:
        need(isinstance(r.get("tokens"), int) and isinstance(r.get("ms"), (int, float)),
             f"moegen.json: row lacks integer 'tokens' / numeric 'ms': {r}")
        need("variant" in r, f"moegen.json: row lacks 'variant': {r}")
    return m


# --------------------------------------------------------------------------------------------
# numerics shared by the peers
# --------------------------------------------------------------------------------------------

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequant_mxfp4(torch, values, scales, dtype):
    """Exact e2m1 * 2^(code-127) for packed [.., R, C/2] / scales [.., R, C/32] -> [.., R, C] in `dtype`.

    Element 2i sits in the low nibble (moegen's and OCP's packing)."""
    lut = torch.tensor(E2M1, dtype=torch.float64, device=values.device)
    lo = (values & 0xF).long()
    hi = (values >> 4).long()
    codes = torch.stack((lo, hi), dim=-1).flatten(-2)
    v = lut[codes]
    s = torch.exp2(scales.double() - 127.0)
    v = (v.unflatten(-1, (-1, 32)) * s.unsqueeze(-1)).flatten(-2)
    out = v.to(dtype)
    need(torch.equal(out.double(), v), f"MXFP4 weight not exactly representable in {dtype}")
    return out


def dequant_experts(torch, values, scales, dtype):
    return torch.stack([dequant_mxfp4(torch, values[e], scales[e], dtype) for e in range(values.shape[0])])


def up_gate_rows(I):
    """moegen's W1 row order: for block b of 64 outputs, rows 128b..128b+63 are `up`, the next 64 `gate`."""
    j = list(range(I))
    up = [(i // 64) * 128 + i % 64 for i in j]
    gate = [u + 64 for u in up]
    return up, gate


def reference(torch, shape, x, ids, w, W1f, W2f):
    """fp32 layer on the local routes: out = sum w * W2 (u * silu(g)), u/g = W1 x (moegen interleave)."""
    H, I, L, O = shape["hidden"], shape["intermediate"], shape["local_experts"], shape["expert_offset"]
    N = x.shape[0]
    xf = x.float()
    out = torch.zeros(N, H, dtype=torch.float32, device=x.device)
    local = ids.long() - O
    for e in range(L):
        tok, slot = torch.nonzero(local == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        a = xf.index_select(0, tok) @ W1f[e].t()
        a = a.view(-1, I // 64, 2, 64)
        u, g = a[:, :, 0, :].reshape(-1, I), a[:, :, 1, :].reshape(-1, I)
        h = u * (g * torch.sigmoid(g))
        y = h @ W2f[e].t()
        out.index_add_(0, tok, y * w[tok, slot].unsqueeze(1))
    return out


def rel_l2(torch, out, ref):
    num = torch.linalg.vector_norm((out.double() - ref.double()).flatten())
    den = torch.linalg.vector_norm(ref.double().flatten())
    if den.item() == 0.0:
        return 0.0 if num.item() == 0.0 else float("inf")
    return (num / den).item()


# --------------------------------------------------------------------------------------------
# peer (a): torch._grouped_mm, bf16
# --------------------------------------------------------------------------------------------

class TorchGroupedMM:
    name = "torch_bf16"

    def __init__(self, torch, shape, W1b, W2b):
        need(hasattr(torch, "_grouped_mm"), f"torch {torch.__version__} has no torch._grouped_mm")
        self.torch = torch
        self.H, self.I = shape["hidden"], shape["intermediate"]
        self.L, self.O = shape["local_experts"], shape["expert_offset"]
        # B operands as [L, K, N] views of the K-contiguous [L, N, K] weights.
        self.w1t = W1b.transpose(1, 2)
        self.w2t = W2b.transpose(1, 2)
        self.experts = torch.arange(self.L, device=W1b.device)

    def __call__(self, x, ids, w):
        torch, L, I = self.torch, self.L, self.I
        N, K = ids.shape
        local = ids.long() - self.O
        valid = (local >= 0) & (local < L)
        key = torch.where(valid, local, L).flatten()
        skey, order = torch.sort(key, stable=True)
        offs = torch.searchsorted(skey, self.experts, right=True).to(torch.int32)
        token = order // K
        xs = x.index_select(0, token)
        a = torch._grouped_mm(xs, self.w1t, offs=offs)
        a = a.view(N * K, I // 64, 2, 64).float()
        h = (a[:, :, 0, :] * torch.nn.functional.silu(a[:, :, 1, :])).reshape(N * K, I).to(torch.bfloat16)
        y = torch._grouped_mm(h, self.w2t, offs=offs)
        ws = w.flatten().index_select(0, order)
        contrib = torch.where((skey < L).unsqueeze(1), y.float() * ws.unsqueeze(1), 0.0)
        out = torch.zeros(N, self.H, dtype=torch.float32, device=x.device)
        out.index_add_(0, token, contrib)
        return out.to(torch.bfloat16)


# --------------------------------------------------------------------------------------------
# peer (b): triton_kernels matmul_ogs, MXFP4 weights (Hopper layout), bf16 activations
# --------------------------------------------------------------------------------------------

def make_triton_peer(torch, shape, w1v, w1s, w2v, w2s, expected_tokens_per_expt):
    from triton_act import moegen_swiglu
    from triton_kernels.matmul_ogs import (matmul_ogs, PrecisionConfig, FusedActivation, RoutingData, GatherIndx,
                                           ScatterIndx)
    from triton_kernels.specialize import FnSpecs
    from triton_kernels.tensor import (Bitmatrix, BIT, FP4, SparseMatrix, convert_layout, wrap_torch_tensor,
                                       make_ragged_tensor_metadata)
    from triton_kernels.tensor_details import layout

    I, L, O = shape["intermediate"], shape["local_experts"], shape["expert_offset"]

    # W1 rows reordered from moegen's 64-row up/gate blocks to (gate_j, up_j) pairs; scales move with rows.
    up, gate = up_gate_rows(I)
    perm = torch.tensor([r for pair in zip(gate, up) for r in pair], dtype=torch.long, device=w1v.device)
    w1v_p, w1s_p = w1v.index_select(1, perm), w1s.index_select(1, perm)

    value_layout, value_opts = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
    scale_layout, scale_opts = layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=8)

    def to_triton(values, scales):
        # [L, N, K/2] K-contiguous -> the [L, K/2, N] view (stride(-2) == 1) triton_kernels quantizes into.
        wv = wrap_torch_tensor(values.transpose(1, 2), dtype=FP4)
        ws = wrap_torch_tensor(scales.transpose(1, 2))
        return convert_layout(wv, value_layout, **value_opts), convert_layout(ws, scale_layout, **scale_opts)

    w1, w1_scale = to_triton(w1v_p, w1s_p)
    w2, w2_scale = to_triton(w2v, w2s)
    pc1 = PrecisionConfig(weight_scale=w1_scale)
    pc2 = PrecisionConfig(weight_scale=w2_scale)
    act = FusedActivation(FnSpecs("moegen_swiglu", moegen_swiglu, tuple(), reduction_n=2), tuple())
    words = (L + 31) // 32

    def routing(ids, w):
        N, K = ids.shape
        local = ids.long() - O
        valid = (local >= 0) & (local < L)
        indx = torch.where(valid, local, -1).to(torch.int16)
        # bitmatrix [N, L] (bit e of row n: token n routes to local expert e), stored transposed as
        # triton_kernels' topk stores it; ids are distinct per token, so the sum of bits is their OR.
        word = torch.where(valid, local // 32, 0)
        bit = torch.where(valid, torch.ones_like(local) << (local % 32), 0)
        acc = torch.zeros(N, words, dtype=torch.int64, device=ids.device).scatter_add_(1, word, bit)
        acc = torch.where(acc >= 2**31, acc - 2**32, acc).to(torch.int32)
        store = torch.empty(words, (N + 31) // 32 * 32, dtype=torch.int32, device=ids.device)
        bits = store.t()[:N]
        bits.copy_(acc)
        mask = Bitmatrix(bits.view(torch.uint32), dtype=BIT, shape=[N, L], shape_max=[N, None])
        sparse = SparseMatrix(indx=indx, vals=w, mask=mask)
        md = sparse.mask_metadata
        combine, dispatch = md.col_sorted_indx, md.row_sorted_indx
        ragged = make_ragged_tensor_metadata(md.col_sum, N * K)
        gate_scal = w.flatten().index_select(0, combine.clamp(min=0).long())
        rd = RoutingData(gate_scal, ragged.slice_sizes, L, K, ragged,
                         expected_tokens_per_expt=expected_tokens_per_expt(N, K))
        return rd, GatherIndx(src_indx=combine, dst_indx=dispatch), ScatterIndx(src_indx=dispatch, dst_indx=combine)

    def run(x, ids, w):
        rd, gi, si = routing(ids, w)
        h = matmul_ogs(x, w1, None, rd, gather_indx=gi, precision_config=pc1, fused_activation=act)
        return matmul_ogs(h, w2, None, rd, scatter_indx=si, precision_config=pc2, gammas=rd.gate_scal)

    info = {"value_layout": value_layout.__name__, "scale_layout": scale_layout.__name__,
            "scale_layout_opts": {k: v for k, v in scale_opts.items()}}
    return run, info


# --------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------

def capture(torch, fn, args):
    """Eager runs (compilation, workspace), then one CUDA graph of fn(*args)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*args)
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


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------

def weight_bytes(fmt, H, I):
    """Bytes of one expert's W1 [2I, H] + W2 [H, I]."""
    n = 2 * I * H + H * I
    if fmt == "bf16":
        return 2 * n
    if fmt == "mxfp4":
        return n // 2 + n // 32
    if fmt == "nvfp4":
        return n // 2 + n // 16
    return None


def fmt_of_variant(v):
    v = str(v).lower()
    return "mxfp4" if "mxfp4" in v else "nvfp4" if "nvfp4" in v else None


def device_facts(torch):
    props = torch.cuda.get_device_properties(0)
    driver = "unknown (nvidia-smi not found)"
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            driver = r.stdout.strip().splitlines()[0]
        else:
            driver = f"unknown (nvidia-smi exit {r.returncode})"
    except (OSError, subprocess.TimeoutExpired) as e:
        driver = f"unknown ({type(e).__name__})"
    return {"name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "sms": props.multi_processor_count, "memory_gib": round(props.total_memory / 2**30, 1),
            "driver": driver, "cuda_runtime": torch.version.cuda}


def triton_kernels_source(explicit):
    if explicit:
        return explicit
    import triton_kernels
    pkg = os.path.dirname(os.path.abspath(triton_kernels.__file__))
    src = os.path.join(os.path.dirname(os.path.dirname(pkg)), "SOURCE.txt")
    need(os.path.isfile(src), f"no {src} next to the triton_kernels copy ({pkg}); pass --triton-kernels-source")
    with open(src) as f:
        for line in f:
            if line.startswith("commit"):
                return "triton " + line.split(":", 1)[1].strip() + f" (python/triton_kernels; see {src})"
    raise BenchError(f"{src}: no 'commit' line")


def fmt_ms(r):
    if r is None:
        return "n/a"
    if r.get("status") != "ok":
        return r.get("status", "?").upper()
    return f"{r['ms']:.4f}"


def fmt_num(v, digits):
    return "n/a" if v is None else f"{v:.{digits}f}"


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder moe-bench wrote (inputs.json, *.npy, *.npz, moegen.json)")
    ap.add_argument("--iters", type=int, default=20, help="timed graph replays per case (median reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed graph replays before timing")
    ap.add_argument("--max-rel-err", type=float, default=0.05, help="accuracy gate (relative L2 vs fp32 reference)")
    ap.add_argument("--max-rel-err-a4", type=float, default=0.25,
                    help="accuracy gate for moegen variants with NVFP4 activations (name ends in -a4): x and h are "
                         "quantized to 4 bits, which alone costs about 10 %% relative L2 each")
    ap.add_argument("--peers", default="torch,triton", help="comma list of peers to run: torch, triton")
    ap.add_argument("--moegen-variant", default=None, help="moegen variant the ratios use (default: see README)")
    ap.add_argument("--without-moegen", action="store_true", help="peers-only run when moegen.json is absent")
    ap.add_argument("--flush-l2", action="store_true", help="zero a 256 MiB buffer before each timed replay")
    ap.add_argument("--out", default=None, help="results file (default: DIR/bench_results.json)")
    ap.add_argument("--triton-kernels-source", default=None,
                    help="provenance string of triton_kernels (default: read from .peers/SOURCE.txt)")
    ap.add_argument("--allow-version-mismatch", action="store_true",
                    help="run although triton is not 3.6.0 / torch not 2.11 (recorded in the results)")
    ap.add_argument("--traceback", action="store_true", help="print the full traceback on error")
    args = ap.parse_args()

    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    need(peers and all(p in ("torch", "triton") for p in peers), f"--peers: unknown entry in {args.peers!r}")
    need(args.iters >= 1 and args.warmup >= 0, "--iters must be >= 1 and --warmup >= 0")

    import numpy as np
    import torch
    need(torch.cuda.is_available(), "CUDA is not available to torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    versions = {"torch": torch.__version__, "python": sys.version.split()[0], "numpy": np.__version__}
    tk_source = None
    if "triton" in peers:
        import triton
        versions["triton"] = triton.__version__
        tk_source = triton_kernels_source(args.triton_kernels_source)
        ok = triton.__version__.split("+")[0] == "3.6.0"
        need(ok or args.allow_version_mismatch,
             f"triton {triton.__version__} is not 3.6.0, the release this triton_kernels copy belongs to "
             "(--allow-version-mismatch to run anyway)")
    need(torch.__version__.startswith("2.11") or args.allow_version_mismatch,
         f"torch {torch.__version__} is not 2.11 (--allow-version-mismatch to run anyway)")

    shape, cases, wts, seed = load_inputs(np, args.dir)
    moegen = load_moegen(args.dir, required=not args.without_moegen)
    H, I, E, L, O, K = (shape[k] for k in SHAPE_KEYS)
    dev = torch.device("cuda", 0)
    device = device_facts(torch)
    print(f"device: {device['name']} (sm_{device['capability'][0]}{device['capability'][1]}, {device['sms']} SMs), "
          f"driver {device['driver']}, CUDA {device['cuda_runtime']}; torch {versions['torch']}"
          + (f", triton {versions['triton']}" if "triton" in versions else ""))
    print(f"shape: H={H} I={I} E={E} local={L} offset={O} top_k={K}; npz keys {wts['keys']}")
    if moegen is not None:
        # Side by side means timed alike: L2 flushed before each replay on both sides or on neither.
        need(bool(moegen.get("flush_l2", False)) == args.flush_l2,
             f"moegen.json was timed with flush_l2={bool(moegen.get('flush_l2', False))}; "
             f"run peers.py {'with' if moegen.get('flush_l2') else 'without'} --flush-l2")
    if moegen is not None and moegen.get("device") and str(moegen["device"]) != device["name"]:
        print(f"note: moegen.json was measured on '{moegen['device']}', this is '{device['name']}'")

    # moegen variant used for the ratios
    primary = None
    variants = []
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

    # weights on the device
    w1v = torch.from_numpy(wts["w1"][0]).to(dev)
    w1s = torch.from_numpy(wts["w1"][1]).to(dev)
    w2v = torch.from_numpy(wts["w2"][0]).to(dev)
    w2s = torch.from_numpy(wts["w2"][1]).to(dev)
    W1f = dequant_experts(torch, w1v, w1s, torch.float32)
    W2f = dequant_experts(torch, w2v, w2s, torch.float32)

    impls = {}
    triton_info = None
    if "torch" in peers:
        W1b, W2b = W1f.to(torch.bfloat16), W2f.to(torch.bfloat16)
        need(torch.equal(W1b.float(), W1f) and torch.equal(W2b.float(), W2f), "MXFP4 weights not exact in bf16")
        impls["torch_bf16"] = TorchGroupedMM(torch, shape, W1b, W2b)
        del W1b, W2b
    if "triton" in peers:
        run, triton_info = make_triton_peer(torch, shape, w1v, w1s, w2v, w2s,
                                            lambda n, k: max(1, (n * k) // E))
        impls["triton_mxfp4"] = run
        print(f"triton_kernels: {tk_source}; layouts {triton_info['value_layout']} / {triton_info['scale_layout']}")

    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device=dev) if args.flush_l2 else None
    results = []
    any_fail = False
    for c in cases:
        N = c["tokens"]
        ids = torch.from_numpy(c["ids"]).to(dev)
        w = torch.from_numpy(c["weights"]).to(dev)
        x = torch.from_numpy(c["x"].view(np.int16)).to(dev).view(torch.bfloat16)
        local = c["ids"].astype(np.int64) - O
        is_local = (local >= 0) & (local < L)
        routes = int(is_local.sum())
        touched = int(np.unique(local[is_local]).size)
        flops = 6 * H * I * routes
        act_bytes = 2 * N * H * 2 + N * K * 8
        ref = reference(torch, shape, x, ids, w, W1f, W2f)
        row = {"tokens": N, "local_routes": routes, "experts_touched": touched, "flop": flops,
               "activation_bytes": act_bytes, "peers": {}}
        for name, fn in impls.items():
            fmt = "bf16" if name == "torch_bf16" else "mxfp4"
            nbytes = touched * weight_bytes(fmt, H, I) + act_bytes
            try:
                g, out = capture(torch, fn, (x, ids, w))
                g.replay()
                torch.cuda.synchronize()
                need(tuple(out.shape) == (N, H) and out.dtype == torch.bfloat16,
                     f"{name}: output {tuple(out.shape)} {out.dtype}, expected ({N}, {H}) bfloat16")
                err = rel_l2(torch, out, ref)
            except BenchError:
                raise
            except Exception as e:  # a peer that cannot run this case is reported, not hidden
                row["peers"][name] = {"status": "error", "error": f"{type(e).__name__}: {e}".splitlines()[0]}
                any_fail = True
                print(f"tokens {N}: {name} failed: {row['peers'][name]['error']}")
                continue
            if not math.isfinite(err) or err > args.max_rel_err:
                row["peers"][name] = {"status": "fail", "rel_l2_err": err, "weight_format": fmt}
                any_fail = True
                print(f"tokens {N}: {name} FAILS the accuracy gate: rel L2 error {err:.4%} > {args.max_rel_err:.2%}")
                del g
                continue
            ms, times = time_graph(torch, g, args.warmup, args.iters, flush)
            row["peers"][name] = {"status": "ok", "ms": ms, "times_ms": times, "rel_l2_err": err, "weight_format": fmt,
                                  "bytes": nbytes, "tflops": flops / (ms * 1e-3) / 1e12,
                                  "gbps": nbytes / (ms * 1e-3) / 1e9}
            del g
        mrows = [] if moegen is None else [dict(r) for r in moegen["rows"] if r["tokens"] == N]
        # moegen's own output for the case (moe-bench writes out_<variant>_<N>.npy): gated like a peer.
        for r in mrows:
            op = os.path.join(args.dir, f"out_{r['variant']}_{N}.npy")
            if not os.path.exists(op):
                r["output_check"] = "missing"
                continue
            mo = torch.from_numpy(load_npy(np, op, np.uint16, (N, H)).view(np.int16)).to(dev).view(torch.bfloat16)
            merr = rel_l2(torch, mo, ref)
            gate = args.max_rel_err_a4 if str(r["variant"]).endswith("-a4") else args.max_rel_err
            r["rel_l2_err"], r["gate"] = merr, gate
            r["output_check"] = "ok" if math.isfinite(merr) and merr <= gate else "fail"
            print(f"tokens {N}: moegen {r['variant']} rel L2 error {merr:.4%} (gate {gate:.0%})")
            if r["output_check"] == "fail":
                any_fail = True
                print(f"tokens {N}: moegen {r['variant']} FAILS the accuracy gate: rel L2 error {merr:.4%} > {gate:.2%}")
        row["moegen_rows"] = mrows
        prim = [r for r in mrows if str(r["variant"]) == primary]
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
        else:
            row["moegen"] = None
        results.append(row)

    # table
    cols = ["tokens", "routes", "moegen ms", "torch bf16 ms", "triton MXFP4 ms", "torch/moegen", "triton/moegen",
            "TFLOP/s m|t|tr", "GB/s m|t|tr", "rel err t|tr"]
    lines = []
    for r in results:
        pt, px, m = r["peers"].get("torch_bf16"), r["peers"].get("triton_mxfp4"), r.get("moegen")
        rat = r.get("ratio_peer_over_moegen", {})
        get = lambda p, k: None if p is None or p.get("status") != "ok" else p.get(k)
        err = lambda p: "n/a" if p is None or "rel_l2_err" not in p else f"{p['rel_l2_err']:.2%}"
        lines.append([
            str(r["tokens"]), str(r["local_routes"]),
            "n/a" if m is None else f"{m['ms']:.4f}", fmt_ms(pt), fmt_ms(px),
            fmt_num(rat.get("torch_bf16"), 2), fmt_num(rat.get("triton_mxfp4"), 2),
            "|".join([fmt_num(None if m is None else m["tflops"], 1), fmt_num(get(pt, "tflops"), 1),
                      fmt_num(get(px, "tflops"), 1)]),
            "|".join([fmt_num(None if m is None else m["gbps"], 0), fmt_num(get(pt, "gbps"), 0),
                      fmt_num(get(px, "gbps"), 0)]),
            f"{err(pt)}|{err(px)}"])
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(cols)]
    print()
    print(" | ".join(h.rjust(wd) for h, wd in zip(cols, widths)))
    print("-+-".join("-" * wd for wd in widths))
    for l in lines:
        print(" | ".join(v.rjust(wd) for v, wd in zip(l, widths)))
    print(f"(median of {args.iters} CUDA-graph replays after {args.warmup}; ratios are peer ms / moegen ms for "
          f"'{primary}'; m = moegen, t = torch bf16, tr = triton MXFP4; useful work 6*H*I*routes; "
          "GB/s = touched experts' weight bytes in each format + x, out, ids, router weights)")

    doc = {"device": device, "versions": versions, "triton_kernels_source": tk_source, "triton_layouts": triton_info,
           "shape": shape, "seed": seed, "iters": args.iters, "warmup": args.warmup, "flush_l2": args.flush_l2,
           "max_rel_err": args.max_rel_err, "moegen_device": None if moegen is None else moegen.get("device"),
           "moegen_variants": variants, "moegen_primary_variant": primary, "npz_keys": wts["keys"],
           "cases": results}
    out_path = args.out or os.path.join(args.dir, "bench_results.json")
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out_path}")
    return 2 if any_fail else 0


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
