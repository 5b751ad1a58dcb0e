#include "op_kernels.h"

#include <string>

#include "epjit/ep/config.h"
#include "epjit/error.h"

namespace epjit::ep {

EpKernels EpKernels::bind(const KernelModule& module, const EpDispatchCombineConfig& config) {
  // The module holds the kernels its configuration launches (each kernel's
  // when(...) in the template, stated in the record): bind what it holds,
  // then check that it holds what the op's calls need.
  const ModuleInterface& record = module.interface();
  auto held = [&](const char* name) { return record.has_kernel(name) ? &module.kernel(name) : nullptr; };
  EpKernels kernels;
  kernels.dispatch = &module.kernel("ep_dispatch");
  kernels.count_experts = &module.kernel("ep_count_experts");
  kernels.deliver_received = &module.kernel("ep_deliver_received");
  kernels.dispatch_layout = &module.kernel("ep_dispatch_layout");
  kernels.narrow_indices = &module.kernel("ep_narrow_indices");
  kernels.combine_low_latency = held("ep_combine_low_latency");
  kernels.combine_gather = held("ep_combine_gather");
  kernels.combine_entries = held("ep_combine_entries");
  kernels.combine_scatter = held("ep_combine_scatter");
  kernels.std_moe_pack = held("ep_std_moe_pack");
  kernels.std_moe_unpack = held("ep_std_moe_unpack");
  kernels.std_moe_quantize = held("ep_std_moe_quantize");
  kernels.order_count = held("ep_order_count");
  kernels.order_slots = held("ep_order_slots");
  kernels.order_totals = held("ep_order_totals");
  kernels.internode_ingest = held("ep_internode_ingest");
  kernels.internode_return_pack = held("ep_internode_return_pack");
  kernels.internode_return_unpack = held("ep_internode_return_unpack");
  kernels.internode_forward = held("ep_internode_forward");
  kernels.internode_partials = held("ep_internode_partials");
  kernels.internode_sum = held("ep_internode_sum");
  const int combines = int(kernels.combine_low_latency != nullptr) + int(kernels.combine_gather != nullptr) +
                       int(kernels.combine_scatter != nullptr) + int(kernels.combine_entries != nullptr);
  auto disagree = [&](const std::string& what) {
    throw Error(record.template_name + " for target " + config.target + ": " + what, "the kernels the op's calls launch",
                "the template's when(...) clauses and the op disagree: report this as a bug");
  };
  if (combines != 1) disagree("the module holds " + std::to_string(combines) + " combine kernels");
  if (config.enable_std_moe && !kernels.std_moe_pack) disagree("enable_std_moe, but no ep_std_moe_pack");
  if ((config.enable_std_moe && config.std_moe_combine == StdMoeCombine::WeightedEntries) !=
      (kernels.combine_entries != nullptr))
    disagree(std::string("std_moe_combine ") + name_of(config.std_moe_combine) + ", but ep_combine_entries " +
             (kernels.combine_entries ? "is there" : "is not"));
  if ((config.enable_std_moe && config.std_moe_quant != StdMoeQuant::None) != (kernels.std_moe_quantize != nullptr))
    disagree(std::string("std_moe_quant ") + name_of(config.std_moe_quant) + ", but ep_std_moe_quantize " +
             (kernels.std_moe_quantize ? "is there" : "is not"));
  if ((config.receive_order == ReceiveOrder::Source) != (kernels.order_count && kernels.order_slots))
    disagree(std::string("receive_order ") + name_of(config.receive_order) + ", but the ep_order_* kernels " +
             (kernels.order_count ? "are there" : "are not"));
  if ((config.receive_order == ReceiveOrder::Source && config.internode()) != (kernels.order_totals != nullptr))
    disagree(std::string("receive_order ") + name_of(config.receive_order) +
             (config.internode() ? " across nodes" : " on one node") + ", but ep_order_totals " +
             (kernels.order_totals ? "is there" : "is not"));
  if (config.internode() && !(kernels.internode_ingest && kernels.internode_return_pack &&
                              kernels.internode_return_unpack && kernels.internode_forward &&
                              kernels.internode_partials && kernels.internode_sum))
    disagree("internode, but not every ep_internode_* kernel");
  return kernels;
}

EpBuffers EpBuffers::of(const ModuleInterface& record) {
  EpBuffers buffers;
  buffers.route = &record.buffer("route");
  buffers.route_entries = &buffers.route->part("route_entries");
  buffers.route_received = &buffers.route->part("route_received");
  buffers.route_sent = &buffers.route->part("route_sent");
  buffers.route_source_first = &buffers.route->part("route_source_first");
  buffers.route_forward = &buffers.route->part("route_forward");
  buffers.kept = &record.buffer("kept");
  buffers.kept_origins = &buffers.kept->part("kept_origins");
  buffers.kept_indices = &buffers.kept->part("kept_indices");
  buffers.outputs = &record.buffer("outputs");
  buffers.out_tokens = &buffers.outputs->part("out_tokens");
  buffers.out_weights = &buffers.outputs->part("out_weights");
  buffers.expert_counts = &buffers.outputs->part("expert_counts");
  buffers.narrow_indices = &buffers.outputs->part("narrow_indices");
  buffers.std_moe = &record.buffer("std_moe");
  buffers.moe_tokens = &buffers.std_moe->part("moe_tokens");
  buffers.moe_counts = &buffers.std_moe->part("moe_counts_out");
  buffers.moe_sources = &buffers.std_moe->part("moe_sources");
  buffers.moe_combine_in = &buffers.std_moe->part("moe_combine_in");
  buffers.moe_codes = &buffers.std_moe->part("moe_codes");
  buffers.moe_scales = &buffers.std_moe->part("moe_scales");
  // The host reads and writes the route map word by word (route_map(),
  // load_routing()): every part is i32, and the forward route comes last.
  for (const BufferPartInfo& part : buffers.route->parts)
    if (part.element != "i32")
      throw Error(record.template_name + "'s route map part '" + part.name + "' holds " + part.element,
                  "i32 words", "declare the route map's parts as i32 in the template");
  if (&buffers.route->parts.back() != buffers.route_forward || buffers.route->bytes % 4 != 0)
    throw Error(record.template_name + "'s route map does not end with route_forward",
                "route_forward last (a map saved without it is the whole map's prefix)",
                "declare route_forward as the route buffer's last part in the template");
  return buffers;
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
  map.layout_counts = offset("layout_counts");
  map.layout_counts_bytes = bytes("layout_counts");
  map.expert_count_buffers = offset("expert_count_buffers");
  map.expert_count_buffers_bytes = bytes("expert_count_buffers");
  map.moe_entry_rows = offset("moe_entry_rows");
  map.moe_entry_rows_bytes = bytes("moe_entry_rows");
  map.flagged_rows = offset("flagged_rows");
  map.flagged_rows_bytes = bytes("flagged_rows");
  map.flagged_weights = offset("flagged_weights");
  map.flagged_weights_bytes = bytes("flagged_weights");
  map.total_recv_word = record.constant("state_total_recv");
  map.error_word = record.constant("state_error");
  map.peer_timeout_word = record.constant("state_peer_timeout_ms");
  map.phase_send = record.constant("phase_send");
  map.phase_receive = record.constant("phase_receive");
  if (map.phase_send <= 0 || map.phase_receive <= 0 || (map.phase_send & map.phase_receive) != 0)
    throw Error(record.template_name + " names phases " + std::to_string(map.phase_send) + " and " +
                    std::to_string(map.phase_receive),
                "two distinct bits (@phase_send, @phase_receive)", "fix the template's phase constants");
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
