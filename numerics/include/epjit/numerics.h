// epjit numerics: the one definition of every narrow format and conversion.
//
// Header-only and dependency-free so that the same code serves three uses:
// the host target's emulation, device fallbacks in the target preludes, and the
// oracle in tests. GPU lowerings must produce the same bits as this header for
// every finite input. The rules are those of docs/NUMERICS.md (and
// ../shared/NUMERICS.md): round-to-nearest-even, subnormals kept, overflow
// decided after rounding.
//
// Everything is constexpr and works on float bit patterns with integer
// arithmetic only: no libm (device code lacks it), no <cmath>, no floating
// point environment dependence except where a division is part of a rule.
#pragma once

#if defined(__CUDACC_RTC__)
// NVRTC compiles without the C++ standard library headers: the fixed-width
// types this header and the device preludes use, spelled out.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
typedef decltype(sizeof(0)) size_t;
#else
#include <cstddef>
#include <cstdint>
#endif

#if defined(__NVCC__) || defined(__CUDACC_RTC__)
#define EPJIT_HOST_DEVICE __host__ __device__
#elif defined(__CUDA__) || defined(__HIP__)
// clang compiling CUDA or HIP, possibly with -nogpuinc (no __device__ macro).
#define EPJIT_HOST_DEVICE __attribute__((host)) __attribute__((device))
#else
#define EPJIT_HOST_DEVICE
#endif

#define EPJIT_NUMERICS_FN EPJIT_HOST_DEVICE inline constexpr

