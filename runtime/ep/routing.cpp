// Routings: made, handed out as maps and kept calls, loaded back from a saved map.
#include "op_impl.h"

namespace epjit::ep {

std::unique_ptr<Routing> EpDispatchCombineOp::make_routing() {
  const OneCallAtATime one_call = impl_->one_call("make_routing");
  Impl& op = *impl_;
  op.require_open("make_routing");
  // A dispatch that returns a routing may be captured into a graph (a
  // framework's, torch.cuda.graph) and make its routing there: the memory is
  // the caller's for as long as the routing lives, not the graph's, and is
  // ready on return, so neither the allocations nor the fills belong in it.
  const std::unique_ptr<CaptureExemption> exemption = op.device.exempt_from_capture();
  Stream& setup = op.routing_setup_stream();
  std::unique_ptr<Routing> routing(new Routing(op.device, setup, op.buffers.route->bytes, op.id));
  op.clear_forward_route(routing->route_, setup);
  // Here, not at the first keep_call: a dispatch is not exempt from a
  // capture's rules.
  routing->kept_ = op.device.allocate(op.buffers.kept->bytes);
  // Only a kept call's first total_recv origins are its own. Where the
  // kernel keeps them, the rows past those are not written (an earlier
  // call's stay, as in the window): they hold -1 ("no row") until one is,
  // never what the allocation held before (the copy after the kernel
  // writes every row).
  if (op.kernel_may_keep_origins())
    op.device.fill_bytes(op.part_of(routing->kept_, *op.buffers.kept_origins), 0xFF, op.kept_origins_bytes(), setup);
  return routing;
}

TensorRef EpDispatchCombineOp::route_map(const Routing& routing) const {
  const Impl& op = *impl_;  // the routing's memory, not the arena: it answers after close() too
  if (routing.op_id_ != op.id || !routing.recorded())
    throw Error("route_map: the routing was not recorded by this op", "a Routing a dispatch of this op recorded",
                "pass record= to a dispatch of this op first");
  return {routing.route_, DType::I32, {int64_t(op.buffers.route_words())}};
}

RecordedCall EpDispatchCombineOp::recorded_call(const Routing& routing) const {
  const Impl& op = *impl_;
  if (routing.op_id_ != op.id || !routing.recorded() || !routing.kept_call_)
    throw Error("recorded_call: the routing kept no call of this op",
                "a Routing a dispatch of this op recorded with DispatchOptions::keep_call (and has not recorded or "
                "loaded since without it)",
                "record with keep_call set, then read recorded_call()");
  return {{op.part_of(routing.route_, *op.buffers.route_received), DType::I32, {1}},
          {op.part_of(routing.kept_, *op.buffers.kept_origins), DType::I32, {op.capacity(), 2}},
          {op.kept_indices_of(routing), DType::I32, {routing.tokens_, op.config.num_experts_per_token}}};
}

void EpDispatchCombineOp::load_routing(Routing& routing, const TensorRef& map, int64_t tokens,
                                       const DispatchOptions& options) {
  const OneCallAtATime one_call = impl_->one_call("load_routing");
  Impl& op = *impl_;
  op.require_open("load_routing");
  op.require_no_split_call_open("load_routing");
  op.require_not_capturing("load_routing");
  if (routing.op_id_ != op.id)
    throw Error("load_routing: the routing belongs to another op", "a Routing from this op's make_routing()",
                "load into this op's make_routing()");
  // The map's words, where the record places them (templates/ep/buffers.mlir).
  const EpBuffers& parts = op.buffers;
  const int64_t words = int64_t(parts.route_words()), own_words = int64_t(parts.own_route_words());
  const int64_t k = op.config.num_experts_per_token;
  // The whole map, or (internode v2) its own words without the forward route.
  const bool whole = map.shape.size() == 1 && map.shape[0] == words;
  expect_tensor("load_routing", "map", map, DType::I32, {whole ? words : own_words});
  if (tokens < 0 || tokens > op.config.max_num_inp_token_per_rank)
    throw Error("load_routing: " + std::to_string(tokens) + " tokens",
                "at most max_num_inp_token_per_rank = " + std::to_string(op.config.max_num_inp_token_per_rank),
                "pass the token count the map was recorded for");
  const bool v2 = op.call_runs_internode_v2("load_routing", tokens, options);
  std::vector<int32_t> host(size_t(words), -1);
  op.device.copy_to_host(host.data(), map.data, size_t(whole ? words : own_words) * 4, *op.stream);
  const int64_t cap = op.capacity(), ranks = op.config.world_size;
  const auto entries_at = int64_t(parts.route_entries->element_offset());
  const auto entries = int64_t(parts.route_entries->count);
  for (int64_t i = 0; i < entries; ++i) {
    int32_t& entry = host[size_t(entries_at + i)];
    if (i / k >= tokens) {  // rows past the recorded tokens: no kernel reads them
      entry = -1;
      continue;
    }
    if (entry != -1 && (entry < 0 || entry / cap >= ranks))
      throw Error("load_routing: map[" + std::to_string(entries_at + i) + "] = " + std::to_string(entry),
                  "-1, or rank * capacity + slot with rank < " + std::to_string(ranks) + " and slot < " +
                      std::to_string(cap),
                  "pass a map route_map() returned for this op's configuration");
  }
  const int32_t received = host[parts.route_received->element_offset()];
  if (received < 0 || received > cap)
    throw Error("load_routing: received count " + std::to_string(received), "in [0, capacity = " + std::to_string(cap) + "]",
                "pass a map route_map() returned for this op's configuration");
  // Then the tokens sent to each off-node rank (0 for the node's ranks).
  const int per_node = op.config.nodes_gpu_count();
  const auto sent_at = int64_t(parts.route_sent->element_offset());
  for (int peer = 0; peer < ranks; ++peer) {
    const int32_t sent = host[size_t(sent_at + peer)];
    const bool off_node = peer / per_node != op.config.rank / per_node;
    const int64_t most = off_node ? std::min<int64_t>(tokens, op.internode->rows_per_peer()) : 0;
    if (sent < 0 || sent > most)
      throw Error("load_routing: map[" + std::to_string(sent_at + peer) + "] (tokens sent to rank " +
                      std::to_string(peer) + ") = " + std::to_string(sent),
                  "in [0, " + std::to_string(most) + "]", "pass a map route_map() returned for this op's configuration");
  }
  // Source order across nodes: the row each off-node source's first token
  // took here, which ep_internode_ingest writes that source's rows from.
  const auto first_at = int64_t(parts.route_source_first->element_offset());
  for (int64_t source = 0; source < int64_t(parts.route_source_first->count); ++source) {
    const int32_t first = host[size_t(first_at + source)];
    if (first < 0 || first > std::max(received, 0))
      throw Error("load_routing: map[" + std::to_string(first_at + source) + "] (the first row from rank " +
                      std::to_string(source) + ") = " + std::to_string(first),
                  "in [0, the received count " + std::to_string(received) + "]",
                  "pass a map route_map() returned for this op's configuration");
  }
  // An entry naming another node's rank names a slot of this rank's outbox
  // for it, which holds only the tokens sent there: a slot past them would
  // reach past the outbox.
  for (int64_t i = entries_at; i < entries_at + entries; ++i) {
    const int32_t entry = host[size_t(i)];
    if (entry < 0 || entry / cap / per_node == op.config.rank / per_node) continue;
    const int32_t sent = host[size_t(sent_at + entry / cap)];
    if (entry % cap >= sent)
      throw Error("load_routing: map[" + std::to_string(i) + "] = " + std::to_string(entry) + " names slot " +
                      std::to_string(entry % cap) + " of the outbox for rank " + std::to_string(entry / cap) +
                      ", which the map says holds " + std::to_string(sent) + " tokens",
                  "a slot below the tokens sent to that rank", "pass a map route_map() returned for this op's configuration");
  }
  // The forward route: where this rank forwarded each inbox row, -1 or a
  // rank of its own node * capacity + slot.
  for (int64_t i = own_words; whole && i < words; ++i) {
    const int32_t entry = host[size_t(i)];
    const bool on_node = entry >= 0 && entry / cap / per_node == op.config.rank / per_node;
    if (entry != -1 && !(on_node && entry / cap < ranks))
      throw Error("load_routing: map[" + std::to_string(i) + "] (forward route) = " + std::to_string(entry),
                  "-1, or rank * capacity + slot with a rank of this rank's node and slot < " + std::to_string(cap),
                  "pass a map route_map() returned for this op's configuration");
  }
  op.device.copy_to_device(routing.route_, host.data(), host.size() * 4, *op.stream);
  routing.tokens_ = tokens;
  routing.forward_route_ = whole;
  routing.internode_v2_ = v2;
  routing.kept_call_ = false;  // a map carries no received rows
}

}  // namespace epjit::ep
