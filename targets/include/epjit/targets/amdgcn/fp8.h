// v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32 (and their decodes) with an explicit
// fmed3 clamp to the format's max: the hardware does not saturate by default
// (overflow gives NaN on gfx950/gfx1250, 0x80 on gfx942). The hardware's
// formats are FNUZ on gfx942 and OCP on gfx950/gfx1250; ep-lower-numerics
// picks this method only for the target's own formats.
#pragma once

#include "epjit/targets/amdgcn/device.h"

namespace epjit::prim::amdgcn_pk_fp8 {

constexpr bool is_e5m2(Fp8Format f) { return f == Fp8Format::E5M2 || f == Fp8Format::E5M2FNUZ; }

// Four values, saturated, into one dword: x[0] in byte 0 ... x[3] in byte 3.
template <Fp8Format F>
EPJIT_DEVICE uint32_t pack4(const float* x) {
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
EPJIT_DEVICE void unpack4(uint32_t word, float* x) {
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

template <Fp8Format F, bool Aligned, typename Src>
EPJIT_DEVICE void quantize_fp8_chunk_scaled(const Src* src, int8_t* dst, size_t n, float scale) {
  detail::quantize_fp8_chunk_with<Aligned>(src, dst, n, &scale, [](const float* x) { return pack4<F>(x); });
}

template <Fp8Format F, bool Aligned, typename Src>
EPJIT_DEVICE void quantize_fp8_chunk(const Src* src, int8_t* dst, size_t n) {
  detail::quantize_fp8_chunk_with<Aligned>(src, dst, n, nullptr, [](const float* x) { return pack4<F>(x); });
}

template <Fp8Format F, bool Aligned, typename Src>
EPJIT_DEVICE void quantize_fp8_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
  detail::quantize_fp8_mx<Aligned>(dst, n, scale, [&](float s) { quantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, s); });
}

template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp8_chunk_scaled(const int8_t* src, Dst* dst, size_t n, float scale) {
  uint32_t lo, hi;
  load_codes8<Aligned>(src, n, lo, hi);
  float x[8];
  unpack4<F>(lo, x);
  unpack4<F>(hi, x + 4);
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = x[i] * scale;
  store_chunk8<Aligned>(dst, n, x);
}

template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp8_chunk(const int8_t* src, Dst* dst, size_t n) {
  dequantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, 1.0f);
}

template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp8_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
  dequantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, e8m0_as_float(scale));
}

template <Fp8Format F>
struct Codec {
  EPJIT_DEVICE static void unpack4(uint32_t word, float* x) { amdgcn_pk_fp8::unpack4<F>(word, x); }
};

template <Fp8Format F, int Chunk, bool Aligned, typename Dst, typename Source, typename... More>
EPJIT_DEVICE void sum_fp8_chunk(Dst* dst, size_t n, size_t start, const Source& first, const More&... more) {
  static_assert(Chunk == 16, "a chunk is 16 bytes of codes");
  detail::sum_sources<Chunk, Aligned, detail::WidenCodes<Codec<F>>>(dst, n, start, first, more...);
}
template <Fp8Format F, int Chunk, int Unroll, bool Aligned, typename Dst, typename Source, typename... More>
EPJIT_DEVICE void sum_fp8_chunks(Dst* dst, size_t count, size_t start, size_t stride, const Source& first,
                                 const More&... more) {
  static_assert(Chunk == 16, "a chunk is 16 bytes of codes");
  detail::sum_sources_unrolled<Chunk, Unroll, Aligned, detail::WidenCodes<Codec<F>>>(dst, count, start, stride,
                                                                                     first, more...);
}

}  // namespace epjit::prim::amdgcn_pk_fp8
