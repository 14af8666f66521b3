"""Small Triton kernels and routing helpers shared by the engine-style peers.

What an engine writes around its grouped GEMMs: a gather of the local routes' rows, one fused
activation pass (u * silu(g) from FC1's output, bf16 h), one fused weighted combine (fp32
accumulation, bf16 out), and the route bookkeeping (expert-sorted order, per-expert offsets, block
alignment) done with torch ops that need no host synchronisation, so that all of it can live in one
CUDA graph with static shapes.
"""

import triton
import triton.language as tl

# Column layouts of FC1's output [rows, 2I] that the activation kernel understands.
LAYOUT_MOEGEN = 0  # moegen's interleave: per 64 outputs, 64 `up` columns then 64 `gate` columns
LAYOUT_HALVES = 1  # vLLM's w13: all `gate` columns, then all `up` columns (silu_and_mul)


@triton.jit
def _gather_rows(x_ptr, src_ptr, n_valid_ptr, out_ptr, H, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if row >= tl.load(n_valid_ptr):
        return
    src = tl.load(src_ptr + row).to(tl.int64)
    for c in range(0, H, BLOCK):
        cols = c + tl.arange(0, BLOCK)
        m = cols < H
        tl.store(out_ptr + row.to(tl.int64) * H + cols, tl.load(x_ptr + src * H + cols, mask=m), mask=m)


@triton.jit
def _swiglu_rows(a_ptr, n_valid_ptr, h_ptr, I, LAYOUT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if row >= tl.load(n_valid_ptr):
        return
    base = row.to(tl.int64) * (2 * I)
    for c in range(0, I, BLOCK):
        j = c + tl.arange(0, BLOCK)
        m = j < I
        if LAYOUT == 0:
            up_col = (j // 64) * 128 + j % 64
            gate_col = up_col + 64
        else:
            gate_col = j
            up_col = j + I
        u = tl.load(a_ptr + base + up_col, mask=m, other=0.0).to(tl.float32)
        g = tl.load(a_ptr + base + gate_col, mask=m, other=0.0).to(tl.float32)
        h = u * (g / (1.0 + tl.exp(-g)))
        tl.store(h_ptr + row.to(tl.int64) * I + j, h.to(tl.bfloat16), mask=m)


@triton.jit
def _weighted_combine(y_ptr, slot_row_ptr, w_ptr, out_ptr, H, K: tl.constexpr, BLOCK: tl.constexpr):
    tok = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(K):
        r = tl.load(slot_row_ptr + tok * K + k)
        if r >= 0:
            wk = tl.load(w_ptr + tok * K + k).to(tl.float32)
            y = tl.load(y_ptr + r.to(tl.int64) * H + cols, mask=m, other=0.0).to(tl.float32)
            acc += wk * y
    tl.store(out_ptr + tok.to(tl.int64) * H + cols, acc.to(tl.bfloat16), mask=m)


def gather_rows(x, src_row, n_valid, out):
    """out[r] = x[src_row[r]] for r < n_valid[0]; rows past it are left as they are."""
    _gather_rows[(out.shape[0],)](x, src_row, n_valid, out, x.shape[1], BLOCK=1024)
    return out


def swiglu(a, n_valid, h, layout):
    """h[r] = u * silu(g) of FC1's bf16 output row r (r < n_valid[0]), computed in fp32, stored bf16."""
    _swiglu_rows[(a.shape[0],)](a, n_valid, h, h.shape[1], LAYOUT=layout, BLOCK=512)
    return h


def weighted_combine(y, slot_row, w, out):
    """out[t] = sum over k with slot_row[t, k] >= 0 of w[t, k] * y[slot_row[t, k]] (fp32 sum, bf16 out)."""
    N, K = w.shape
    H = out.shape[1]
    BLOCK = 512
    _weighted_combine[(N, triton.cdiv(H, BLOCK))](y, slot_row, w, out, H, K=K, BLOCK=BLOCK)
    return out


def sort_local_routes(torch, ids, O, L):
    """Expert-sorted order of the local routes (non-local routes last), without host syncs.

    Returns (valid [N*K] bool, order [N*K] int64: route id at each sorted position, offs [L] int32:
    end offset of each local expert's rows, n_valid [1] int32, slot_row [N, K] int32: the sorted
    position of each local route, -1 for non-local ones)."""
    N, K = ids.shape
    local = ids.long().flatten() - O
    valid = (local >= 0) & (local < L)
    key = torch.where(valid, local, L)
    _, order = torch.sort(key, stable=True)
    counts = torch.zeros(L + 1, dtype=torch.int64, device=ids.device).scatter_add_(0, key, torch.ones_like(key))
    offs = torch.cumsum(counts[:L], 0).to(torch.int32)
    pos = torch.empty_like(order).scatter_(0, order, torch.arange(N * K, device=ids.device))
    slot_row = torch.where(valid, pos, -1).to(torch.int32).view(N, K)
    return valid, order, offs, offs[L - 1:], slot_row


def align_block_size(torch, ids, O, L, block):
    """vLLM's moe_align_block_size (expert_map given, invalid experts ignored) in torch ops.

    Each local expert's routes, in route order, padded to a multiple of `block` rows with the sentinel
    N*K. Returns (sorted_ids int32 [cap], expert_ids int32 [cap / block], num_tokens_padded int32 [1])
    with cap = N*K + L*(block-1) rounded up to `block`; blocks past num_tokens_padded carry expert 0
    and only sentinels (the kernels stop at num_tokens_padded)."""
    N, K = ids.shape
    NK = N * K
    dev = ids.device
    local = ids.long().flatten() - O
    valid = (local >= 0) & (local < L)
    key = torch.where(valid, local, L)
    skey, order = torch.sort(key, stable=True)
    counts = torch.zeros(L + 1, dtype=torch.int64, device=dev).scatter_add_(0, key, torch.ones_like(key))[:L]
    padded = (counts + block - 1) // block * block
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    start = torch.cumsum(counts, 0) - counts
    e = skey.clamp(max=L - 1)
    rank = torch.arange(NK, device=dev) - start[e]
    cap = (NK + L * (block - 1) + block - 1) // block * block
    dest = torch.where(skey < L, pad_start[e] + rank, cap)
    sorted_ids = torch.full((cap + 1,), NK, dtype=torch.int32, device=dev)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    blocks = torch.arange(cap // block, device=dev) * block
    expert_ids = torch.searchsorted(pad_end, blocks, right=True).clamp(max=L - 1).to(torch.int32)
    expert_ids = torch.where(blocks < pad_end[L - 1], expert_ids, 0).to(torch.int32)
    return sorted_ids[:cap], expert_ids, pad_end[L - 1:].to(torch.int32)
