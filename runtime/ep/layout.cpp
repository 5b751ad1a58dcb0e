// dispatch_layout(): what a dispatch of a batch's top-k would send, before it
// runs (ep/layout's kernel).
#include "op_impl.h"

namespace epjit::ep {

void EpDispatchCombineOp::dispatch_layout(const TensorRef& indices, const TensorRef& per_rank,
                                          const TensorRef& per_expert, const TensorRef& in_rank,
                                          const std::optional<TensorRef>& per_node) {
  static constexpr const char* call = "dispatch_layout";
  const OneCallAtATime one_call = impl_->one_call(call);
  Impl& op = *impl_;
  op.require_open(call);
  const int64_t n = indices.shape.empty() ? -1 : indices.shape[0];
  const int64_t k = op.config.num_experts_per_token, world = op.config.world_size;
  if (indices.shape.size() != 2 || n < 0)
    throw Error(std::string(call) + ": indices have shape " + shape_text(indices.shape), "[tokens, top-k] int64",
                "pass the router's top-k expert ids");
  expect_tensor(call, "indices", indices, DType::I64, {n, k});
  expect_tensor(call, "per_rank", per_rank, DType::I32, {world});
  expect_tensor(call, "per_expert", per_expert, DType::I32, {op.config.num_experts()});
  if (n > 0) expect_tensor(call, "in_rank", in_rank, DType::U8, {n, world});
  if (per_node) {
    if (!op.config.internode())
      throw Error(std::string(call) + ": per_node counts for an op on one node",
                  "per_node only across nodes (gpu_per_node < world_size)",
                  "leave per_node out (one node: per_rank's total is the node's), or build the op across nodes");
    expect_tensor(call, "per_node", *per_node, DType::I32, {world / op.config.nodes_gpu_count()});
  }
  const Kernel& kernel = *op.kernels.dispatch_layout;
  require_pointer_alignment(kernel, "indices", indices.data, call, "indices");
  require_pointer_alignment(kernel, "per_rank", per_rank.data, call, "per_rank");
  require_pointer_alignment(kernel, "per_expert", per_expert.data, call, "per_expert");
  if (per_node) require_pointer_alignment(kernel, "per_node", per_node->data, call, "per_node");
  // A warp per top-k entry, up to the dispatch's grid for this many tokens;
  // one block when there are none (it publishes the zero counts). The
  // kernel clears its counts itself: no fill before it, nothing the host
  // waits for.
  const ScheduleEntry& geometry = op.geometry_for(std::clamp<int64_t>(n, 1, op.config.max_num_inp_token_per_rank));
  const int64_t warps = geometry.dispatch_warps;
  const int64_t blocks = blocks_for(n * k, warps, geometry.dispatch_blocks);
  op.device.launch(kernel, {uint32_t(blocks), uint32_t(warps)},
                   LaunchArgs(kernel)
                       .set("indices", indices.data)
                       .set("tokens", n)
                       .set("per_rank", per_rank.data)
                       .set("per_expert", per_expert.data)
                       .set("in_rank", in_rank.data)
                       .set("per_node", per_node ? per_node->data : nullptr)
                       .set("has_per_node", per_node.has_value())
                       .set("rank", op.config.rank)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
}

}  // namespace epjit::ep
