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
def _gather_rows(x_ptr, src_ptr, n_valid_ptr, out_ptr, H, DIV: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if row >= tl.load(n_valid_ptr):
        return
    src = (tl.load(src_ptr + row) // DIV).to(tl.int64)
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
def _weighted_combine(y_ptr, slot_ptr, ids_ptr, w_ptr, out_ptr, H, O, L, K: tl.constexpr, BY_SLOT: tl.constexpr,
                      BLOCK: tl.constexpr):
    tok = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(K):
        if BY_SLOT:
            r = tl.load(slot_ptr + tok * K + k)
        else:
            e = tl.load(ids_ptr + tok * K + k) - O
            r = tl.where((e >= 0) & (e < L), tok * K + k, -1)
        if r >= 0:
            wk = tl.load(w_ptr + tok * K + k).to(tl.float32)
            y = tl.load(y_ptr + r.to(tl.int64) * H + cols, mask=m, other=0.0).to(tl.float32)
            acc += wk * y
    tl.store(out_ptr + tok.to(tl.int64) * H + cols, acc.to(tl.bfloat16), mask=m)


def gather_rows(x, src, div, n_valid, out):
    """out[r] = x[src[r] // div] for r < n_valid[0]; rows past it are left as they are."""
    _gather_rows[(out.shape[0],)](x, src, n_valid, out, x.shape[1], DIV=div, BLOCK=1024)
    return out


def swiglu(a, n_valid, h, layout):
    """h[r] = u * silu(g) of FC1's bf16 output row r (r < n_valid[0]), computed in fp32, stored bf16."""
    _swiglu_rows[(a.shape[0],)](a, n_valid, h, h.shape[1], LAYOUT=layout, BLOCK=512)
    return h


def weighted_combine(y, w, out, slot=None, ids=None, O=0, L=0):
    """out[t] = sum over t's local routes k of w[t, k] * y[row] (fp32 sum, bf16 out), row = slot[t*K + k]
    (compacted rows; -1 = not local) or, without `slot`, row = t*K + k with locality read from ids."""
    N, K = w.shape
    H = out.shape[1]
    BLOCK = 512
    by_slot = slot is not None
    _weighted_combine[(N, triton.cdiv(H, BLOCK))](y, slot if by_slot else w, ids if ids is not None else w, w, out,
                                                  H, O, L, K=K, BY_SLOT=by_slot, BLOCK=BLOCK)
    return out


ROUTE_CHUNK = 256  # routes per program in the alignment kernels


@triton.jit
def _route_hist(ids_ptr, hist_ptr, NK, O, L, LP: tl.constexpr, CHUNK: tl.constexpr):
    c = tl.program_id(0)
    r = c * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + r, mask=r < NK, other=-1) - O
    e = tl.where((e >= 0) & (e < L), e, -1)
    hit = e[:, None] == tl.arange(0, LP)[None, :]
    tl.store(hist_ptr + c * LP + tl.arange(0, LP), tl.sum(hit.to(tl.int32), axis=0))


@triton.jit
def _route_offsets(hist_ptr, base_ptr, pad_end_ptr, ntp_ptr, sorted_ptr, expert_ids_ptr, n_chunks, cap, NK, block,
                   L, LP: tl.constexpr, TILE: tl.constexpr, FILL: tl.constexpr):
    ex = tl.arange(0, LP)
    counts = tl.zeros([LP], dtype=tl.int32)
    for c0 in range(0, n_chunks, TILE):
        c = c0 + tl.arange(0, TILE)
        counts += tl.sum(tl.load(hist_ptr + c[:, None] * LP + ex[None, :], mask=(c < n_chunks)[:, None], other=0), 0)
    padded = (counts + block - 1) // block * block
    pad_end = tl.cumsum(padded, axis=0)
    run = pad_end - padded
    # each chunk's first slot per expert: the expert's padded start plus the earlier chunks' routes
    for c0 in range(0, n_chunks, TILE):
        c = c0 + tl.arange(0, TILE)
        m = (c < n_chunks)[:, None]
        h = tl.load(hist_ptr + c[:, None] * LP + ex[None, :], mask=m, other=0)
        tl.store(base_ptr + c[:, None] * LP + ex[None, :], tl.cumsum(h, axis=0) - h + run[None, :], mask=m)
        run += tl.sum(h, axis=0)
    tl.store(pad_end_ptr + ex, pad_end, mask=ex < L)
    total = tl.sum(padded, axis=0)
    tl.store(ntp_ptr, total)
    for b0 in range(0, cap // block, FILL):
        b = b0 + tl.arange(0, FILL)
        eid = tl.sum(((pad_end[None, :] <= (b * block)[:, None]) & (ex[None, :] < L)).to(tl.int32), axis=1)
        eid = tl.where(b * block < total, tl.minimum(eid, L - 1), 0)
        tl.store(expert_ids_ptr + b, eid, mask=b < cap // block)
    for s0 in range(0, cap, FILL):
        s = s0 + tl.arange(0, FILL)
        tl.store(sorted_ptr + s, tl.full([FILL], 0, tl.int32) + NK, mask=s < cap)


@triton.jit
def _route_scatter(ids_ptr, base_ptr, sorted_ptr, slot_ptr, NK, O, L, LP: tl.constexpr, CHUNK: tl.constexpr,
                   WRITE_SLOT: tl.constexpr):
    c = tl.program_id(0)
    r = c * CHUNK + tl.arange(0, CHUNK)
    e = tl.load(ids_ptr + r, mask=r < NK, other=-1) - O
    valid = (e >= 0) & (e < L)
    hit = (tl.where(valid, e, -1)[:, None] == tl.arange(0, LP)[None, :]).to(tl.int32)
    # stable rank among the chunk's routes to the same expert, plus the chunk's base for it
    rank = tl.sum(tl.cumsum(hit, axis=0) * hit, axis=1) - 1
    base = tl.sum(hit * tl.load(base_ptr + c * LP + tl.arange(0, LP))[None, :], axis=1)
    pos = base + rank
    tl.store(sorted_ptr + pos, r, mask=valid)
    if WRITE_SLOT:
        tl.store(slot_ptr + r, tl.where(valid, pos, -1), mask=r < NK)


def align_routes(torch, ids, O, L, block, with_slots=False):
    """vLLM's moe_align_block_size (expert_map given, invalid experts ignored) as three Triton kernels.

    Each local expert's routes (route id = token*K + k), in route order, padded to a multiple of
    `block` rows with the sentinel N*K. Returns a dict: sorted_ids int32 [cap] with
    cap = N*K + L*(block-1) rounded up to `block`, expert_ids int32 [cap / block] (blocks past
    num_tokens_padded carry expert 0 and only sentinels; kernels stop at num_tokens_padded),
    num_tokens_padded int32 [1], pad_end int32 [L] (each expert's end slot; with block 1 these are
    the grouped GEMMs' offsets), and with `with_slots` slot int32 [N*K]: each route's slot, -1 if not
    local. No host synchronisation: graph-capturable."""
    N, K = ids.shape
    NK = N * K
    dev = ids.device
    LP = triton.next_power_of_2(L)
    n_chunks = triton.cdiv(NK, ROUTE_CHUNK)
    cap = (NK + L * (block - 1) + block - 1) // block * block
    flat = ids.reshape(-1)
    hist = torch.empty(n_chunks, LP, dtype=torch.int32, device=dev)
    base = torch.empty(n_chunks, LP, dtype=torch.int32, device=dev)
    out = {"sorted_ids": torch.empty(cap, dtype=torch.int32, device=dev),
           "expert_ids": torch.empty(cap // block, dtype=torch.int32, device=dev),
           "num_tokens_padded": torch.empty(1, dtype=torch.int32, device=dev),
           "pad_end": torch.empty(L, dtype=torch.int32, device=dev),
           "slot": torch.empty(NK if with_slots else 1, dtype=torch.int32, device=dev)}
    _route_hist[(n_chunks,)](flat, hist, NK, O, L, LP=LP, CHUNK=ROUTE_CHUNK)
    _route_offsets[(1,)](hist, base, out["pad_end"], out["num_tokens_padded"], out["sorted_ids"], out["expert_ids"],
                         n_chunks, cap, NK, block, L, LP=LP, TILE=64, FILL=1024)
    _route_scatter[(n_chunks,)](flat, base, out["sorted_ids"], out["slot"], NK, O, L, LP=LP, CHUNK=ROUTE_CHUNK,
                                WRITE_SLOT=with_slots)
    return out


@triton.jit
def _pack_routes(ids_ptr, indx_ptr, bits_ptr, N, O, L, NPAD, K: tl.constexpr, KP: tl.constexpr,
                 WORDS: tl.constexpr, BLOCK_N: tl.constexpr):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, KP)
    m = (n < N)[:, None] & (k < K)[None, :]
    e = tl.load(ids_ptr + n[:, None] * K + k[None, :], mask=m, other=-1) - O
    valid = m & (e >= 0) & (e < L)
    tl.store(indx_ptr + n[:, None] * K + k[None, :], tl.where(valid, e, -1).to(tl.int16), mask=m)
    for wd in range(WORDS):
        bit = tl.where(valid & (e // 32 == wd), tl.full([BLOCK_N, KP], 1, tl.int32) << (e % 32), 0)
        tl.store(bits_ptr + wd * NPAD + n, tl.sum(bit, axis=1), mask=n < N)


def pack_routes(torch, ids, O, L):
    """triton_kernels' routing inputs from global ids in one kernel (vLLM's pack_bitmatrix plus the
    expert_map lookup): local expert per route as int16 (-1 = not local) and the [N, L] bitmatrix of
    routed experts, stored transposed ([words, N padded to 32]) as triton_kernels' topk stores it.
    Ids are distinct per token, so summing the bits of a word equals OR-ing them."""
    N, K = ids.shape
    words = triton.cdiv(L, 32)
    npad = triton.cdiv(N, 32) * 32
    indx = torch.empty(N, K, dtype=torch.int16, device=ids.device)
    store = torch.empty(words, npad, dtype=torch.int32, device=ids.device)
    _pack_routes[(triton.cdiv(N, 128),)](ids, indx, store, N, O, L, npad, K=K, KP=triton.next_power_of_2(K),
                                         WORDS=words, BLOCK_N=128)
    return indx, store
