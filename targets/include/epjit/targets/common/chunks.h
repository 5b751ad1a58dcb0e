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
    acc = combine<K>(acc, K == Reduce::AbsMax || K == Reduce::AbsMaxNum ? numerics_detail::abs_of(x) : x);
  }
  return acc;
}

// ---------------------------------------------------------------- copy, accumulate

// One destination of a fan-out: its row (at the row's first element) and
// whether it is written.
template <typename T>
struct RowDest {
  T* row;
  bool live;
};
template <typename T>
EPJIT_HD RowDest<T> row_dest(bool live, T* row) {
  return {row, live};
}

// At most one chunk of a row is partial, the one holding its end: copied
// element by element if it is among the lane's chunks start + k * stride.
template <int Chunk, int Unroll, typename T>
EPJIT_HD void copy_partial_chunk(const T* src, T* dst, size_t count, size_t start, size_t stride) {
  const size_t tail = count - count % Chunk;
  if (tail != count && tail >= start && (tail - start) % stride == 0 && (tail - start) / stride < size_t(Unroll))
    for (size_t i = tail; i < count; ++i) dst[i] = src[i];
}

// Chunks of a row at elements start + k * stride (k < Unroll), each clipped
// to the row's `count` elements, to every live destination: each full
// aligned chunk is loaded once (Unroll loads in flight per lane) before the
// first store, then stored to each destination.
template <int Chunk, int Unroll, bool Aligned, typename T, typename... More>
EPJIT_HD void fanout_chunks(const T* src, size_t count, size_t start, size_t stride, const RowDest<T>& first,
                            const More&... more) {
  constexpr int kDests = 1 + int(sizeof...(More));
  const RowDest<T> dests[kDests] = {first, more...};
  if constexpr (Aligned && sizeof(T) * Chunk == sizeof(Vec16)) {
    Vec16 held[Unroll];
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      const size_t at = start + size_t(k) * stride;
      if (at + Chunk <= count) held[k] = load_global(reinterpret_cast<const Vec16*>(src + at));
    }
#pragma unroll
    for (int d = 0; d < kDests; ++d) {
      if (!dests[d].live) continue;
#pragma unroll
      for (int k = 0; k < Unroll; ++k) {
        const size_t at = start + size_t(k) * stride;
        if (at + Chunk <= count) store_global(reinterpret_cast<Vec16*>(dests[d].row + at), held[k]);
      }
    }
    for (int d = 0; d < kDests; ++d)
      if (dests[d].live) copy_partial_chunk<Chunk, Unroll>(src, dests[d].row, count, start, stride);
  } else {
    for (int d = 0; d < kDests; ++d) {
      if (!dests[d].live) continue;
      for (int k = 0; k < Unroll; ++k) {
        const size_t at = start + size_t(k) * stride;
        const size_t end = at + Chunk < count ? at + Chunk : count;
        for (size_t i = at; i < end; ++i) dests[d].row[i] = src[i];
      }
    }
  }
}

// Chunks of a row at elements start + k * stride (k < Unroll), each clipped
// to the row's `count` elements. Full aligned chunks are all loaded before
// the first store: Unroll 16-byte loads in flight per lane. A fan-out to one
// destination.
template <int Chunk, int Unroll, bool Aligned, typename T>
EPJIT_HD void copy_chunks(const T* src, T* dst, size_t count, size_t start, size_t stride) {
  fanout_chunks<Chunk, Unroll, Aligned>(src, count, start, stride, row_dest(true, dst));
}

// A lane's full chunks of a row, loaded before the code that decides where
// they go (ep.warp.copy_row_around): registers, not memory.
template <int Unroll>
struct HeldChunks {
  Vec16 chunk[Unroll];
};

