"""torch peers written as an engine writes them, on the rank's compacted local routes.

`torch-bf16`: the local routes sorted by expert (non-local ones last and never computed), one Triton
gather of their rows, `torch._grouped_mm` FC1 (bf16 out), one fused activation pass (Triton,
u * silu(g) in fp32 -> bf16 h), `torch._grouped_mm` FC2, one fused weighted combine (Triton, fp32 sum
of each token's local routes, bf16 out). Static shapes (capacity N*K rows; rows past the local count
are masked by the kernels and skipped by the GEMMs' offsets), no host syncs: one CUDA graph.

`torch-fp8-gemms`: `torch._scaled_grouped_mm` in FP8 e4m3 with rowwise scales, the two grouped GEMMs
ONLY, on the same compacted routes (operands quantized and gathered before timing). No routing, no
activation, no combine: a LOWER BOUND on an FP8 layer, not a layer; checked only for sane GEMM outputs.
"""

import peer_kernels as pk
from peer_io import need
from peer_numerics import rel_l2

E4M3_MAX = 448.0


class TorchBf16Peer:
    name = "torch-bf16"
    weight_format = "bf16"
    lower_bound = False

    def __init__(self, ctx):
        torch = ctx.torch
        need(hasattr(torch, "_grouped_mm"), f"torch {torch.__version__} has no torch._grouped_mm")
        self.torch = torch
        self.H, self.I = ctx.shape["hidden"], ctx.shape["intermediate"]
        self.L, self.O = ctx.shape["local_experts"], ctx.shape["expert_offset"]
        W1b, W2b = ctx.W1f.to(torch.bfloat16), ctx.W2f.to(torch.bfloat16)
        need(torch.equal(W1b.float(), ctx.W1f) and torch.equal(W2b.float(), ctx.W2f), "MXFP4 weights not exact in bf16")
        # B operands as [L, K, N] views of K-contiguous [L, N, K] weights (W1 rows in moegen's order).
        self.w1t, self.w2t = W1b.transpose(1, 2), W2b.transpose(1, 2)
        self.info = {"mode": "compacted local routes (EP rank after dispatch, or all experts local)",
                     "engine": "torch._grouped_mm bf16 x2 + Triton gather / fused u*silu(g) / fused weighted "
                               "combine (bench/peer_kernels.py), as an engine writes the grouped-GEMM MoE path",
                     "weight_format": "bf16 (exact dequantization of the MXFP4 weights)"}

    def layer(self, x, ids, w):
        torch, I, H = self.torch, self.I, self.H
        N, K = ids.shape
        # block 1: the local routes compacted in expert order, pad_end = the grouped GEMMs' offsets
        rt = pk.align_routes(torch, ids, self.O, self.L, 1, with_slots=True)
        n_valid, offs = rt["num_tokens_padded"], rt["pad_end"]
        xs = pk.gather_rows(x, rt["sorted_ids"], K, n_valid, torch.empty(N * K, H, dtype=torch.bfloat16, device=x.device))
        a = torch._grouped_mm(xs, self.w1t, offs=offs)
        h = pk.swiglu(a, n_valid, torch.empty(N * K, I, dtype=torch.bfloat16, device=x.device), pk.LAYOUT_MOEGEN)
        y = torch._grouped_mm(h, self.w2t, offs=offs)
        return pk.weighted_combine(y, w, torch.empty(N, H, dtype=torch.bfloat16, device=x.device), slot=rt["slot"])

    def case(self, x, ids, w):
        torch = self.torch
        return (lambda: self.layer(x, ids, w)), (lambda out, ref: rel_l2(torch, out, ref)), {"rows": x.shape[0]}


def quant_rows(torch, a):
    """Rowwise e4m3: scale = amax / 448 per row (1 for all-zero rows). Returns (q, fp32 scales)."""
    amax = a.float().abs().amax(dim=-1)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (a.float() / scale.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.float().contiguous()


class TorchFp8GemmsPeer:
    name = "torch-fp8-gemms"
    weight_format = "fp8"
    lower_bound = True
    max_gemm_err = 0.10  # sanity bound on each GEMM's output against fp32 (e4m3 rowwise: a few %)

    def __init__(self, ctx):
        torch = ctx.torch
        need(hasattr(torch, "_scaled_grouped_mm"), f"torch {torch.__version__} has no torch._scaled_grouped_mm")
        self.torch, self.ctx = torch, ctx
        self.L, self.O = ctx.shape["local_experts"], ctx.shape["expert_offset"]
        self.I = ctx.shape["intermediate"]
        self.w1q, self.s1 = quant_rows(torch, ctx.W1f)  # [L, 2I, H], [L, 2I]
        self.w2q, self.s2 = quant_rows(torch, ctx.W2f)  # [L, H, I], [L, H]
        self.info = {"mode": "compacted local routes, GEMMs only: LOWER BOUND, not a layer",
                     "engine": "torch._scaled_grouped_mm e4m3 x2, rowwise scales (activations per row, weights "
                               "per output channel), bf16 out; no routing, activation or combine timed",
                     "weight_format": "fp8 e4m3 + fp32 per-row scales (requantized from the dequantized MXFP4)"}

    def case(self, x, ids, w):
        torch, ctx, L, I = self.torch, self.ctx, self.L, self.I
        N, K = ids.shape
        rt = pk.align_routes(torch, ids, self.O, L, 1)
        offs = rt["pad_end"]
        m = int(rt["num_tokens_padded"].item())
        if m == 0:
            return None, None, {"rows": 0}
        tok = rt["sorted_ids"][:m].long() // K
        xs = x.index_select(0, tok)
        xq, xsc = quant_rows(torch, xs)
        # FC2's operand: the fp32 u*silu(g) of the fp32 FC1, per expert (setup, not timed)
        ends = offs.tolist()
        starts = [0] + ends[:-1]
        a_ref = torch.zeros(m, 2 * I, dtype=torch.float32, device=x.device)
        for e in range(L):
            if ends[e] > starts[e]:
                a_ref[starts[e]:ends[e]] = xs[starts[e]:ends[e]].float() @ ctx.W1f[e].t()
        v = a_ref.view(m, I // 64, 2, 64)
        u, g = v[:, :, 0, :].reshape(m, I), v[:, :, 1, :].reshape(m, I)
        h = u * (g * torch.sigmoid(g))
        hq, hsc = quant_rows(torch, h)
        y_ref = torch.zeros(m, ctx.shape["hidden"], dtype=torch.float32, device=x.device)
        for e in range(L):
            if ends[e] > starts[e]:
                y_ref[starts[e]:ends[e]] = h[starts[e]:ends[e]] @ ctx.W2f[e].t()
        w1t, w2t = self.w1q.transpose(1, 2), self.w2q.transpose(1, 2)

        def gemms():
            a = torch._scaled_grouped_mm(xq, w1t, xsc, self.s1, offs=offs, out_dtype=torch.bfloat16)
            y = torch._scaled_grouped_mm(hq, w2t, hsc, self.s2, offs=offs, out_dtype=torch.bfloat16)
            return a, y

        def check(out, ref):
            a, y = out
            return max(rel_l2(torch, a, a_ref), rel_l2(torch, y, y_ref))
        return gemms, check, {"rows": m}
