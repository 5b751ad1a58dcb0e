// sm90 fp8: cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b puts a in the HIGH
// byte and b in the low byte (the opposite of AMD), so operands are swapped
// to keep element 0 in the low byte. satfinite clamps to +-max (and Inf to
// max), which is the saturating rule. Decoding uses the numerics.h codec.
#pragma once

#include "epjit/targets/nvptx/device.h"

namespace epjit::prim::ptx_cvt_satfinite {

template <Fp8Format F>
EPJIT_DEVICE uint32_t pack2(float first, float second) {
  unsigned short pair;
  if constexpr (F == Fp8Format::E5M2) {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(second), "f"(first));
  } else {
    static_assert(F == Fp8Format::E4M3FN, "sm90 converts e4m3fn and e5m2 in hardware");
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(second), "f"(first));
  }
  return pair;
}

template <Fp8Format F>
EPJIT_DEVICE uint32_t pack4(const float* x) {
  return pack2<F>(x[0], x[1]) | (pack2<F>(x[2], x[3]) << 16);
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
EPJIT_DEVICE void dequantize_fp8_chunk(const int8_t* src, Dst* dst, size_t n) {
  software::dequantize_fp8_chunk<F, Aligned>(src, dst, n);
}
template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp8_chunk_scaled(const int8_t* src, Dst* dst, size_t n, float scale) {
  software::dequantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, scale);
}
template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_DEVICE void dequantize_fp8_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
  software::dequantize_fp8_chunk_mx<F, Aligned>(src, dst, n, scale);
}

template <Fp8Format F, int Chunk, bool Aligned, typename Dst, typename Source, typename... More>
EPJIT_DEVICE void sum_fp8_chunk(Dst* dst, size_t n, size_t start, const Source& first, const More&... more) {
  software::sum_fp8_chunk<F, Chunk, Aligned>(dst, n, start, first, more...);
}
template <Fp8Format F, int Chunk, int Unroll, bool Aligned, typename Dst, typename Source, typename... More>
EPJIT_DEVICE void sum_fp8_chunks(Dst* dst, size_t count, size_t start, size_t stride, const Source& first,
                                 const More&... more) {
  software::sum_fp8_chunks<F, Chunk, Unroll, Aligned>(dst, count, start, stride, first, more...);
}

}  // namespace epjit::prim::ptx_cvt_satfinite
