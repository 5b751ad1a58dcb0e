// What an EpDispatchCombineOp binds in its module, resolved once from the
// interface record: the kernels it launches (the one place their names
// appear) and where it reads and writes its window (region offsets, state
// words, error codes). A template that disagrees fails here, at construction,
// with the name of what is missing.
#pragma once

#include <cstddef>
#include <cstdint>

#include "epjit/ep/config.h"
#include "epjit/kernel_module.h"
#include "epjit/window_layout.h"

namespace epjit::ep {

struct EpKernels {
  const Kernel* dispatch = nullptr;
  const Kernel* combine_gather = nullptr;
  const Kernel* combine_scatter = nullptr;
  const Kernel* combine_low_latency = nullptr;  // instead of either, with config.uses_low_latency_combine()
  const Kernel* std_moe_pack = nullptr;
  const Kernel* std_moe_unpack = nullptr;
  const Kernel* count_experts = nullptr;
  const Kernel* internode_ingest = nullptr;
  const Kernel* internode_return_pack = nullptr;
  const Kernel* internode_return_unpack = nullptr;
  const Kernel* internode_forward = nullptr;   // v2
  const Kernel* internode_partials = nullptr;  // v2
  const Kernel* internode_sum = nullptr;       // v2

  // Those `config` launches; the others stay null (its module does not hold them).
  static EpKernels bind(const KernelModule& module, const EpDispatchCombineConfig& config);
};

// Byte offsets of the regions the op hands out or clears, and the words and
// codes of @state it reads.
struct EpWindowMap {
  size_t state = 0, signals = 0, recv_tokens = 0, recv_weights = 0, recv_scales = 0, recv_indices = 0,
         recv_origin = 0, combine_rows = 0, combine_weights = 0, moe_counts = 0;
  size_t signals_bytes = 0, state_bytes = 0, moe_counts_bytes = 0;
  // The low-latency combine's flagged inboxes (empty without it): reset()
  // clears them, or a line of an earlier epoch would pass for a new one.
  size_t flagged_rows = 0, flagged_rows_bytes = 0, flagged_weights = 0, flagged_weights_bytes = 0;
  int64_t total_recv_word = 0, error_word = 0, peer_timeout_word = 0;
  int32_t error_peer_timeout = 0, error_capacity_exceeded = 0, error_expert_out_of_range = 0,
          error_internode_count = 0;

  static EpWindowMap of(const ModuleInterface& record, const WindowLayout& layout);
};

// The template whose kernels the op runs.
inline constexpr const char* kEpTemplate = "ep_dispatch_combine";

}  // namespace epjit::ep
