// Loading and storing one lane's chunk of a row (host and device). Full
// chunks whose addresses the compiler proved aligned (Aligned) use 16-byte
// accesses; partial chunks go element by element. Arrays are indexed with
// constants only after unrolling, so they live in registers (no scratch).
#pragma once

#include "epjit/targets/common/base.h"

namespace epjit {

struct alignas(16) Vec16 {
  uint32_t w[4];
};
struct alignas(8) Vec8 {
  uint32_t w[2];
};

// 16-byte loads and stores of row data, which lives in global memory (device
// memory, and peers' windows mapped into this device's address space). AMD
// GPUs are told so, as one 128-bit vector access: a flat access counts
// against the LDS counter too, so the compiler would wait for all of them at
// once instead of keeping several in flight.
#if defined(__AMDGCN__)
typedef unsigned int Vec16Bits __attribute__((ext_vector_type(4)));
EPJIT_HD Vec16 load_global(const Vec16* address) {
  const Vec16Bits bits = *(const __attribute__((address_space(1))) Vec16Bits*)address;  // an addrspacecast
  return Vec16{{bits.x, bits.y, bits.z, bits.w}};
}
EPJIT_HD void store_global(Vec16* address, const Vec16& value) {
  const Vec16Bits bits = {value.w[0], value.w[1], value.w[2], value.w[3]};
  *(__attribute__((address_space(1))) Vec16Bits*)address = bits;
}
#elif defined(__NVCC__) || defined(__CUDACC_RTC__)
// NVVM splits a 16-byte struct store into four 4-byte stores once the loop
// around it is strength-reduced (it keeps the loads whole), so the store is
// spelled out. Rows are global memory: device buffers, peers' windows mapped
// over NVLink, or mapped host memory. The clobber keeps it ordered with the
// kernel's other memory operations, as a plain store would be.
EPJIT_HD Vec16 load_global(const Vec16* address) { return *address; }
EPJIT_HD void store_global(Vec16* address, const Vec16& value) {
  asm("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(address)), "r"(value.w[0]),
      "r"(value.w[1]), "r"(value.w[2]), "r"(value.w[3])
      : "memory");
}
#else
EPJIT_HD Vec16 load_global(const Vec16* address) { return *address; }
EPJIT_HD void store_global(Vec16* address, const Vec16& value) { *address = value; }
#endif

// x[0..8) <- src[0..n), zero-filled past n.
template <bool Aligned>
EPJIT_HD void load_chunk8(const uint16_t* src, size_t n, float (&x)[8]) {
  if (Aligned && n == 8) {
    const Vec16 v = *reinterpret_cast<const Vec16*>(src);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[2 * k] = decode_bf16(static_cast<uint16_t>(v.w[k] & 0xFFFFu));
      x[2 * k + 1] = decode_bf16(static_cast<uint16_t>(v.w[k] >> 16));
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = size_t(i) < n ? decode_bf16(src[i]) : 0.0f;
}

template <bool Aligned>
EPJIT_HD void load_chunk8(const float* src, size_t n, float (&x)[8]) {
  if (Aligned && n == 8) {
    const Vec16 a = reinterpret_cast<const Vec16*>(src)[0];
    const Vec16 b = reinterpret_cast<const Vec16*>(src)[1];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x[k] = numerics_detail::float_of(a.w[k]);
      x[4 + k] = numerics_detail::float_of(b.w[k]);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = size_t(i) < n ? src[i] : 0.0f;
}

// dst[0..n) <- x[0..n)
template <bool Aligned>
EPJIT_HD void store_chunk8(uint16_t* dst, size_t n, const float (&x)[8]) {
  if (Aligned && n == 8) {
    Vec16 v;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      v.w[k] = uint32_t(encode_bf16(x[2 * k])) | (uint32_t(encode_bf16(x[2 * k + 1])) << 16);
    *reinterpret_cast<Vec16*>(dst) = v;
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (size_t(i) < n) dst[i] = encode_bf16(x[i]);
}

template <bool Aligned>
EPJIT_HD void store_chunk8(float* dst, size_t n, const float (&x)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (size_t(i) < n) dst[i] = x[i];
  (void)Aligned;
}

// dst[0..n) <- x[0..n) for a chunk of N elements: 16-byte stores when the
// chunk is full and aligned (bf16: N a multiple of 8; f32: of 4).
template <int N, bool Aligned>
EPJIT_HD void store_row(uint16_t* dst, size_t n, const float (&x)[N]) {
  if (Aligned && n == size_t(N) && N % 8 == 0) {
#pragma unroll
    for (int c = 0; c < N / 8; ++c) {
      Vec16 v;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        v.w[k] = uint32_t(encode_bf16(x[8 * c + 2 * k])) | (uint32_t(encode_bf16(x[8 * c + 2 * k + 1])) << 16);
      store_global(reinterpret_cast<Vec16*>(dst) + c, v);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (size_t(i) < n) dst[i] = encode_bf16(x[i]);
}

template <int N, bool Aligned>
EPJIT_HD void store_row(float* dst, size_t n, const float (&x)[N]) {
  if (Aligned && n == size_t(N) && N % 4 == 0) {
#pragma unroll
    for (int c = 0; c < N / 4; ++c) {
      Vec16 v;
#pragma unroll
      for (int k = 0; k < 4; ++k) v.w[k] = numerics_detail::bits_of(x[4 * c + k]);
      store_global(reinterpret_cast<Vec16*>(dst) + c, v);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (size_t(i) < n) dst[i] = x[i];
}

// Eight fp8 codes: two little-endian dwords.
template <bool Aligned>
EPJIT_HD void store_codes8(int8_t* dst, size_t n, uint32_t lo, uint32_t hi) {
  if (Aligned && n == 8) {
    *reinterpret_cast<Vec8*>(dst) = Vec8{{lo, hi}};
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (size_t(i) < n) dst[i] = static_cast<int8_t>(((i < 4 ? lo : hi) >> (8 * (i % 4))) & 0xFFu);
}

template <bool Aligned>
EPJIT_HD void load_codes8(const int8_t* src, size_t n, uint32_t& lo, uint32_t& hi) {
  if (Aligned && n == 8) {
    const Vec8 v = *reinterpret_cast<const Vec8*>(src);
    lo = v.w[0];
    hi = v.w[1];
    return;
  }
  lo = hi = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t byte = size_t(i) < n ? static_cast<uint8_t>(src[i]) : 0u;
    if (i < 4) lo |= byte << (8 * i);
    else hi |= byte << (8 * (i - 4));
  }
}

// Eight fp4 codes: one dword of nibbles, element i in nibble i; a partial
// chunk of n stores ceil(n / 2) bytes.
template <bool Aligned>
EPJIT_HD void store_nibbles8(int8_t* dst, size_t n, uint32_t packed) {
  if (Aligned && n == 8) {
    *reinterpret_cast<uint32_t*>(dst) = packed;
    return;
  }
#pragma unroll
  for (int b = 0; b < 4; ++b)
    if (size_t(2 * b) < n) dst[b] = static_cast<int8_t>((packed >> (8 * b)) & 0xFFu);
}

template <bool Aligned>
EPJIT_HD uint32_t load_nibbles8(const int8_t* src, size_t n) {
  if (Aligned && n == 8) return *reinterpret_cast<const uint32_t*>(src);
  uint32_t packed = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b)
    if (size_t(2 * b) < n) packed |= uint32_t(static_cast<uint8_t>(src[b])) << (8 * b);
  return packed;
}

}  // namespace epjit
