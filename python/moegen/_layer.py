"""`moegen.MoeLayer`: one MoE layer's experts, uploaded once; passes over torch tensors
(through the `moegen::fused_moe` op) or host arrays (moegen's simulator)."""

import itertools
import weakref

from . import _arrays
from ._errors import InputError
from ._native import Layer as _NativeLayer

# Layers by id, for the torch op (a torch.library op takes the layer as an int).
_layers = weakref.WeakValueDictionary()
_ids = itertools.count(1)

# gpt-oss's clamped SwiGLU (alpha, beta, limit).
GPT_OSS_SWIGLU = (1.702, 1.0, 7.0)


def _dim(name, a, axis, rank):
    shape = tuple(a.shape)
    if len(shape) != rank:
        raise InputError(f"{name}: shape {list(shape)}, expected rank {rank}")
    return int(shape[axis])


def _count(name, v):
    """A non-negative integer argument (moegen's planner refuses the zeros it cannot use)."""
    n = int(v)
    if n < 0:
        raise InputError(f"{name}: {n} is negative")
    return n


def _scalar(name, v):
    if hasattr(v, "reshape"):
        flat = v.reshape(-1)
        if flat.shape[0] != 1:
            raise InputError(f"{name}: shape {list(v.shape)}, expected one element")
        v = flat[0]
        v = v.item() if hasattr(v, "item") else v
    return float(v)


def _mma_scales(name, sf):
    """FlashInfer's block scales as moegen takes them: their bytes in storage order.
    `convert_sf_to_mma_layout` returns a strided 6-D view `(32, 4, m_tiles, 4, k_tiles,
    experts)` of storage ordered `(experts, m_tiles, k_tiles, 32, 4, 4)`, which is the 128x4
    layout per expert; a tensor of any other rank must already be dense in that order."""
    if len(sf.shape) == 6:
        sf = sf.permute(5, 2, 4, 0, 1, 3) if _arrays.is_torch(sf) else sf.transpose(5, 2, 4, 0, 1, 3)
    return _arrays.host(name, sf)


def _default_device(t):
    return _arrays.device_name(t.device) if _arrays.is_torch(t) else "cpu"


