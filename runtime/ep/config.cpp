#include "epjit/ep/config.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "epjit/error.h"
#include "../core/environment.h"

namespace epjit::ep {
namespace {

[[noreturn]] void reject(const std::string& field, const std::string& value, const std::string& rule,
                         const std::string& fix) {
  throw Error("EpDispatchCombineConfig." + field + " = " + value + " breaks a rule", rule, fix);
}

std::string text(int64_t value) { return std::to_string(value); }

constexpr int64_t kMaxIndex = INT32_MAX;
constexpr double kDefaultPeerTimeoutSeconds = 30, kMinPeerTimeoutSeconds = 0.001, kMaxPeerTimeoutSeconds = 86400;

template <typename Enum, size_t N>
Enum parse_enum(const std::string& value, const std::pair<const char*, Enum> (&names)[N], const char* field) {
  std::string accepted;
  for (const auto& [name, parsed] : names) {
    if (value == name) return parsed;
    accepted += (accepted.empty() ? "" : ", ") + std::string(name);
  }
  throw Error("EpDispatchCombineConfig." + std::string(field) + " = '" + value + "' is not known", "one of " + accepted,
              "use one of those names");
}

constexpr std::pair<const char*, DataType> kDataTypes[] = {{"bf16", DataType::BF16},   {"f32", DataType::F32},
                                                           {"fp32", DataType::F32},   {"float32", DataType::F32},
                                                           {"float", DataType::F32},
                                                           {"fp8", DataType::FP8},    {"fp4", DataType::FP4}};
constexpr std::pair<const char*, CombineMode> kCombineModes[] = {{"gather", CombineMode::Gather},
                                                                 {"scatter", CombineMode::Scatter}};
constexpr std::pair<const char*, QuantType> kQuantTypes[] = {{"none", QuantType::None},
                                                             {"fp8_direct_cast", QuantType::Fp8DirectCast},
                                                             {"fp8_blockwise", QuantType::Fp8Blockwise}};
constexpr std::pair<const char*, InternodeKernel> kInternodeKernels[] = {
    {"auto", InternodeKernel::Auto}, {"v2", InternodeKernel::V2}, {"v2_ll", InternodeKernel::V2LowLatency}};
constexpr std::pair<const char*, ReceiveOrder> kReceiveOrders[] = {{"arrival", ReceiveOrder::Arrival},
                                                                   {"source", ReceiveOrder::Source}};
constexpr std::pair<const char*, StdMoeCombine> kStdMoeCombines[] = {
    {"rank_sums", StdMoeCombine::RankSums}, {"weighted_entries", StdMoeCombine::WeightedEntries}};
// The names of templates/ep/common.mlir's @std_moe_quant, in its order.
constexpr std::pair<const char*, StdMoeQuant> kStdMoeQuants[] = {{"none", StdMoeQuant::None},
                                                                 {"deepep_fp8", StdMoeQuant::DeepEpFp8},
                                                                 {"deepep_fp8_pow2", StdMoeQuant::DeepEpFp8Pow2},
                                                                 {"deepep_fp8_ue8m0", StdMoeQuant::DeepEpFp8Ue8m0}};

template <typename Enum, size_t N>
const char* enum_name(Enum value, const std::pair<const char*, Enum> (&names)[N]) {
  for (const auto& [name, parsed] : names)
    if (parsed == value) return name;
  return "?";
}

int64_t elements_in_16_bytes(DataType type) {
  switch (type) {
    case DataType::BF16: return 8;
    case DataType::F32: return 4;
    case DataType::FP8: return 16;
    case DataType::FP4: return 32;
  }
  return 1;
}

void require_positive(const std::string& field, int64_t value, const std::string& what) {
  if (value <= 0) reject(field, text(value), field + " is required and must be positive (" + what + ")", "set " + field);
}

void validate_geometry(const std::string& field, const std::optional<int>& value) {
  if (value && *value <= 0) reject(field, text(*value), field + " must be positive when set", "set a positive count or leave it unset");
}

}  // namespace

DataType parse_data_type(const std::string& value, const char* field) { return parse_enum(value, kDataTypes, field); }
std::span<const std::pair<const char*, DataType>> data_type_spellings() { return kDataTypes; }
CombineMode parse_combine_mode(const std::string& value) { return parse_enum(value, kCombineModes, "combine_mode"); }
QuantType parse_quant_type(const std::string& value) { return parse_enum(value, kQuantTypes, "quant_type"); }
InternodeKernel parse_internode_kernel(const std::string& value) {
  return parse_enum(value, kInternodeKernels, "internode_kernel");
}
ReceiveOrder parse_receive_order(const std::string& value) {
  return parse_enum(value, kReceiveOrders, "receive_order");
}
const char* name_of(DataType type) { return enum_name(type, kDataTypes); }
const char* name_of(CombineMode mode) { return enum_name(mode, kCombineModes); }
const char* name_of(QuantType quant) { return enum_name(quant, kQuantTypes); }
const char* name_of(InternodeKernel kernel) { return enum_name(kernel, kInternodeKernels); }
const char* name_of(ReceiveOrder order) { return enum_name(order, kReceiveOrders); }
StdMoeCombine parse_std_moe_combine(const std::string& value) {
  return parse_enum(value, kStdMoeCombines, "std_moe_combine");
}
const char* name_of(StdMoeCombine combine) { return enum_name(combine, kStdMoeCombines); }
StdMoeQuant parse_std_moe_quant(const std::string& value) { return parse_enum(value, kStdMoeQuants, "std_moe_quant"); }
const char* name_of(StdMoeQuant quant) { return enum_name(quant, kStdMoeQuants); }

size_t payload_bytes(DataType type, size_t elements) {
  switch (type) {
    case DataType::BF16: return elements * 2;
    case DataType::F32: return elements * 4;
    case DataType::FP8: return elements;
    case DataType::FP4: return (elements + 1) / 2;
  }
  return 0;
}

const TargetInfo& EpDispatchCombineConfig::target_info() const {
  if (const TargetInfo* info = find_target(target)) return *info;
  throw Error("EpDispatchCombineConfig.target = '" + target + "' is not a known target", "one of " + target_names(),
              "set target (or EPJIT_TARGET) to one of those");
}

std::string EpDispatchCombineConfig::backend() const {
  if (!kernel_backend.empty()) return kernel_backend;
  const char* from_env = std::getenv("EPJIT_KERNEL_BACKEND");
  return from_env && *from_env ? from_env : "epjit";
}

int64_t EpDispatchCombineConfig::max_tokens_per_rank_padded() const {
  if (!internode()) return max_num_inp_token_per_rank;
  const int64_t wave = target_info().wave_size;
  return (max_num_inp_token_per_rank + wave - 1) / wave * wave;
}

bool EpDispatchCombineConfig::runs_internode_v2(int64_t tokens) const {
  if (!internode()) return false;
  switch (internode_kernel) {
    case InternodeKernel::V2: return true;
    case InternodeKernel::V2LowLatency: return false;
    case InternodeKernel::Auto: return tokens > internode_auto_ll_max_tokens;
  }
  return false;
}

std::string EpDispatchCombineConfig::low_latency_combine_obstacle() const {
  if (internode()) return "it is intranode only (world_size " + text(world_size) + " > gpu_per_node " +
                          text(nodes_gpu_count()) + ")";
  if (quant_type != QuantType::None)
    return "it moves bf16 or f32 rows, not quant_type " + std::string(name_of(quant_type)) + "'s fp8 codes";
  if (enable_std_moe) return "the standard-MoE layout's combine unpacks in the staged kernels";
  return "";
}

bool EpDispatchCombineConfig::uses_low_latency_combine() const {
  if (low_latency_combine) return *low_latency_combine;
  // The op resolves an unset target (the device's, or EPJIT_TARGET) before
  // it asks; a config asked before that answers for TargetInfo's defaults.
  const Crossovers crossovers = target.empty() ? Crossovers{} : target_info().crossovers;
  return world_size > 1 && max_num_inp_token_per_rank <= crossovers.low_latency_combine_max_tokens &&
         low_latency_combine_obstacle().empty();
}

std::vector<ScheduleEntry> default_schedule(const TargetInfo& target) {
  std::vector<ScheduleEntry> table;
  for (const ScheduleRow& row : target.schedule)
    table.push_back({row.max_tokens > 0 ? std::optional<int64_t>(row.max_tokens) : std::nullopt, row.dispatch_blocks,
                     row.dispatch_warps, row.combine_blocks, row.combine_warps});
  return table;
}

std::vector<ScheduleEntry> EpDispatchCombineConfig::resolved_schedule() const {
  if (!schedule.empty()) return schedule;
  std::vector<ScheduleEntry> table = default_schedule(target_info());
  // Fields that are set override every variant of the table.
  for (ScheduleEntry& entry : table) {
    if (dispatch_block_num) entry.dispatch_blocks = *dispatch_block_num;
    if (warp_num_per_block) entry.dispatch_warps = *warp_num_per_block;
    if (combine_block_num) entry.combine_blocks = *combine_block_num;
    if (combine_warp_num_per_block) entry.combine_warps = *combine_warp_num_per_block;
  }
  return table;
}

const ScheduleEntry& schedule_entry_for(const std::vector<ScheduleEntry>& schedule, int64_t tokens) {
  for (const ScheduleEntry& entry : schedule)
    if (!entry.max_tokens || tokens <= *entry.max_tokens) return entry;
  return schedule.back();
}

ScheduleEntry EpDispatchCombineConfig::geometry_for(int64_t tokens) const {
  return schedule_entry_for(resolved_schedule(), tokens);
}

int32_t EpDispatchCombineConfig::peer_timeout_ms() const {
  const double seconds = peer_timeout_s > 0 ? peer_timeout_s
                                            : environment_seconds("EPJIT_PEER_TIMEOUT_S", kDefaultPeerTimeoutSeconds,
                                                                  kMinPeerTimeoutSeconds, kMaxPeerTimeoutSeconds);
  return int32_t(std::max(1.0, seconds * 1000.0 + 0.5));
}

void EpDispatchCombineConfig::validate() const {
  // Required fields.
  require_positive("world_size", world_size, "ranks in the op");
  if (rank < 0 || rank >= world_size)
    reject("rank", text(rank), "rank must be in [0, world_size = " + text(world_size) + ")", "pass this process's rank");
  require_positive("hidden_dim", hidden_dim, "elements per token");
  require_positive("max_num_inp_token_per_rank", max_num_inp_token_per_rank, "tokens per call and rank");
  require_positive("num_experts_per_rank", num_experts_per_rank, "experts on each rank");
  require_positive("num_experts_per_token", num_experts_per_token, "top-k");
  if (num_experts_per_token > num_experts())
    reject("num_experts_per_token", text(num_experts_per_token),
           "top-k cannot exceed the experts in the op (world_size * num_experts_per_rank = " + text(num_experts()) + ")",
           "lower num_experts_per_token or add experts");
  const TargetInfo& info = target_info();

  // Dtypes.
  if (dispatch_data_type.has_value() != combine_data_type.has_value())
    reject(dispatch_data_type ? "dispatch_data_type" : "combine_data_type",
           name_of(dispatch_data_type ? *dispatch_data_type : *combine_data_type),
           "dispatch_data_type and combine_data_type are set together or not at all",
           "set both (asymmetric legs) or neither (data_type for both)");
  if (combine_type() != DataType::BF16 && combine_type() != DataType::F32)
    reject("combine_data_type", name_of(combine_type()),
           "the combine leg sums in f32 and returns bf16 or f32 rows; it cannot be " +
               std::string(name_of(combine_type())),
           "set combine_data_type to bf16 or f32 (quant_type compresses the combine transport to fp8)");
  if (asymmetric()) {
    if (combine_mode != CombineMode::Gather)
      reject("combine_mode", name_of(combine_mode), "asymmetric dispatch/combine dtypes need gather combine",
             "set combine_mode=gather or drop the per-leg dtypes");
    if (quant_type != QuantType::None)
      reject("quant_type", name_of(quant_type), "asymmetric dispatch/combine dtypes cannot be combined with quant",
             "set quant_type=none or drop the per-leg dtypes");
    if (enable_std_moe)
      reject("enable_std_moe", "true", "asymmetric dispatch/combine dtypes cannot use the standard-MoE layout",
             "disable enable_std_moe or drop the per-leg dtypes");
  }
  if (enable_std_moe && (dispatch_type() != DataType::BF16 || combine_type() != DataType::BF16))
    reject("enable_std_moe", "true", "the standard-MoE layout conversion is bf16 only (data_type is " +
                                         std::string(name_of(dispatch_type())) + ")",
           "use data_type=bf16 or disable enable_std_moe");

  // Quantization.
  if (quant_type != QuantType::None && combine_mode != CombineMode::Scatter)
    reject("combine_mode", name_of(combine_mode), "quant_type " + std::string(name_of(quant_type)) + " needs scatter combine",
           "set combine_mode=scatter or quant_type=none");
  if (quant_type != QuantType::None && internode())
    reject("quant_type", name_of(quant_type),
           "quantized combine is intranode only (world_size " + text(world_size) + " > gpu_per_node " +
               text(nodes_gpu_count()) + ")",
           "set quant_type=none for internode runs");

  // Token layout.
  if (dispatch_token_bytes() % 16 != 0)
    reject("hidden_dim", text(hidden_dim),
           "a dispatched token must be a multiple of 16 bytes (" + text(int64_t(dispatch_token_bytes())) + " bytes of " +
               name_of(dispatch_type()) + ")",
           "pad hidden_dim to a multiple of " + text(elements_in_16_bytes(dispatch_type())));
  if ((scale_dim == 0) != (scale_type_size == 0) || scale_dim < 0 || scale_type_size < 0)
    reject("scale_dim", text(scale_dim) + " (scale_type_size " + text(scale_type_size) + ")",
           "per-token scales need both scale_dim and scale_type_size positive, or both 0",
           "set both, or neither");

  // Ranks, nodes.
  // world_size's bound by the target's wave size is the template's
  // (templates/ep/common.mlir, at_most): kernel generation refuses it.
  if (gpu_per_node) {
    if (*gpu_per_node <= 0 || *gpu_per_node > world_size || world_size % *gpu_per_node != 0)
      reject("gpu_per_node", text(*gpu_per_node), "gpu_per_node must divide world_size (" + text(world_size) + ")",
             "set it to the GPUs per node, or leave it unset for one node");
  }
  if (low_latency_combine.value_or(false)) {
    const std::string obstacle = low_latency_combine_obstacle();
    if (!obstacle.empty())
      reject("low_latency_combine", "true", "the low-latency combine cannot run this op: " + obstacle,
             "leave low_latency_combine unset (auto) or set it to false");
  }
  if (receive_order == ReceiveOrder::Source) {
    // Across nodes the order's totals cross before the dispatch and every
    // off-node rank gets its rows directly: v2_ll's transfers. v2 forwards
    // through a rail peer, whose arrival order the slots cannot fix.
    if (internode() && internode_kernel != InternodeKernel::V2LowLatency)
      reject("receive_order", "source",
             "source order across nodes (gpu_per_node " + text(nodes_gpu_count()) + " < world_size " +
                 text(world_size) + ") runs the v2_ll kernels, but internode_kernel is " +
                 std::string(name_of(internode_kernel)),
             "set internode_kernel 'v2_ll' with receive_order 'source', or use receive_order 'arrival'");
    // ep/order keeps its counts as f32, exact below 2^24.
    if (total_recv_tokens() >= (int64_t(1) << 24))
      reject("receive_order", "source",
             "source order counts the receive capacity (" + text(total_recv_tokens()) + " tokens) exactly below 2^24",
             "lower max_num_inp_token_per_rank or max_total_recv_tokens, or use receive_order 'arrival'");
  }
  if (std_moe_combine == StdMoeCombine::WeightedEntries) {
    const char* value = "weighted_entries";
    if (!enable_std_moe)
      reject("std_moe_combine", value, "weighted entries is how the standard-MoE combine sums; enable_std_moe is off",
             "set enable_std_moe=true, or leave std_moe_combine at 'rank_sums'");
    if (combine_mode != CombineMode::Gather || quant_type != QuantType::None)
      reject("std_moe_combine", value,
             "weighted entries reads each expert row from its rank's window: gather combine without quant (combine_mode " +
                 std::string(name_of(combine_mode)) + ", quant_type " + name_of(quant_type) + ")",
             "set combine_mode=gather and quant_type=none");
    if (internode())
      reject("std_moe_combine", value,
             "weighted entries reads rows across one node's windows (gpu_per_node " + text(nodes_gpu_count()) +
                 " < world_size " + text(world_size) + ")",
             "use std_moe_combine 'rank_sums' across nodes, or build the op for one node");
  }
  if (std_moe_quant != StdMoeQuant::None) {
    const char* value = name_of(std_moe_quant);
    if (!enable_std_moe)
      reject("std_moe_quant", value, "it quantizes the standard-MoE packed rows; enable_std_moe is off",
             "set enable_std_moe=true, or leave std_moe_quant at 'none'");
    if (quant_type != QuantType::None)
      reject("std_moe_quant", value,
             "it quantizes bf16 rows after a bf16 dispatch (quant_type " + std::string(name_of(quant_type)) + ")",
             "set quant_type=none");
    if (internode())
      reject("std_moe_quant", value,
             "it is served on one node (gpu_per_node " + text(nodes_gpu_count()) + " < world_size " +
                 text(world_size) + ")",
             "leave std_moe_quant at 'none' across nodes, or build the op for one node");
    const int64_t multiple = std_moe_quant == StdMoeQuant::DeepEpFp8Ue8m0 ? 512 : 128;
    if (hidden_dim % multiple != 0)
      reject("std_moe_quant", value,
             "its scales cover whole blocks of 128 elements" +
                 std::string(multiple == 512 ? ", packed four to an int32 word" : "") + ": hidden_dim " +
                 text(hidden_dim) + " is not a multiple of " + text(multiple),
             "use a hidden_dim that is a multiple of " + text(multiple) +
                 (multiple == 512 ? ", or std_moe_quant 'deepep_fp8_pow2' (the same scales as float)" : ""));
  }
  if (internode_auto_ll_max_tokens <= 0)
    reject("internode_auto_ll_max_tokens", text(internode_auto_ll_max_tokens), "the auto crossover must be positive",
           "leave it at 512 or set a positive token count");
  if (max_total_recv_tokens < 0)
    reject("max_total_recv_tokens", text(max_total_recv_tokens), "it is 0 (worst case) or a positive bound",
           "set 0 or a positive count");
  // Kernels index experts, routed entries and receive slots with 32-bit
  // integers: every such index must stay below 2^31.
  if (num_experts() > kMaxIndex)
    reject("num_experts_per_rank", text(num_experts_per_rank),
           "world_size * num_experts_per_rank = " + text(num_experts()) + " must be at most " + text(kMaxIndex),
           "use fewer experts per rank");
  if (max_num_inp_token_per_rank > kMaxIndex / num_experts_per_token)
    reject("max_num_inp_token_per_rank", text(max_num_inp_token_per_rank),
           "max_num_inp_token_per_rank * num_experts_per_token must be at most " + text(kMaxIndex),
           "lower max_num_inp_token_per_rank");
  if (total_recv_tokens() > kMaxIndex / world_size)
    reject(max_total_recv_tokens > 0 ? "max_total_recv_tokens" : "max_num_inp_token_per_rank",
           text(max_total_recv_tokens > 0 ? max_total_recv_tokens : max_num_inp_token_per_rank),
           "world_size * the receive capacity (" + text(total_recv_tokens()) + " tokens) must be at most " +
               text(kMaxIndex) + ": a sender addresses slot (rank, slot) as rank * capacity + slot",
           "lower max_total_recv_tokens (or max_num_inp_token_per_rank)");
  if (!(peer_timeout_s == 0 || (peer_timeout_s >= kMinPeerTimeoutSeconds && peer_timeout_s <= kMaxPeerTimeoutSeconds)))
    reject("peer_timeout_s", std::to_string(peer_timeout_s),
           "0 (EPJIT_PEER_TIMEOUT_S, else 30 s) or a time in [0.001, 86400] seconds",
           "set a timeout in seconds, e.g. 30");
  (void)peer_timeout_ms();  // a bad EPJIT_PEER_TIMEOUT_S is reported here, with its range
  if (backend() != "epjit")
    reject("kernel_backend", backend(), "epjit has one backend, 'epjit' (MORI's 'flydsl' and 'hip' are theirs)",
           "leave kernel_backend unset or set it to epjit");

  // Geometry.
  validate_geometry("dispatch_block_num", dispatch_block_num);
  validate_geometry("combine_block_num", combine_block_num);
  validate_geometry("warp_num_per_block", warp_num_per_block);
  validate_geometry("combine_warp_num_per_block", combine_warp_num_per_block);
  validate_geometry("send_block_num", send_block_num);
  validate_geometry("recv_block_num", recv_block_num);
  for (size_t i = 0; i < schedule.size(); ++i) {
    const ScheduleEntry& entry = schedule[i];
    const std::string field = "schedule[" + std::to_string(i) + "]";
    if (entry.dispatch_blocks <= 0 || entry.dispatch_warps <= 0 || entry.combine_blocks <= 0 || entry.combine_warps <= 0)
      reject(field, "(...)", "every block and warp count of a schedule entry must be positive", "fix the entry");
    const bool last = i + 1 == schedule.size();
    if (last != !entry.max_tokens.has_value())
      reject(field, entry.max_tokens ? text(*entry.max_tokens) : "none",
             "only the last schedule entry has no token bound (it catches every larger call)",
             "give every entry but the last a max_tokens, and the last none");
    if (i > 0 && entry.max_tokens && schedule[i - 1].max_tokens && *entry.max_tokens <= *schedule[i - 1].max_tokens)
      reject(field, text(*entry.max_tokens), "schedule thresholds must increase", "sort the entries by max_tokens");
  }
}

}  // namespace epjit::ep
