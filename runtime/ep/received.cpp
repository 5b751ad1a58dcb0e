// The received rows of the dispatch awaiting combine, as callers take them:
// the tokens each local expert got (local_expert_counts*, received_counts)
// and the rows in the caller's tensors (deliver_received).
#include "op_impl.h"

namespace epjit::ep {

namespace {

// A received-rows call's common checks: an open op, no split call between
// its halves, and a dispatch whose rows are still this rank's.
void require_received(EpDispatchCombineOp::Impl& op, const char* call) {
  op.require_open(call);
  op.require_no_split_call_open(call);
  op.require_received_rows(call);
}

void launch_count_experts(EpDispatchCombineOp::Impl& op, EpDispatchCombineOp::ExpertCountRule rule) {
  // A warp per received entry, up to the dispatch's grid: rows come from
  // every rank, so the grid is sized for the dispatch's tokens times the
  // world (balanced routing) times top-k, at least one block (it publishes
  // the counts).
  const Kernel& kernel = *op.kernels.count_experts;
  const ScheduleEntry& geometry = op.geometry_for(std::max<int64_t>(op.dispatched_tokens, 1));
  const int64_t entries = op.dispatched_tokens * op.config.world_size * op.config.num_experts_per_token;
  const int64_t warps = geometry.dispatch_warps;
  const int64_t blocks = blocks_for(entries, warps, geometry.dispatch_blocks);
  op.device.launch(kernel, {uint32_t(blocks), uint32_t(warps)},
                   LaunchArgs(kernel)
                       .set("counts", op.expert_counts)
                       .set("rank", op.config.rank)
                       .set("every_entry", rule == EpDispatchCombineOp::ExpertCountRule::EveryEntry)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
}

// received_counts() under the name of the call that asked (its errors name it).
EpDispatchCombineOp::ReceivedCounts read_received_counts(EpDispatchCombineOp::Impl& op, const char* call,
                                                         EpDispatchCombineOp::ExpertCountRule rule) {
  const OneCallAtATime one_call = op.one_call(call);
  require_received(op, call);
  op.require_not_capturing(call);
  launch_count_experts(op, rule);
  // The kernel writes the received count after the experts' counts: one copy,
  // on the op's stream, after its dispatch (a failed kernel throws here).
  const size_t experts = size_t(op.config.num_experts_per_rank);
  std::vector<int32_t> words(experts + 1);
  op.device.copy_to_host(words.data(), op.expert_counts, words.size() * 4, *op.stream);
  EpDispatchCombineOp::ReceivedCounts counts;
  counts.total = words[experts];
  op.received_read = counts.total;
  counts.per_expert.assign(words.begin(), words.begin() + std::ptrdiff_t(experts));
  return counts;
}

}  // namespace

EpDispatchCombineOp::ReceivedCounts EpDispatchCombineOp::received_counts(ExpertCountRule rule,
                                                                         int64_t expert_alignment) {
  // The padded counts stay ints: an alignment past 2^30 could round a count beyond one.
  constexpr int64_t kLargestAlignment = int64_t(1) << 30;
  if (expert_alignment < 1 || expert_alignment > kLargestAlignment)
    throw Error("received_counts: expert_alignment is " + std::to_string(expert_alignment),
                "a multiple in [1, 2^30] to round each expert's count up to (1: the counts as they are)",
                "pass expert_alignment >= 1 (DeepEP's are 1 to a few hundred)");
  ReceivedCounts counts = read_received_counts(*impl_, "received_counts", rule);
  if (expert_alignment > 1) {
    const int64_t a = expert_alignment;
    for (int& count : counts.per_expert) count = int((count + a - 1) / a * a);
  }
  return counts;
}

std::vector<int> EpDispatchCombineOp::local_expert_counts(ExpertCountRule rule) {
  return read_received_counts(*impl_, "local_expert_counts", rule).per_expert;
}

TensorRef EpDispatchCombineOp::local_expert_counts_device(ExpertCountRule rule) {
  const OneCallAtATime one_call = impl_->one_call("local_expert_counts_device");
  Impl& op = *impl_;
  require_received(op, "local_expert_counts_device");
  launch_count_experts(op, rule);
  return {op.expert_counts, DType::I32, {op.config.num_experts_per_rank}};
}

void EpDispatchCombineOp::deliver_received(const ReceivedRows& out) {
  static constexpr const char* call = "deliver_received";
  const OneCallAtATime one_call = impl_->one_call(call);
  Impl& op = *impl_;
  require_received(op, call);
  const int64_t rows = out.tokens.shape.empty() ? -1 : out.tokens.shape[0];
  if (out.tokens.shape.size() != 2 || rows < 0 || rows > op.capacity())
    throw Error(std::string(call) + ": tokens has shape " + shape_text(out.tokens.shape),
                "[rows, hidden_dim] with rows at most the op's capacity (" + std::to_string(op.capacity()) + ")",
                "pass as many rows as the dispatch received (received_counts().total), or a worst case up to the "
                "capacity");
  const int64_t k = op.config.num_experts_per_token;
  expect_tensor(call, "tokens", out.tokens, tensor_type_of(op.config.dispatch_type(), op.config.target_info()),
                {rows, op.config.hidden_dim});
  if (out.local_experts) expect_tensor(call, "local_experts", *out.local_experts, DType::I64, {rows, k});
  if (out.weights) expect_tensor(call, "weights", *out.weights, DType::F32, {rows, k});
  const bool has_scales = op.config.scale_dim > 0;
  if (has_scales != bool(out.scales))
    throw Error(std::string(call) + (has_scales ? ": no scales tensor" : ": a scales tensor") + " for an op built " +
                    "with scale_dim = " + std::to_string(op.config.scale_dim),
                has_scales ? "scales [rows, scale_dim] of scale_type_size bytes" : "no scales",
                has_scales ? "pass a scales tensor for the received rows' scales" : "drop the scales tensor");
  if (out.scales) {
    if (bits_of(out.scales->dtype) != 8 * op.config.scale_type_size)
      throw Error(std::string(call) + ": scales are " + name_of(out.scales->dtype),
                  "elements of scale_type_size = " + std::to_string(op.config.scale_type_size) + " bytes",
                  "pass scales of the configured element size");
    expect_tensor(call, "scales", *out.scales, out.scales->dtype, {rows, op.config.scale_dim});
  }
  const Kernel& kernel = *op.kernels.deliver_received;
  require_pointer_alignment(kernel, "tokens_out", out.tokens.data, call, "tokens");
  if (out.scales) require_pointer_alignment(kernel, "scales_out", out.scales->data, call, "scales");
  if (out.local_experts)
    require_pointer_alignment(kernel, "local_ids", out.local_experts->data, call, "local_experts");
  if (out.weights) require_pointer_alignment(kernel, "weights_out", out.weights->data, call, "weights");
  if (rows == 0) return;
  // A warp per top-k entry (and per row for the copies), up to the combine's
  // grid: a handful of rows is one small launch.
  const ScheduleEntry geometry = op.geometry_for(op.dispatched_tokens);
  const int64_t warps = geometry.combine_warps, items = rows * std::max<int64_t>(1, k);
  const int64_t blocks = blocks_for(items, warps, geometry.combine_blocks);
  op.device.launch(kernel, {uint32_t(blocks), uint32_t(warps)},
                   LaunchArgs(kernel)
                       .set("tokens_out", out.tokens.data)
                       .set("scales_out", out.scales ? out.scales->data : nullptr)
                       .set("local_ids", out.local_experts ? out.local_experts->data : nullptr)
                       .set("weights_out", out.weights ? out.weights->data : nullptr)
                       .set("has_ids", out.local_experts.has_value())
                       .set("has_weights", out.weights.has_value())
                       .set("rows", rows)
                       .set("rank", op.config.rank)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
}

}  // namespace epjit::ep
