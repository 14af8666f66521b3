"""triton_kernels `matmul_ogs` peers: vLLM's default Hopper MXFP4 MoE path, in the two EP modes engines use.

Followed: vLLM vllm/model_executor/layers/fused_moe/experts/gpt_oss_triton_kernels_moe.py,
`OAITritonExperts.apply` (expert_map applied to topk_ids, so non-local routes become -1;
`make_routing_data`; `triton_kernel_fused_experts`: FC1 `matmul_ogs` with the gather and the activation
fused, FC2 `matmul_ogs` with the router weights (gammas) and the scatter/reduce fused).

- `triton-allgather`: every token of the batch, non-local routes masked with -1 (vLLM's
  allgather/reduce-scatter EP default: each rank runs the whole batch against its local experts).
- `triton-dispatched`: the batch as an all-to-all dispatch (DeepEP-style) leaves it on the rank: only
  tokens with at least one local route, compacted (rows gathered), their non-local slots -1. The
  dispatch and the combine back to token order are communication and are not timed.
"""

import peer_kernels as pk
from peer_io import need
from peer_numerics import up_gate_rows, rel_l2

ENGINE = ("vLLM vllm/model_executor/layers/fused_moe/experts/gpt_oss_triton_kernels_moe.py: "
          "OAITritonExperts.apply -> make_routing_data, triton_kernel_fused_experts (matmul_ogs x2)")


def pad_storage(torch, t, extra):
    """The same strided view, backed by a copy of its storage with `extra` zero bytes after the end.

    triton_kernels' Hopper MXFP4 kernel loads scales in whole BLOCK_K groups; with K = 2880 (90 scale
    columns, not a multiple of 4) the last group of the last row reads past the swizzled scale
    tensor's end (compute-sanitizer memcheck, issue 15). Zeros there make the read in-bounds, and the
    weights those scales multiply are masked, so the result is unchanged."""
    need(t.element_size() == 1, f"scale tensor of {t.dtype}: expected one byte per element")
    nbytes = t.untyped_storage().nbytes()
    buf = torch.zeros(nbytes + extra, dtype=t.dtype, device=t.device)
    buf[:nbytes].copy_(t.as_strided((nbytes,), (1,), 0))
    return buf.as_strided(t.shape, t.stride(), t.storage_offset())


