#include "op_kernels.h"

#include <string>

#include "epjit/ep/config.h"
#include "epjit/error.h"

namespace epjit::ep {

EpKernels EpKernels::bind(const KernelModule& module, const EpDispatchCombineConfig& config) {
  // The module holds only what its configuration launches (the template's
  // when(...) clauses): bind exactly that, so a disagreement fails here by name.
  EpKernels kernels;
  kernels.dispatch = &module.kernel("ep_dispatch");
  kernels.count_experts = &module.kernel("ep_count_experts");
  if (config.uses_low_latency_combine())
    kernels.combine_low_latency = &module.kernel("ep_combine_low_latency");
  else if (config.combine_mode == CombineMode::Gather)
    kernels.combine_gather = &module.kernel("ep_combine_gather");
  else
    kernels.combine_scatter = &module.kernel("ep_combine_scatter");
  if (config.enable_std_moe) kernels.std_moe_pack = &module.kernel("ep_std_moe_pack");
  // Intranode, the combine kernels unpack the standard-MoE layout themselves.
  if (config.enable_std_moe && config.internode()) kernels.std_moe_unpack = &module.kernel("ep_std_moe_unpack");
  if (config.internode()) {
    kernels.internode_ingest = &module.kernel("ep_internode_ingest");
    kernels.internode_return_pack = &module.kernel("ep_internode_return_pack");
    kernels.internode_return_unpack = &module.kernel("ep_internode_return_unpack");
    kernels.internode_forward = &module.kernel("ep_internode_forward");
    kernels.internode_partials = &module.kernel("ep_internode_partials");
    kernels.internode_sum = &module.kernel("ep_internode_sum");
  }
  return kernels;
}

EpWindowMap EpWindowMap::of(const ModuleInterface& record, const WindowLayout& layout) {
  auto offset = [&](const char* name) { return layout.offsets[record.region_index(name)]; };
  auto bytes = [&](const char* name) { return layout.bytes[record.region_index(name)]; };
  EpWindowMap map;
  map.state = offset("state");
  map.signals = offset("signals");
  map.recv_tokens = offset("recv_tokens");
  map.recv_weights = offset("recv_weights");
  map.recv_scales = offset("recv_scales");
  map.recv_indices = offset("recv_indices");
  map.recv_origin = offset("recv_origin");
  map.combine_rows = offset("combine_rows");
  map.combine_weights = offset("combine_weights");
  map.moe_counts = offset("moe_counts");
  map.state_bytes = bytes("state");
  map.signals_bytes = bytes("signals");
  map.moe_counts_bytes = bytes("moe_counts");
  map.flagged_rows = offset("ll_rows");
  map.flagged_rows_bytes = bytes("ll_rows");
  map.flagged_weights = offset("ll_weights");
  map.flagged_weights_bytes = bytes("ll_weights");
  map.total_recv_word = record.constant("state_total_recv");
  map.error_word = record.constant("state_error");
  map.peer_timeout_word = record.constant("state_peer_timeout_ms");
  map.error_peer_timeout = int32_t(record.constant("error_peer_timeout"));
  map.error_capacity_exceeded = int32_t(record.constant("error_capacity_exceeded"));
  map.error_expert_out_of_range = int32_t(record.constant("error_expert_out_of_range"));
  map.error_internode_count = int32_t(record.constant("error_internode_count"));
  if (record.constant("expert_none") != kNoExpert)
    throw Error(record.template_name + " names expert " + std::to_string(record.constant("expert_none")) +
                    " as 'no expert'",
                std::to_string(kNoExpert) + " (epjit::ep::kNoExpert)", "the template and the runtime disagree: report this as a bug");
  return map;
}

}  // namespace epjit::ep
