"""Numerics shared by the peers: exact MXFP4 dequantization, moegen's W1 row order, the fp32
reference the accuracy gate uses, and the byte counts of the table."""

from peer_io import need

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


def fp8_weight_bytes(H, I):
    """One expert's W1 + W2 in e4m3 with one fp32 scale per output row (the FP8 lower bound)."""
    return (2 * I * H + H * I) + 4 * (2 * I + H)
