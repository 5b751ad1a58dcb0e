// The symmetric window of an EpDispatchCombineOp: the regions the kernels of
// templates/ep_dispatch_combine.mlir declare, in the same order, sized for
// one configuration. tests/unit/ep/window_layout_test.cpp checks the order
// against the template.
#pragma once

#include <array>
#include <cstddef>

#include "epjit/ep/config.h"

namespace epjit::ep {

enum class Region : int {
  State,
  Signals,
  RecvTokens,
  RecvWeights,
  RecvScales,
  RecvIndices,
  RecvOrigin,
  CombineRows,
  CombineWeights,
  ScatterRows,
  ScatterScales,
  ScatterWeights,
  Accumulator,
  Dequantized,
  MoeCounts,
  MoeSlots,
};
inline constexpr int kRegionCount = 16;
inline constexpr std::array<const char*, kRegionCount> kRegionNames = {
    "state",          "signals",        "recv_tokens", "recv_weights", "recv_scales", "recv_indices",
    "recv_origin",    "combine_rows",   "combine_weights", "scatter_rows", "scatter_scales", "scatter_weights",
    "accumulator",    "dequantized",    "moe_counts",  "moe_slots"};

// i32 words of the state region (the template names them by number).
enum StateWord : int {
  kEpoch = 0,             // the last completed dispatch's epoch
  kDispatchArrivals = 1,  // warps of this rank done sending (reset by the last)
  kTotalRecv = 2,         // tokens the last dispatch delivered here
  kError = 3,             // 0, or an ErrorCode
  kCombineArrivals = 4,
  kMoeArrivals = 5,
  kRecvCounter = 6,       // slots taken here by senders during a dispatch
  kStateWords = 16,
};

// Elements of a row a combine warp sums at a time in its f32 scratch (whole
// fp8 blocks of 128; the template's `chunk`).
inline constexpr int64_t kCombineChunk = 1024;

// The most warps a combine-side launch of this config runs (its scratch rows).
int64_t max_combine_warps(const EpDispatchCombineConfig& config);

// What a kernel writes into kError.
enum ErrorCode : int { kPeerTimeout = 1, kCapacityExceeded = 2, kExpertOutOfRange = 3 };

struct WindowLayout {
  std::array<size_t, kRegionCount> offset{};
  std::array<size_t, kRegionCount> bytes{};
  size_t total = 0;

  static WindowLayout of(const EpDispatchCombineConfig& config);
  size_t at(Region region) const { return offset[size_t(region)]; }
};

// Rows of the route map one dispatch writes: max tokens * top-k entries, then
// the received count.
size_t route_words(const EpDispatchCombineConfig& config);

}  // namespace epjit::ep
