"""Small layers' weights and inputs, built with NumPy from the formats' definitions
(docs/formats.md), and an independent float64 MoE over the dequantized weights."""

import numpy as np

# E2M1 code (low 3 bits) -> magnitude; bit 3 is the sign.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def e2m1(codes):
    codes = codes.astype(np.int64)
    mag = E2M1[codes & 7]
    return np.where(codes & 8, -mag, mag)


def unpack(packed):
    """[..., n/2] uint8 -> [..., n] E2M1 values, element 2j in the low nibble."""
    lo, hi = packed & 0xF, packed >> 4
    return e2m1(np.stack([lo, hi], axis=-1).reshape(*packed.shape[:-1], -1))


def e4m3(codes):
    """Non-negative E4M3 (fn) codes -> values (no NaN among them)."""
    codes = codes.astype(np.int64)
    exp, man = (codes >> 3) & 0xF, codes & 7
    normal = (1 + man / 8.0) * np.exp2(exp - 7.0)
    sub = man / 8.0 * 2.0**-6
    return np.where(exp == 0, sub, normal)


def swizzle_128x4(linear, rows, cols):
    """Row-major [rows, cols] scale codes -> the 128x4 layout's bytes (rows padded to 128,
    cols to 4): atom (r/128, c/4) of 512 bytes, offset (r%32)*16 + ((r/32)%4)*4 + c%4."""
    rp, cp = -(-rows // 128) * 128, -(-cols // 4) * 4
    out = np.zeros(rp * cp, dtype=np.uint8)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    atom = (r // 128) * (cp // 4) + c // 4
    off = atom * 512 + (r % 32) * 16 + ((r // 32) % 4) * 4 + c % 4
    out[off.ravel()] = linear.ravel()
    return out


def mma_view(per_expert_bytes, experts, rows, cols):
    """FlashInfer's `convert_sf_to_mma_layout` result: a strided 6-D view (32, 4, m_tiles,
    4, k_tiles, experts) of storage ordered (experts, m_tiles, k_tiles, 32, 4, 4)."""
    m_tiles, k_tiles = -(-rows // 128), -(-cols // 4)
    storage = per_expert_bytes.reshape(experts, m_tiles, k_tiles, 32, 4, 4)
    return storage.transpose(3, 4, 1, 5, 2, 0)


class Nvfp4Case:
    """NVFP4 experts in FlashInfer's layouts, and bf16 inputs that NVFP4 represents exactly
    with input_scale 1 (each 16-block is E2M1 values times 2^k with amax 6 * 2^k), so the
    only quantization left in the layer is that of GEMM1's output."""

    def __init__(self, seed, hidden=256, inter=256, experts=4, top_k=2, tokens=5, offset=0,
                 local=None):
        rng = np.random.default_rng(seed)
        self.h, self.i, self.e, self.k, self.n = hidden, inter, experts, top_k, tokens
        self.offset, self.local = offset, local if local is not None else experts
        l = self.local
        self.w1 = rng.integers(0, 256, (l, 2 * inter, hidden // 2), dtype=np.uint8)
        self.w2 = rng.integers(0, 256, (l, hidden, inter // 2), dtype=np.uint8)
        # Scale codes 0x18..0x27: 2^-4 .. 2^-2 (x 1.875), so h stays within E4M3's range.
        self.sf1_linear = rng.integers(0x18, 0x28, (l, 2 * inter, hidden // 16), dtype=np.uint8)
        self.sf2_linear = rng.integers(0x18, 0x28, (l, hidden, inter // 16), dtype=np.uint8)
        self.sf1 = np.stack([swizzle_128x4(s, 2 * inter, hidden // 16) for s in self.sf1_linear])
        self.sf2 = np.stack([swizzle_128x4(s, hidden, inter // 16) for s in self.sf2_linear])
        self.alpha1 = np.linspace(0.75, 1.25, l).astype(np.float32)
        self.alpha2 = np.linspace(1.25, 0.75, l).astype(np.float32)
        self.fc2_input_scale = 4.0
        self.input_scale = 1.0
        codes = rng.integers(0, 16, (tokens, hidden))
        codes[:, ::16] = 7  # one 6 per block: amax = 6 * 2^k exactly
        k = rng.integers(-3, 0, (tokens, hidden // 16)).repeat(16, axis=1)
        self.x = (e2m1(codes) * np.exp2(k)).astype(np.float32)
        self.ids = np.stack(
            [rng.permutation(experts)[:top_k] for _ in range(tokens)]
        ).astype(np.int32)
        w = rng.uniform(0.1, 1.0, (tokens, top_k))
        self.weights = (w / w.sum(1, keepdims=True)).astype(np.float32)

    def layer_args(self):
        return dict(
            w1_weight=self.w1,
            w1_weight_sf=mma_view(self.sf1, self.local, 2 * self.i, self.h // 16),
            w1_alpha=self.alpha1,
            fc2_input_scale=np.array([self.fc2_input_scale], dtype=np.float32),
            w2_weight=self.w2,
            w2_weight_sf=mma_view(self.sf2, self.local, self.h, self.i // 16),
            w2_alpha=self.alpha2,
            num_experts=self.e,
            top_k=self.k,
            num_local_experts=self.local,
            local_expert_offset=self.offset,
            input_scale=self.input_scale,
        )

    def float64_moe(self):
        """FlashInfer's semantics in float64 (its tests' reference): GEMM1 = alpha1 * (x_q @
        W1^T) with W1 = E2M1 x E4M3 scale; the first I rows of W1 (de-interleaved from
        blocks of 64) are "linear" (up), the last I gate; h = up * silu(gate); GEMM2 =
        alpha2 * fc2_input_scale * (h @ W2^T); h is not requantized here."""
        out = np.zeros((self.n, self.h))
        xq = self.x.astype(np.float64) * self.input_scale
        for e in range(self.local):
            w1 = unpack(self.w1[e]) * e4m3(self.sf1_linear[e]).repeat(16, axis=1)
            blocks = w1.reshape(self.i // 64, 2, 64, self.h)
            up, gate = blocks[:, 0].reshape(self.i, self.h), blocks[:, 1].reshape(self.i, self.h)
            w2 = unpack(self.w2[e]) * e4m3(self.sf2_linear[e]).repeat(16, axis=1)
            for t in range(self.n):
                for s in range(self.k):
                    if self.ids[t, s] != self.offset + e:
                        continue
                    u, g = self.alpha1[e] * (up @ xq[t]), self.alpha1[e] * (gate @ xq[t])
                    hh = u * g / (1 + np.exp(-g))
                    y = self.alpha2[e] * self.fc2_input_scale * (w2 @ hh)
                    out[t] += self.weights[t, s] * y
        return out


class GptOssCase:
    """gpt-oss's MXFP4 tensors (all experts of a layer) and bf16 inputs."""

    def __init__(self, seed, hidden=256, inter=128, experts=4, top_k=2, tokens=6):
        rng = np.random.default_rng(seed)
        self.h, self.i, self.e, self.k, self.n = hidden, inter, experts, top_k, tokens
        self.gate_up_blocks = rng.integers(0, 256, (experts, 2 * inter, hidden // 32, 16),
                                           dtype=np.uint8)
        self.gate_up_scales = rng.integers(120, 124, (experts, 2 * inter, hidden // 32),
                                           dtype=np.uint8)
        self.down_blocks = rng.integers(0, 256, (experts, hidden, inter // 32, 16),
                                        dtype=np.uint8)
        self.down_scales = rng.integers(120, 124, (experts, hidden, inter // 32), dtype=np.uint8)
        # Biases exactly representable in bf16 (multiples of 2^-9 below 0.25).
        self.gate_up_bias = (rng.integers(-128, 128, (experts, 2 * inter)) / 512).astype(np.float32)
        self.down_bias = (rng.integers(-128, 128, (experts, hidden)) / 512).astype(np.float32)
        # bf16-exact inputs: multiples of 1/8 in [-1.5, 1.5].
        self.x = (rng.integers(-12, 13, (tokens, hidden)) / 8).astype(np.float32)
        self.ids = np.stack(
            [rng.permutation(experts)[:top_k] for _ in range(tokens)]
        ).astype(np.int32)
        w = rng.uniform(0.1, 1.0, (tokens, top_k))
        self.weights = (w / w.sum(1, keepdims=True)).astype(np.float32)

    def layer_args(self):
        return dict(
            gate_up_proj_blocks=self.gate_up_blocks,
            gate_up_proj_scales=self.gate_up_scales,
            gate_up_proj_bias=self.gate_up_bias,
            down_proj_blocks=self.down_blocks,
            down_proj_scales=self.down_scales,
            down_proj_bias=self.down_bias,
            top_k=self.k,
        )

    def float64_moe(self, alpha=1.702, beta=1.0, limit=7.0):
        """gpt-oss's MoE in float64 (Hugging Face's GptOssExperts): gate = even rows of
        gate_up, up = odd rows; (clamp(up, +-limit) + beta) * g * sigmoid(alpha * g) with g =
        min(gate, limit); down; biases; router weights."""
        out = np.zeros((self.n, self.h))
        x = self.x.astype(np.float64)
        for e in range(self.e):
            s1 = np.exp2(self.gate_up_scales[e].astype(np.float64) - 127).repeat(32, axis=1)
            w1 = unpack(self.gate_up_blocks[e].reshape(2 * self.i, -1)) * s1
            s2 = np.exp2(self.down_scales[e].astype(np.float64) - 127).repeat(32, axis=1)
            w2 = unpack(self.down_blocks[e].reshape(self.h, -1)) * s2
            for t in range(self.n):
                for s in range(self.k):
                    if self.ids[t, s] != e:
                        continue
                    gu = w1 @ x[t] + self.gate_up_bias[e]
                    g, u = np.minimum(gu[0::2], limit), np.clip(gu[1::2], -limit, limit)
                    hh = (u + beta) * g / (1 + np.exp(-alpha * g))
                    out[t] += self.weights[t, s] * (w2 @ hh + self.down_bias[e])
        return out


def relative_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def interleave_64(up, gate):
    """[L, I, ...] up and gate -> [L, 2I, ...] with rows interleaved in blocks of 64."""
    l, i = up.shape[:2]
    both = np.stack([up.reshape(l, i // 64, 64, *up.shape[2:]),
                     gate.reshape(l, i // 64, 64, *gate.shape[2:])], axis=2)
    return both.reshape(l, 2 * i, *up.shape[2:])


class Mxfp4Case:
    """MXFP4 experts in moegen's W1 layout (what moe-bench writes), plain SwiGLU."""

    def __init__(self, seed, hidden=256, inter=128, experts=4, top_k=2, tokens=5):
        rng = np.random.default_rng(seed)
        self.h, self.i, self.e, self.k, self.n = hidden, inter, experts, top_k, tokens
        u8 = lambda *s: rng.integers(0, 256, s, dtype=np.uint8)  # noqa: E731
        sc = lambda *s: rng.integers(120, 124, s, dtype=np.uint8)  # noqa: E731
        self.up, self.gate = u8(experts, inter, hidden // 2), u8(experts, inter, hidden // 2)
        self.up_s, self.gate_s = sc(experts, inter, hidden // 32), sc(experts, inter, hidden // 32)
        self.w2, self.w2_s = u8(experts, hidden, inter // 2), sc(experts, hidden, inter // 32)
        self.x = (rng.integers(-12, 13, (tokens, hidden)) / 8).astype(np.float32)
        self.ids = np.stack(
            [rng.permutation(experts)[:top_k] for _ in range(tokens)]
        ).astype(np.int32)
        w = rng.uniform(0.1, 1.0, (tokens, top_k))
        self.weights = (w / w.sum(1, keepdims=True)).astype(np.float32)

    def layer_args(self):
        return dict(
            w1_values=interleave_64(self.up, self.gate),
            w1_scales=interleave_64(self.up_s, self.gate_s),
            w2_values=self.w2,
            w2_scales=self.w2_s,
            num_experts=self.e,
            top_k=self.k,
        )

    def float64_moe(self):
        """up * silu(gate), MXFP4 dequantized exactly."""
        def deq(v, s):
            return unpack(v) * np.exp2(s.astype(np.float64) - 127).repeat(32, axis=1)

        out = np.zeros((self.n, self.h))
        x = self.x.astype(np.float64)
        for e in range(self.e):
            up, gate = deq(self.up[e], self.up_s[e]), deq(self.gate[e], self.gate_s[e])
            w2 = deq(self.w2[e], self.w2_s[e])
            for t in range(self.n):
                for s in range(self.k):
                    if self.ids[t, s] == e:
                        u, g = up @ x[t], gate @ x[t]
                        out[t] += self.weights[t, s] * (w2 @ (u * g / (1 + np.exp(-g))))
        return out
