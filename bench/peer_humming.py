"""Humming peers (PyPI `humming-kernels` 0.1.20, kernels JIT-compiled with NVRTC), run as vLLM runs them
with `--moe-backend humming` and its default indexed GEMM (VLLM_HUMMING_MOE_GEMM_TYPE unset).

Followed (vLLM main):
- vllm/model_executor/layers/quantization/utils/humming_utils.py `prepare_humming_moe_layer` and
  vllm/model_executor/layers/fused_moe/oracle/humming.py `_process_all_sublayers` /
  `_process_single_sublayer`: the checkpoint's MXFP4 tensors converted with the `mxfp4` weight schema
  (w13 as two stacks of I rows, gate then up), `HummingMethod.prepare_layer_meta` with
  pad_n_to_multiple=256, pad_k_to_multiple=128, then `HummingMethod.transform_humming_layer`;
  the input schema from VLLM_HUMMING_INPUT_QUANT_CONFIG (unset: bf16 activations = W4A16;
  {"dtype": "float8e4m3"}: FP8 e4m3 activations, dynamic per-token scales = W4A8).
- vllm/model_executor/layers/fused_moe/experts/fused_humming_moe.py `HummingIndexedExperts.main_apply`:
  valid_shape_m = ceil(N*K * L/E) (`estimate_local_valid_shape_m`), `moe_align_block_size` with the
  block size of the w13 tuning config for that shape (expert_map given, invalid experts ignored),
  may_quant_input + forward_layer(w13, top_k=K), the activation over all N*K rows, may_quant_input +
  forward_layer(w2, top_k=1), then `moe_fused_mul_sum` (router-weighted sum of each token's local rows).

One deliberate difference (issue 20): vLLM aligns the routes once, with GEMM1's block size, and reuses
the alignment for GEMM2, although Humming's w2 tuning config may pick another block size for the same
shape (wrong output or an illegal address at some N). Here GEMM2 gets its own alignment with its own
block size (recorded per case). The activation and the combine are this benchmark's Triton kernels
(bench/peer_kernels.py), as in the torch-bf16 peer, in place of vLLM's silu_and_mul and
moe_fused_mul_sum CUDA ops.
"""

import json
import math

import peer_kernels as pk
from peer_io import need
from peer_numerics import rel_l2

VLLM_FILES = ("vLLM vllm/model_executor/layers/fused_moe/experts/fused_humming_moe.py "
              "(HummingIndexedExperts.main_apply), vllm/model_executor/layers/fused_moe/oracle/humming.py "
              "(_process_all_sublayers), vllm/model_executor/layers/quantization/utils/humming_utils.py "
              "(prepare_humming_moe_layer)")

INPUT_CONFIGS = {"w4a16": {}, "w4a8": {"dtype": "float8e4m3"}}


