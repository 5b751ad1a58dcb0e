// EpDispatchCombineConfig: the configuration of an expert-parallel
// dispatch/combine op, with MORI EPv2's fields (snake_case as there), the
// properties derived from them, and every validation rule of SEED-NOTES.md.
// validate() throws an epjit::Error naming the field, the value and the rule.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "epjit/targets/TargetInfo.h"

namespace epjit::ep {

// An index slot routed nowhere: dispatch skips it and it counts for no
// destination (DeepEP's and vLLM's masked or padded slots). Any other index
// outside [0, world_size * num_experts_per_rank) is an error.
inline constexpr int32_t kNoExpert = -1;

// Payload element types. fp8 is the target's fp8 (e4m3fnuz on gfx942, e4m3fn
// elsewhere); fp4 is E2M1, two per byte.
enum class DataType : uint8_t { BF16, F32, FP8, FP4 };
enum class CombineMode : uint8_t { Gather, Scatter };
enum class QuantType : uint8_t { None, Fp8DirectCast, Fp8Blockwise };
enum class InternodeKernel : uint8_t { Auto, V2, V2LowLatency };
// Where a dispatch puts each row it delivers: Arrival (the slot a sender
// takes from the receiver's counter; the fastest), or Source (rank 0's rows
// first, then rank 1's, ..., each rank's in its token order: DeepEP's
// normal-mode order, the same on every run; docs/EP.md "Receive order").
enum class ReceiveOrder : uint8_t { Arrival, Source };
// How std_moe_combine sums (enable_std_moe): RankSums (each rank sums its
// experts' rows of a token, the origin sums the ranks' partials), or
// WeightedEntries (each (token, k) row goes back to its origin, which sums
// them weighted by its top-k weights in top-k order, as DeepEP's low-latency
// combine does; docs/EP.md "Standard MoE").
enum class StdMoeCombine : uint8_t { RankSums, WeightedEntries };
// Standard MoE's packed rows also in OCP E4M3 with DeepEP's per-128 scales
// (its low-latency fp8 dispatch; docs/EP.md "Standard MoE in fp8"): none, or
// float scales amax / 448, power-of-two float scales, or UE8M0 bytes.
enum class StdMoeQuant : uint8_t { None, DeepEpFp8, DeepEpFp8Pow2, DeepEpFp8Ue8m0 };

// "bf16", "f32"/"fp32"/"float32", "fp8", "fp4"; throws epjit::Error naming `field`.
DataType parse_data_type(const std::string& text, const char* field = "data_type");
// Every spelling parse_data_type takes, with the type it names.
std::span<const std::pair<const char*, DataType>> data_type_spellings();
CombineMode parse_combine_mode(const std::string& text);
QuantType parse_quant_type(const std::string& text);
InternodeKernel parse_internode_kernel(const std::string& text);
ReceiveOrder parse_receive_order(const std::string& text);
StdMoeCombine parse_std_moe_combine(const std::string& text);
StdMoeQuant parse_std_moe_quant(const std::string& text);
const char* name_of(DataType type);
const char* name_of(CombineMode mode);
const char* name_of(QuantType quant);
const char* name_of(InternodeKernel kernel);
const char* name_of(ReceiveOrder order);
const char* name_of(StdMoeCombine combine);
const char* name_of(StdMoeQuant quant);

// Bytes of `elements` elements of a type (fp4 packs two per byte).
size_t payload_bytes(DataType type, size_t elements);

// One geometry variant: used for calls of at most max_tokens tokens (none: any).
struct ScheduleEntry {
  std::optional<int64_t> max_tokens;
  int dispatch_blocks = 0;
  int dispatch_warps = 0;
  int combine_blocks = 0;
  int combine_warps = 0;
};

struct EpDispatchCombineConfig {
  // Required.
  int rank = -1;
  int world_size = 0;
  int64_t hidden_dim = 0;
  int64_t max_num_inp_token_per_rank = 0;
  int num_experts_per_rank = 0;
  int num_experts_per_token = 0;

