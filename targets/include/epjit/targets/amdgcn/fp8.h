// v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32 (and their decodes) with an explicit
// fmed3 clamp to the format's max: the hardware does not saturate by default
// (overflow gives NaN on gfx950/gfx1250, 0x80 on gfx942). The hardware's
// formats are FNUZ on gfx942 and OCP on gfx950/gfx1250; ep-lower-numerics
// picks this method only for the target's own formats.
#pragma once

#include "epjit/targets/amdgcn/device.h"

namespace epjit::prim {

// v_cvt_pk_fp8_f32 and friends as the fp8 chunks' codec (common/chunks.h).
struct AmdgcnPkFp8Codec {
  static constexpr bool is_e5m2(Fp8Format f) { return f == Fp8Format::E5M2 || f == Fp8Format::E5M2FNUZ; }

  // Four values, saturated, into one dword: x[0] in byte 0 ... x[3] in byte 3.
  template <Fp8Format F>
  EPJIT_DEVICE static uint32_t pack4(const float* x) {
    constexpr float max = fp8_max(F);
    float a = x[0], b = x[1], c = x[2], d = x[3];
    a = __builtin_amdgcn_fmed3f(a, -max, max);
    b = __builtin_amdgcn_fmed3f(b, -max, max);
    c = __builtin_amdgcn_fmed3f(c, -max, max);
    d = __builtin_amdgcn_fmed3f(d, -max, max);
    int word;
    if constexpr (is_e5m2(F)) {
      word = __builtin_amdgcn_cvt_pk_bf8_f32(a, b, 0, false);
      word = __builtin_amdgcn_cvt_pk_bf8_f32(c, d, word, true);
    } else {
      word = __builtin_amdgcn_cvt_pk_fp8_f32(a, b, 0, false);
      word = __builtin_amdgcn_cvt_pk_fp8_f32(c, d, word, true);
    }
    return uint32_t(word);
  }

  template <Fp8Format F>
  EPJIT_DEVICE static void unpack4(uint32_t word, float* x) {
    typedef float float2_t __attribute__((ext_vector_type(2)));
    float2_t lo, hi;
    if constexpr (is_e5m2(F)) {
      lo = __builtin_amdgcn_cvt_pk_f32_bf8(int(word), false);
      hi = __builtin_amdgcn_cvt_pk_f32_bf8(int(word), true);
    } else {
      lo = __builtin_amdgcn_cvt_pk_f32_fp8(int(word), false);
      hi = __builtin_amdgcn_cvt_pk_f32_fp8(int(word), true);
    }
    x[0] = lo.x;
    x[1] = lo.y;
    x[2] = hi.x;
    x[3] = hi.y;
  }
};

// ConversionMethod::amdgcn_pk_fp8.
struct amdgcn_pk_fp8 : Fp8Chunks<AmdgcnPkFp8Codec> {};

}  // namespace epjit::prim
