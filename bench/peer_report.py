"""Facts recorded beside the figures (device, provenance) and the printed table."""

import os
import subprocess

from peer_io import BenchError, need


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


def humming_version(allow_mismatch):
    try:
        import humming
    except ImportError as e:
        raise BenchError(f"humming peers need `humming-kernels` 0.1.20 importable ({e}); see bench/README.md")
    need(humming.__version__.split("+")[0] == "0.1.20" or allow_mismatch,
         f"humming {humming.__version__} is not 0.1.20 (--allow-version-mismatch to run anyway)")
    return humming.__version__


def fastest_by_class(row, classes, lower_bounds):
    """The fastest passing layer peer of each activation class ('a16', 'a8'): {class: {"peer", "ms"}}."""
    best = {}
    for name, p in row["peers"].items():
        if p.get("status") != "ok" or name in lower_bounds:
            continue
        c = classes[name]
        if c not in best or p["ms"] < best[c]["ms"]:
            best[c] = {"peer": name, "ms": p["ms"]}
    return best


def print_table(results, peer_names, classes, lower_bounds, primary, iters, warmup):
    """One row per token count: moegen, every peer, and per activation class the fastest layer peer
    with its ratio to moegen's chosen variant."""
    cols = (["tokens", "routes", "moegen ms", "moegen a8 ms"] + [f"{p} ms" for p in peer_names]
            + ["fastest a16 peer", "a16/moegen", "fastest a8 peer", "a8/moegen"])
    lines = []
    for r in results:
        m = r.get("moegen")
        m8 = r.get("moegen_a8")
        best = r["fastest_peer"]
        cells = []
        for c in ("a16", "a8"):
            b = best.get(c)
            # a8 peers are compared with moegen's FP8-activation variant when it ran.
            mc = m8 if c == "a8" and m8 is not None else m
            cells += ["n/a" if b is None else b["peer"], fmt_num(None if b is None or mc is None else b["ms"] / mc["ms"], 2)]
        lines.append([str(r["tokens"]), str(r["local_routes"]), "n/a" if m is None else f"{m['ms']:.4f}",
                      "n/a" if m8 is None else f"{m8['ms']:.4f}"]
                     + [fmt_ms(r["peers"].get(p)) for p in peer_names] + cells)
    errs = [[str(r["tokens"])] + [fmt_err(r["peers"].get(p)) for p in peer_names] for r in results]
    for head, body in ((cols, lines), (["tokens"] + [f"{p} err" for p in peer_names], errs)):
        widths = [max(len(h), *(len(l[i]) for l in body)) for i, h in enumerate(head)]
        print()
        print(" | ".join(h.rjust(wd) for h, wd in zip(head, widths)))
        print("-+-".join("-" * wd for wd in widths))
        for l in body:
            print(" | ".join(v.rjust(wd) for v, wd in zip(l, widths)))
    lb = ", ".join(sorted(lower_bounds)) or "none"
    print(f"(median of {iters} CUDA-graph replays after {warmup}; a16 / a8 = peers with bf16 / FP8 activations; "
          f"ratio = that class's fastest layer peer ms / moegen ms for '{primary}' (a8: moegen's fastest -a8 variant when run; > 1: moegen faster); LOWER "
          f"BOUNDS, not layers, never 'fastest': {lb}; err = relative L2 error against the fp32 reference "
          "(GEMM outputs for lower bounds))")


def fmt_err(p):
    return "n/a" if p is None or "rel_l2_err" not in p else f"{p['rel_l2_err']:.2%}"
