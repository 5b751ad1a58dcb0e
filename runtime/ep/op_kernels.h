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
  const Kernel* combine_entries = nullptr;  // std_moe_combine weighted_entries
  const Kernel* combine_low_latency = nullptr;  // instead of either, with config.uses_low_latency_combine()
  const Kernel* std_moe_pack = nullptr;
  const Kernel* std_moe_unpack = nullptr;
  const Kernel* std_moe_quantize = nullptr;  // std_moe_quant
  const Kernel* count_experts = nullptr;
  const Kernel* deliver_received = nullptr;
  const Kernel* dispatch_layout = nullptr;
  const Kernel* narrow_indices = nullptr;  // int64 top-k ids into the op's int32 copy
  const Kernel* order_count = nullptr;  // receive_order source: ep/order's kernels
  const Kernel* order_slots = nullptr;
  const Kernel* order_totals = nullptr;  // receive_order source across nodes
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
         recv_origin = 0, combine_rows = 0, combine_weights = 0, moe_counts = 0, moe_entry_rows = 0;
  size_t signals_bytes = 0, state_bytes = 0, moe_counts_bytes = 0, moe_entry_rows_bytes = 0;
  // ep_dispatch_layout's and ep_count_experts' two buffers and zeros: reset() clears them.
  size_t layout_counts = 0, layout_counts_bytes = 0, expert_count_buffers = 0, expert_count_buffers_bytes = 0;
  // The low-latency combine's flagged inboxes (empty without it): reset()
  // clears them, or a line of an earlier epoch would pass for a new one.
  size_t flagged_rows = 0, flagged_rows_bytes = 0, flagged_weights = 0, flagged_weights_bytes = 0;
  int64_t total_recv_word = 0, error_word = 0, peer_timeout_word = 0;
  // The bits of a dispatch's or combine's `phases` argument (ep/common).
  int64_t phase_send = 0, phase_receive = 0;
  int32_t error_peer_timeout = 0, error_capacity_exceeded = 0, error_expert_out_of_range = 0,
          error_internode_count = 0;

  static EpWindowMap of(const ModuleInterface& record, const WindowLayout& layout);
};

// The buffers outside the window the op allocates for its kernels, and the
// parts it addresses in them, from the record (templates/ep/buffers.mlir):
// their layout is written there only. Each buffer is one allocation.
struct EpBuffers {
  const BufferInfo* route = nullptr;  // one per op and one per Routing
  const BufferPartInfo *route_entries = nullptr, *route_received = nullptr, *route_sent = nullptr,
                       *route_source_first = nullptr, *route_forward = nullptr;
  const BufferInfo* kept = nullptr;  // a Routing's kept call
  const BufferPartInfo *kept_origins = nullptr, *kept_indices = nullptr;
  const BufferInfo* outputs = nullptr;
  const BufferPartInfo *out_tokens = nullptr, *out_weights = nullptr, *expert_counts = nullptr,
                       *narrow_indices = nullptr;
  const BufferInfo* std_moe = nullptr;
  const BufferPartInfo *moe_tokens = nullptr, *moe_counts = nullptr, *moe_sources = nullptr,
                       *moe_combine_in = nullptr, *moe_codes = nullptr, *moe_scales = nullptr;

  // The record must outlive the result (it points into it). Throws
  // epjit::Error naming what the record lacks or what the op cannot use.
  static EpBuffers of(const ModuleInterface& record);
  // 32-bit words of a route map, and of one without its forward route (the
  // last part: a map saved without it is the whole map's prefix).
  size_t route_words() const { return route->bytes / 4; }
  size_t own_route_words() const { return route_forward->offset / 4; }
};

// The template whose kernels the op runs.
inline constexpr const char* kEpTemplate = "ep_dispatch_combine";

}  // namespace epjit::ep
