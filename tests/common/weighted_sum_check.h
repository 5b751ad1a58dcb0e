// The check of ep.warp.sum_rows with weighted sources shared by the host and
// GPU tests: the kernel of tests/unit/templates/inputs/weighted_sum.mlir
// (three bf16 rows of `count`, a weight and a live flag each) run by
// `launch(rows, weights, valid, out, count)` on device buffers. The expected
// bits are DeepEP's low-latency combine's: +0.0, then std::fma(row, weight,
// acc) per live row in order, rounded once to bf16.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "epjit/device.h"
#include "epjit/numerics.h"

namespace epjit::testing {

inline constexpr uint32_t kWeightedSumWarps = 4;  // weighted_sum.mlir's warps_per_block

using WeightedSumLaunch = std::function<void(void* rows, void* weights, void* valid, void* out, size_t count)>;

// Element 0 separates a fused multiply-add from a rounded product: row 0 is
// -1 times P = round(row 1 x weight 1), so acc after row 1 is the product's
// rounding error 2^-30 (a multiply then add gives +0). Element 1 is -0 in
// every row: the sum starts at +0, so +0. The rest are random; a dead row
// holds values that would swamp the sum. Outputs poisoned, so an unwritten
// element shows; counts cover a partial chunk.
inline void checkWeightedSum(Device& device, const WeightedSumLaunch& launch) {
  for (size_t count : {size_t(2), size_t(29), size_t(136)}) {
    for (int dead : {-1, 0, 2}) {
      std::mt19937 rng(uint32_t(count * 7 + size_t(dead + 1)));
      std::uniform_real_distribution<float> value(-4.0f, 4.0f), weight(-1.0f, 1.0f);
      std::vector<uint16_t> rows(3 * count);
      for (uint16_t& bits : rows) bits = encode_bf16(value(rng));
      const float w1 = 1.0f + std::ldexp(1.0f, -23);
      const float x1 = 1.0f + std::ldexp(1.0f, -7);
      std::vector<float> weights = {x1 * w1, w1, weight(rng)};
      rows[0] = encode_bf16(-1.0f), rows[count] = encode_bf16(x1), rows[2 * count] = 0;
      rows[1] = rows[count + 1] = rows[2 * count + 1] = 0x8000;
      std::vector<int32_t> valid = {1, 1, 1};
      if (dead >= 0) {
        valid[size_t(dead)] = 0;
        for (size_t h = 2; h < count; ++h) rows[size_t(dead) * count + h] = encode_bf16(3.0e38f);
      }
      std::vector<uint16_t> want(count);
      for (size_t h = 0; h < count; ++h) {
        float acc = 0.0f;
        for (size_t j = 0; j < 3; ++j)
          if (valid[j]) acc = std::fma(decode_bf16(rows[j * count + h]), weights[j], acc);
        want[h] = encode_bf16(acc);
      }
      if (dead < 0) {
        EXPECT_EQ(want[0], encode_bf16(std::ldexp(1.0f, -30))) << "the hand-picked element is not what it checks";
        EXPECT_EQ(want[1], 0u);
      }
      void* d_rows = device.allocate(rows.size() * 2);
      void* d_weights = device.allocate(12);
      void* d_valid = device.allocate(12);
      void* d_out = device.allocate(count * 2);
      device.copy_to_device(d_rows, rows.data(), rows.size() * 2);
      device.copy_to_device(d_weights, weights.data(), 12);
      device.copy_to_device(d_valid, valid.data(), 12);
      std::vector<uint16_t> out(count, 0x7FC1);
      device.copy_to_device(d_out, out.data(), count * 2);
      launch(d_rows, d_weights, d_valid, d_out, count);
      device.copy_to_host(out.data(), d_out, count * 2);
      for (size_t h = 0; h < count; ++h)
        EXPECT_EQ(out[h], want[h]) << "count " << count << ", dead row " << dead << ", element " << h;
      for (void* p : {d_rows, d_weights, d_valid, d_out}) device.release(p);
    }
  }
}

}  // namespace epjit::testing
