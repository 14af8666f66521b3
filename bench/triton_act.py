"""moegen's SwiGLU as a triton_kernels fused activation (imported by peers.py only for the triton peer).

triton_kernels' own `swiglu_fn` computes gpt-oss's variant, g * sigmoid(alpha * g) * (u + 1) with an
optional clamp, which cannot express moegen's plain u * silu(g). matmul_ogs takes any jitted function
as its fused activation (FnSpecs(..., reduction_n=2)); this is that function. It runs on the fp32
accumulator tile before the bf16 store, with W1's rows ordered so that columns 2j and 2j+1 of the tile
hold gate_j and up_j.
"""

import triton
import triton.language as tl


@triton.jit
def moegen_swiglu(acc):
    gate, up = tl.split(tl.reshape(acc, (acc.shape[0], acc.shape[1] // 2, 2)))
    return up * (gate / (1.0 + tl.exp(-gate)))
