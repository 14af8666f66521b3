// Reads f32 bit patterns (hex, one per line) on stdin and prints, per input, what NVIDIA's
// own host-side emulation in cuda_fp4.hpp / cuda_fp8.hpp makes of it. moegen's codecs are
// compared against these lines by tests/tests/cuda_header_oracle.rs.
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

static float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

int main() {
  unsigned int bits = 0;
  // The pair partner exercises the x2 forms' operand order.
  const float partner = 1.5f;
  while (std::scanf("%x", &bits) == 1) {
    const float x = from_bits(bits);
    const float2 pair = make_float2(x, partner);
    std::printf("%08x %x %02x %02x %02x %02x %02x %02x %04x\n", bits,
                (unsigned)__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest),
                (unsigned)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3),
                (unsigned)__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero),
                (unsigned)__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf),
                (unsigned)__nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundZero),
                (unsigned)__nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundPosInf),
                (unsigned)__nv_cvt_float2_to_fp4x2(pair, __NV_E2M1, cudaRoundNearest),
                (unsigned)__nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3));
  }
  return 0;
}
