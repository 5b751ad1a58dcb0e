// Lane chunk primitives every target shares (host and device): reductions,
// copies, accumulation, and the numerics.h ("software") conversions. The
// hardware conversions live in the amdgcn/ and nvptx/ headers with the same
// signatures, in namespaces named after ep's conversion methods.
#pragma once

#include "epjit/targets/common/rows.h"

namespace epjit::prim {

// ---------------------------------------------------------------- reductions

template <Reduce K, int Chunk, typename Src>
EPJIT_HD float chunk_reduce(const Src* src, size_t n) {
  float acc = reduce_identity<K>();
  for (size_t i = 0; i < n; ++i) {
    const float x = load_value(src, i);
    acc = combine<K>(acc, K == Reduce::AbsMax ? numerics_detail::abs_of(x) : x);
  }
  return acc;
}

// ---------------------------------------------------------------- copy, accumulate

template <int Chunk, bool Aligned, typename T>
EPJIT_HD void copy_chunk(const T* src, T* dst, size_t n) {
  if (Aligned && n == size_t(Chunk) && sizeof(T) * Chunk == sizeof(Vec16)) {
    *reinterpret_cast<Vec16*>(dst) = *reinterpret_cast<const Vec16*>(src);
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}

// bf16 <-> f32 rows: exact one way, round-to-nearest-even the other.
template <int Chunk, bool Aligned, typename Src, typename Dst>
EPJIT_HD void copy_chunk(const Src* src, Dst* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) store_value(dst, i, load_value(src, i));
}

// acc[i] = fma(weight, src[i], acc[i]): one explicit fused multiply-add on
// every target, so GPU contraction and host code cannot disagree.
template <int Chunk, bool Aligned, typename Src>
EPJIT_HD void accumulate_chunk(const Src* src, float* acc, size_t n, float weight) {
  for (size_t i = 0; i < n; ++i) acc[i] = EPJIT_FMAF(weight, load_value(src, i), acc[i]);
}

// ---------------------------------------------------------------- MX scales

namespace detail {

// One lane's fp8 chunk, for every method: load up to 8 values, divide by
// *scale when there is one, pack four at a time with the method's `pack4`
// (four floats -> one dword, element 0 in the low byte), store.
template <bool Aligned, typename Src, typename Pack4>
EPJIT_HD void quantize_fp8_chunk_with(const Src* src, int8_t* dst, size_t n, const float* scale, Pack4 pack4) {
  float x[8];
  load_chunk8<Aligned>(src, n, x);
  if (scale) {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = x[i] / *scale;
  }
  store_codes8<Aligned>(dst, n, pack4(x), pack4(x + 4));
}

// The MX rule every method shares: a NaN scale (0xFF) stores zero codes (the
// scale carries the NaN); otherwise convert with x / 2^e.
template <bool Aligned, typename Scaled>
EPJIT_HD void quantize_fp8_mx(int8_t* dst, size_t n, int8_t scale, Scaled scaled) {
  if (e8m0_is_nan(scale)) return store_codes8<Aligned>(dst, n, 0u, 0u);
  scaled(e8m0_as_float(scale));
}

}  // namespace detail

// ---------------------------------------------------------------- numerics.h codecs

namespace software {

template <Fp8Format F>
EPJIT_HD uint32_t pack4(const float* x) {
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) word |= uint32_t(encode_fp8(x[i], F, Overflow::Saturate)) << (8 * i);
  return word;
}

template <Fp8Format F, bool Aligned, typename Src>
EPJIT_HD void quantize_fp8_chunk_scaled(const Src* src, int8_t* dst, size_t n, float scale) {
  detail::quantize_fp8_chunk_with<Aligned>(src, dst, n, &scale, [](const float* x) { return pack4<F>(x); });
}

template <Fp8Format F, bool Aligned, typename Src>
EPJIT_HD void quantize_fp8_chunk(const Src* src, int8_t* dst, size_t n) {
  detail::quantize_fp8_chunk_with<Aligned>(src, dst, n, nullptr, [](const float* x) { return pack4<F>(x); });
}

template <Fp8Format F, bool Aligned, typename Src>
EPJIT_HD void quantize_fp8_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
  detail::quantize_fp8_mx<Aligned>(dst, n, scale, [&](float s) { quantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, s); });
}

template <bool Aligned, typename Src>
EPJIT_HD void quantize_fp4_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
  uint32_t packed = 0;
  if (!e8m0_is_nan(scale)) {
    float x[8];
    load_chunk8<Aligned>(src, n, x);
    const float divisor = e8m0_as_float(scale);
#pragma unroll
    for (int i = 0; i < 8; ++i) packed |= uint32_t(encode_fp4_e2m1(x[i] / divisor)) << (4 * i);
  }
  store_nibbles8<Aligned>(dst, n, packed);
}

template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_HD void dequantize_fp8_chunk_scaled(const int8_t* src, Dst* dst, size_t n, float scale) {
  uint32_t word[2];
  load_codes8<Aligned>(src, n, word[0], word[1]);
  float x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = decode_fp8(uint8_t(word[i / 4] >> (8 * (i % 4))), F) * scale;
  store_chunk8<Aligned>(dst, n, x);
}

template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_HD void dequantize_fp8_chunk(const int8_t* src, Dst* dst, size_t n) {
  dequantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, 1.0f);
}

template <Fp8Format F, bool Aligned, typename Dst>
EPJIT_HD void dequantize_fp8_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
  dequantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, e8m0_as_float(scale));
}

template <bool Aligned, typename Dst>
EPJIT_HD void dequantize_fp4_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
  const uint32_t packed = load_nibbles8<Aligned>(src, n);
  const float factor = e8m0_as_float(scale);
  float x[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = decode_fp4_e2m1(uint8_t(packed >> (4 * i))) * factor;
  store_chunk8<Aligned>(dst, n, x);
}

}  // namespace software
}  // namespace epjit::prim
