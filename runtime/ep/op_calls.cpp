// dispatch(), dispatch_replay(), combine() and the split calls' halves
// (dispatch_send/recv, combine_send/recv): checks, launches, results.
#include "op_impl.h"

namespace epjit::ep {

void EpDispatchCombineOp::Impl::check_dispatch_inputs(const char* call, const TensorRef& input, const TensorRef& weights,
                                                     const std::optional<TensorRef>& scales,
                                                     const TensorRef& indices, bool counts_slots,
                                                     const void* token_count) {
  require_open(call);
  require_working_transport(call);
  require_no_split_call_open(call);
  if (counts_slots && dispatched_tokens >= 0 && pending_counted_slots)
    throw Error(std::string(call) + " while the previous dispatch awaits its combine",
                "a combine between two dispatches that take slots (a replay may follow a dispatch directly)",
                "call combine() first, replay a recorded routing, or reset() to abandon the previous dispatch");
  if (input.shape.size() != 2)
    throw Error(std::string(call) + ": input has shape " + shape_text(input.shape), "[tokens, hidden_dim]",
                "pass a 2-D token tensor");
  const int64_t n = input.shape[0];
  if (n < 0 || n > config.max_num_inp_token_per_rank)
    throw Error(std::string(call) + ": " + std::to_string(n) + " tokens on rank " + std::to_string(config.rank),
                "at most max_num_inp_token_per_rank = " + std::to_string(config.max_num_inp_token_per_rank),
                "split the batch or build the op with a larger max_num_inp_token_per_rank");
  const int64_t k = config.num_experts_per_token;
  expect_tensor(call, "input", input, tensor_type_of(config.dispatch_type(), config.target_info()),
                {n, config.hidden_dim});
  expect_tensor(call, "weights", weights, DType::F32, {n, k});
  expect_tensor(call, "indices", indices, index_type_of(indices), {n, k});
  if (config.scale_dim > 0) {
    if (!scales)
      throw Error(std::string(call) + ": no scales", "[tokens, scale_dim = " + std::to_string(config.scale_dim) + "]",
                  "pass the per-token scales, or build the op with scale_dim = 0");
    if (bits_of(scales->dtype) != 8 * config.scale_type_size)
      throw Error(std::string(call) + ": scales are " + name_of(scales->dtype), 
                  "elements of scale_type_size = " + std::to_string(config.scale_type_size) + " bytes",
                  "pass scales of the configured element size");
    expect_tensor(call, "scales", *scales, scales->dtype, {n, config.scale_dim});
  } else if (scales && scales->data) {
    throw Error(std::string(call) + ": scales given to an op built with scale_dim = 0", "no scales",
                "drop the scales, or build the op with scale_dim and scale_type_size");
  }
  // Before anything is launched: a misaligned vector access would fault the device.
  const Kernel& dispatch_kernel = *kernels.dispatch;
  require_pointer_alignment(dispatch_kernel, "input", input.data, call, "input");
  require_pointer_alignment(dispatch_kernel, "weights", weights.data, call, "weights");
  if (scales) require_pointer_alignment(dispatch_kernel, "scales", scales->data, call, "scales");
  if (indices.dtype == DType::I32) require_pointer_alignment(dispatch_kernel, "indices", indices.data, call, "indices");
  // Memory the host addresses can be read now; GPU kernels flag bad experts
  // (check()), as every kernel does for a count on the device: which rows
  // are padding is known only when the call runs.
  if (device.host_addressable() && !token_count) {
    const bool wide = indices.dtype == DType::I64;
    for (int64_t i = 0; i < n * k; ++i) {
      const int64_t expert = wide ? static_cast<const int64_t*>(indices.data)[i]
                                  : static_cast<const int32_t*>(indices.data)[i];
      if (expert != kNoExpert && (expert < 0 || expert >= config.num_experts()))
        throw Error(std::string(call) + ": indices[" + std::to_string(i / k) + ", " + std::to_string(i % k) +
                        "] = " + std::to_string(expert) + " on rank " + std::to_string(config.rank),
                    "an expert in [0, " + std::to_string(config.num_experts()) + "), or -1 for none",
                    "fix the router's indices");
    }
  }
}

void EpDispatchCombineOp::Impl::check_token_count(const char* call, const void* token_count,
                                                  const Routing* record) const {
  if (!token_count) return;
  if (config.internode())
    throw Error(std::string(call) + ": a token count on the device for an op with ranks on other nodes (gpu_per_node " +
                    std::to_string(config.nodes_gpu_count()) + " < world_size " + std::to_string(config.world_size) +
                    ")",
                "token_count on one node (the internode legs size their transfers on the host)",
                "pass the rows to send as the input's row count, or build the op for one node");
  if (record)
    throw Error(std::string(call) + ": a token count on the device with a routing to record",
                "token_count without record (a routing's replay needs its count on the host)",
                "pass the rows to send as the input's row count to record a routing");
  require_pointer_alignment(*kernels.dispatch, "token_count", token_count, call, "token_count");
}

// Whether a call of n tokens (this rank's) runs internode v2: by the
// largest count of any rank when the caller gives it, else by n.
bool EpDispatchCombineOp::Impl::call_runs_internode_v2(const char* call, int64_t n,
                                                      const DispatchOptions& options) const {
  if (const std::optional<int64_t> largest = options.max_tokens_across_ranks) {
    if (*largest < n || *largest > config.max_num_inp_token_per_rank)
      throw Error(std::string(call) + ": max_tokens_across_ranks = " + std::to_string(*largest) + " with " +
                      std::to_string(n) + " tokens on rank " + std::to_string(config.rank),
                  "the largest token count of any rank in this call, in [" + std::to_string(n) +
                      ", max_num_inp_token_per_rank = " + std::to_string(config.max_num_inp_token_per_rank) + "]",
                  "pass the maximum of every rank's token count for this call (the same on every rank), or leave "
                  "it unset");
    return config.runs_internode_v2(*largest);
  }
  return config.runs_internode_v2(n);
}

DispatchLaunch EpDispatchCombineOp::Impl::launch_dispatch(const TensorRef& input, const TensorRef& weights,
                                                          const std::optional<TensorRef>& scales,
                                                          const TensorRef& indices, void* route_map, bool replay,
                                                          bool v2, Halves halves, void* kept_indices,
                                                          void* kept_origins, Routing* copy_origins_into,
                                                          const void* token_count) {
  DispatchLaunch call{.input = input.data,
                      .weights = weights.data,
                      .scales = scales ? scales->data : nullptr,
                      .indices = indices.data,
                      .route = route_map,
                      .tokens = input.shape[0],
                      .replay = replay,
                      .v2 = v2,
                      .kept_indices = kept_indices,
                      .kept_origins = kept_origins,
                      .token_count = token_count,
                      .copy_origins_into = copy_origins_into};
  const int64_t cap = capacity(), k = config.num_experts_per_token;
  DispatchResult& result = call.result;
  result.tokens = {local(window.recv_tokens), tensor_type_of(config.dispatch_type(), config.target_info()),
                   {cap, config.hidden_dim}};
  result.weights = {local(window.recv_weights), DType::F32, {cap, k}};
  if (config.scale_dim > 0)
    result.scales = {local(window.recv_scales), scales->dtype, {cap, config.scale_dim}};
  result.indices = {local(window.recv_indices), DType::I32, {cap, k}};
  result.origins = {local(window.recv_origin), DType::I32, {cap, 2}};
  result.total_recv = total_recv_tensor();

  enqueue_dispatch(call, halves);
  dispatched_tokens = call.tokens;
  received_read = -1;
  packed_since_dispatch = false;
  pending_counted_slots = !replay;
  pending_v2 = v2;
  pending_token_count = token_count;
  return call;
}

void EpDispatchCombineOp::Impl::enqueue_dispatch(const DispatchLaunch& call, Halves halves) {
  const ScheduleEntry& geometry = geometry_for(call.tokens);
  const LaunchGeometry grid{uint32_t(geometry.dispatch_blocks), uint32_t(geometry.dispatch_warps)};
  const Kernel& kernel = *kernels.dispatch;
  device.launch(kernel, split_grid(grid, halves, /*dispatch=*/true),
                LaunchArgs(kernel)
                    .set("input", call.input)
                    .set("weights", call.weights)
                    .set("scales", call.scales)
                    .set("indices", call.indices)
                    .set("route", call.route)
                    .set("tokens", call.tokens)
                    .set("rank", config.rank)
                    .set("replay", call.replay)
                    .set("forward", call.v2)
                    .set("kept_from", call.kept_indices ? call.indices : nullptr)
                    .set("kept_indices", call.kept_indices)
                    .set("keep", call.kept_indices != nullptr)
                    .set("kept_origins", call.kept_origins)
                    .set("keep_origins", call.kept_origins != nullptr)
                    .set("phases", phase_bits(halves))
                    .set("token_count", call.token_count)
                    .set("count_on_device", call.token_count != nullptr)
                    .set("w", window_table)
                    .build(),
                *stream);
  if (halves == Halves::Send) return;
  // Rows from other nodes cross once this rank's meeting is over: the receive half's.
  if (internode)
    internode->after_dispatch(kernels, grid, window_table, call.route, forward_route(call.route), call.replay,
                              call.v2, *stream);
  if (call.copy_origins_into) keep_origins(*call.copy_origins_into, call.result);
}

void EpDispatchCombineOp::Impl::enqueue_source_order(int64_t tokens, const void* indices, void* route_map,
                                                     const void* token_count, Halves halves) {
  const ScheduleEntry& geometry = geometry_for(tokens);
  const LaunchGeometry grid =
      split_grid({uint32_t(geometry.dispatch_blocks), uint32_t(geometry.dispatch_warps)}, halves, /*dispatch=*/true);
  // Both take the call's tokens; ep_order_slots also writes the route and,
  // across nodes, reads the order rows the transport filled in between.
  for (const Kernel* kernel : {kernels.order_count, kernels.order_slots}) {
    if (kernel == kernels.order_slots && internode)
      internode->exchange_order_totals(kernels, grid, window_table, tokens, token_count, *stream);
    LaunchArgs args(*kernel);
    args.set("indices", indices)
        .set("tokens", tokens)
        .set("rank", config.rank)
        .set("token_count", token_count)
        .set("count_on_device", token_count != nullptr)
        .set("w", window_table);
    if (kernel == kernels.order_slots)
      args.set("route", route_map).set("rows", internode ? internode->order_rows() : nullptr);
    device.launch(*kernel, grid, args.build(), *stream);
  }
}

DispatchLaunch EpDispatchCombineOp::Impl::dispatch_call(const char* name, const TensorRef& input,
                                                        const TensorRef& weights,
                                                        const std::optional<TensorRef>& scales,
                                                        const TensorRef& given_indices, Routing* record,
                                                        const DispatchOptions& options, Halves halves) {
  check_dispatch_inputs(name, input, weights, scales, given_indices, /*counts_slots=*/true, options.token_count);
  check_token_count(name, options.token_count, record);
  if (record && record->op_id_ != id)
    throw Error(std::string(name) + ": the routing to record into belongs to another op",
                "a Routing from this op's make_routing()", "record with this op's make_routing()");
  if (options.keep_call && !record)
    throw Error(std::string(name) + ": keep_call without a routing to record into",
                "keep_call together with a record", "pass a make_routing() as the record, or leave keep_call unset");
  const bool v2 = call_runs_internode_v2(name, input.shape[0], options);
  const TensorRef indices = indices_for_kernels(given_indices);
  route_in_use = record ? record->route_ : route;
  const bool indices_by_kernel = options.keep_call && kernel_keeps_indices(indices);
  const bool origins_by_kernel = options.keep_call && kernel_keeps_origins(input.shape[0]);
  void* kept_indices = indices_by_kernel ? kept_indices_of(*record) : nullptr;
  void* kept_origins = origins_by_kernel ? part_of(record->kept_, *buffers.kept_origins) : nullptr;
  // The origins are complete once the receive half is queued: copied after it.
  Routing* copy_origins_into = options.keep_call && !origins_by_kernel ? record : nullptr;
  // Source order: ep/order writes the route's slots, then the dispatch sends
  // as a replay does; it still takes slots (a combine must follow it), since
  // the next ordered dispatch rewrites the peers' order counts.
  const bool source_order = config.receive_order == ReceiveOrder::Source;
  if (source_order) enqueue_source_order(input.shape[0], indices.data, route_in_use, options.token_count, halves);
  DispatchLaunch call = launch_dispatch(input, weights, scales, indices, route_in_use, source_order, v2, halves,
                                        kept_indices, kept_origins, copy_origins_into, options.token_count);
  pending_counted_slots = true;
  if (record) {
    record->tokens_ = input.shape[0];
    record->forward_route_ = true;
    record->internode_v2_ = v2;
    record->kept_call_ = options.keep_call;
    if (options.keep_call && !indices_by_kernel) keep_indices_by_copy(*record, indices);
  }
  return call;
}

// expert_out (std-MoE, !unpacks_apart()): the combine kernel unpacks the
// standard-MoE layout itself; gather's `input` is then its staged rows.
CombineResult EpDispatchCombineOp::Impl::launch_combine(const char* call, const TensorRef& input,
                                                        const std::optional<TensorRef>& weights, Halves halves,
                                                        const void* expert_out, const std::optional<TensorRef>& output,
                                                        const std::optional<TensorRef>& output_weights) {
  require_open(call);
  require_working_transport(call);
  require_no_split_call_open(call);
  if (dispatched_tokens < 0)
    throw Error(std::string(call) + " without a dispatch before it", "dispatch, then combine",
                "call dispatch() first");
  const int64_t cap = capacity(), k = config.num_experts_per_token;
  const DType row_type = tensor_type_of(config.combine_type(), config.target_info());
  // The kernels read the received rows: capacity rows cover any count; once
  // received_counts() has read the count, that many do (plain rows, on one
  // node or over v2_ll, whose return pack reads below the count; v2's
  // partials and the std-MoE unpack read by capacity).
  const bool legs_read_capacity = internode && builds_v2(config);
  const int64_t rows = received_read >= 0 && !legs_read_capacity && !expert_out ? received_read : cap;
  expect_tensor(call, "input", input, row_type, {rows, config.hidden_dim}, /*at_least_rows=*/true);
  const bool weighted = weights.has_value() && weights->data != nullptr;
  if (weighted) expect_tensor(call, "weights", *weights, DType::F32, {rows, k}, true);
  // Every kernel the caller's rows and weights may go to, before any is
  // launched: a misaligned vector access would fault the device.
  for (const Kernel* reader : {combine_kernel(), kernels.internode_return_pack, kernels.internode_partials}) {
    if (!reader) continue;
    require_pointer_alignment(*reader, "input", input.data, call, "input");
    if (weighted) require_pointer_alignment(*reader, "in_weights", weights->data, call, "weights");
  }
  const int64_t n = dispatched_tokens;
  const bool to_output = output && output->data, to_output_weights = output_weights && output_weights->data;
  // v2's sum writes the op's buffers; v2_ll's combine kernel is one node's.
  if ((to_output || to_output_weights) && internode && builds_v2(config))
    throw Error(std::string(call) + " into the caller's tensors on an op that may run internode v2 (internode_kernel " +
                    name_of(config.internode_kernel) + ")",
                "output and output_weights on one node or with internode_kernel v2_ll (v2's sum writes the op's buffers)",
                "leave output and output_weights unset and copy the result, or build the op with internode_kernel "
                "'v2_ll'");
  if (to_output_weights && !weighted)
    throw Error(std::string(call) + ": output_weights without weights", "output_weights only with weights",
                "pass the weights to combine, or drop output_weights");
  if (to_output) {
    expect_tensor(call, "output", *output, row_type, {n, config.hidden_dim});
    require_pointer_alignment(*combine_kernel(), "output", output->data, call, "output");
  }
  if (to_output_weights) {
    expect_tensor(call, "output_weights", *output_weights, DType::F32, {n, k});
    require_pointer_alignment(*combine_kernel(), "out_weights", output_weights->data, call, "output_weights");
  }
  CombineLaunch launch{.input = input.data,
                       .weights = weighted ? weights->data : nullptr,
                       .expert_out = expert_out,
                       .staged = input.data == local(window.combine_rows),  // written in place: combine_input()
                       .tokens = n,
                       .token_count = pending_token_count,
                       .output = to_output ? output->data : nullptr,
                       .output_weights = to_output_weights ? output_weights->data : nullptr};
  launch.result.tokens = {to_output ? output->data : out_tokens, row_type, {n, config.hidden_dim}};
  if (weighted) launch.result.weights = {to_output_weights ? output_weights->data : out_weights, DType::F32, {n, k}};
  return enqueue_combine_call(launch, halves);
}

CombineResult EpDispatchCombineOp::Impl::enqueue_combine_call(const CombineLaunch& launch, Halves halves) {
  enqueue_combine(launch, halves);
  if (halves == Halves::Send) {
    awaiting_combine_recv = launch;
  } else {
    dispatched_tokens = -1;
  }
  return launch.result;
}

void EpDispatchCombineOp::Impl::enqueue_combine(const CombineLaunch& call, Halves halves) {
  const ScheduleEntry& geometry = geometry_for(call.tokens);
  const LaunchGeometry schedule_grid{uint32_t(geometry.combine_blocks), uint32_t(geometry.combine_warps)};
  const LaunchGeometry grid = split_grid(schedule_grid, halves, /*dispatch=*/false);
  const bool weighted = call.weights != nullptr;
  if (pending_v2) {
    // v2's halves: the partials and their transfer, then the sum.
    internode->combine_v2(kernels, grid, window_table,
                          {call.input, call.weights, call.staged, route_in_use, forward_route(route_in_use),
                           call.tokens, out_tokens, out_weights},
                          halves != Halves::Receive, halves != Halves::Send, *stream);
    return;
  }
  // The rows for other nodes leave before this rank's combine kernel runs: the send half's.
  if (internode && halves != Halves::Receive)
    internode->before_combine(kernels, grid, window_table, call.input, call.weights, weighted, route_in_use, *stream);
  const bool scatter = config.combine_mode == CombineMode::Scatter;
  const bool low_latency = kernels.combine_low_latency != nullptr;
  const Kernel& kernel = *combine_kernel();
  LaunchArgs args(kernel);
  args.set("input", call.input)
      .set("in_weights", call.weights)
      .set("output", call.output ? call.output : out_tokens)
      .set("out_weights", call.output_weights ? call.output_weights : out_weights)
      .set("route", route_in_use)
      .set("tokens", call.tokens)
      .set("rank", config.rank)
      .set("has_weights", weighted)
      .set("phases", phase_bits(halves))
      .set("token_count", call.token_count)
      .set("count_on_device", call.token_count != nullptr)
      .set("w", window_table);
  if (!low_latency) {
    args.set("expert_out", call.expert_out).set("unpacks", call.expert_out != nullptr);
    if (!scatter) args.set("staged", call.staged);
  }
  if (kernels.combine_entries) args.set("indices", call.indices);
  device.launch(kernel, grid, args.build(), *stream);
}

DispatchResult EpDispatchCombineOp::dispatch(const TensorRef& input, const TensorRef& weights,
                                             const std::optional<TensorRef>& scales, const TensorRef& indices,
                                             Routing* record, const DispatchOptions& options) {
  const OneCallAtATime one_call = impl_->one_call("dispatch");
  return impl_->dispatch_call("dispatch", input, weights, scales, indices, record, options, Halves::Both).result;
}

DispatchResult EpDispatchCombineOp::dispatch_send(const TensorRef& input, const TensorRef& weights,
                                                  const std::optional<TensorRef>& scales, const TensorRef& indices,
                                                  Routing* record, const DispatchOptions& options) {
  const OneCallAtATime one_call = impl_->one_call("dispatch_send");
  Impl& op = *impl_;
  op.awaiting_dispatch_recv =
      op.dispatch_call("dispatch_send", input, weights, scales, indices, record, options, Halves::Send);
  return op.awaiting_dispatch_recv->result;
}

void EpDispatchCombineOp::dispatch_recv() {
  const OneCallAtATime one_call = impl_->one_call("dispatch_recv");
  Impl& op = *impl_;
  op.require_open("dispatch_recv");
  if (!op.awaiting_dispatch_recv)
    throw Error("dispatch_recv without a dispatch_send before it", "dispatch_send(), then dispatch_recv()",
                "call dispatch_send() first (dispatch() is the one-phase call)");
  const DispatchLaunch call = *op.awaiting_dispatch_recv;
  op.awaiting_dispatch_recv.reset();
  op.enqueue_dispatch(call, Halves::Receive);
}

DispatchResult EpDispatchCombineOp::dispatch_replay(const TensorRef& input, const TensorRef& weights,
                                                    const std::optional<TensorRef>& scales, const TensorRef& indices,
                                                    const Routing& routing) {
  const OneCallAtATime one_call = impl_->one_call("dispatch_replay");
  Impl& op = *impl_;
  op.check_dispatch_inputs("dispatch_replay", input, weights, scales, indices, /*counts_slots=*/false);
  if (routing.op_id_ != op.id || !routing.recorded())
    throw Error("dispatch_replay: the routing was not recorded by this op", "a Routing a dispatch of this op recorded",
                "pass record= to an earlier dispatch of this op, then replay that routing");
  if (routing.tokens_ != input.shape[0])
    throw Error("dispatch_replay: " + std::to_string(input.shape[0]) + " tokens, but the routing was recorded with " +
                    std::to_string(routing.tokens_),
                "the recorded token count (and the same indices)", "replay with the batch the routing was recorded for");
  if (routing.internode_v2_ && !routing.forward_route_)
    throw Error("dispatch_replay: the recorded call of " + std::to_string(routing.tokens_) +
                    " tokens ran internode v2, whose replay needs the forwarding slots this rank recorded, but the "
                    "routing was loaded from a map without them",
                "a routing recorded by a dispatch, or loaded from a whole route_map() (" +
                    std::to_string(op.buffers.route_words()) + " words)",
                "replay the recorded routing itself, load the whole route_map(), or build the op with "
                "internode_kernel v2_ll");
  op.route_in_use = routing.route_;
  return op.launch_dispatch(input, weights, scales, op.indices_for_kernels(indices), routing.route_, true,
                            routing.internode_v2_, Halves::Both)
      .result;
}

CombineResult EpDispatchCombineOp::combine(const TensorRef& input, const std::optional<TensorRef>& weights,
                                           const std::optional<TensorRef>& output,
                                           const std::optional<TensorRef>& output_weights) {
  const OneCallAtATime one_call = impl_->one_call("combine");
  return impl_->launch_combine("combine", input, weights, Halves::Both, nullptr, output, output_weights);
}

void EpDispatchCombineOp::combine_send(const TensorRef& input, const std::optional<TensorRef>& weights) {
  const OneCallAtATime one_call = impl_->one_call("combine_send");
  impl_->launch_combine("combine_send", input, weights, Halves::Send);
}

CombineResult EpDispatchCombineOp::combine_recv() {
  const OneCallAtATime one_call = impl_->one_call("combine_recv");
  Impl& op = *impl_;
  op.require_open("combine_recv");
  if (!op.awaiting_combine_recv)
    throw Error("combine_recv without a combine_send before it",
                "combine_send() (or std_moe_combine_send()), then combine_recv()",
                "call combine_send() first (combine() is the one-phase call)");
  const CombineLaunch call = *op.awaiting_combine_recv;
  op.awaiting_combine_recv.reset();
  op.enqueue_combine(call, Halves::Receive);
  op.dispatched_tokens = -1;
  return call.result;
}

TensorRef EpDispatchCombineOp::combine_input() {
  Impl& op = *impl_;
  op.require_open("combine_input");
  if (op.config.combine_mode != CombineMode::Gather)
    throw Error("combine_input() on a scatter-combine op", "combine_mode = gather",
                "pass any [capacity, hidden] buffer to combine(): scatter reads its input in place");
  return {op.local(op.window.combine_rows), tensor_type_of(op.config.combine_type(), op.config.target_info()),
          {op.capacity(), op.config.hidden_dim}};
}

}  // namespace epjit::ep