namespace epjit {

enum class Fp8Format : uint8_t { E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ };

// What an out-of-range value becomes. ToNaN is what a plain cast does (and
// what ml_dtypes does); Saturate clamps finite values and Inf to +-max.
enum class Overflow : uint8_t { ToNaN, Saturate };

// Element formats that take an MX (E8M0, block 32) scale.
enum class MxElement : uint8_t { E2M1, E4M3, E5M2 };

inline constexpr int kMxBlockSize = 32;
inline constexpr int kFp8BlockwiseBlockSize = 128;
inline constexpr uint8_t kE8M0NaN = 0xFF;
inline constexpr uint8_t kE8M0One = 127;

namespace numerics_detail {

EPJIT_NUMERICS_FN uint32_t bits_of(float x) { return __builtin_bit_cast(uint32_t, x); }
EPJIT_NUMERICS_FN float float_of(uint32_t bits) { return __builtin_bit_cast(float, bits); }

inline constexpr uint32_t kF32SignMask = 0x80000000u;
inline constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
inline constexpr uint32_t kF32InfBits = 0x7F800000u;
inline constexpr uint32_t kF32QuietNaNBits = 0x7FC00000u;

EPJIT_NUMERICS_FN bool is_nan(float x) { return (bits_of(x) & kF32AbsMask) > kF32InfBits; }
EPJIT_NUMERICS_FN bool is_finite(float x) { return (bits_of(x) & kF32AbsMask) < kF32InfBits; }
EPJIT_NUMERICS_FN float abs_of(float x) { return float_of(bits_of(x) & kF32AbsMask); }
EPJIT_NUMERICS_FN float quiet_nan(bool negative) {
  return float_of(kF32QuietNaNBits | (negative ? kF32SignMask : 0u));
}

// 2^e exactly, for e in [-149, 127] (subnormal results included).
EPJIT_NUMERICS_FN float exp2i(int e) {
  if (e >= -126) return float_of(uint32_t(e + 127) << 23);
  return float_of(1u << (e + 149));
}

// floor(log2(|x|)) for finite nonzero x, subnormals included.
EPJIT_NUMERICS_FN int floor_log2(float x) {
  const uint32_t abs_bits = bits_of(x) & kF32AbsMask;
  const int exp_field = int(abs_bits >> 23);
  if (exp_field != 0) return exp_field - 127;
  uint32_t mant = abs_bits & 0x7FFFFFu;
  int e = -127;
  while ((mant & 0x400000u) == 0) {
    mant <<= 1;
    --e;
  }
  return e;
}

// A binary format with an implicit leading one: mantissa bits and exponent bias.
struct Grid {
  int mantissa_bits;
  int bias;
};

// Rounds a finite, non-negative float (given as bits) to the grid of a narrow
// format, round-to-nearest-even, subnormals produced. Returns the magnitude
// code (exponent field and mantissa) without any overflow check: the result can
// exceed the format's largest code, and callers decide what overflow means.
EPJIT_NUMERICS_FN uint32_t round_to_grid(uint32_t abs_bits, Grid grid) {
  const int exp_field = int(abs_bits >> 23);
  const uint32_t mant = abs_bits & 0x7FFFFFu;
  // abs = significand * 2^(exponent - 23)
  const uint32_t significand = exp_field ? (mant | 0x800000u) : mant;
  if (significand == 0) return 0;
  const int exponent = exp_field ? exp_field - 127 : -126;
  const int min_normal_exponent = 1 - grid.bias;
  int value_exponent = floor_log2(float_of(abs_bits));
  if (value_exponent < min_normal_exponent) value_exponent = min_normal_exponent;
  // units = RNE(abs / 2^(value_exponent - mantissa_bits))
  const int shift = (value_exponent - grid.mantissa_bits) - (exponent - 23);
  uint64_t units = 0;
  if (shift <= 0) {
    units = uint64_t(significand) << (-shift);
  } else if (shift < 40) {
    const uint64_t wide = significand;
    units = wide >> shift;
    const uint64_t remainder = wide & ((uint64_t(1) << shift) - 1);
    const uint64_t half = uint64_t(1) << (shift - 1);
    if (remainder > half || (remainder == half && (units & 1))) ++units;
  }
  // A carry out of the mantissa moves into the exponent field by itself.
  return (uint32_t(value_exponent - min_normal_exponent) << grid.mantissa_bits) + uint32_t(units);
}

struct Fp8Spec {
  Grid grid;
  uint8_t max_code;      // largest finite magnitude code
  bool fnuz;             // one NaN (0x80), no -0, no Inf
  bool has_inf;          // OCP E5M2
};

EPJIT_NUMERICS_FN Fp8Spec fp8_spec(Fp8Format f) {
  switch (f) {
    case Fp8Format::E4M3FN: return {{3, 7}, 0x7E, false, false};
    case Fp8Format::E4M3FNUZ: return {{3, 8}, 0x7F, true, false};
    case Fp8Format::E5M2: return {{2, 15}, 0x7B, false, true};
    case Fp8Format::E5M2FNUZ: return {{2, 16}, 0x7F, true, false};
  }
  return {{3, 7}, 0x7E, false, false};
}

// The code a NaN (or, in ToNaN mode, an overflow) becomes.
EPJIT_NUMERICS_FN uint8_t fp8_nan_code(const Fp8Spec& spec, uint8_t sign) {
  if (spec.fnuz) return 0x80;
  return uint8_t(sign | (spec.has_inf ? 0x7E : 0x7F));
}

EPJIT_NUMERICS_FN uint8_t fp8_overflow_code(const Fp8Spec& spec, uint8_t sign, Overflow o) {
  if (o == Overflow::Saturate) return uint8_t(sign | spec.max_code);
  if (spec.has_inf) return uint8_t(sign | 0x7C);
  return fp8_nan_code(spec, sign);
}

// Value of a magnitude code of a format with subnormals: exact in float.
EPJIT_NUMERICS_FN float grid_value(uint32_t magnitude_code, Grid grid) {
  const uint32_t exp_field = magnitude_code >> grid.mantissa_bits;
  const uint32_t mant = magnitude_code & ((1u << grid.mantissa_bits) - 1);
  if (exp_field == 0) return float(mant) * exp2i(1 - grid.bias - grid.mantissa_bits);
  return float((1u << grid.mantissa_bits) | mant) *
         exp2i(int(exp_field) - grid.bias - grid.mantissa_bits);
}

EPJIT_NUMERICS_FN Fp8Format mx_fp8_format(MxElement e) {
  return e == MxElement::E5M2 ? Fp8Format::E5M2 : Fp8Format::E4M3FN;
}

}  // namespace numerics_detail

// ---------------------------------------------------------------- FP8

EPJIT_NUMERICS_FN float fp8_max(Fp8Format f) {
  switch (f) {
    case Fp8Format::E4M3FN: return 448.0f;
    case Fp8Format::E4M3FNUZ: return 240.0f;
    case Fp8Format::E5M2: return 57344.0f;
    case Fp8Format::E5M2FNUZ: return 57344.0f;
  }
  return 0.0f;
}

EPJIT_NUMERICS_FN const char* fp8_format_name(Fp8Format f) {
  switch (f) {
    case Fp8Format::E4M3FN: return "e4m3fn";
    case Fp8Format::E4M3FNUZ: return "e4m3fnuz";
    case Fp8Format::E5M2: return "e5m2";
    case Fp8Format::E5M2FNUZ: return "e5m2fnuz";
  }
  return "?";
}

// float32 -> FP8, round-to-nearest-even.
EPJIT_NUMERICS_FN uint8_t encode_fp8(float x, Fp8Format f, Overflow o = Overflow::ToNaN) {
  using namespace numerics_detail;
  const Fp8Spec spec = fp8_spec(f);
  const uint32_t bits = bits_of(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t abs_bits = bits & kF32AbsMask;
  if (abs_bits > kF32InfBits) return fp8_nan_code(spec, sign);
  if (abs_bits == kF32InfBits) return fp8_overflow_code(spec, sign, o);
  const uint32_t magnitude = round_to_grid(abs_bits, spec.grid);
  if (magnitude > spec.max_code) return fp8_overflow_code(spec, sign, o);
  if (magnitude == 0 && spec.fnuz) return 0x00;  // FNUZ has no -0
  return uint8_t(sign | magnitude);
}

EPJIT_NUMERICS_FN float decode_fp8(uint8_t code, Fp8Format f) {
  using namespace numerics_detail;
  const Fp8Spec spec = fp8_spec(f);
  const bool negative = (code & 0x80) != 0;
  const uint8_t magnitude = code & 0x7F;
  if (spec.fnuz) {
    if (code == 0x80) return quiet_nan(false);
  } else if (spec.has_inf) {
    if (magnitude == 0x7C) return float_of(kF32InfBits | (negative ? kF32SignMask : 0u));
    if (magnitude > 0x7C) return quiet_nan(negative);
  } else if (magnitude == 0x7F) {
    return quiet_nan(negative);
  }
  const float value = grid_value(magnitude, spec.grid);
  return negative ? -value : value;
}

// ---------------------------------------------------------------- FP4 E2M1

// float32 -> E2M1 (low 4 bits), round-to-nearest-even, always saturating to
// +-6 (the OCP MX rule and the hardware's). E2M1 has no NaN: NaN encodes as
// +-6 like Inf; an MX block that holds a NaN is marked by its NaN scale.
EPJIT_NUMERICS_FN uint8_t encode_fp4_e2m1(float x) {
  using namespace numerics_detail;
  const uint32_t bits = bits_of(x);
  const uint8_t sign = uint8_t((bits >> 28) & 0x8);
  const uint32_t abs_bits = bits & kF32AbsMask;
  if (abs_bits >= kF32InfBits) return uint8_t(sign | 0x7);
  const uint32_t magnitude = round_to_grid(abs_bits, Grid{1, 1});
  return uint8_t(sign | (magnitude > 0x7 ? 0x7u : magnitude));
}

EPJIT_NUMERICS_FN float decode_fp4_e2m1(uint8_t nibble) {
  const float value = numerics_detail::grid_value(nibble & 0x7u, numerics_detail::Grid{1, 1});
  return (nibble & 0x8) ? -value : value;
}

// ---------------------------------------------------------------- E8M0

// float32 -> E8M0 (2^(code-127), 0xFF = NaN), as ml_dtypes' float8_e8m0fnu
// casts (0.7 and later): the exponent rounds half up (1.5 -> 2, 3 -> 4), f32
// subnormals included (below 1.5 * 2^-127 gives 2^-127); zero, negatives, Inf
// and NaN give NaN; anything rounding past 2^127 gives NaN.
EPJIT_NUMERICS_FN uint8_t encode_e8m0(float x) {
  using namespace numerics_detail;
  const uint32_t bits = bits_of(x);
  if ((bits & kF32SignMask) || bits >= kF32InfBits || bits == 0) return kE8M0NaN;
  const uint32_t exp_field = bits >> 23;
  const uint32_t mant = bits & 0x7FFFFFu;
  if (exp_field == 0) return mant >= 0x600000u ? 1 : 0;  // 0x600000 is 1.5 * 2^-127
  const uint32_t code = exp_field + (mant >= 0x400000u ? 1u : 0u);
  return code >= 0xFF ? kE8M0NaN : uint8_t(code);
}

EPJIT_NUMERICS_FN float decode_e8m0(uint8_t code) {
  if (code == kE8M0NaN) return numerics_detail::quiet_nan(false);
  return numerics_detail::exp2i(int(code) - 127);
}

// ---------------------------------------------------------------- BF16

// float32 -> bfloat16, round-to-nearest-even; NaN stays NaN (sign kept,
// quiet, payload dropped, as ml_dtypes does).
EPJIT_NUMERICS_FN uint16_t encode_bf16(float x) {
  using namespace numerics_detail;
  const uint32_t bits = bits_of(x);
  if ((bits & kF32AbsMask) > kF32InfBits) return uint16_t(((bits >> 16) & 0x8000u) | 0x7FC0u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

EPJIT_NUMERICS_FN float decode_bf16(uint16_t code) {
  return numerics_detail::float_of(uint32_t(code) << 16);
}

// ---------------------------------------------------------------- blocks

// Largest |x| of a block; NaN anywhere makes the result NaN.
EPJIT_NUMERICS_FN float block_amax(const float* x, size_t n) {
  using namespace numerics_detail;
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float a = abs_of(x[i]);
    if (is_nan(a)) return a;
    if (a > amax) amax = a;
  }
  return amax;
}

// emax of the MX element format: the exponent of its largest power of two.
EPJIT_NUMERICS_FN int mx_element_emax(MxElement e) {
  switch (e) {
    case MxElement::E2M1: return 2;
    case MxElement::E4M3: return 8;
    case MxElement::E5M2: return 15;
  }
  return 0;
}

// MX scale byte for a block whose largest magnitude is amax:
// shared_exp = floor(log2(amax)) - emax_elem, clamped to [-127, 127], stored
// as shared_exp + 127. amax == 0 gives 127 (2^0); non-finite amax gives 0xFF.
EPJIT_NUMERICS_FN uint8_t mx_scale_from_amax(float amax, MxElement e) {
  using namespace numerics_detail;
  if (!is_finite(amax)) return kE8M0NaN;
  if (amax == 0.0f) return kE8M0One;
  int shared_exp = floor_log2(amax) - mx_element_emax(e);
  if (shared_exp < -127) shared_exp = -127;
  if (shared_exp > 127) shared_exp = 127;
  return uint8_t(shared_exp + 127);
}

EPJIT_NUMERICS_FN uint8_t mx_scale(const float* x, size_t n, MxElement e) {
  return mx_scale_from_amax(block_amax(x, n), e);
}

// Bytes one MX block of n elements occupies (FP4: two per byte).
EPJIT_NUMERICS_FN size_t mx_block_bytes(size_t n, MxElement e) {
  return e == MxElement::E2M1 ? (n + 1) / 2 : n;
}

// One element x / 2^shared_exp, saturated, in the element format.
EPJIT_NUMERICS_FN uint8_t mx_encode_element(float x, uint8_t scale, MxElement e) {
  const float scaled = x / decode_e8m0(scale);
  if (e == MxElement::E2M1) return encode_fp4_e2m1(scaled);
  return encode_fp8(scaled, numerics_detail::mx_fp8_format(e), Overflow::Saturate);
}

EPJIT_NUMERICS_FN float mx_decode_element(uint8_t code, uint8_t scale, MxElement e) {
  if (scale == kE8M0NaN) return numerics_detail::quiet_nan(false);
  const float value = e == MxElement::E2M1
                          ? decode_fp4_e2m1(code)
                          : decode_fp8(code, numerics_detail::mx_fp8_format(e));
  return value * decode_e8m0(scale);
}

// Quantizes one MX block of n <= 32 elements into mx_block_bytes(n, e) bytes
// (FP4: element 2i in the low nibble of byte i) and returns its scale byte.
// A block with a NaN scale stores zero codes: the scale carries the NaN.
EPJIT_NUMERICS_FN uint8_t quantize_mx_block(const float* x, size_t n, MxElement e, uint8_t* out) {
  const uint8_t scale = mx_scale(x, n, e);
  for (size_t i = 0; i < mx_block_bytes(n, e); ++i) out[i] = 0;
  if (scale == kE8M0NaN) return scale;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t code = mx_encode_element(x[i], scale, e);
    if (e == MxElement::E2M1) {
      out[i / 2] = uint8_t(out[i / 2] | (i % 2 ? code << 4 : code));
    } else {
      out[i] = code;
    }
  }
  return scale;
}

EPJIT_NUMERICS_FN void dequantize_mx_block(const uint8_t* in, size_t n, MxElement e, uint8_t scale,
                                           float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint8_t code =
        e == MxElement::E2M1 ? uint8_t((in[i / 2] >> (i % 2 ? 4 : 0)) & 0xF) : in[i];
    out[i] = mx_decode_element(code, scale, e);
  }
}

// FP8 blockwise (block 128, one f32 scale): scale = amax / fp8_max when
// amax > fp8_max, else 1.0. Elements are x / scale, converted with saturation.
EPJIT_NUMERICS_FN float fp8_blockwise_scale_from_amax(float amax, Fp8Format f) {
  const float max = fp8_max(f);
  return amax > max ? amax / max : 1.0f;
}

EPJIT_NUMERICS_FN float quantize_fp8_block(const float* x, size_t n, Fp8Format f, uint8_t* out) {
  const float scale = fp8_blockwise_scale_from_amax(block_amax(x, n), f);
  for (size_t i = 0; i < n; ++i) out[i] = encode_fp8(x[i] / scale, f, Overflow::Saturate);
  return scale;
}

EPJIT_NUMERICS_FN void dequantize_fp8_block(const uint8_t* in, size_t n, Fp8Format f, float scale,
                                            float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = decode_fp8(in[i], f) * scale;
}

// DeepEP's per-128-channel cast to OCP E4M3 (its low-latency dispatch): amax is
// the block's largest |x| but at least 1e-4, NaN elements ignored (as fmaxf
// ignores them); scale_inv = amax * (1/448) and elements x * (448 / amax), or
// with round_scale scale_inv = 2^e, e = ceil(log2(amax * (1/448))) read from the
// bits, and elements x * 2^-e; codes saturated. Defined for a finite amax (DeepEP
// leaves an infinite one undefined). UE8M0 scales are scale_inv's exponent byte.
struct DeepEpFp8Scale {
  float scale_inv, multiplier;
};
EPJIT_NUMERICS_FN float deepep_block_amax(const float* x, size_t n) {
  using namespace numerics_detail;
  float amax = 1e-4f;
  for (size_t i = 0; i < n; ++i) {
    const float a = abs_of(x[i]);
    if (a > amax) amax = a;  // a NaN compares false: ignored
  }
  return amax;
}
EPJIT_NUMERICS_FN DeepEpFp8Scale deepep_fp8_scale(float amax, bool round_scale) {
  using namespace numerics_detail;
  constexpr float kMax = 448.0f, kInverseMax = 1.0f / 448.0f;
  if (round_scale) {
    const uint32_t bits = bits_of(amax * kInverseMax);
    const int e = int((bits >> 23) & 0xFFu) - 127 + ((bits & 0x7FFFFFu) != 0 ? 1 : 0);
    return {float_of(uint32_t(e + 127) << 23), float_of(uint32_t(127 - e) << 23)};
  }
  return {amax * kInverseMax, kMax / amax};
}
EPJIT_NUMERICS_FN float quantize_fp8_deepep_block(const float* x, size_t n, bool round_scale, uint8_t* out) {
  const DeepEpFp8Scale scale = deepep_fp8_scale(deepep_block_amax(x, n), round_scale);
  for (size_t i = 0; i < n; ++i) out[i] = encode_fp8(x[i] * scale.multiplier, Fp8Format::E4M3FN, Overflow::Saturate);
  return scale.scale_inv;
}
EPJIT_NUMERICS_FN uint8_t ue8m0_of(float power_of_two) {
  return uint8_t(numerics_detail::bits_of(power_of_two) >> 23);
}

}  // namespace epjit
