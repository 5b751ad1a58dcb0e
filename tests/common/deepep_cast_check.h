// The check of ep.warp.quantize with DeepEP's per-128 cast shared by the host
// and GPU tests: the kernels of tests/unit/templates/inputs/deepep_cast.mlir
// run by `launch(kernel, input, codes, scales, tokens, hidden)` on device
// buffers. Expected bits: numerics.h quantize_fp8_deepep_block per block,
// with the scales where DeepEP's low-latency dispatch puts them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "epjit/device.h"
#include "epjit/numerics.h"

namespace epjit::testing {

inline constexpr uint32_t kDeepEpCastWarps = 4;  // deepep_cast.mlir's warps_per_block

using DeepEpCastLaunch = std::function<void(const std::string& kernel, void* input, void* codes, void* scales,
                                            size_t tokens, size_t hidden)>;

// Blocks of every kind DeepEP's rule treats apart: all zeros (the 1e-4
// floor), tiny values, a NaN element (ignored by the amax, NaN code), values
// past the range, and for each token one element whose code from x * factor
// differs from x / scale_inv's (a dividing kernel fails there).
inline std::vector<uint16_t> deepEpCastInput(size_t tokens, size_t hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> magnitude(-12.0f, 12.0f);
  std::vector<uint16_t> input(tokens * hidden);
  const size_t blocks = hidden / 128;
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t b = 0; b < blocks; ++b) {
      const float scale = std::exp2(magnitude(rng));
      uint16_t* block = &input[t * hidden + b * 128];
      for (size_t i = 0; i < 128; ++i) block[i] = encode_bf16(normal(rng) * scale);
      const size_t kind = (t * blocks + b) % 7;
      if (kind == 1) std::fill(block, block + 128, uint16_t(0));
      if (kind == 2)
        for (size_t i = 0; i < 128; ++i) block[i] = encode_bf16(normal(rng) * 1e-6f);
      if (kind == 3) block[5] = 0x7FC0;  // NaN
      if (kind == 4) block[9] = encode_bf16(-3.0e38f);
    }
    // Block 0: amax a (element 0) and an element v whose codes differ
    // between multiplying by 448 / a and dividing by a / 448; the rest
    // smaller than a.
    uint16_t* block = &input[t * hidden];
    for (size_t i = 2; i < 128; ++i) block[i] = encode_bf16(std::clamp(normal(rng) * 0.25f, -0.9f, 0.9f));
    bool planted = false;
    for (uint16_t a = uint16_t(0x3F80 + 7 * t); a < 0x4080 && !planted; ++a) {
      const float amax = decode_bf16(a);
      const DeepEpFp8Scale s = deepep_fp8_scale(amax, false);
      for (uint32_t c = 0; c < 0x8000 && !planted; ++c) {
        const float v = decode_bf16(uint16_t(c));
        if (!(v < amax)) continue;
        if (encode_fp8(v * s.multiplier, Fp8Format::E4M3FN, Overflow::Saturate) !=
            encode_fp8(v / s.scale_inv, Fp8Format::E4M3FN, Overflow::Saturate)) {
          block[0] = a, block[1] = uint16_t(c), planted = true;
        }
      }
    }
    EXPECT_TRUE(planted) << "no element found whose multiplied and divided codes differ";
  }
  return input;
}

inline void checkDeepEpCast(Device& device, const DeepEpCastLaunch& launch) {
  struct Form {
    const char* kernel;
    bool round, ue8m0;
  };
  for (const Form form : {Form{"deepep_cast", false, false}, Form{"deepep_cast_pow2", true, false},
                          Form{"deepep_cast_ue8m0", true, true}}) {
    for (size_t tokens : {size_t(1), size_t(5)}) {
      for (size_t hidden : {size_t(512), size_t(896), size_t(7168)}) {
        if (form.ue8m0 && hidden % 512 != 0) continue;
        const size_t blocks = hidden / 128;
        const std::vector<uint16_t> input = deepEpCastInput(tokens, hidden, uint32_t(tokens * 131 + hidden));
        std::vector<uint8_t> want_codes(tokens * hidden);
        std::vector<float> want_scales(blocks * tokens);  // [blocks, tokens]
        for (size_t t = 0; t < tokens; ++t) {
          for (size_t b = 0; b < blocks; ++b) {
            float x[128];
            for (size_t i = 0; i < 128; ++i) x[i] = decode_bf16(input[t * hidden + b * 128 + i]);
            want_scales[b * tokens + t] =
                quantize_fp8_deepep_block(x, 128, form.round, &want_codes[t * hidden + b * 128]);
          }
        }
        const size_t scale_bytes = form.ue8m0 ? blocks * tokens : blocks * tokens * 4;
        void* d_input = device.allocate(input.size() * 2);
        void* d_codes = device.allocate(want_codes.size());
        void* d_scales = device.allocate(scale_bytes);
        device.copy_to_device(d_input, input.data(), input.size() * 2);
        std::vector<uint8_t> codes(want_codes.size(), 0x55), scales(scale_bytes, 0xA5);
        device.copy_to_device(d_codes, codes.data(), codes.size());
        device.copy_to_device(d_scales, scales.data(), scales.size());
        launch(form.kernel, d_input, d_codes, d_scales, tokens, hidden);
        device.copy_to_host(codes.data(), d_codes, codes.size());
        device.copy_to_host(scales.data(), d_scales, scales.size());
        const std::string what = std::string(form.kernel) + ", " + std::to_string(tokens) + " tokens, hidden " +
                                 std::to_string(hidden);
        size_t wrong = 0;
        for (size_t i = 0; i < codes.size() && wrong < 8; ++i)
          if (codes[i] != want_codes[i])
            ++wrong, ADD_FAILURE() << what << ": code " << i << " is " << int(codes[i]) << ", want "
                                   << int(want_codes[i]);
        for (size_t t = 0; t < tokens; ++t) {
          for (size_t b = 0; b < blocks; ++b) {
            const float want = want_scales[b * tokens + t];
            if (form.ue8m0) {
              // Word (b / 4, t), byte b % 4: DeepEP's [tokens, blocks / 4] int32 view.
              const uint8_t got = scales[((b / 4) * tokens + t) * 4 + b % 4];
              EXPECT_EQ(got, ue8m0_of(want)) << what << ": token " << t << " block " << b;
            } else {
              float got;
              std::memcpy(&got, &scales[(b * tokens + t) * 4], 4);
              EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << what << ": token " << t << " block " << b << " scale "
                                                        << got << ", want " << want;
            }
          }
        }
        for (void* p : {d_input, d_codes, d_scales}) device.release(p);
      }
    }
  }
}

}  // namespace epjit::testing
