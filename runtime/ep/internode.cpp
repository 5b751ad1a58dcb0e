#include "internode.h"

#include <algorithm>
#include <string>

#include "epjit/error.h"
#include "epjit/kernel_module.h"
#include "epjit/logging.h"
#include "../core/environment.h"

namespace epjit::ep {

namespace {

// EPJIT_INTERNODE_TRANSPORT: "host" (the bootstrap stand-in) or "nccl"; by
// default the host device uses the stand-in and GPUs NCCL/RCCL.
std::unique_ptr<InternodeTransport> pick_transport(Communicator& comm, Device& device, void* adopted_nccl_comm,
                                                   std::chrono::milliseconds peer_timeout) {
  const std::string chosen =
      environment_value("EPJIT_INTERNODE_TRANSPORT").value_or(device.kind() == "host" ? "host" : "nccl");
  if (chosen == "host") {
    if (adopted_nccl_comm)
      throw Error("an NCCL communicator was given, but EPJIT_INTERNODE_TRANSPORT=host", "the nccl transport",
                  "unset EPJIT_INTERNODE_TRANSPORT, or do not pass OpOptions.nccl_communicator");
    return make_host_transport(comm, device);
  }
  if (chosen == "nccl") return make_nccl_transport(comm, adopted_nccl_comm, peer_timeout);
  throw Error("EPJIT_INTERNODE_TRANSPORT=" + chosen + " names no internode transport", "host or nccl",
              "unset it (the device's default) or set one of those");
}

bool builds_v2_ll(const EpDispatchCombineConfig& config) {
  return config.internode() && config.internode_kernel != InternodeKernel::V2;
}

}  // namespace

bool builds_v2(const EpDispatchCombineConfig& config) {
  return config.internode() && config.internode_kernel != InternodeKernel::V2LowLatency;
}

int64_t internode_rows_per_peer(const EpDispatchCombineConfig& config) {
  return std::min(config.max_tokens_per_rank_padded(), config.total_recv_tokens());
}

int64_t forward_route_rows(const EpDispatchCombineConfig& config) {
  if (!builds_v2(config)) return 0;
  return int64_t(config.world_size / config.nodes_gpu_count()) * internode_rows_per_peer(config);
}

InternodeExchange::InternodeExchange(const EpDispatchCombineConfig& config, Communicator& comm,
                                     const EpWindowMap& window, void* adopted_nccl_comm)
    : config_(config),
      device_(comm.device()),
      window_(window),
      rank_(config.rank),
      world_(config.world_size),
      per_node_(config.nodes_gpu_count()),
      nodes_(config.world_size / config.nodes_gpu_count()),
      v2_ll_built_(builds_v2_ll(config)),
      rows_per_peer_(internode_rows_per_peer(config)),
      v2_ll_transfer_rows_(config.internode_kernel == InternodeKernel::Auto
                               ? std::min(rows_per_peer_, config.internode_auto_ll_max_tokens)
                               : rows_per_peer_),
      outbox_bytes_(outbox_bytes(config, window, rows_per_peer_)) {
  const Team& node = comm.node();
  const int node_first = rank_ / per_node_ * per_node_;
  for (int i = 0; i < node.size(); ++i)
    if (node.ranks[size_t(i)] != node_first + i)
      throw Error("the communicator's node of rank " + std::to_string(rank_) + " is not ranks [" +
                      std::to_string(node_first) + ", " + std::to_string(node_first + per_node_) + ")",
                  "nodes of gpu_per_node consecutive ranks",
                  "number ranks node by node (or pass CommOptions.gpu_per_node to Communicator::init)");
  transport_ = pick_transport(comm, device_, adopted_nccl_comm, std::chrono::milliseconds(config.peer_timeout_ms()));
  outboxes_.assign(size_t(world_), nullptr);
  for (int peer = 0; peer < world_; ++peer) {
    if (!off_node(peer)) continue;
    if (!exchanges_with(peer, /*v2=*/!v2_ll_built_)) {
      // v2 only: a token never goes to this rank's outbox, only the seal
      // writes its (zero) count; every such rank shares one of state words.
      if (!idle_outbox_) idle_outbox_ = allocate_zeroed(window.state + window.state_bytes);
      outboxes_[size_t(peer)] = idle_outbox_;
      continue;
    }
    // Only the state words are read before this rank writes them (the seal's counter).
    outboxes_[size_t(peer)] = allocate(outbox_bytes_);
    device_.fill_zero(outbox(peer) + window.state, window.state_bytes);
  }
  // Inboxes: a block per source rank (v2_ll), or per source node (v2 only).
  const size_t rows = size_t(v2_ll_built_ ? world_ : nodes_) * size_t(rows_per_peer_);
  const size_t k = size_t(config.num_experts_per_token);
  counts_ = allocate_zeroed(size_t(world_) * 4);
  if (config.receive_order == ReceiveOrder::Source)
    order_rows_ = allocate_zeroed(size_t(world_ + 1) * size_t(world_) * 4);
  tokens_ = allocate_zeroed(rows * config.dispatch_token_bytes());
  weights_ = allocate_zeroed(rows * k * 4);
  scales_ = allocate_zeroed(rows * config.scale_bytes_per_token());
  indices_ = allocate_zeroed(rows * k * 4);
  origins_ = allocate_zeroed(rows * 2 * 4);
  if (v2_ll_built_) {
    rows_out_ = allocate_zeroed(rows * config.combine_token_bytes());
    weights_out_ = allocate_zeroed(rows * k * 4);
    if (config.combine_mode == CombineMode::Scatter) {
      rows_in_ = allocate_zeroed(rows * config.combine_token_bytes());
      weights_in_ = allocate_zeroed(rows * k * 4);
    }
  }
  if (builds_v2(config)) {
    const size_t node_rows = size_t(nodes_) * size_t(rows_per_peer_), hidden = size_t(config.hidden_dim);
    const size_t own_rows = size_t(config.max_num_inp_token_per_rank);
    partials_out_ = allocate_zeroed(node_rows * hidden * 4);
    partial_weights_out_ = allocate_zeroed(node_rows * k * 4);
    partials_in_ = allocate_zeroed(node_rows * hidden * 4);
    partial_weights_in_ = allocate_zeroed(node_rows * k * 4);
    own_partials_ = allocate_zeroed(own_rows * hidden * 4);
    own_weights_ = allocate_zeroed(own_rows * k * 4);
  }
  connect_peers();
  log().info("rank {}: internode {} over {}: {} rows per off-node peer ({} moved by a v2_ll call), {} bytes per outbox",
             rank_, name_of(config.internode_kernel), transport_->name(), rows_per_peer_, v2_ll_transfer_rows_,
             outbox_bytes_);
}

// NCCL connects a pair of ranks at their first transfer, and that first
// ncclGroupEnd waits on the host for the peer's: in a call it would block
// dispatch() (forever, if the peer is gone), where the transfer watch cannot
// help. Construction is collective already; every pair meets here instead.
void InternodeExchange::connect_peers() {
  constexpr size_t kBytes = 4;
  char* scratch = static_cast<char*>(allocate_zeroed(size_t(world_ + 1) * kBytes));
  std::vector<TransferSegment> sends, receives;
  for (int peer = 0; peer < world_; ++peer) {
    if (!exchanges_with(peer, /*v2=*/!v2_ll_built_)) continue;
    sends.push_back({peer, scratch + size_t(world_) * kBytes, kBytes});
    receives.push_back({peer, scratch + size_t(peer) * kBytes, kBytes});
  }
  auto stream = device_.create_stream();
  transport_->exchange(sends, receives, *stream);
  stream->synchronize();
  if (auto why = transport_->failure())
    throw Error("rank " + std::to_string(rank_) + ": the first internode transfer failed: " + *why,
                "every rank constructs the op", "construct the op on every rank within the peer timeout");
}

size_t InternodeExchange::outbox_bytes(const EpDispatchCombineConfig& config, const EpWindowMap& window,
                                       int64_t rows) {
  const size_t n = size_t(rows), k = size_t(config.num_experts_per_token);
  size_t end = window.state + window.state_bytes;
  auto touched = [&](size_t offset, size_t bytes) { end = std::max(end, offset + bytes); };
  touched(window.recv_tokens, n * config.dispatch_token_bytes());
  touched(window.recv_weights, n * k * 4);
  touched(window.recv_scales, n * config.scale_bytes_per_token());
  touched(window.recv_indices, n * k * 4);
  touched(window.recv_origin, n * 2 * 4);
  // v2_ll's gather return leg lands in the outbox.
  if (builds_v2_ll(config) && config.combine_mode == CombineMode::Gather) {
    touched(window.combine_rows, n * config.combine_token_bytes());
    touched(window.combine_weights, n * k * 4);
  }
  return end;
}

InternodeExchange::~InternodeExchange() {
  for (void* pointer : owned_) device_.release(pointer);
}

void* InternodeExchange::allocate(size_t bytes) {
  void* pointer = device_.allocate(std::max<size_t>(bytes, 16));
  owned_.push_back(pointer);
  return pointer;
}

void* InternodeExchange::allocate_zeroed(size_t bytes) {
  void* pointer = allocate(bytes);
  device_.fill_zero(pointer, std::max<size_t>(bytes, 16));
  return pointer;
}

std::vector<void*> InternodeExchange::window_bases(const std::vector<void*>& node_windows) const {
  std::vector<void*> bases = node_windows;
  for (int peer = 0; peer < world_; ++peer)
    if (off_node(peer)) bases[size_t(peer)] = outboxes_[size_t(peer)];
  return bases;
}

void InternodeExchange::after_dispatch(const EpKernels& kernels, LaunchGeometry geometry, const Window& table,
                                       void* route, void* forward_route, bool replay, bool v2, Stream& stream) {
  const size_t rows = transfer_rows(v2), k = size_t(config_.num_experts_per_token);
  const size_t token_bytes = config_.dispatch_token_bytes(), scale_bytes = config_.scale_bytes_per_token();
  std::vector<TransferSegment> sends, receives;
  for (int peer = 0; peer < world_; ++peer) {
    if (!exchanges_with(peer, v2)) continue;
    char* box = outbox(peer);
    // The outbox's total word carries its count (ep/internode @seal_outboxes).
    sends.push_back({peer, box + window_.state + 4 * size_t(window_.total_recv_word), 4});
    receives.push_back({peer, static_cast<char*>(counts_) + 4 * size_t(peer), 4});
    auto both = [&](size_t region, void* inbox_base, size_t row_bytes) {
      if (row_bytes == 0) return;
      sends.push_back({peer, box + region, rows * row_bytes});
      receives.push_back({peer, peer_rows(inbox_base, inbox_block(peer, v2), row_bytes), rows * row_bytes});
    };
    both(window_.recv_tokens, tokens_, token_bytes);
    both(window_.recv_weights, weights_, k * 4);
    both(window_.recv_scales, scales_, scale_bytes);
    both(window_.recv_indices, indices_, k * 4);
    both(window_.recv_origin, origins_, 2 * 4);
  }
  transport_->exchange(sends, receives, stream);
  const Kernel& kernel = v2 ? *kernels.internode_forward : *kernels.internode_ingest;
  LaunchArgs args(kernel);
  args.set("counts", counts_)
      .set("tokens_in", tokens_)
      .set("weights_in", weights_)
      .set("scales_in", scales_)
      .set("indices_in", indices_)
      .set("origins_in", origins_)
      .set("route", route)
      .set("replay", replay)
      .set("per_source", rows_per_peer_)
      .set("rank", rank_)
      .set("w", table);
  if (v2) args.set("forward_route", forward_route);
  device_.launch(kernel, geometry, args.build(), stream);
}

void InternodeExchange::exchange_order_totals(const EpKernels& kernels, LaunchGeometry geometry,
                                              const Window& table, int64_t tokens, const void* token_count,
                                              Stream& stream) {
  const Kernel& totals = *kernels.order_totals;
  device_.launch(totals, geometry,
                 LaunchArgs(totals)
                     .set("tokens", tokens)
                     .set("rank", rank_)
                     .set("token_count", token_count)
                     .set("count_on_device", token_count != nullptr)
                     .set("rows", order_rows_)
                     .set("w", table)
                     .build(),
                 stream);
  // Row r of the order rows is rank r's totals: this rank's goes to every
  // off-node rank, whose rows land at their own index here.
  const size_t row_bytes = size_t(world_) * 4;
  char* rows = static_cast<char*>(order_rows_);
  std::vector<TransferSegment> sends, receives;
  for (int peer = 0; peer < world_; ++peer) {
    if (!off_node(peer)) continue;
    sends.push_back({peer, rows + size_t(rank_) * row_bytes, row_bytes});
    receives.push_back({peer, rows + size_t(peer) * row_bytes, row_bytes});
  }
  transport_->exchange(sends, receives, stream);
}

void InternodeExchange::before_combine(const EpKernels& kernels, LaunchGeometry geometry, const Window& table,
                                       const void* input, const void* weights, bool weighted, const void* route,
                                       Stream& stream) {
  const Kernel& pack = *kernels.internode_return_pack;
  device_.launch(pack, geometry,
                 LaunchArgs(pack)
                     .set("input", input)
                     .set("in_weights", weighted ? weights : nullptr)
                     .set("has_weights", weighted)
                     .set("counts", counts_)
                     .set("rows_out", rows_out_)
                     .set("weights_out", weights_out_)
                     .set("route", route)
                     .set("per_source", rows_per_peer_)
                     .set("rank", rank_)
                     .set("w", table)
                     .build(),
                 stream);
  const bool scatter = config_.combine_mode == CombineMode::Scatter;
  const size_t rows = transfer_rows(/*v2=*/false), k = size_t(config_.num_experts_per_token);
  const size_t row_bytes = config_.combine_token_bytes();
  std::vector<TransferSegment> sends, receives;
  for (int peer = 0; peer < world_; ++peer) {
    if (!off_node(peer)) continue;
    // What `peer` sent this rank goes back to it; what this rank sent `peer`
    // comes back where the origin's sum reads it (gather: the outbox's
    // staged rows, at the slots the route recorded).
    sends.push_back({peer, peer_rows(rows_out_, peer, row_bytes), rows * row_bytes});
    sends.push_back({peer, peer_rows(weights_out_, peer, k * 4), rows * k * 4});
    if (scatter) {
      receives.push_back({peer, peer_rows(rows_in_, peer, row_bytes), rows * row_bytes});
      receives.push_back({peer, peer_rows(weights_in_, peer, k * 4), rows * k * 4});
    } else {
      receives.push_back({peer, outbox(peer) + window_.combine_rows, rows * row_bytes});
      receives.push_back({peer, outbox(peer) + window_.combine_weights, rows * k * 4});
    }
  }
  transport_->exchange(sends, receives, stream);
  if (!scatter) return;
  const Kernel& unpack = *kernels.internode_return_unpack;
  device_.launch(unpack, geometry,
                 LaunchArgs(unpack)
                     .set("rows_in", rows_in_)
                     .set("weights_in", weights_in_)
                     .set("has_weights", weighted)
                     .set("route", route)
                     .set("per_source", rows_per_peer_)
                     .set("rank", rank_)
                     .set("w", table)
                     .build(),
                 stream);
}

void InternodeExchange::combine_v2(const EpKernels& kernels, LaunchGeometry geometry, const Window& table,
                                   const V2Combine& call, bool partials, bool sum, Stream& stream) {
  const bool weighted = call.weights != nullptr;
  if (partials) send_partials_v2(kernels, geometry, table, call, stream);
  if (!sum) return;
  const Kernel& sum_kernel = *kernels.internode_sum;
  device_.launch(sum_kernel, geometry,
                 LaunchArgs(sum_kernel)
                     .set("output", call.output)
                     .set("out_weights", call.out_weights)
                     .set("has_weights", weighted)
                     .set("route", call.route)
                     .set("tokens", call.tokens)
                     .set("own_partials", own_partials_)
                     .set("own_weights", own_weights_)
                     .set("partials_in", partials_in_)
                     .set("partial_weights_in", partial_weights_in_)
                     .set("per_source", rows_per_peer_)
                     .set("rank", rank_)
                     .set("w", table)
                     .build(),
                 stream);
}

void InternodeExchange::send_partials_v2(const EpKernels& kernels, LaunchGeometry geometry, const Window& table,
                                         const V2Combine& call, Stream& stream) {
  const bool weighted = call.weights != nullptr;
  const Kernel& partials = *kernels.internode_partials;
  device_.launch(partials, geometry,
                 LaunchArgs(partials)
                     .set("input", call.input)
                     .set("in_weights", call.weights)
                     .set("has_weights", weighted)
                     .set("staged", call.staged)
                     .set("counts", counts_)
                     .set("forward_route", call.forward_route)
                     .set("route", call.route)
                     .set("tokens", call.tokens)
                     .set("partials", partials_out_)
                     .set("partial_weights", partial_weights_out_)
                     .set("own_partials", own_partials_)
                     .set("own_weights", own_weights_)
                     .set("per_source", rows_per_peer_)
                     .set("rank", rank_)
                     .set("w", table)
                     .build(),
                 stream);
  // Node n's block of partials: this rank forwarded those rows for node n's
  // rail peer, and that peer's block for this rank's node comes back. The
  // weights cross whether or not this rank has any: a transfer's pairs must
  // match on both sides, and the peer's call may be weighted.
  const size_t rows = transfer_rows(/*v2=*/true), k = size_t(config_.num_experts_per_token);
  const size_t row_bytes = size_t(config_.hidden_dim) * 4;
  std::vector<TransferSegment> sends, receives;
  for (int peer = 0; peer < world_; ++peer) {
    if (!exchanges_with(peer, /*v2=*/true)) continue;
    const int node = peer / per_node_;
    sends.push_back({peer, peer_rows(partials_out_, node, row_bytes), rows * row_bytes});
    receives.push_back({peer, peer_rows(partials_in_, node, row_bytes), rows * row_bytes});
    sends.push_back({peer, peer_rows(partial_weights_out_, node, k * 4), rows * k * 4});
    receives.push_back({peer, peer_rows(partial_weights_in_, node, k * 4), rows * k * 4});
  }
  transport_->exchange(sends, receives, stream);
}

void InternodeExchange::clear_outbox_state(Stream& stream) {
  // The idle outbox (v2) stands for several ranks, so it is cleared more than once.
  for (int peer = 0; peer < world_; ++peer)
    if (off_node(peer)) device_.fill_zero(outbox(peer) + window_.state, window_.state_bytes, stream);
}

}  // namespace epjit::ep
