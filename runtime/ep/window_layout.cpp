#include "window_layout.h"

#include <algorithm>

#include "epjit/numerics.h"

namespace epjit::ep {

namespace {

constexpr size_t kRegionAlignment = 256;  // keeps every row start 16-byte aligned

size_t align_up(size_t bytes) { return (bytes + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment; }

size_t row_bytes(DataType type, size_t elements) { return payload_bytes(type, elements); }

}  // namespace

WindowLayout WindowLayout::of(const EpDispatchCombineConfig& config) {
  const size_t hidden = size_t(config.hidden_dim), topk = size_t(config.num_experts_per_token);
  const size_t world = size_t(config.world_size), max_tokens = size_t(config.max_num_inp_token_per_rank);
  const size_t capacity = size_t(config.total_recv_tokens());
  const size_t combine_row = row_bytes(config.combine_type(), hidden);
  const bool scatter = config.combine_mode == CombineMode::Scatter;
  const bool quant = config.quant_type != QuantType::None;
  const size_t boxes = max_tokens * topk;  // scatter inbox rows

  std::array<size_t, kRegionCount> sizes{};
  auto set = [&](Region region, size_t bytes) { sizes[size_t(region)] = bytes; };
  set(Region::State, kStateWords * 4);
  set(Region::Signals, 2 * world * 4);
  set(Region::RecvTokens, capacity * config.dispatch_token_bytes());
  set(Region::RecvWeights, capacity * topk * 4);
  set(Region::RecvScales, capacity * config.scale_bytes_per_token());
  set(Region::RecvIndices, capacity * topk * 4);
  set(Region::RecvOrigin, capacity * 2 * 4);
  if (!scatter) {
    set(Region::CombineRows, capacity * combine_row);
    set(Region::CombineWeights, capacity * topk * 4);
  } else {
    set(Region::ScatterRows, boxes * (quant ? hidden : combine_row));
    if (config.quant_type == QuantType::Fp8Blockwise)
      set(Region::ScatterScales, boxes * ((hidden + kFp8BlockwiseBlockSize - 1) / kFp8BlockwiseBlockSize) * 4);
    set(Region::ScatterWeights, boxes * topk * 4);
    if (quant) set(Region::Dequantized, size_t(max_combine_warps(config)) * size_t(kCombineChunk) * 4);
  }
  const size_t scratch = size_t(max_combine_warps(config)) * size_t(kCombineChunk) * 4;
  set(Region::Accumulator, scratch);
  if (config.enable_std_moe) {
    set(Region::MoeCounts, size_t(config.num_experts_per_rank) * 4);
    set(Region::MoeSlots, capacity * topk * 4);
  }

  WindowLayout layout;
  for (int r = 0; r < kRegionCount; ++r) {
    layout.offset[size_t(r)] = layout.total;
    layout.bytes[size_t(r)] = sizes[size_t(r)];
    layout.total += align_up(sizes[size_t(r)]);
  }
  return layout;
}

int64_t max_combine_warps(const EpDispatchCombineConfig& config) {
  int64_t warps = 1;
  for (const ScheduleEntry& entry : config.resolved_schedule())
    warps = std::max(warps, int64_t(entry.combine_blocks) * entry.combine_warps);
  return warps;
}

size_t route_words(const EpDispatchCombineConfig& config) {
  return size_t(config.max_num_inp_token_per_rank) * size_t(config.num_experts_per_token) + 1;
}

}  // namespace epjit::ep