// Loads the lane's full aligned chunks start + k * stride (k < Unroll) of
// the row's `count` elements; unaligned rows load nothing here.
template <int Chunk, int Unroll, bool Aligned, typename T>
EPJIT_HD HeldChunks<Unroll> hold_chunks(const T* src, size_t count, size_t start, size_t stride) {
  if constexpr (Aligned && sizeof(T) * Chunk == sizeof(Vec16)) {
    HeldChunks<Unroll> held;  // a chunk past the row is never stored: left unset
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      const size_t at = start + size_t(k) * stride;
      if (at + Chunk <= count) held.chunk[k] = load_global(reinterpret_cast<const Vec16*>(src + at));
    }
    return held;
  } else {
    return HeldChunks<Unroll>{};
  }
}

// Stores what hold_chunks loaded with the same arguments; the partial chunk
// (and an unaligned row's every chunk) comes from `src` now.
template <int Chunk, int Unroll, bool Aligned, typename T>
EPJIT_HD void put_chunks(const HeldChunks<Unroll>& held, const T* src, T* dst, size_t count, size_t start,
                         size_t stride) {
  if constexpr (Aligned && sizeof(T) * Chunk == sizeof(Vec16)) {
#pragma unroll
    for (int k = 0; k < Unroll; ++k) {
      const size_t at = start + size_t(k) * stride;
      if (at + Chunk <= count) store_global(reinterpret_cast<Vec16*>(dst + at), held.chunk[k]);
    }
    copy_partial_chunk<Chunk, Unroll>(src, dst, count, start, stride);
  } else {
    copy_chunks<Chunk, Unroll, false>(src, dst, count, start, stride);
  }
}

// bf16 <-> f32 rows: exact one way, round-to-nearest-even the other.
template <int Chunk, int Unroll, bool Aligned, typename Src, typename Dst>
EPJIT_HD void copy_chunks(const Src* src, Dst* dst, size_t count, size_t start, size_t stride) {
  for (int k = 0; k < Unroll; ++k) {
    const size_t at = start + size_t(k) * stride;
    const size_t end = at + Chunk < count ? at + Chunk : count;
    for (size_t i = at; i < end; ++i) store_value(dst, i, load_value(src, i));
  }
}

// i64 -> i32: a framework's int64 top-k ids into the op's int32 copy. A value
// outside int32 becomes INT32_MAX, which no expert id reaches, so the kernels
// reading the copy report an expert out of range instead of taking the
// wrapped low word for an expert. Every element of the lane's chunks is
// loaded before the first store (the compiler cannot tell the two rows
// apart, so a load after a store would wait for it): Unroll * Chunk loads in
// flight, element by element (no alignment asked of a framework's view).
template <int Chunk, int Unroll, bool Aligned>
EPJIT_HD void copy_chunks(const int64_t* src, int32_t* dst, size_t count, size_t start, size_t stride) {
  int64_t held[Unroll][Chunk];
#pragma unroll
  for (int k = 0; k < Unroll; ++k) {
    const size_t at = start + size_t(k) * stride;
#pragma unroll
    for (int i = 0; i < Chunk; ++i) held[k][i] = at + size_t(i) < count ? src[at + size_t(i)] : 0;
  }
#pragma unroll
  for (int k = 0; k < Unroll; ++k) {
    const size_t at = start + size_t(k) * stride;
#pragma unroll
    for (int i = 0; i < Chunk; ++i) {
      const int64_t value = held[k][i];
      if (at + size_t(i) < count)
        dst[at + size_t(i)] = value < -2147483648LL || value > 2147483647LL ? int32_t(2147483647) : int32_t(value);
    }
  }
}

// acc[i] = fma(weight, src[i], acc[i]): one explicit fused multiply-add on
// every target, so GPU contraction and host code cannot disagree.
template <int Chunk, bool Aligned, typename Src>
EPJIT_HD void accumulate_chunk(const Src* src, float* acc, size_t n, float weight) {
  for (size_t i = 0; i < n; ++i) acc[i] = EPJIT_FMAF(weight, load_value(src, i), acc[i]);
}

