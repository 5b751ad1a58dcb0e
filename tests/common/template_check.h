// Runs one quantize/dequantize template over random rows and checks every
// output element against numerics.h, bit for bit. Where the kernel runs is
// the caller's: a launcher gets the kernel's buffers (inputs filled, outputs
// poisoned, each followed by guard elements) in argument order, runs the
// kernel with them and `tokens`, and leaves the results in the same buffers.
// Shared by the host-target test and the GPU test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "epjit/numerics.h"

namespace epjit::testing {

enum class TemplateKind {
  QuantizeDirect,
  QuantizeBlockwise,
  QuantizeMx,
  DequantizeDirect,
  DequantizeBlockwise,
  DequantizeMx
};

struct KernelBuffer {
  void* data;
  size_t bytes;
};
using TemplateLauncher = std::function<void(std::vector<KernelBuffer>& buffers, size_t tokens)>;

inline constexpr int kGuard = 64;  // poisoned elements after every output
inline constexpr uint8_t kPoisonByte = 0xAB;
inline constexpr uint16_t kPoisonBf16 = 0xFFFE;

// Random bf16 rows at many magnitudes, with zeros, saturating values, tiny
// values and (row 2) a NaN and an Inf.
inline std::vector<uint16_t> randomRows(int tokens, int hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 12);
  std::vector<uint16_t> rows(size_t(tokens) * hidden + kGuard, kPoisonBf16);
  for (int t = 0; t < tokens; ++t) {
    const float scale = std::ldexp(1.0f, exponent(rng));
    for (int i = 0; i < hidden; ++i) {
      float x = normal(rng) * scale;
      if (i % 97 == 5) x = 0.0f;
      if (i % 89 == 7) x = 1000.0f * (i % 2 ? -1.0f : 1.0f);
      if (i % 83 == 11) x = std::ldexp(1.0f, -140);
      rows[size_t(t) * hidden + i] = encode_bf16(x);
    }
    if (t == 2 && hidden > 20) {
      rows[size_t(t) * hidden + 3] = encode_bf16(std::numeric_limits<float>::quiet_NaN());
      rows[size_t(t) * hidden + hidden - 2] = encode_bf16(std::numeric_limits<float>::infinity());
    }
  }
  return rows;
}

inline std::vector<uint8_t> randomBytes(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(count + kGuard, kPoisonByte);
  for (size_t i = 0; i < count; ++i) bytes[i] = uint8_t(rng());
  return bytes;
}

inline bool sameBf16(uint16_t a, uint16_t b) {
  const bool nanA = (a & 0x7FFF) > 0x7F80, nanB = (b & 0x7FFF) > 0x7F80;
  return a == b || (nanA && nanB);
}

// Equal codes, or both NaN: NaN sign and payload differ between targets
// (x86's default NaN is negative, the GPUs' positive) and are not asserted.
inline bool sameFp8(uint8_t a, uint8_t b, Fp8Format format) {
  return a == b || (std::isnan(decode_fp8(a, format)) && std::isnan(decode_fp8(b, format)));
}

template <typename T>
void expectGuardsIntact(const std::vector<T>& data, size_t used, T poison, const std::string& what) {
  for (size_t i = used; i < data.size(); ++i) ASSERT_EQ(data[i], poison) << what << ": written past its end at " << i;
}

template <typename T>
KernelBuffer bufferOf(std::vector<T>& data) {
  return {data.data(), data.size() * sizeof(T)};
}

