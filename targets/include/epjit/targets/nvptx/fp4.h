// sm100a FP4 (E2M1) in hardware. cvt.rn.satfinite.e2m1x2.f32 d, a, b converts
// two values into one byte with a in the HIGH nibble and b in the low one (as
// the fp8 pairs), so operands are swapped to keep element 2i in the low nibble.
// satfinite clamps to +-6, the saturating rule; the MX quantize never hands it
// a NaN or an Inf (such a block has the NaN scale and stores zero codes).
// cvt.rn.f16x2.e2m1x2 decodes a byte into two exact halves, the low nibble in
// the low half. The scale is applied as the software codec applies it: the
// value converted is x / 2^e, here x * 2^-e, the same bits (a power of two and
// its reciprocal are both exact, so each product and quotient is the one
// correctly rounded value of the same real number).
#pragma once

#include "epjit/targets/nvptx/device.h"

namespace epjit::prim::ptx_cvt_e2m1x2 {

// Element `first` in the low nibble of the byte returned.
EPJIT_DEVICE uint32_t pack2(float first, float second) {
  unsigned short pair;
  asm("{ .reg .b8 e2m1x2;\n\t"
      "cvt.rn.satfinite.e2m1x2.f32 e2m1x2, %1, %2;\n\t"
      "mov.b16 %0, {e2m1x2, 0};\n\t}"
      : "=h"(pair)
      : "f"(second), "f"(first));
  return pair;
}

// The two values of the byte `codes`, the low nibble first.
EPJIT_DEVICE void unpack2(uint32_t codes, float& first, float& second) {
  unsigned halves;
  asm("{ .reg .b8 low, high;\n\t"
      "mov.b16 {low, high}, %1;\n\t"
      "cvt.rn.f16x2.e2m1x2 %0, low;\n\t}"
      : "=r"(halves)
      : "h"(static_cast<unsigned short>(codes & 0xFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(first) : "h"(static_cast<unsigned short>(halves & 0xFFFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(second) : "h"(static_cast<unsigned short>(halves >> 16)));
}

template <bool Aligned, typename Src>
EPJIT_DEVICE void quantize_fp4_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
  uint32_t packed = 0;
  if (!e8m0_is_nan(scale)) {
    float x[8];
    load_chunk8<Aligned>(src, n, x);
    const float reciprocal = 1.0f / e8m0_as_float(scale);  // exact: a power of two in [2^-127, 2^127]
#pragma unroll
    for (int i = 0; i < 4; ++i) packed |= pack2(x[2 * i] * reciprocal, x[2 * i + 1] * reciprocal) << (8 * i);
  }
  store_nibbles8<Aligned>(dst, n, packed);
}

template <bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp4_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
  const uint32_t packed = load_nibbles8<Aligned>(src, n);
  const float factor = e8m0_as_float(scale);  // NaN for the NaN scale: the block decodes to NaN
  float x[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    unpack2(packed >> (8 * i), x[2 * i], x[2 * i + 1]);
    x[2 * i] *= factor;
    x[2 * i + 1] *= factor;
  }
  store_chunk8<Aligned>(dst, n, x);
}

}  // namespace epjit::prim::ptx_cvt_e2m1x2