// ---------------------------------------------------------------- multi-row sums

// One source of a sum: whether it counts, and its row at the summed range's
// first element (bf16 bits, f32, or fp8 codes).
template <typename T>
struct RowSource {
  const T* row;
  bool live;
};
template <typename T>
EPJIT_HD RowSource<T> row_source(bool live, const T* row) {
  return {row, live};
}

// fp8 codes with one f32 scale per 128 elements; `scales` is the scale of
// the block holding the range's first element.
struct ScaledCodes {
  const int8_t* row;
  const float* scales;
  bool live;
};
EPJIT_HD ScaledCodes row_source(bool live, const int8_t* row, const float* scales) { return {row, scales, live}; }

// A row with its weight in a weighted sum (DeepEP's low-latency combine).
template <typename T>
struct WeightedRow {
  const T* row;
  float weight;
  bool live;
};
template <typename T>
EPJIT_HD WeightedRow<T> weighted_source(bool live, const T* row, float weight) {
  return {row, weight, live};
}

namespace detail {

// 16 bytes of a row from `at`: one vector load for a full aligned chunk,
// else its first `n` elements byte by byte, zero-filled past n. Each byte is
// shifted into its word at a constant position: a byte store into the
// vector at a variable index would keep it in memory (AMD promotes such a
// per-lane array to LDS: 16 KB of a 1024-lane block's, though only a row's
// tail ever takes this path).
template <bool Aligned, typename T>
EPJIT_HD Vec16 load16(const T* at, size_t n) {
  constexpr size_t kElements = 16 / sizeof(T);
  if (Aligned && n == kElements) return load_global(reinterpret_cast<const Vec16*>(at));
  const size_t bytes = n < kElements ? n * sizeof(T) : 16;
  const auto* from = reinterpret_cast<const unsigned char*>(at);
  Vec16 v = {{0, 0, 0, 0}};
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (size_t(i) < bytes) v.w[i / 4] |= uint32_t(from[i]) << (8 * (i % 4));
  return v;
}

// acc = the live sources' loaded chunks in source order: the first one's
// values widened to f32, plus the others', each widened only at its add
// (zeros when none is live). `at` is the chunk's first element.
// Weighted: acc = +0.0, then fma(row, weight, acc) for each live source in
// order: DeepEP's `acc += x * w` as its compiler emits it (nvcc contracts it
// to one fused multiply-add), so the bits are DeepEP's; a source whose
// product is -0.0 leaves +0.0 as DeepEP's does.
template <int Chunk, typename Widen, typename T, int kSources>
EPJIT_HD void add_in_order(const Vec16 (&raw)[kSources], const WeightedRow<T> (&sources)[kSources], size_t at,
                           float (&acc)[Chunk]) {
#pragma unroll
  for (int i = 0; i < Chunk; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int k = 0; k < kSources; ++k) {
    if (!sources[k].live) continue;
    float x[Chunk];
    Widen::widen(raw[k], RowSource<T>{sources[k].row, true}, at, x);
#pragma unroll
    for (int i = 0; i < Chunk; ++i) acc[i] = EPJIT_FMAF(x[i], sources[k].weight, acc[i]);
  }
}

template <int Chunk, typename Widen, typename Source, int kSources>
EPJIT_HD void add_in_order(const Vec16 (&raw)[kSources], const Source (&sources)[kSources], size_t at,
                           float (&acc)[Chunk]) {
#pragma unroll
  for (int i = 0; i < Chunk; ++i) acc[i] = 0.0f;
  bool any = false;
#pragma unroll
  for (int k = 0; k < kSources; ++k) {
    if (!sources[k].live) continue;
    float x[Chunk];
    Widen::widen(raw[k], sources[k], at, x);
#pragma unroll
    for (int i = 0; i < Chunk; ++i) acc[i] = any ? acc[i] + x[i] : x[i];
    any = true;
  }
}

// Elements [start, start + n) of every live source (n <= Chunk, the elements
// of 16 source bytes), each loaded as 16 bytes before the first add (the
// loads are independent, so all of them are in flight at once) and widened
// only at its add; then summed in source order: the first live source's
// values, plus the others', rounded once into dst. No live source: zeros.
// `Widen` has `void widen(const Vec16&, const Source&, size_t start, float (&)[Chunk])`.
template <int Chunk, bool Aligned, typename Widen, typename Dst, typename Source, typename... More>
EPJIT_HD void sum_sources(Dst* dst, size_t n, size_t start, const Source& first, const More&... more) {
  constexpr int kSources = 1 + int(sizeof...(More));
  const Source sources[kSources] = {first, more...};
  Vec16 raw[kSources];
#pragma unroll
  for (int k = 0; k < kSources; ++k)
    if (sources[k].live) raw[k] = load16<Aligned>(sources[k].row + start, n);
  float acc[Chunk];
  add_in_order<Chunk, Widen>(raw, sources, start, acc);
  store_row<Chunk, Aligned>(dst, n, acc);
}

// The same sum over Unroll chunks of a range of `count` elements, at start +
// u * stride, each clipped to the range (rows and dst at the range's first
// element): every live source of every chunk is loaded before the first
// add, so Unroll x live sources loads are in flight per lane. A chunk past
// the range has n = 0: no load, no store.
template <int Chunk, int Unroll, bool Aligned, typename Widen, typename Dst, typename Source, typename... More>
EPJIT_HD void sum_sources_unrolled(Dst* dst, size_t count, size_t start, size_t stride, const Source& first,
                                   const More&... more) {
  constexpr int kSources = 1 + int(sizeof...(More));
  const Source sources[kSources] = {first, more...};
  auto clipped = [&](size_t at) -> size_t {
    return at >= count ? 0 : count - at < size_t(Chunk) ? count - at : size_t(Chunk);
  };
  Vec16 raw[Unroll][kSources];
#pragma unroll
  for (int u = 0; u < Unroll; ++u) {
    const size_t at = start + size_t(u) * stride;
    const size_t n = clipped(at);
#pragma unroll
    for (int k = 0; k < kSources; ++k)
      if (sources[k].live) raw[u][k] = load16<Aligned>(sources[k].row + at, n);
  }
#pragma unroll
  for (int u = 0; u < Unroll; ++u) {
    const size_t at = start + size_t(u) * stride;
    const size_t n = clipped(at);
    float acc[Chunk];
    add_in_order<Chunk, Widen>(raw[u], sources, at, acc);
    store_row<Chunk, Aligned>(dst + at, n, acc);
  }
}

// bf16 bits (8 a chunk) and f32 (4 a chunk) widen exactly.
struct WidenRows {
  EPJIT_HD static void widen(const Vec16& v, const RowSource<uint16_t>&, size_t, float (&x)[8]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[2 * k] = decode_bf16(static_cast<uint16_t>(v.w[k] & 0xFFFFu));
      x[2 * k + 1] = decode_bf16(static_cast<uint16_t>(v.w[k] >> 16));
    }
  }
  EPJIT_HD static void widen(const Vec16& v, const RowSource<float>&, size_t, float (&x)[4]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = numerics_detail::float_of(v.w[k]);
  }
};

