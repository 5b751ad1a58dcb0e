// gfx1250 FP4: v_cvt_scalef32_pk8_fp4_f32 converts eight values (element i
// into nibble i) in one instruction, dividing by 2^exponent(scale). Decode
// uses v_cvt_scale_pk8_f32_fp4 with sel 0 and a uniform E8M0 scale of 1.0
// (0x7F7F7F7F), then multiplies by the block's power of two: the cross-lane
// meaning of other sel values is not confirmed.
#pragma once

#include "epjit/targets/amdgcn/device.h"

namespace epjit::prim::amdgcn_scalef32_pk8_fp4 {

template <bool Aligned, typename Src>
EPJIT_DEVICE void quantize_fp4_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
  typedef float float8_t __attribute__((ext_vector_type(8)));
  if (e8m0_is_nan(scale)) return store_nibbles8<Aligned>(dst, n, 0u);
  float x[8];
  load_chunk8<Aligned>(src, n, x);
  const float8_t v = {x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]};
  const float s = __builtin_bit_cast(float, uint32_t(static_cast<uint8_t>(scale)) << 23);
  store_nibbles8<Aligned>(dst, n, __builtin_amdgcn_cvt_scalef32_pk8_fp4_f32(v, s));
}

template <bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp4_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
  typedef float float8_t __attribute__((ext_vector_type(8)));
  const unsigned packed = load_nibbles8<Aligned>(src, n);
  const float8_t v = __builtin_amdgcn_cvt_scale_pk8_f32_fp4(packed, 0x7F7F7F7Fu, 0);
  const float factor = e8m0_as_float(scale);
  float x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = v[i] * factor;
  store_chunk8<Aligned>(dst, n, x);
}

}  // namespace epjit::prim::amdgcn_scalef32_pk8_fp4
