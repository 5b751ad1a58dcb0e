// Instantiates every numerics.h entry point in device code. Compiled by nvcc
// (sm_90 cubin) and by clang-22 as HIP (gfx942, gfx950, gfx1250) in the
// numerics.device.* tests: any host-only construct or libm call fails there.
#include "epjit/numerics.h"

#if defined(__NVCC__)
#define EPJIT_TEST_KERNEL extern "C" __global__
#else
#define EPJIT_TEST_KERNEL extern "C" __attribute__((global))
#endif

EPJIT_TEST_KERNEL void exercise_numerics(const float* in, uint8_t* codes, uint16_t* halves, float* out,
                                          int n) {
  using namespace epjit;
  for (int i = 0; i < n; ++i) {
    const float x = in[i];
    codes[i] = uint8_t(encode_fp8(x, Fp8Format::E4M3FN) ^ encode_fp8(x, Fp8Format::E4M3FNUZ, Overflow::Saturate) ^
                       encode_fp8(x, Fp8Format::E5M2) ^ encode_fp8(x, Fp8Format::E5M2FNUZ) ^
                       encode_fp4_e2m1(x) ^ encode_e8m0(x));
    halves[i] = encode_bf16(x);
    out[i] = decode_fp8(codes[i], Fp8Format::E4M3FN) + decode_fp8(codes[i], Fp8Format::E5M2FNUZ) +
             decode_fp4_e2m1(codes[i]) + decode_e8m0(codes[i]) + decode_bf16(halves[i]) +
             fp8_max(Fp8Format::E4M3FNUZ);
  }
}

EPJIT_TEST_KERNEL void exercise_blocks(const float* in, uint8_t* codes, uint8_t* scales, float* fscales,
                                        float* out, int blocks) {
  using namespace epjit;
  for (int b = 0; b < blocks; ++b) {
    scales[b] = quantize_mx_block(in + b * kMxBlockSize, kMxBlockSize, MxElement::E2M1, codes + b * 16);
    dequantize_mx_block(codes + b * 16, kMxBlockSize, MxElement::E2M1, scales[b], out + b * kMxBlockSize);
    fscales[b] = quantize_fp8_block(in + b * 128, 128, Fp8Format::E4M3FN, codes + b * 128);
    dequantize_fp8_block(codes + b * 128, 128, Fp8Format::E4M3FN, fscales[b], out + b * 128);
  }
}