// fp8 codes (16 a chunk) of format F, decoded by the method's
// `Codec::unpack4<F>` (one dword of four codes -> four floats), times the
// block's scale for ScaledCodes (a chunk never straddles a block of 128).
template <typename Codec, Fp8Format F>
struct WidenCodes {
  EPJIT_HD static void widen(const Vec16& v, const RowSource<int8_t>&, size_t, float (&x)[16]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) Codec::template unpack4<F>(v.w[k], x + 4 * k);
  }
  EPJIT_HD static void widen(const Vec16& v, const ScaledCodes& source, size_t start, float (&x)[16]) {
    const float scale = source.scales[start / 128];
#pragma unroll
    for (int k = 0; k < 4; ++k) Codec::template unpack4<F>(v.w[k], x + 4 * k);
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = mul_rn(x[i], scale);
  }
};

}  // namespace detail

// dst[i] = sum over live sources of row[start + i], for i < n <= Chunk
// (Chunk: 8 for bf16 rows, 4 for f32 rows: 16 bytes of each source).
// Sources are RowSource<T> (plain sums) or WeightedRow<T> (add_in_order's
// fused multiply-adds).
template <int Chunk, bool Aligned, typename Dst, template <typename> class Source, typename T, typename... More>
EPJIT_HD void sum_chunk(Dst* dst, size_t n, size_t start, const Source<T>& first, const More&... more) {
  static_assert(Chunk * sizeof(T) == 16, "a chunk is 16 bytes of each source");
  detail::sum_sources<Chunk, Aligned, detail::WidenRows>(dst, n, start, first, more...);
}

