"""The torch.library ops (imported when torch is installed and first needed):

- ``moegen::fused_moe(Tensor x, Tensor token_selected_experts, Tensor token_final_scales,
  int layer) -> Tensor``
- ``moegen::fused_moe_out(Tensor x, Tensor token_selected_experts, Tensor
  token_final_scales, int layer, Tensor(a!) out) -> ()``

``layer`` is a :class:`moegen.MoeLayer`'s ``id``. On CUDA the kernels are queued on
torch's current stream, reading and writing the tensors in place: the functional op
allocates only its output (torch's caching allocator, so a CUDA graph's pool during
capture), the ``_out`` op nothing; neither waits for the device. CPU tensors run through
moegen's simulator. Both have fake (meta) implementations for torch.compile.
"""

import torch

from . import _arrays
from ._errors import MoegenError
from ._layer import _layers


def _layer(layer_id):
    layer = _layers.get(layer_id)
    if layer is None:
        raise MoegenError(f"moegen layer {layer_id} no longer exists (it was garbage-collected)")
    return layer


def _run_into(layer, x, ids, weights, out):
    native = layer._native
    if x.device.type == "cuda":
        stream = torch.cuda.current_stream(x.device).cuda_stream
        native.forward_device(
            _arrays.device("x", x),
            _arrays.device("token_selected_experts", ids),
            _arrays.device("token_final_scales", weights),
            _arrays.device("moe_output", out),
            stream,
        )
        return
    raw = native.forward_host(
        _arrays.host("x", x),
        _arrays.host("token_selected_experts", ids),
        _arrays.host("token_final_scales", weights),
    )
    host = torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).reshape(out.shape)
    out.copy_(host)


@torch.library.custom_op("moegen::fused_moe", mutates_args=())
def fused_moe(
    x: torch.Tensor,
    token_selected_experts: torch.Tensor,
    token_final_scales: torch.Tensor,
    layer: int,
) -> torch.Tensor:
    """The MoE layer ``layer`` over ``x``: bf16 ``[num_tokens, hidden]``."""
    lay = _layer(layer)
    out = torch.empty((x.shape[0], lay.hidden_size), dtype=torch.bfloat16, device=x.device)
    _run_into(lay, x, token_selected_experts, token_final_scales, out)
    return out


@fused_moe.register_fake
def _fused_moe_fake(x, token_selected_experts, token_final_scales, layer):
    return x.new_empty((x.shape[0], x.shape[1]), dtype=torch.bfloat16)


@torch.library.custom_op("moegen::fused_moe_out", mutates_args=("out",))
def fused_moe_out(
    x: torch.Tensor,
    token_selected_experts: torch.Tensor,
    token_final_scales: torch.Tensor,
    layer: int,
    out: torch.Tensor,
) -> None:
    """The MoE layer ``layer`` over ``x``, written into ``out`` (bf16 ``[num_tokens,
    hidden]``): allocates nothing."""
    _run_into(_layer(layer), x, token_selected_experts, token_final_scales, out)


@fused_moe_out.register_fake
def _fused_moe_out_fake(x, token_selected_experts, token_final_scales, layer, out):
    return None


def run(layer, x, ids, weights, moe_output):
    """``MoeLayer.__call__`` for torch tensors."""
    if moe_output is None:
        return torch.ops.moegen.fused_moe(x, ids, weights, layer.id)
    torch.ops.moegen.fused_moe_out(x, ids, weights, layer.id, moe_output)
    return moe_output
