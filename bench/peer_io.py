"""Inputs of the peer benchmark: the folder moe-bench writes (bench/README.md, "The folder contract")."""

import json
import os


class BenchError(Exception):
    """A bad input or environment: reported as one `error: ...` line, exit code 1."""


def need(cond, msg):
    if not cond:
        raise BenchError(msg)


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