// The same over the Unroll chunks at start + u * stride of a range of
// `count` elements, all of their loads in flight before the first add.
template <int Chunk, int Unroll, bool Aligned, typename Dst, template <typename> class Source, typename T,
          typename... More>
EPJIT_HD void sum_chunks(Dst* dst, size_t count, size_t start, size_t stride, const Source<T>& first,
                         const More&... more) {
  static_assert(Chunk * sizeof(T) == 16, "a chunk is 16 bytes of each source");
  detail::sum_sources_unrolled<Chunk, Unroll, Aligned, detail::WidenRows>(dst, count, start, stride, first, more...);
}

// ---------------------------------------------------------------- MX scales

// One lane's fp8 chunk functions, written once for every conversion method
// over the method's codec: `Codec::pack4<F>(x)` packs four values into a
// dword (saturated, element 0 in the low byte) and `Codec::unpack4<F>(word,
// x)` decodes one. A method is a struct deriving from Fp8Chunks<its codec>
// (software below, amdgcn_pk_fp8, ptx_cvt_satfinite), so emitted code calls
// epjit::prim::<method>::quantize_fp8_chunk<F, Aligned>(...) whatever it is.
template <typename Codec>
struct Fp8Chunks {
  // Load up to 8 values, divide by `scale` when there is one, pack four at a
  // time, store.
  template <Fp8Format F, bool Aligned, typename Src>
  EPJIT_HD static void quantize_fp8_chunk_scaled(const Src* src, int8_t* dst, size_t n, float scale) {
    quantize_dividing<F, Aligned>(src, dst, n, &scale);
  }

