// sm100's FP4 conversions (cvt.rn.satfinite.e2m1x2.f32, cvt.rn.f16x2.e2m1x2)
// against numerics.h without a Blackwell: the CUDA toolkit's cuda_fp4.h runs
// those instructions on sm_100a and, everywhere else (this host too), its
// own C++ model of them. That model must give encode_fp4_e2m1's codes for
// every non-NaN float32 (a sweep of the whole bit space), decode_fp4_e2m1's
// values for every code, and pack a pair the way the sm100 prelude lays it
// out (element 0 in the low nibble), with the operand order the prelude uses.
#include <cuda_fp4.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "epjit/numerics.h"

namespace epjit {
namespace {

float from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

TEST(CudaFp4Reference, EncodeMatchesForEveryNonNanFloatOfTheSweep) {
  uint64_t checked = 0, nan_sign_differences = 0;
  // Every 31st bit pattern (139 million floats, every exponent and sign),
  // then every float from 0 to 8 in steps of 2^-16 and the thresholds.
  auto check = [&](float x) {
    const unsigned cuda = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
    const unsigned ours = encode_fp4_e2m1(x);
    if (std::isnan(x)) {
      // NVIDIA sends every NaN to +6 (0x7); numerics.h keeps the sign. An MX
      // block holding a NaN stores zero codes, so no kernel converts one.
      EXPECT_EQ(cuda, 0x7u);
      nan_sign_differences += cuda != ours;
      return;
    }
    ++checked;
    ASSERT_EQ(cuda, ours) << "x = " << x << " (bits 0x" << std::hex << [&] {
      uint32_t b;
      std::memcpy(&b, &x, 4);
      return b;
    }() << ")";
  };
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 31) {
    check(from_bits(uint32_t(bits)));
    if (HasFatalFailure()) return;
  }
  for (int i = -(8 << 16); i <= (8 << 16); ++i) {
    check(float(i) / 65536.0f);
    if (HasFatalFailure()) return;
  }
  for (float threshold : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f}) {
    for (float x : {threshold, std::nextafter(threshold, 0.0f), std::nextafter(threshold, 10.0f)}) {
      check(x);
      check(-x);
    }
  }
  EXPECT_GT(checked, uint64_t(138'000'000));
  EXPECT_GT(nan_sign_differences, 0u) << "the sweep meets negative NaNs";
}

TEST(CudaFp4Reference, DecodeMatchesForEveryCode) {
  for (unsigned code = 0; code < 16; ++code) {
    const __half_raw raw = __nv_cvt_fp4_to_halfraw(__nv_fp4_storage_t(code), __NV_E2M1);
    const float cuda = __half2float(__half(raw));
    const float ours = decode_fp4_e2m1(uint8_t(code));
    EXPECT_EQ(std::signbit(cuda), std::signbit(ours)) << code;
    EXPECT_EQ(cuda, ours) << code;
  }
}

TEST(CudaFp4Reference, APairPutsTheFirstValueInTheLowNibble) {
  // cuda_fp4.h packs float2{x, y} with `cvt.rn.satfinite.e2m1x2.f32 d, y, x`
  // on sm_100a, as the sm100 prelude's pack2(first, second) does.
  const __nv_fp4x2_storage_t pair = __nv_cvt_float2_to_fp4x2(float2{1.0f, -6.0f}, __NV_E2M1, cudaRoundNearest);
  EXPECT_EQ(unsigned(pair), 0xF2u);
  EXPECT_EQ(unsigned(pair) & 0xF, encode_fp4_e2m1(1.0f));
  EXPECT_EQ(unsigned(pair) >> 4, encode_fp4_e2m1(-6.0f));
}

}  // namespace
}  // namespace epjit
