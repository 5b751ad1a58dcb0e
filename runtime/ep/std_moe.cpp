// The standard-MoE layout (pack, combine) and the received tokens per local expert.
#include "op_impl.h"

namespace epjit::ep {

StdMoeResult EpDispatchCombineOp::std_moe_pack() {
  const OneCallAtATime one_call = impl_->one_call("std_moe_pack");
  Impl& op = *impl_;
  op.require_open("std_moe_pack");
  op.require_no_split_call_open("std_moe_pack");
  op.require_std_moe("std_moe_pack");
  op.require_received_rows("std_moe_pack");
  const ScheduleEntry geometry = op.geometry_for(op.dispatched_tokens);
  const Kernel& kernel = *op.kernels.std_moe_pack;
  op.device.launch(kernel, {uint32_t(geometry.dispatch_blocks), uint32_t(geometry.dispatch_warps)},
                   LaunchArgs(kernel)
                       .set("packed", op.moe_tokens)
                       .set("counts", op.moe_counts)
                       .set("sources", op.moe_sources)
                       .set("rank", op.config.rank)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
  const int64_t experts = op.config.num_experts_per_rank;
  const int64_t rows = int64_t(op.config.world_size) * op.config.max_num_inp_token_per_rank;
  return {{op.moe_tokens, DType::BF16, {experts, rows, op.config.hidden_dim}},
          {op.moe_counts, DType::I32, {experts}},
          {op.moe_sources, DType::I32, {experts, rows}}};
}

CombineResult EpDispatchCombineOp::std_moe_combine(const TensorRef& expert_out, const std::optional<TensorRef>& weights) {
  const OneCallAtATime one_call = impl_->one_call("std_moe_combine");
  return impl_->std_moe_combine_call("std_moe_combine", expert_out, weights, Halves::Both);
}

void EpDispatchCombineOp::std_moe_combine_send(const TensorRef& expert_out, const std::optional<TensorRef>& weights) {
  const OneCallAtATime one_call = impl_->one_call("std_moe_combine_send");
  impl_->std_moe_combine_call("std_moe_combine_send", expert_out, weights, Halves::Send);
}

CombineResult EpDispatchCombineOp::Impl::std_moe_combine_call(const char* call, const TensorRef& expert_out,
                                                              const std::optional<TensorRef>& weights, Halves halves) {
  Impl& op = *this;
  op.require_open(call);
  op.require_std_moe(call);
  op.require_no_split_call_open(call);
  const int64_t experts = op.config.num_experts_per_rank;
  const int64_t rows = int64_t(op.config.world_size) * op.config.max_num_inp_token_per_rank;
  expect_tensor(call, "expert_out", expert_out, DType::BF16, {experts, rows, op.config.hidden_dim});
  if (op.dispatched_tokens < 0)
    throw Error(std::string(call) + " without a dispatch before it", "dispatch, std_moe_pack, std_moe_combine",
                "call dispatch() and std_moe_pack() first");
  for (const Kernel* reader : {op.combine_kernel(), op.kernels.std_moe_unpack})
    if (reader) require_pointer_alignment(*reader, "expert_out", expert_out.data, call, "expert_out");
  // Gather's staged rows (combine_input()); scatter's buffer of its own
  // where it stages them (under quant, and internode).
  void* unpacked = op.moe_combine_in ? op.moe_combine_in : op.local(op.window.combine_rows);
  const TensorRef combine_in{unpacked, DType::BF16, {op.capacity(), op.config.hidden_dim}};
  if (!op.unpacks_apart()) {
    if (op.config.combine_mode == CombineMode::Scatter) {
      // Under quant the kernel sums into its staging rows and quantizes them;
      // otherwise it reads expert_out, not its input rows, and `input` names
      // the same memory (at least capacity rows) for the checks.
      const TensorRef input = op.moe_combine_in ? combine_in
                                                : TensorRef{expert_out.data, DType::BF16,
                                                            {op.capacity(), op.config.hidden_dim}};
      return op.launch_combine(call, input, weights, halves, expert_out.data);
    }
    const auto* out_begin = static_cast<const std::byte*>(expert_out.data);
    const auto* rows_begin = static_cast<const std::byte*>(unpacked);
    const size_t out_bytes = size_t(experts) * size_t(rows) * size_t(op.config.hidden_dim) * 2;
    const size_t rows_bytes = size_t(op.capacity()) * size_t(op.config.hidden_dim) * 2;
    if (out_begin < rows_begin + rows_bytes && rows_begin < out_begin + out_bytes)
      throw Error(std::string(call) + ": expert_out overlaps combine_input(), the rows it unpacks into (they would be "
                  "overwritten while read)",
                  "expert outputs in a buffer of their own", "write the experts' outputs to another tensor");
    return op.launch_combine(call, combine_in, weights, halves, expert_out.data);
  }
  const ScheduleEntry geometry = op.geometry_for(op.dispatched_tokens);
  const Kernel& kernel = *op.kernels.std_moe_unpack;
  op.device.launch(kernel, {uint32_t(geometry.combine_blocks), uint32_t(geometry.combine_warps)},
                   LaunchArgs(kernel)
                       .set("expert_out", expert_out.data)
                       .set("combine_in", unpacked)
                       .set("rank", op.config.rank)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
  return op.launch_combine(call, combine_in, weights, halves);
}

std::vector<int> EpDispatchCombineOp::local_expert_counts(ExpertCountRule rule) {
  const OneCallAtATime one_call = impl_->one_call("local_expert_counts");
  Impl& op = *impl_;
  op.require_open("local_expert_counts");
  op.require_no_split_call_open("local_expert_counts");
  op.require_not_capturing("local_expert_counts");
  op.require_received_rows("local_expert_counts");
  // Read on the op's stream: after its dispatch, and a failed kernel throws here.
  const int total = read_word(op.device, *op.stream, op.state_word(op.window.total_recv_word), 0);
  const int k = op.config.num_experts_per_token, epr = op.config.num_experts_per_rank;
  std::vector<int32_t> indices(size_t(total) * size_t(k));
  if (!indices.empty())
    op.device.copy_to_host(indices.data(), op.local(op.window.recv_indices), indices.size() * 4, *op.stream);
  std::vector<int> counts(size_t(epr), 0);
  for (int i = 0; i < total; ++i) {
    const int32_t* row = &indices[size_t(i) * size_t(k)];
    for (int j = 0; j < k; ++j) {
      if (row[j] == kNoExpert || row[j] / epr != op.config.rank) continue;
      if (rule == ExpertCountRule::DistinctPerToken && std::find(row, row + j, row[j]) != row + j) continue;
      counts[size_t(row[j] % epr)]++;
    }
  }
  return counts;
}

TensorRef EpDispatchCombineOp::local_expert_counts_device(ExpertCountRule rule) {
  const OneCallAtATime one_call = impl_->one_call("local_expert_counts_device");
  Impl& op = *impl_;
  op.require_open("local_expert_counts_device");
  op.require_no_split_call_open("local_expert_counts_device");
  op.require_received_rows("local_expert_counts_device");
  // One block: the kernel clears the counts, then counts, with a block barrier between.
  const Kernel& kernel = *op.kernels.count_experts;
  const ScheduleEntry geometry = op.geometry_for(op.config.max_num_inp_token_per_rank);
  op.device.launch(kernel, {1, uint32_t(geometry.combine_warps)},
                   LaunchArgs(kernel)
                       .set("counts", op.expert_counts)
                       .set("rank", op.config.rank)
                       .set("every_entry", rule == ExpertCountRule::EveryEntry)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
  return {op.expert_counts, DType::I32, {op.config.num_experts_per_rank}};
}

}  // namespace epjit::ep