  // DeepEP's rule: x * factor, in f32, then the saturating conversion.
  template <Fp8Format F, bool Aligned, typename Src>
  EPJIT_HD static void quantize_fp8_chunk_multiplied(const Src* src, int8_t* dst, size_t n, float factor) {
    float x[8];
    load_chunk8<Aligned>(src, n, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = mul_rn(x[i], factor);
    store_codes8<Aligned>(dst, n, Codec::template pack4<F>(x), Codec::template pack4<F>(x + 4));
  }

  template <Fp8Format F, bool Aligned, typename Src>
  EPJIT_HD static void quantize_fp8_chunk(const Src* src, int8_t* dst, size_t n) {
    quantize_dividing<F, Aligned>(src, dst, n, nullptr);
  }

  // The MX rule: a NaN scale (0xFF) stores zero codes (the scale carries the
  // NaN); otherwise convert with x / 2^e.
  template <Fp8Format F, bool Aligned, typename Src>
  EPJIT_HD static void quantize_fp8_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
    if (e8m0_is_nan(scale)) return store_codes8<Aligned>(dst, n, 0u, 0u);
    quantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, e8m0_as_float(scale));
  }

  template <Fp8Format F, bool Aligned, typename Dst>
  EPJIT_HD static void dequantize_fp8_chunk_scaled(const int8_t* src, Dst* dst, size_t n, float scale) {
    uint32_t lo, hi;
    load_codes8<Aligned>(src, n, lo, hi);
    float x[8];
    Codec::template unpack4<F>(lo, x);
    Codec::template unpack4<F>(hi, x + 4);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = x[i] * scale;
    store_chunk8<Aligned>(dst, n, x);
  }

  template <Fp8Format F, bool Aligned, typename Dst>
  EPJIT_HD static void dequantize_fp8_chunk(const int8_t* src, Dst* dst, size_t n) {
    dequantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, 1.0f);
  }

  template <Fp8Format F, bool Aligned, typename Dst>
  EPJIT_HD static void dequantize_fp8_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
    dequantize_fp8_chunk_scaled<F, Aligned>(src, dst, n, e8m0_as_float(scale));
  }

  // dst[i] = sum over live sources of their decoded codes at start + i, for i < n <= 16.
  template <Fp8Format F, int Chunk, bool Aligned, typename Dst, typename Source, typename... More>
  EPJIT_HD static void sum_fp8_chunk(Dst* dst, size_t n, size_t start, const Source& first, const More&... more) {
    static_assert(Chunk == 16, "a chunk is 16 bytes of codes");
    detail::sum_sources<Chunk, Aligned, detail::WidenCodes<Codec, F>>(dst, n, start, first, more...);
  }

  // The same over Unroll chunks (sum_chunks).
  template <Fp8Format F, int Chunk, int Unroll, bool Aligned, typename Dst, typename Source, typename... More>
  EPJIT_HD static void sum_fp8_chunks(Dst* dst, size_t count, size_t start, size_t stride, const Source& first,
                                      const More&... more) {
    static_assert(Chunk == 16, "a chunk is 16 bytes of codes");
    detail::sum_sources_unrolled<Chunk, Unroll, Aligned, detail::WidenCodes<Codec, F>>(dst, count, start, stride,
                                                                                       first, more...);
  }

 private:
  template <Fp8Format F, bool Aligned, typename Src>
  EPJIT_HD static void quantize_dividing(const Src* src, int8_t* dst, size_t n, const float* scale) {
    float x[8];
    load_chunk8<Aligned>(src, n, x);
    if (scale) {
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = x[i] / *scale;
    }
    store_codes8<Aligned>(dst, n, Codec::template pack4<F>(x), Codec::template pack4<F>(x + 4));
  }
};

// ---------------------------------------------------------------- numerics.h codecs

// The numerics.h codec: every format, element by element.
struct SoftwareFp8Codec {
  template <Fp8Format F>
  EPJIT_HD static uint32_t pack4(const float* x) {
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) word |= uint32_t(encode_fp8(x[i], F, Overflow::Saturate)) << (8 * i);
    return word;
  }
  template <Fp8Format F>
  EPJIT_HD static void unpack4(uint32_t word, float* x) {
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = decode_fp8(uint8_t(word >> (8 * i)), F);
  }
};

// ConversionMethod::software: fp8 and FP4 through numerics.h.
struct software : Fp8Chunks<SoftwareFp8Codec> {
  template <bool Aligned, typename Src>
  EPJIT_HD static void quantize_fp4_chunk_mx(const Src* src, int8_t* dst, size_t n, int8_t scale) {
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

  template <bool Aligned, typename Dst>
  EPJIT_HD static void dequantize_fp4_chunk_mx(const int8_t* src, Dst* dst, size_t n, int8_t scale) {
    const uint32_t packed = load_nibbles8<Aligned>(src, n);
    const float factor = e8m0_as_float(scale);
    float x[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = decode_fp4_e2m1(uint8_t(packed >> (4 * i))) * factor;
    store_chunk8<Aligned>(dst, n, x);
  }
};
}  // namespace epjit::prim
