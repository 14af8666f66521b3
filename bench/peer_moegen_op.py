"""`moegen-torch-op`: moegen's layer called through its Python package's torch op
(`torch.ops.moegen.fused_moe_out`, python/ and docs/python.md) in this process, beside the
peers, on the same MXFP4 weights (moegen's W1 row order, as moe-bench writes them) and the
same inputs: bf16 activations (A16), plain SwiGLU, the tactic table from moegen's autotuner
(as moe-bench's default), the output written into a preallocated tensor. Its figure should
match moe-bench's `mxfp4-a16` row: a difference is the op's cost (none inside a graph)."""

from peer_io import BenchError
from peer_numerics import rel_l2


class MoegenTorchOpPeer:
    name = "moegen-torch-op"
    weight_format = "mxfp4"
    lower_bound = False
    # moegen itself: left out of the "fastest peer" columns and ratios.
    is_moegen = True

    def __init__(self, ctx):
        try:
            import moegen
        except ImportError as e:
            raise BenchError(
                "moegen-torch-op needs the moegen wheel built with `cuda` (docs/python.md): "
                f"{e}; or leave the peer out with --peers"
            ) from e
        if not moegen.cuda_built:
            raise BenchError("moegen-torch-op: this moegen wheel was built without `cuda`")
        self.torch = ctx.torch
        s = ctx.shape
        self.H = s["hidden"]
        self.layer = moegen.MoeLayer.from_mxfp4(
            ctx.w1v, ctx.w1s, ctx.w2v, ctx.w2s,
            num_experts=s["experts"], top_k=s["top_k"], local_expert_offset=s["expert_offset"],
            max_num_tokens=ctx.max_tokens, autotune=True,
        )
        self.info = {"mode": "the rank's local experts (moegen's expert window)",
                     "engine": f"moegen {moegen.__version__} Python package: "
                               "torch.ops.moegen.fused_moe_out on torch's current stream",
                     "weight_format": "mxfp4 (moegen's layout)", "activations": "bf16",
                     "tactic_table": "moegen's autotuner"}

    def case(self, x, ids, w):
        torch = self.torch
        N = ids.shape[0]
        out = torch.empty(N, self.H, dtype=torch.bfloat16, device=x.device)

        def layer_fn():
            return self.layer(x, ids, w, moe_output=out)

        return layer_fn, (lambda o, ref: rel_l2(torch, o, ref)), {
            "rows": N, "tactic": self.layer.tactic(N)}