class HummingPeer:
    weight_format = "mxfp4"
    lower_bound = False

    def __init__(self, ctx, variant):
        need(variant in INPUT_CONFIGS, f"unknown humming variant {variant}")
        import humming
        from humming.config import GemmType
        from humming.layer import HummingMethod
        from humming.schema import BaseWeightSchema, HummingInputSchema

        torch, shape = ctx.torch, ctx.shape
        self.torch, self.name, self.variant = torch, f"humming-{variant}", variant
        H, I = shape["hidden"], shape["intermediate"]
        self.H, self.I, self.L, self.O, self.E = H, I, shape["local_experts"], shape["expert_offset"], shape["experts"]
        self.Method = HummingMethod
        dev = ctx.w1v.device

        # vLLM's w13 is [gate (w1); up (w3)]: moegen's 64-row up/gate blocks are reordered to that.
        j = torch.arange(I, device=dev)
        up = (j // 64) * 128 + j % 64
        perm = torch.cat([up + 64, up])
        layer = torch.nn.Module()
        layer.locks = torch.zeros(2048, dtype=torch.int32, device=dev)
        raw = {"w13": (ctx.w1v.index_select(1, perm), ctx.w1s.index_select(1, perm), [I, I], H),
               "w2": (ctx.w2v, ctx.w2s, [H], I)}
        weight_schema = BaseWeightSchema.from_config({"quant_method": "mxfp4"})
        input_cfg = INPUT_CONFIGS[variant]
        input_schema = HummingInputSchema.from_config(input_cfg) if input_cfg else HummingInputSchema()
        for sub, (v, s, n_stacks, k) in raw.items():
            wschema, tensors = weight_schema.convert_humming(
                tensors={"weight": v.contiguous(), "weight_scale": s.contiguous()}, shape_n_stacks=n_stacks,
                shape_k_stacks=[k], param_dtype=torch.bfloat16, num_experts=self.L)
            ischema, _ = input_schema.convert_humming(
                tensors=tensors, shape_n_stacks=n_stacks, shape_k_stacks=[k], param_dtype=torch.bfloat16,
                num_experts=self.L)
            for name, t in tensors.items():
                setattr(layer, f"{sub}_{name}", torch.nn.Parameter(t, requires_grad=False))
            HummingMethod.prepare_layer_meta(
                layer=layer, shape_n=sum(n_stacks), shape_k=k, weight_schema=wschema, input_schema=ischema,
                num_experts=self.L, pad_n_to_multiple=256, pad_k_to_multiple=128, has_bias=False,
                torch_dtype=torch.bfloat16, sublayer_name=sub)
            HummingMethod.transform_humming_layer(layer, sublayer_name=sub)
        self.layer = layer
        self.a_bits = layer.humming_metas["w13"].a_dtype.num_bits
        self.compute_config = json.dumps({"use_batch_invariant": False, "use_f16_accum": False,
                                          "gemm_type": GemmType.INDEXED.value})
        self.tuning = {sub: HummingMethod.get_default_tuning_configs(
            layer=layer, use_f16_accum=False, use_batch_invariant=False, gemm_type=GemmType.INDEXED,
            sublayer_name=sub) for sub in ("w13", "w2")}
        self.tuning_str = {k: json.dumps(v) for k, v in self.tuning.items()}
        self.info = {"mode": "allgather: every token, non-local routes dropped by the alignment (expert_map)",
                     "engine": VLLM_FILES, "weight_format": "mxfp4",
                     "activations": "bf16" if self.a_bits == 16 else "fp8 e4m3, dynamic per-token scales",
                     "vllm_env": {"VLLM_HUMMING_INPUT_QUANT_CONFIG": input_cfg or None,
                                  "VLLM_HUMMING_MOE_GEMM_TYPE": "indexed (default)"},
                     "humming_version": humming.__version__,
                     "gemm2_alignment": "own (GEMM2's block size), not GEMM1's as vLLM does (issue 20)"}

    def block_size(self, sub, valid_shape_m):
        for lo, hi, cfg in self.tuning[sub]:
            if lo < valid_shape_m <= hi:
                return int(cfg["block_shape"][0])
        raise RuntimeError(f"humming {sub}: no tuning config covers shape_m {valid_shape_m}")

    def case(self, x, ids, w):
        torch, M = self.torch, self.Method
        N, K = ids.shape
        dev = x.device
        valid_shape_m = math.ceil(N * K * self.L / self.E)
        b1, b2 = self.block_size("w13", valid_shape_m), self.block_size("w2", valid_shape_m)
        all_rows = torch.full((1,), N * K, dtype=torch.int32, device=dev)
        # rows of non-local routes are never written; zeroed once so the activation reads finite data
        gate_up = torch.zeros(N * K, 2 * self.I, dtype=torch.bfloat16, device=dev)
        act = torch.zeros(N * K, self.I, dtype=torch.bfloat16, device=dev)
        down = torch.zeros(N * K, self.H, dtype=torch.bfloat16, device=dev)
        out = torch.empty(N, self.H, dtype=torch.bfloat16, device=dev)
        common = {"compute_config": self.compute_config, "valid_shape_m": valid_shape_m}

        def layer_fn():
            r1 = pk.align_routes(torch, ids, self.O, self.L, b1)
            r2 = r1 if b2 == b1 else pk.align_routes(torch, ids, self.O, self.L, b2)
            s1, e1, p1 = r1["sorted_ids"], r1["expert_ids"], r1["num_tokens_padded"]
            s2, e2, p2 = r2["sorted_ids"], r2["expert_ids"], r2["num_tokens_padded"]
            a, a_scale = M.may_quant_input(layer=self.layer, inputs=x, sublayer_name="w13")
            M.forward_layer(layer=self.layer, inputs=a, input_scale=a_scale, outputs=gate_up, sublayer_name="w13",
                            sorted_ids=s1, expert_ids=e1, num_tokens_padded=p1, top_k=K,
                            tuning_config=self.tuning_str["w13"], **common)
            pk.swiglu(gate_up, all_rows, act, pk.LAYOUT_HALVES)
            h, h_scale = M.may_quant_input(layer=self.layer, inputs=act, sublayer_name="w2")
            M.forward_layer(layer=self.layer, inputs=h, input_scale=h_scale, outputs=down, sublayer_name="w2",
                            sorted_ids=s2, expert_ids=e2, num_tokens_padded=p2, top_k=1,
                            tuning_config=self.tuning_str["w2"], **common)
            return pk.weighted_combine(down, w, out, ids=ids, O=self.O, L=self.L)

        return layer_fn, (lambda o, ref: rel_l2(torch, o, ref)), {
            "rows": N, "valid_shape_m": valid_shape_m, "block_m_gemm1": b1, "block_m_gemm2": b2}
