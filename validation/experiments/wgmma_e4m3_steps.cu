// Measures the H200's FP8 tensor-core accumulation: single and chained
// `wgmma.mma_async.m64n8k32.f32.e4m3.e4m3` steps on random operands, written out for the
// model fit (docs/hopper.md, "The FP8 tensor cores' accumulation").
//
// Build and run on an sm_90a machine:
//   nvcc -O2 -arch=sm_90a -o /tmp/w8 validation/experiments/wgmma_e4m3_steps.cu
//   /tmp/w8 OUT.bin [problems] [seed]
//
// OUT.bin: a header of 4 u32 (magic 0x38475753, problems, steps, seed), then per problem
// A [steps][64][32] u8, B [8][32·steps] u8 (token-major, k innermost), C [64][8] f32 (the
// initial accumulator), D [steps][64][8] f32 (the accumulator after each step), u32 flags
// (bit 0: the first step ran with scale-d false, ignoring C).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

constexpr int STEPS = 4;

__global__ void steps_kernel(const uint8_t *A, const uint8_t *B, const float *C, float *D,
                             const uint32_t *flags) {
    // Activations as the layer holds them: 8 rows of 128 bytes, 128B swizzle, 1024-aligned.
    __shared__ __align__(1024) uint8_t bs[8 * 128];
    const int p = blockIdx.x, t = threadIdx.x, w = t / 32, l = t % 32;
    const uint8_t *Bp = B + p * 8 * 32 * STEPS;
    for (int i = t; i < 8 * 128; i += 128) {
        int n = i / 128, kb = i % 128;
        bs[n * 128 + (((kb / 16) ^ (n % 8)) * 16) + kb % 16] = Bp[n * 128 + kb];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const int r0 = 16 * w + l / 4, c0 = 2 * (l % 4);
    const float *Cp = C + p * 512;
    float d0 = Cp[r0 * 8 + c0], d1 = Cp[r0 * 8 + c0 + 1];
    float d2 = Cp[(r0 + 8) * 8 + c0], d3 = Cp[(r0 + 8) * 8 + c0 + 1];
    const uint32_t first_scale_d = (flags[p] & 1) ? 0 : 1;
    uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(bs));
    for (int s = 0; s < STEPS; ++s) {
        const uint8_t *Ap = A + (p * STEPS + s) * 64 * 32;
        uint32_t a[4];
        // a0: row r0, bytes 4(l%4)..+3; a1: row r0+8; a2/a3: the same 16 bytes further in K.
        for (int j = 0; j < 4; ++j) {
            int row = r0 + 8 * (j & 1), kb = 4 * (l % 4) + 16 * (j >> 1);
            uint32_t v;
            memcpy(&v, Ap + row * 32 + kb, 4);
            a[j] = v;
        }
        uint64_t lo = ((base >> 4) & 0x3FFF) | (1u << 16);
        lo += s * 2;  // 32 bytes per k32 step
        uint64_t desc = lo | (uint64_t((1u << 30) | (1024 >> 4)) << 32);
        uint32_t sd = s == 0 ? first_scale_d : 1;
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %8, 0;\n"
            "wgmma.fence.sync.aligned;\n"
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, "
            "{%4, %5, %6, %7}, %9, p, 1, 1;\n"
            "wgmma.commit_group.sync.aligned;\n"
            "wgmma.wait_group.sync.aligned 0;\n}\n"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(sd), "l"(desc));
        float *Dp = D + (p * STEPS + s) * 512;
        Dp[r0 * 8 + c0] = d0;
        Dp[r0 * 8 + c0 + 1] = d1;
        Dp[(r0 + 8) * 8 + c0] = d2;
        Dp[(r0 + 8) * 8 + c0 + 1] = d3;
    }
}