  DataType data_type = DataType::BF16;
  std::optional<DataType> dispatch_data_type;  // set both or neither
  std::optional<DataType> combine_data_type;
  int scale_dim = 0;        // per-token scales forwarded as opaque bytes
  int scale_type_size = 0;
  CombineMode combine_mode = CombineMode::Gather;
  QuantType quant_type = QuantType::None;
  // Geometry: unset = from the target's schedule table.
  std::optional<int> dispatch_block_num;
  std::optional<int> combine_block_num;
  std::optional<int> warp_num_per_block;
  std::optional<int> combine_warp_num_per_block;
  // The SMs of a split call's halves (dispatch_send/combine_send, and
  // combine_recv): blocks at most, unset = the schedule's. A send half only
  // issues its transfers, so a few blocks leave the rest of the GPU to the
  // work between the halves. dispatch_recv runs on one block.
  std::optional<int> send_block_num;
  std::optional<int> recv_block_num;
  std::vector<ScheduleEntry> schedule;  // empty = one entry from the fields above / the table
  bool enable_std_moe = false;
  int64_t max_total_recv_tokens = 0;  // 0 = world_size * max_num_inp_token_per_rank
  std::string kernel_backend;         // "" = EPJIT_KERNEL_BACKEND, else "epjit"
  std::optional<int> gpu_per_node;    // unset = world_size (intranode)
  InternodeKernel internode_kernel = InternodeKernel::Auto;
  int64_t internode_auto_ll_max_tokens = 512;
  // The combine's protocol, a property of the op (never of a call, so every
  // rank runs the same kernels): true runs the low-latency combine (each
  // contribution pushed into its origin's flagged inbox and summed as it
  // arrives; docs/EP.md), false the staged combine of combine_mode. Unset =
  // auto: low latency when the op can run it (intranode, quant_type none,
  // no std-MoE), has peers (world_size > 1: alone, gather reads its rows in
  // place and copies nothing) and max_num_inp_token_per_rank is at most the
  // target's crossover (TargetInfo::crossovers; a config with no target yet
  // answers with TargetInfo's default). Results are the same bits either way.
  std::optional<bool> low_latency_combine;
  // The order of a dispatch's received rows (one node only). Source runs two
  // small kernels and one more meeting of the ranks before the transfers
  // (docs/PERFORMANCE.md has its cost); the rows, counts and sums are the
  // same either way, only their places differ.
  ReceiveOrder receive_order = ReceiveOrder::Arrival;
  // With enable_std_moe: how std_moe_combine sums (StdMoeCombine). Weighted
  // entries need gather, bf16, one node; std_moe_combine then takes the
  // origin's top-k weights and indices.
  StdMoeCombine std_moe_combine = StdMoeCombine::RankSums;
  // With enable_std_moe: std_moe_pack also writes the packed rows in fp8
  // (StdMoeQuant). Needs bf16 dispatch (quant_type none), one node, hidden a
  // multiple of 128 (of 512 for UE8M0).
  StdMoeQuant std_moe_quant = StdMoeQuant::None;
  std::string target;                 // "" = the device's target, or EPJIT_TARGET
  // How long a kernel waits for a peer before it reports error_peer_timeout
  // (check() throws; later calls fail at once until reset()). 0 = the
  // EPJIT_PEER_TIMEOUT_S variable, else 30 s. Changes no generated code.
  double peer_timeout_s = 0;

  // Throws epjit::Error for the first rule broken. `target` must be resolved.
  void validate() const;

  // ------------------------------------------------ derived properties
  int64_t num_experts() const { return int64_t(world_size) * num_experts_per_rank; }
  // The peer timeout in milliseconds after the environment default (what the
  // kernels read from their state word).
  int32_t peer_timeout_ms() const;
  DataType dispatch_type() const { return dispatch_data_type.value_or(data_type); }
  // data_type fp8/fp4 applies to the dispatch leg; the combine leg, which sums
  // in f32, is then bf16 (its transport is compressed by quant_type instead).
  DataType combine_type() const {
    if (combine_data_type) return *combine_data_type;
    return (data_type == DataType::FP8 || data_type == DataType::FP4) ? DataType::BF16 : data_type;
  }
  bool asymmetric() const { return dispatch_data_type.has_value(); }
  int nodes_gpu_count() const { return gpu_per_node.value_or(world_size); }
  bool internode() const { return world_size > nodes_gpu_count(); }
  size_t dispatch_token_bytes() const { return payload_bytes(dispatch_type(), size_t(hidden_dim)); }
  size_t combine_token_bytes() const { return payload_bytes(combine_type(), size_t(hidden_dim)); }
  size_t scale_bytes_per_token() const { return size_t(scale_dim) * size_t(scale_type_size); }
  int64_t total_recv_tokens() const {
    return max_total_recv_tokens > 0 ? max_total_recv_tokens : int64_t(world_size) * max_num_inp_token_per_rank;
  }
  // Internode buffers are sized for a multiple of the wave size.
  int64_t max_tokens_per_rank_padded() const;
  // Does a call of `tokens` tokens run internode v2 (a token crosses to each
  // node once, through its rail peer) rather than v2_ll? auto: above
  // internode_auto_ll_max_tokens. Every rank of a call must decide alike
  // (their transfers pair up): they do when their token counts are on the
  // same side of the crossover, or when each passes the call's largest count
  // (DispatchOptions::max_tokens_across_ranks) as `tokens`.
  bool runs_internode_v2(int64_t tokens) const;
  // Does the op combine with the low-latency protocol (low_latency_combine,
  // auto resolved)?
  bool uses_low_latency_combine() const;
  // Why the op cannot run the low-latency combine, or "" when it can.
  std::string low_latency_combine_obstacle() const;
  // The geometry variants compiled at construction, smallest threshold first
  // (explicit schedule, else the fields, else the target's table).
  std::vector<ScheduleEntry> resolved_schedule() const;
  // The variant a call of `tokens` tokens uses.
  ScheduleEntry geometry_for(int64_t tokens) const;
  const TargetInfo& target_info() const;
  // The backend after the environment default.
  std::string backend() const;
};

// The variant of `schedule` (smallest threshold first, the last unbounded) a
// call of `tokens` tokens uses.
const ScheduleEntry& schedule_entry_for(const std::vector<ScheduleEntry>& schedule, int64_t tokens);

// The target's tuning table (TargetInfo::schedule): geometry by token count.
std::vector<ScheduleEntry> default_schedule(const TargetInfo& target);

}  // namespace epjit::ep