// One run of a template: `fp8` is the target's fp8 format.
inline void checkTemplate(TemplateKind kind, Fp8Format fp8, int hidden, int tokens, const TemplateLauncher& launch) {
  SCOPED_TRACE("tokens " + std::to_string(tokens) + ", hidden " + std::to_string(hidden));
  const size_t n = size_t(tokens) * hidden;
  const uint32_t seed = uint32_t(hidden * 131 + tokens);
  const int blocks128 = (hidden + 127) / 128, blocks32 = (hidden + 31) / 32;
  switch (kind) {
    case TemplateKind::QuantizeDirect: {
      std::vector<uint16_t> in = randomRows(tokens, hidden, seed);
      std::vector<uint8_t> out(n + kGuard, kPoisonByte);
      std::vector<KernelBuffer> buffers = {bufferOf(in), bufferOf(out)};
      launch(buffers, size_t(tokens));
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(sameFp8(out[i], encode_fp8(decode_bf16(in[i]), fp8, Overflow::Saturate), fp8))
            << "element " << i << ": " << int(out[i]);
      expectGuardsIntact(out, n, kPoisonByte, "codes");
      break;
    }
    case TemplateKind::QuantizeBlockwise: {
      std::vector<uint16_t> in = randomRows(tokens, hidden, seed);
      std::vector<uint8_t> out(n + kGuard, kPoisonByte);
      std::vector<float> scales(size_t(tokens) * blocks128 + kGuard, -7.0f);
      std::vector<KernelBuffer> buffers = {bufferOf(in), bufferOf(out), bufferOf(scales)};
      launch(buffers, size_t(tokens));
      for (int t = 0; t < tokens; ++t) {
        for (int b = 0; b < blocks128; ++b) {
          const int start = b * 128, count = std::min(128, hidden - start);
          float x[128];
          uint8_t expected[128];
          for (int i = 0; i < count; ++i) x[i] = decode_bf16(in[size_t(t) * hidden + start + i]);
          const float scale = quantize_fp8_block(x, size_t(count), fp8, expected);
          ASSERT_EQ(numerics_detail::bits_of(scales[size_t(t) * blocks128 + b]), numerics_detail::bits_of(scale))
              << "token " << t << " block " << b;
          for (int i = 0; i < count; ++i)
            ASSERT_TRUE(sameFp8(out[size_t(t) * hidden + start + i], expected[i], fp8))
                << "token " << t << " element " << start + i << ": " << int(out[size_t(t) * hidden + start + i])
                << " expected " << int(expected[i]);
        }
      }
      expectGuardsIntact(out, n, kPoisonByte, "codes");
      expectGuardsIntact(scales, size_t(tokens) * blocks128, -7.0f, "scales");
      break;
    }
    case TemplateKind::QuantizeMx: {
      std::vector<uint16_t> in = randomRows(tokens, hidden, seed);
      std::vector<uint8_t> out(n / 2 + kGuard, kPoisonByte);
      std::vector<uint8_t> scales(size_t(tokens) * blocks32 + kGuard, kPoisonByte);
      std::vector<KernelBuffer> buffers = {bufferOf(in), bufferOf(out), bufferOf(scales)};
      launch(buffers, size_t(tokens));
      for (int t = 0; t < tokens; ++t) {
        for (int b = 0; b < blocks32; ++b) {
          const int start = b * 32, count = std::min(32, hidden - start);
          float x[32];
          uint8_t expected[16];
          for (int i = 0; i < count; ++i) x[i] = decode_bf16(in[size_t(t) * hidden + start + i]);
          const uint8_t scale = quantize_mx_block(x, size_t(count), MxElement::E2M1, expected);
          ASSERT_EQ(scales[size_t(t) * blocks32 + b], scale) << "token " << t << " block " << b;
          for (int i = 0; i < (count + 1) / 2; ++i)
            ASSERT_EQ(out[(size_t(t) * hidden + start) / 2 + i], expected[i]) << "token " << t << " byte " << i;
        }
      }
      expectGuardsIntact(out, n / 2, kPoisonByte, "packed codes");
      expectGuardsIntact(scales, size_t(tokens) * blocks32, kPoisonByte, "scales");
      break;
    }
    case TemplateKind::DequantizeDirect: {
      std::vector<uint8_t> in = randomBytes(n, seed);
      std::vector<uint16_t> out(n + kGuard, kPoisonBf16);
      std::vector<KernelBuffer> buffers = {bufferOf(in), bufferOf(out)};
      launch(buffers, size_t(tokens));
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(sameBf16(out[i], encode_bf16(decode_fp8(in[i], fp8)))) << "element " << i << " code " << int(in[i]);
      expectGuardsIntact(out, n, kPoisonBf16, "values");
      break;
    }
    case TemplateKind::DequantizeBlockwise: {
      std::vector<uint8_t> in = randomBytes(n, seed);
      std::vector<float> scales(size_t(tokens) * blocks128);
      std::mt19937 rng(seed);
      for (float& s : scales) s = std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, int(rng() % 20) - 10);
      std::vector<uint16_t> out(n + kGuard, kPoisonBf16);
      std::vector<KernelBuffer> buffers = {bufferOf(in), bufferOf(scales), bufferOf(out)};
      launch(buffers, size_t(tokens));
      for (int t = 0; t < tokens; ++t)
        for (int i = 0; i < hidden; ++i) {
          const size_t at = size_t(t) * hidden + i;
          const uint16_t expected = encode_bf16(decode_fp8(in[at], fp8) * scales[size_t(t) * blocks128 + i / 128]);
          ASSERT_TRUE(sameBf16(out[at], expected)) << "token " << t << " element " << i;
        }
      expectGuardsIntact(out, n, kPoisonBf16, "values");
      break;
    }
    case TemplateKind::DequantizeMx: {
      std::vector<uint8_t> in = randomBytes(n / 2, seed);
      std::vector<uint8_t> scales = randomBytes(size_t(tokens) * blocks32, seed + 1);
      for (size_t i = 0; i < size_t(tokens) * blocks32; ++i) scales[i] = uint8_t(100 + scales[i] % 60);
      if (tokens > 2) scales[1] = kE8M0NaN;  // a NaN block decodes to NaN
      std::vector<uint16_t> out(n + kGuard, kPoisonBf16);
      std::vector<KernelBuffer> buffers = {bufferOf(in), bufferOf(scales), bufferOf(out)};
      launch(buffers, size_t(tokens));
      for (int t = 0; t < tokens; ++t)
        for (int i = 0; i < hidden; ++i) {
          const size_t at = size_t(t) * hidden + i;
          const uint8_t nibble = uint8_t((in[at / 2] >> (at % 2 ? 4 : 0)) & 0xF);
          const float value = mx_decode_element(nibble, scales[size_t(t) * blocks32 + i / 32], MxElement::E2M1);
          ASSERT_TRUE(sameBf16(out[at], encode_bf16(value))) << "token " << t << " element " << i;
        }
      expectGuardsIntact(out, n, kPoisonBf16, "values");
      break;
    }
  }
}

}  // namespace epjit::testing