class TritonPeer:
    weight_format = "mxfp4"
    lower_bound = False

    def __init__(self, ctx, mode):
        need(mode in ("allgather", "dispatched"), f"unknown triton mode {mode}")
        from triton_act import moegen_swiglu
        from triton_kernels.matmul_ogs import matmul_ogs, PrecisionConfig, FusedActivation
        from triton_kernels.specialize import FnSpecs
        from triton_kernels.tensor import FP4, convert_layout, wrap_torch_tensor
        from triton_kernels.tensor_details import layout

        torch, shape = ctx.torch, ctx.shape
        self.torch, self.mode, self.name = torch, mode, f"triton-{mode}"
        I, self.L, self.O, self.E = shape["intermediate"], shape["local_experts"], shape["expert_offset"], shape["experts"]
        self.matmul_ogs = matmul_ogs

        # W1 rows reordered from moegen's 64-row up/gate blocks to (gate_j, up_j) pairs: the fused
        # activation reads gate and up from adjacent columns. Values and scales move with their rows.
        up, gate = up_gate_rows(I)
        perm = torch.tensor([r for pair in zip(gate, up) for r in pair], dtype=torch.long, device=ctx.w1v.device)
        w1v, w1s = ctx.w1v.index_select(1, perm), ctx.w1s.index_select(1, perm)

        value_layout, value_opts = layout.make_default_matmul_mxfp4_w_layout(mx_axis=1)
        scale_layout, scale_opts = layout.make_default_matmul_mxfp4_w_scale_layout(mx_axis=1, num_warps=8)

        def to_triton(values, scales):
            # [L, N, K/2] K-contiguous -> the [L, K/2, N] view (stride(-2) == 1) triton_kernels expects.
            wv = convert_layout(wrap_torch_tensor(values.transpose(1, 2), dtype=FP4), value_layout, **value_opts)
            ws = convert_layout(wrap_torch_tensor(scales.transpose(1, 2)), scale_layout, **scale_opts)
            ws.storage.data = pad_storage(torch, ws.storage.data, 1 << 16)
            return wv, ws

        self.w1, w1_scale = to_triton(w1v, w1s)
        self.w2, w2_scale = to_triton(ctx.w2v, ctx.w2s)
        self.pc1 = PrecisionConfig(weight_scale=w1_scale)
        self.pc2 = PrecisionConfig(weight_scale=w2_scale)
        self.act = FusedActivation(FnSpecs("moegen_swiglu", moegen_swiglu, tuple(), reduction_n=2), tuple())
        self.info = {"mode": mode, "engine": ENGINE, "weight_format": "mxfp4",
                     "value_layout": value_layout.__name__, "scale_layout": scale_layout.__name__,
                     "scale_padding_bytes": 1 << 16,
                     "activation": "moegen u*silu(g) fused in FC1's epilogue (bench/triton_act.py)"}

    def routing(self, ids, w):
        """vLLM's make_routing_data for topk_ids already mapped through expert_map (-1 = not local)."""
        from triton_kernels.matmul_ogs import RoutingData, GatherIndx, ScatterIndx
        from triton_kernels.tensor import Bitmatrix, BIT, SparseMatrix, make_ragged_tensor_metadata
        torch, L = self.torch, self.L
        N, K = ids.shape
        indx, store = pk.pack_routes(torch, ids, self.O, L)
        bits = store.t()[:N]
        mask = Bitmatrix(bits.view(torch.uint32), dtype=BIT, shape=[N, L], shape_max=[N, None])
        md = SparseMatrix(indx=indx, vals=w, mask=mask).mask_metadata
        combine, dispatch = md.col_sorted_indx, md.row_sorted_indx
        ragged = make_ragged_tensor_metadata(md.col_sum, N * K)
        gate_scal = w.flatten().index_select(0, combine.clamp(min=0).long())
        # the heuristics hint vLLM passes: routes per expert of the whole model
        rd = RoutingData(gate_scal, ragged.slice_sizes, L, K, ragged, expected_tokens_per_expt=max(1, N * K // self.E))
        return rd, GatherIndx(src_indx=combine, dst_indx=dispatch), ScatterIndx(src_indx=dispatch, dst_indx=combine)

    def layer(self, x, ids, w):
        rd, gi, si = self.routing(ids, w)
        h = self.matmul_ogs(x, self.w1, None, rd, gather_indx=gi, precision_config=self.pc1, fused_activation=self.act)
        return self.matmul_ogs(h, self.w2, None, rd, scatter_indx=si, precision_config=self.pc2, gammas=rd.gate_scal)

    def case(self, x, ids, w):
        torch = self.torch
        N = x.shape[0]
        if self.mode == "allgather":
            return (lambda: self.layer(x, ids, w)), (lambda out, ref: rel_l2(torch, out, ref)), {"rows": N}
        local = ids.long() - self.O
        keep = torch.nonzero(((local >= 0) & (local < self.L)).any(dim=1)).flatten()
        xr, idr, wr = x.index_select(0, keep).contiguous(), ids.index_select(0, keep).contiguous(), \
            w.index_select(0, keep).contiguous()
        rows = int(keep.numel())

        def check(out, ref):
            full = torch.zeros(N, x.shape[1], dtype=torch.bfloat16, device=x.device)
            if rows:
                full.index_copy_(0, keep, out)
            return rel_l2(torch, full, ref)
        if rows == 0:
            return None, None, {"rows": 0}
        return (lambda: self.layer(xr, idr, wr)), check, {"rows": rows}