class MoeLayer:
    """A MoE layer run by moegen, built once from 4-bit expert weights.

    Build it with :meth:`from_flashinfer_nvfp4` (NVFP4, FlashInfer CuTe-DSL layouts) or
    :meth:`from_gpt_oss_mxfp4` (gpt-oss's MXFP4 tensors). Then ``layer(x,
    token_selected_experts, token_final_scales)``: torch tensors go through the
    ``moegen::fused_moe`` op (CUDA: on torch's current stream, no allocation but the output,
    no sync, CUDA-graph capturable); NumPy arrays (or DLPack producers) run on moegen's
    simulator and return float32 (the bf16 output, widened exactly).
    """

    def __init__(self, native):
        self._native = native
        self.id = next(_ids)
        _layers[self.id] = self

    @classmethod
    def from_flashinfer_nvfp4(
        cls,
        w1_weight,
        w1_weight_sf,
        w1_alpha,
        fc2_input_scale,
        w2_weight,
        w2_weight_sf,
        w2_alpha,
        num_experts,
        top_k,
        num_local_experts=None,
        local_expert_offset=0,
        *,
        input_scale,
        max_num_tokens,
        use_fused_finalize=True,
        device=None,
        keep_host_weights=False,
        autotune=False,
        tune_iterations=(2, 10),
    ):
        """NVFP4 experts exactly as FlashInfer's ``cute_dsl_fused_moe_nvfp4`` takes them, in
        its argument order (docs/python.md has the mapping):

        - ``w1_weight`` uint8 ``[L, 2I, H/2]``: up ("linear") and gate rows interleaved in
          blocks of 64, two E2M1 per byte (low nibble first);
        - ``w1_weight_sf``: E4M3 codes (uint8 or float8_e4m3fn), per expert the 128x4
          layout of ``[2I, H/16]`` (``convert_sf_to_mma_layout``'s 6-D view, or its bytes);
        - ``w1_alpha`` float32 ``[L]``: 1 / (input_scale · w1 global scale);
        - ``fc2_input_scale``: GEMM1's output global scale (a float or a one-element tensor);
        - ``w2_weight`` uint8 ``[L, H, I/2]``, ``w2_weight_sf`` (128x4 of ``[H, I/16]``),
          ``w2_alpha`` float32 ``[L]``: 1 / (fc2_input_scale · w2 global scale).

        ``input_scale`` is the global scale FlashInfer's caller quantizes ``x`` with
        (``fp4_quantize(x, global_scale=input_scale)``): moegen takes bf16 ``x`` and
        quantizes it itself. ``max_num_tokens`` sizes the workspace and the dispatch table
        once. ``use_fused_finalize=False`` is moegen's deterministic finalize.
        ``keep_host_weights`` keeps a host copy for :meth:`reference`. ``autotune`` times
        every tactic at every token bucket with moegen's tuner instead of taking the
        analytic model's choices (cached in ``$MOEGEN_TUNE_CACHE`` when set), with
        ``tune_iterations = (warm-up runs, timed runs)`` per bucket and tactic.
        """
        hidden = 2 * _dim("w1_weight", w1_weight, 2, 3)
        intermediate = _dim("w1_weight", w1_weight, 1, 3) // 2
        local = num_local_experts if num_local_experts is not None else num_experts
        native = _NativeLayer.nvfp4(
            _resolve(device, w1_weight),
            hidden,
            intermediate,
            (
                _count("num_experts", num_experts),
                _count("local_expert_offset", local_expert_offset),
                _count("num_local_experts", local),
                _count("top_k", top_k),
            ),
            _options(
                max_num_tokens, use_fused_finalize, keep_host_weights, autotune, tune_iterations
            ),
            _arrays.host("w1_weight", w1_weight),
            _mma_scales("w1_weight_sf", w1_weight_sf),
            _arrays.host("w1_alpha", w1_alpha),
            _scalar("fc2_input_scale", fc2_input_scale),
            _arrays.host("w2_weight", w2_weight),
            _mma_scales("w2_weight_sf", w2_weight_sf),
            _arrays.host("w2_alpha", w2_alpha),
            _scalar("input_scale", input_scale),
        )
        return cls(native)

    @classmethod
    def from_gpt_oss_mxfp4(
        cls,
        gate_up_proj_blocks,
        gate_up_proj_scales,
        gate_up_proj_bias,
        down_proj_blocks,
        down_proj_scales,
        down_proj_bias,
        *,
        top_k,
        max_num_tokens,
        num_local_experts=None,
        local_expert_offset=0,
        swiglu=GPT_OSS_SWIGLU,
        activations="bf16",
        use_fused_finalize=True,
        device=None,
        keep_host_weights=False,
        autotune=False,
        tune_iterations=(2, 10),
    ):
        """gpt-oss's MXFP4 experts, the checkpoint's tensors of one layer (all experts):
        ``gate_up_proj_blocks`` uint8 ``[E, 2I, H/32, 16]``, ``gate_up_proj_scales`` uint8
        or float8_e8m0fnu ``[E, 2I, H/32]``, ``gate_up_proj_bias`` bfloat16 or float32
        ``[E, 2I]`` (gate and up interleaved by row), ``down_proj_*`` likewise with ``[E, H,
        I/32, 16]``, ``[E, H, I/32]``, ``[E, H]``. Run with gpt-oss's clamped SwiGLU
        ``swiglu = (alpha, beta, limit)`` and both biases. Local experts:
        ``local_expert_offset`` .. ``+ num_local_experts`` (default: all).

        ``activations``: what the experts multiply (``x`` is bf16 either way; the layer
        converts it):

        - ``"bf16"``: Hopper's kernels, the weights dequantized exactly in registers (on the
          CPU, moegen's Hopper simulator);
        - ``"mxfp8"``: SM100's ``kind::mxf8f6f4`` kernels, the weights kept MXFP4 and ``x``
          quantized to MXFP8 (E4M3, one power-of-two scale per 32); on the CPU, moegen's
          SM100 simulator; a GPU other than SM100 raises :class:`moegen.UnsupportedError`."""
        experts = _dim("gate_up_proj_blocks", gate_up_proj_blocks, 0, 4)
        intermediate = _dim("gate_up_proj_blocks", gate_up_proj_blocks, 1, 4) // 2
        hidden = _dim("down_proj_blocks", down_proj_blocks, 1, 4)
        local = num_local_experts if num_local_experts is not None else experts
        tensors = [
            ("gate_up_proj_blocks", gate_up_proj_blocks),
            ("gate_up_proj_scales", gate_up_proj_scales),
            ("gate_up_proj_bias", gate_up_proj_bias),
            ("down_proj_blocks", down_proj_blocks),
            ("down_proj_scales", down_proj_scales),
            ("down_proj_bias", down_proj_bias),
        ]
        alpha, beta, limit = swiglu
        native = _NativeLayer.gpt_oss(
            _resolve(device, gate_up_proj_blocks),
            hidden,
            intermediate,
            (
                experts,
                _count("local_expert_offset", local_expert_offset),
                _count("num_local_experts", local),
                _count("top_k", top_k),
            ),
            _options(
                max_num_tokens, use_fused_finalize, keep_host_weights, autotune, tune_iterations
            ),
            [(k, _arrays.host(k, v)) for k, v in tensors],
            (float(alpha), float(beta), float(limit)),
            _activations(activations),
        )
        return cls(native)

    @classmethod
    def from_mxfp4(
        cls,
        w1_values,
        w1_scales,
        w2_values,
        w2_scales,
        *,
        num_experts,
        top_k,
        max_num_tokens,
        num_local_experts=None,
        local_expert_offset=0,
        activations="bf16",
        use_fused_finalize=True,
        device=None,
        keep_host_weights=False,
        autotune=False,
        tune_iterations=(2, 10),
    ):
        """MXFP4 experts in moegen's own W1 layout, plain SwiGLU: ``w1_values`` uint8 ``[L,
        2I, H/2]`` with up and gate rows interleaved in blocks of 64 (as FlashInfer's NVFP4
        ``w1_weight``), ``w1_scales`` UE8M0 ``[L, 2I, H/32]`` (uint8 or float8_e8m0fnu),
        ``w2_values`` ``[L, H, I/2]``, ``w2_scales`` ``[L, H, I/32]``; one entry per local
        expert. This is the layout moe-bench writes (bench/README.md). ``activations`` as
        for :meth:`from_gpt_oss_mxfp4`: ``"bf16"`` (Hopper's kernels) or ``"mxfp8"``
        (SM100's)."""
        local = _dim("w1_values", w1_values, 0, 3)
        hidden = 2 * _dim("w1_values", w1_values, 2, 3)
        intermediate = _dim("w1_values", w1_values, 1, 3) // 2
        if num_local_experts is not None and int(num_local_experts) != local:
            raise InputError(
                f"num_local_experts: {num_local_experts}, but w1_values holds {local} experts"
            )
        native = _NativeLayer.mxfp4(
            _resolve(device, w1_values),
            hidden,
            intermediate,
            (
                _count("num_experts", num_experts),
                _count("local_expert_offset", local_expert_offset),
                local,
                _count("top_k", top_k),
            ),
            _options(
                max_num_tokens, use_fused_finalize, keep_host_weights, autotune, tune_iterations
            ),
            _arrays.host("w1_values", w1_values),
            _arrays.host("w1_scales", w1_scales),
            _arrays.host("w2_values", w2_values),
            _arrays.host("w2_scales", w2_scales),
            _activations(activations),
        )
        return cls(native)

    def __call__(self, x, token_selected_experts, token_final_scales, moe_output=None):
        """The layer over bf16 ``x`` ``[num_tokens, H]``, global expert ids
        ``token_selected_experts`` ``[num_tokens, top_k]`` (int32; int64 too on the host)
        and router weights ``token_final_scales`` ``[num_tokens, top_k]`` (float32).

        torch tensors: ``torch.ops.moegen.fused_moe`` (or, with ``moe_output`` given,
        ``torch.ops.moegen.fused_moe_out`` writing into it): bf16 ``[num_tokens, H]``.
        Host arrays: float32 ``[num_tokens, H]`` from moegen's simulator (x may be float32,
        rounded to bf16 to nearest even, or bf16 bits as uint16)."""
        if _arrays.is_torch(x):
            from . import _torch_op

            return _torch_op.run(self, x, token_selected_experts, token_final_scales, moe_output)
        if moe_output is not None:
            raise InputError("moe_output: only torch tensors are written in place")
        raw = self._native.forward_host(
            _arrays.host("x", x),
            _arrays.host("token_selected_experts", token_selected_experts),
            _arrays.host("token_final_scales", token_final_scales),
        )
        return _arrays.bf16_to_float32(raw, (len(raw) // (2 * self.hidden_size), self.hidden_size))

    def reference(self, x, token_selected_experts, token_final_scales):
        """moegen's CPU reference of this layer (bit-specified; docs/reference.md) over host
        arrays, for the tactic the layer runs at this token count: float32 (bf16 widened).
        Needs ``keep_host_weights=True`` at construction."""
        raw = self._native.reference(
            _arrays.host("x", x),
            _arrays.host("token_selected_experts", token_selected_experts),
            _arrays.host("token_final_scales", token_final_scales),
        )
        return _arrays.bf16_to_float32(raw, (len(raw) // (2 * self.hidden_size), self.hidden_size))

    def check_errors(self):
        """Raises :class:`moegen.RoutingError` for what the routing kernels recorded on the
        device (ids out of range, an expert twice in a token, non-finite weights). On CUDA it
        waits for torch's current stream: call it where the engine may wait. Host passes
        check after every pass themselves."""
        stream = 0
        if self.device.startswith("cuda"):
            import torch

            stream = torch.cuda.current_stream(torch.device(self.device)).cuda_stream
        self._native.check_errors(stream)

    def tactic(self, num_tokens):
        """The tactic moegen runs for ``num_tokens`` tokens."""
        return self._native.tactic(_count("num_tokens", num_tokens))

    def __getattr__(self, name):
        # Shape and placement: hidden_size, intermediate_size, top_k, num_experts,
        # num_local_experts, local_expert_offset, max_num_tokens, deterministic, device, arch,
        # activations.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._native, name)

    def __repr__(self):
        n = self._native
        return (
            f"moegen.MoeLayer(H={n.hidden_size}, I={n.intermediate_size}, "
            f"experts={n.local_expert_offset}..+{n.num_local_experts} of {n.num_experts}, "
            f"top_k={n.top_k}, device={n.device!r}, arch={n.arch}, "
            f"activations={n.activations!r})"
        )


def _options(max_num_tokens, use_fused_finalize, keep_host_weights, autotune, tune_iterations):
    warmup, timed = tune_iterations
    tune = (_count("tune_iterations", warmup), _count("tune_iterations", timed)) if autotune else None
    return (
        _count("max_num_tokens", max_num_tokens),
        not use_fused_finalize,
        bool(keep_host_weights),
        tune,
    )


def _activations(v):
    # The extension parses the spelling; only its type is checked here, where a wrong one
    # can be named before it becomes a TypeError of the binding.
    if not isinstance(v, str):
        raise InputError(f"activations: {v!r}, expected \"bf16\" or \"mxfp8\"")
    return v


def _resolve(device, first_weight):
    d = device if device is not None else _default_device(first_weight)
    d = str(d)
    if d == "cuda":
        import torch

        d = f"cuda:{torch.cuda.current_device()}"
    return d
