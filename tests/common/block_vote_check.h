// The check of ep.block_any shared by the host and GPU tests: the kernel of
// tests/unit/templates/inputs/block_vote.mlir (two votes per kernel, bit 0
// of a warp's flag its first vote, bit 1 its second) on `blocks` blocks of
// 4 warps, run by `launch(flags, out)` on device buffers.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "epjit/device.h"

namespace epjit::testing {

inline constexpr uint32_t kBlockVoteWarps = 4;  // block_vote.mlir's warps_per_block

// Hand-picked blocks first (none, one warp, every warp, the first vote
// only: the word must be cleared before the second, the second only), then
// flags from a fixed seed. Outputs poisoned, so an unwritten word shows.
inline void checkBlockVote(Device& device, uint32_t blocks, const std::function<void(void*, void*)>& launch) {
  ASSERT_GE(blocks, 5u);
  constexpr uint32_t kWarps = kBlockVoteWarps;
  std::vector<int32_t> flags(size_t(blocks) * kWarps, 0);
  flags[1 * kWarps + 3] = 1;
  for (uint32_t w = 0; w < kWarps; ++w) flags[2 * kWarps + w] = 3;
  flags[3 * kWarps + 0] = 1;
  flags[3 * kWarps + 2] = 1;
  flags[4 * kWarps + 1] = 2;
  std::mt19937 rng(41);
  for (size_t i = 5 * kWarps; i < flags.size(); ++i) flags[i] = rng() % 7 == 0 ? int32_t(rng() % 4) : 0;
  void* d_flags = device.allocate(flags.size() * 4);
  void* d_out = device.allocate(flags.size() * 8);
  device.copy_to_device(d_flags, flags.data(), flags.size() * 4);
  std::vector<int32_t> out(flags.size() * 2, -7);
  device.copy_to_device(d_out, out.data(), out.size() * 4);
  launch(d_flags, d_out);
  device.copy_to_host(out.data(), d_out, out.size() * 4);
  for (uint32_t b = 0; b < blocks; ++b) {
    bool first = false, second = false;
    for (uint32_t w = 0; w < kWarps; ++w) {
      first |= (flags[size_t(b) * kWarps + w] & 1) != 0;
      second |= (flags[size_t(b) * kWarps + w] & 2) != 0;
    }
    for (uint32_t w = 0; w < kWarps; ++w) {
      const size_t at = (size_t(b) * kWarps + w) * 2;
      EXPECT_EQ(out[at], int32_t(first)) << "block " << b << " warp " << w << ", first vote";
      EXPECT_EQ(out[at + 1], int32_t(second)) << "block " << b << " warp " << w << ", second vote";
    }
  }
  device.release(d_flags);
  device.release(d_out);
}

}  // namespace epjit::testing
