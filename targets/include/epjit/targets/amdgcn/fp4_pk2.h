// gfx950 FP4: v_cvt_scalef32_pk_fp4_f32 converts two values per instruction
// into the byte chosen by dst_sel (a low nibble, b high), dividing by
// 2^exponent(scale); four calls fill a dword of eight values. The hardware
// reads only the scale's exponent field, so the E8M0 byte is passed as the
// exponent bits of a float (byte << 23). E2M1 conversion saturates to +-6.
#pragma once

#include "epjit/targets/amdgcn/device.h"

namespace epjit::prim::amdgcn_scalef32_pk_fp4 {

EPJIT_DEVICE float scale_operand(int8_t scale) {
  return __builtin_bit_cast(float, uint32_t(static_cast<uint8_t>(scale)) << 23);
}

template <bool Aligned, typename Src>
EPJIT_DEVICE void quantize_fp4_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
  if (e8m0_is_nan(scale)) return store_nibbles8<Aligned>(dst, n, 0u);
  float x[8];
  load_chunk8<Aligned>(src, n, x);
  const float s = scale_operand(scale);
  unsigned packed = 0;
  packed = __builtin_amdgcn_cvt_scalef32_pk_fp4_f32(packed, x[0], x[1], s, 0);
  packed = __builtin_amdgcn_cvt_scalef32_pk_fp4_f32(packed, x[2], x[3], s, 1);
  packed = __builtin_amdgcn_cvt_scalef32_pk_fp4_f32(packed, x[4], x[5], s, 2);
  packed = __builtin_amdgcn_cvt_scalef32_pk_fp4_f32(packed, x[6], x[7], s, 3);
  store_nibbles8<Aligned>(dst, n, packed);
}

// v_cvt_scalef32_pk_f32_fp4: the two values of byte src_sel times the scale.
template <bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp4_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
  typedef float float2_t __attribute__((ext_vector_type(2)));
  const unsigned packed = load_nibbles8<Aligned>(src, n);
  float x[8];
  if (e8m0_is_nan(scale)) {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = e8m0_as_float(scale);
  } else {
    const float s = scale_operand(scale);
    const float2_t p0 = __builtin_amdgcn_cvt_scalef32_pk_f32_fp4(packed, s, 0);
    const float2_t p1 = __builtin_amdgcn_cvt_scalef32_pk_f32_fp4(packed, s, 1);
    const float2_t p2 = __builtin_amdgcn_cvt_scalef32_pk_f32_fp4(packed, s, 2);
    const float2_t p3 = __builtin_amdgcn_cvt_scalef32_pk_f32_fp4(packed, s, 3);
    x[0] = p0.x, x[1] = p0.y, x[2] = p1.x, x[3] = p1.y, x[4] = p2.x, x[5] = p2.y, x[6] = p3.x, x[7] = p3.y;
  }
  store_chunk8<Aligned>(dst, n, x);
}

}  // namespace epjit::prim::amdgcn_scalef32_pk_fp4