static double e4m3(uint8_t b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
    return s ? -v : v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT.bin [problems] [seed]\n", argv[0]);
        return 2;
    }
    const int P = argc > 2 ? atoi(argv[2]) : 512;
    const uint32_t seed = argc > 3 ? atoi(argv[3]) : 1;
    std::mt19937_64 rng(seed);
    auto u = [&](uint64_t n) { return rng() % n; };
    std::vector<uint8_t> A(size_t(P) * STEPS * 64 * 32), B(size_t(P) * 8 * 32 * STEPS);
    std::vector<float> C(size_t(P) * 512), D(size_t(P) * STEPS * 512);
    std::vector<uint32_t> flags(P);
    // A finite E4M3 byte: mode 0 any, mode 1 exponent field in [lo, hi], mode 2 zero or a
    // power-of-two-spaced weight |e2m1|·2^c like the prepared MXFP4 weights.
    auto byte = [&](int mode, int lo, int hi) -> uint8_t {
        for (;;) {
            uint8_t b;
            if (mode == 0) {
                b = uint8_t(u(256));
            } else if (mode == 1) {
                b = uint8_t((u(2) << 7) | ((lo + u(hi - lo + 1)) << 3) | u(8));
            } else {
                static const uint8_t mag[8] = {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C};
                int m = mag[u(8)];
                if (m) m += int(u(5) * 8) - 16;  // shift the binade by up to ±2
                b = uint8_t((u(2) << 7) | m);
            }
            if ((b & 0x7F) != 0x7F) return b;
        }
    };
    for (int p = 0; p < P; ++p) {
        int kind = p % 4;  // 0 any bytes, 1 narrow exponents, 2 weight-like × narrow, 3 wide
        flags[p] = (p / 4) % 3 == 0 ? 1 : 0;
        for (int i = 0; i < STEPS * 64 * 32; ++i) {
            A[size_t(p) * STEPS * 2048 + i] =
                kind == 0 ? byte(0, 0, 0) : kind == 2 ? byte(2, 0, 0) : kind == 1 ? byte(1, 5, 9) : byte(1, 1, 14);
        }
        for (int i = 0; i < 8 * 32 * STEPS; ++i) {
            B[size_t(p) * 1024 + i] = kind == 0 ? byte(0, 0, 0) : kind == 3 ? byte(1, 1, 14) : byte(1, 4, 10);
        }
        for (int i = 0; i < 512; ++i) {
            int r = int(u(10));
            float c;
            if (r == 0) {
                c = 0.0f;
            } else {
                int e = int(u(40)) - 20;
                c = std::ldexp(float(0x800000 | u(0x800000)), e - 23);
                if (u(2)) c = -c;
            }
            C[size_t(p) * 512 + i] = c;
        }
    }
    uint8_t *dA, *dB;
    float *dC, *dD;
    uint32_t *dF;
    cudaMalloc(&dA, A.size());
    cudaMalloc(&dB, B.size());
    cudaMalloc(&dC, C.size() * 4);
    cudaMalloc(&dD, D.size() * 4);
    cudaMalloc(&dF, flags.size() * 4);
    cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dF, flags.data(), flags.size() * 4, cudaMemcpyHostToDevice);
    steps_kernel<<<P, 128>>>(dA, dB, dC, dD, dF);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        fprintf(stderr, "kernel: %s\n", cudaGetErrorString(err));
        return 1;
    }
    cudaMemcpy(D.data(), dD, D.size() * 4, cudaMemcpyDeviceToHost);
    // Sanity: how often the exact sum rounded to nearest is what the GPU gave, per step.
    size_t same = 0, total = 0, far = 0;
    for (int p = 0; p < P; ++p) {
        for (int m = 0; m < 64; ++m) {
            for (int n = 0; n < 8; ++n) {
                double acc = (flags[p] & 1) ? 0.0 : C[size_t(p) * 512 + m * 8 + n];
                for (int s = 0; s < STEPS; ++s) {
                    double exact = acc;
                    for (int k = 0; k < 32; ++k)
                        exact += e4m3(A[(size_t(p) * STEPS + s) * 2048 + m * 32 + k]) *
                                 e4m3(B[size_t(p) * 1024 + n * 128 + 32 * s + k]);
                    float got = D[(size_t(p) * STEPS + s) * 512 + m * 8 + n];
                    same += float(exact) == got;
                    far += std::fabs(got - exact) > 1e-2 * std::fabs(exact) + 1e-30;
                    ++total;
                    acc = got;
                }
            }
        }
    }
    printf("steps %zu, exact-rounded %zu (%.1f%%), off by more than 1%%: %zu\n", total, same,
           100.0 * same / total, far);
    FILE *f = fopen(argv[1], "wb");
    uint32_t hdr[4] = {0x38475753u, uint32_t(P), STEPS, seed};
    fwrite(hdr, 4, 4, f);
    for (int p = 0; p < P; ++p) {
        fwrite(&A[size_t(p) * STEPS * 2048], 1, STEPS * 2048, f);
        fwrite(&B[size_t(p) * 1024], 1, 1024, f);
        fwrite(&C[size_t(p) * 512], 4, 512, f);
        fwrite(&D[size_t(p) * STEPS * 512], 4, STEPS * 512, f);
        fwrite(&flags[p], 4, 1, f);
    }
    fclose(f);
    return 0;
}
