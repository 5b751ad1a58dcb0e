// The standard-MoE layout (pack, combine).
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
  if (const Kernel* quantize = op.kernels.std_moe_quantize) {
    // The packed rows in fp8 (std_moe_quant), after the pack on the same
    // stream. Its items (entry, 512-element piece) are latency-bound warp
    // work: on the dispatch's grid a warp took 14 of them one after another
    // at 128 tokens (+125 us on an H100), so the grid grows with this call's
    // entries (balanced routing brings a rank about tokens * top-k of them)
    // to about two items a warp, up to 8x the dispatch's blocks.
    constexpr int64_t kItemsPerWarp = 2, kPieceElements = 512, kMostBlocksPerDispatchBlock = 8;
    const int64_t pieces = (op.config.hidden_dim + kPieceElements - 1) / kPieceElements;
    const int64_t items = op.dispatched_tokens * op.config.num_experts_per_token * pieces;
    const int64_t warps = geometry.dispatch_warps;
    const int64_t blocks = std::max<int64_t>(
        blocks_for(items, warps * kItemsPerWarp, geometry.dispatch_blocks * kMostBlocksPerDispatchBlock),
        geometry.dispatch_blocks);
    op.device.launch(*quantize, {uint32_t(blocks), uint32_t(warps)},
                     LaunchArgs(*quantize)
                         .set("packed", op.moe_tokens)
                         .set("codes", op.moe_codes)
                         .set("scale_words", op.moe_scales)
                         .set("scale_bytes", op.moe_scales)
                         .set("rank", op.config.rank)
                         .set("w", op.window_table)
                         .build(),
                     *op.stream);
  }
  op.packed_since_dispatch = true;
  return op.std_moe_outputs();
}

StdMoeResult EpDispatchCombineOp::std_moe_outputs() {
  Impl& op = *impl_;
  op.require_open("std_moe_outputs");
  op.require_std_moe("std_moe_outputs");
  return op.std_moe_outputs();
}

CombineResult EpDispatchCombineOp::std_moe_combine(const TensorRef& expert_out, const std::optional<TensorRef>& weights,
                                                   const std::optional<TensorRef>& indices,
                                                   const std::optional<TensorRef>& output) {
  const OneCallAtATime one_call = impl_->one_call("std_moe_combine");
  return impl_->std_moe_combine_call("std_moe_combine", expert_out, weights, indices, output, Halves::Both);
}

void EpDispatchCombineOp::std_moe_combine_send(const TensorRef& expert_out, const std::optional<TensorRef>& weights,
                                               const std::optional<TensorRef>& indices,
                                               const std::optional<TensorRef>& output) {
  const OneCallAtATime one_call = impl_->one_call("std_moe_combine_send");
  impl_->std_moe_combine_call("std_moe_combine_send", expert_out, weights, indices, output, Halves::Send);
}

TensorRef EpDispatchCombineOp::std_moe_combine_input() {
  Impl& op = *impl_;
  op.require_open("std_moe_combine_input");
  op.require_std_moe("std_moe_combine_input");
  if (!op.kernels.combine_entries)
    throw Error("std_moe_combine_input() on an op whose std_moe_combine sums rank by rank",
                "std_moe_combine = weighted_entries (its expert outputs are read from the window)",
                "build the op with std_moe_combine = weighted_entries, or pass any buffer to std_moe_combine()");
  const int64_t rows = int64_t(op.config.world_size) * op.config.max_num_inp_token_per_rank;
  return {op.local(op.window.moe_entry_rows), DType::BF16,
          {op.config.num_experts_per_rank, rows, op.config.hidden_dim}};
}

CombineResult EpDispatchCombineOp::Impl::std_moe_combine_call(const char* call, const TensorRef& expert_out,
                                                              const std::optional<TensorRef>& weights,
                                                              const std::optional<TensorRef>& indices,
                                                              const std::optional<TensorRef>& output, Halves halves) {
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
  if (op.kernels.combine_entries) return op.entries_combine_call(call, expert_out, weights, indices, output, halves);
  if ((indices && indices->data) || (output && output->data))
    throw Error(std::string(call) + " with " + (indices && indices->data ? "indices" : "an output") +
                    " on an op whose std_moe_combine sums rank by rank",
                "indices and output only with std_moe_combine = weighted_entries (the origin's top-k, which it "
                "weights, and where its sums go)",
                "drop them, or build the op with std_moe_combine = weighted_entries");
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

}  // namespace epjit::ep

namespace epjit::ep {

CombineResult EpDispatchCombineOp::Impl::entries_combine_call(const char* call, const TensorRef& expert_out,
                                                              const std::optional<TensorRef>& weights,
                                                              const std::optional<TensorRef>& indices,
                                                              const std::optional<TensorRef>& output, Halves halves) {
  require_working_transport(call);
  if (!packed_since_dispatch)
    throw Error(std::string(call) + " without std_moe_pack after the dispatch",
                "dispatch, std_moe_pack, then std_moe_combine (the pack gives each entry the packed row the origins "
                "read)",
                "call std_moe_pack() after dispatch()");
  const int64_t n = dispatched_tokens, k = config.num_experts_per_token;
  // A call of no tokens may pass empty tensors (no memory behind them).
  if (!weights || !indices || (n > 0 && (!weights->data || !indices->data)))
    throw Error(std::string(call) + " without the origin's top-k weights and indices",
                "weights [" + std::to_string(n) + ", " + std::to_string(k) + "] f32 and indices [" + std::to_string(n) +
                    ", " + std::to_string(k) + "] i32 of this rank's dispatch (std_moe_combine = weighted_entries "
                    "weights each token's expert rows with its own top-k weights)",
                "pass the dispatch's top-k weights and indices");
  expect_tensor(call, "weights", *weights, DType::F32, {n, k});
  expect_tensor(call, "indices", *indices, index_type_of(*indices), {n, k});
  const Kernel& kernel = *kernels.combine_entries;
  require_pointer_alignment(kernel, "expert_out", expert_out.data, call, "expert_out");
  require_pointer_alignment(kernel, "in_weights", weights->data, call, "weights");
  if (indices->dtype == DType::I32) require_pointer_alignment(kernel, "indices", indices->data, call, "indices");
  const bool to_output = output && output->data;
  if (to_output) {
    expect_tensor(call, "output", *output, DType::BF16, {n, config.hidden_dim});
    require_pointer_alignment(kernel, "output", output->data, call, "output");
  }
  const void* kernel_indices = indices_for_kernels(*indices).data;
  CombineLaunch launch{.weights = weights->data,
                       .expert_out = expert_out.data,
                       .indices = kernel_indices,
                       .staged = expert_out.data == local(window.moe_entry_rows),  // std_moe_combine_input()
                       .tokens = n,
                       .token_count = pending_token_count,
                       .output = to_output ? output->data : nullptr};
  launch.result.tokens = {to_output ? output->data : out_tokens, DType::BF16, {n, config.hidden_dim}};
  return enqueue_combine_call(launch, halves);
}

}  // namespace epjit::ep
