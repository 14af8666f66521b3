"""moegen: 4-bit Mixture-of-Experts layers generated ahead of time (docs/python.md).

``moegen.MoeLayer`` is one layer's experts, uploaded once (NVFP4 as FlashInfer's CuTe-DSL
MoE takes them, or gpt-oss's MXFP4 tensors); calling it over torch tensors runs the
``torch.ops.moegen.fused_moe`` op (CUDA: on torch's current stream, CUDA-graph
capturable), over NumPy arrays it runs moegen's simulator on the CPU. torch is imported
only when torch tensors are used (or ``moegen.torch_ops()`` is called).
"""

from ._errors import (
    DeviceError,
    InputError,
    LayerError,
    MoegenError,
    RoutingError,
    UnsupportedError,
    WeightError,
)
from ._layer import GPT_OSS_SWIGLU, MoeLayer
from ._native import CUDA as cuda_built, VERSION as __version__


def torch_ops():
    """Registers the torch.library ops (``torch.ops.moegen.fused_moe`` and
    ``fused_moe_out``) and returns their module; needs torch."""
    from . import _torch_op

    return _torch_op


__all__ = [
    "MoeLayer",
    "GPT_OSS_SWIGLU",
    "MoegenError",
    "InputError",
    "WeightError",
    "LayerError",
    "RoutingError",
    "DeviceError",
    "UnsupportedError",
    "cuda_built",
    "torch_ops",
    "__version__",
]
