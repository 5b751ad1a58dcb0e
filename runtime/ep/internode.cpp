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
std::unique_ptr<InternodeTransport> pick_transport(Communicator& comm, Device& device, void* adopted_nccl_comm) {
  const std::string chosen =
      environment_value("EPJIT_INTERNODE_TRANSPORT").value_or(device.kind() == "host" ? "host" : "nccl");
  if (chosen == "host") {
    if (adopted_nccl_comm)
      throw Error("an NCCL communicator was given, but EPJIT_INTERNODE_TRANSPORT=host", "the nccl transport",
                  "unset EPJIT_INTERNODE_TRANSPORT, or do not pass OpOptions.nccl_communicator");
    return make_host_transport(comm, device);
  }
  if (chosen == "nccl") return make_nccl_transport(comm, adopted_nccl_comm);
  throw Error("EPJIT_INTERNODE_TRANSPORT=" + chosen + " names no internode transport", "host or nccl",
              "unset it (the device's default) or set one of those");
}

}  // namespace

InternodeExchange::InternodeExchange(const EpDispatchCombineConfig& config, Communicator& comm,
                                     const EpWindowMap& window, void* adopted_nccl_comm)
    : config_(config),
      device_(comm.device()),
      window_(window),
      rank_(config.rank),
      world_(config.world_size),
      per_node_(config.nodes_gpu_count()),
      // A source sends an off-node rank each token at most once, into slots
      // below capacity; the seed rounds the per-peer slot count up to a
      // multiple of the wave size.
      rows_per_peer_(std::min(config.max_tokens_per_rank_padded(), config.total_recv_tokens())),
      outbox_bytes_(outbox_bytes(config, window, rows_per_peer_)) {
  const Team& node = comm.node();
  const int node_first = rank_ / per_node_ * per_node_;
  for (int i = 0; i < node.size(); ++i)
    if (node.ranks[size_t(i)] != node_first + i)
      throw Error("the communicator's node of rank " + std::to_string(rank_) + " is not ranks [" +
                      std::to_string(node_first) + ", " + std::to_string(node_first + per_node_) + ")",
                  "nodes of gpu_per_node consecutive ranks",
                  "number ranks node by node (or pass CommOptions.gpu_per_node to Communicator::init)");
  transport_ = pick_transport(comm, device_, adopted_nccl_comm);
  outboxes_.assign(size_t(world_), nullptr);
  for (int peer = 0; peer < world_; ++peer)
    if (off_node(peer)) {
      // Only the state words are read before this rank writes them (the seal's counter).
      outboxes_[size_t(peer)] = allocate(outbox_bytes_);
      device_.fill_zero(outbox(peer) + window.state, window.state_bytes);
    }
  const size_t rows = size_t(world_) * size_t(rows_per_peer_);
  const size_t k = size_t(config.num_experts_per_token);
  counts_ = allocate_zeroed(size_t(world_) * 4);
  tokens_ = allocate_zeroed(rows * config.dispatch_token_bytes());
  weights_ = allocate_zeroed(rows * k * 4);
  scales_ = allocate_zeroed(rows * config.scale_bytes_per_token());
  indices_ = allocate_zeroed(rows * k * 4);
  origins_ = allocate_zeroed(rows * 2 * 4);
  rows_out_ = allocate_zeroed(rows * config.combine_token_bytes());
  weights_out_ = allocate_zeroed(rows * k * 4);
  if (config.combine_mode == CombineMode::Scatter) {
    rows_in_ = allocate_zeroed(rows * config.combine_token_bytes());
    weights_in_ = allocate_zeroed(rows * k * 4);
  }
  log().info("rank {}: internode v2_ll over {}: {} rows per off-node peer, {} bytes per outbox", rank_,
             transport_->name(), rows_per_peer_, outbox_bytes_);
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
  if (config.combine_mode == CombineMode::Gather) {  // the return leg lands in the outbox
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
                                       void* route, bool replay, Stream& stream) {
  const size_t rows = size_t(rows_per_peer_), k = size_t(config_.num_experts_per_token);
  const size_t token_bytes = config_.dispatch_token_bytes(), scale_bytes = config_.scale_bytes_per_token();
  std::vector<TransferSegment> sends, receives;
  for (int peer = 0; peer < world_; ++peer) {
    if (!off_node(peer)) continue;
    char* box = outbox(peer);
    // The outbox's total word carries its count (ep/internode @seal_outboxes).
    sends.push_back({peer, box + window_.state + 4 * size_t(window_.total_recv_word), 4});
    receives.push_back({peer, static_cast<char*>(counts_) + 4 * size_t(peer), 4});
    auto both = [&](size_t region, void* inbox_base, size_t row_bytes) {
      if (row_bytes == 0) return;
      sends.push_back({peer, box + region, rows * row_bytes});
      receives.push_back({peer, peer_rows(inbox_base, peer, row_bytes), rows * row_bytes});
    };
    both(window_.recv_tokens, tokens_, token_bytes);
    both(window_.recv_weights, weights_, k * 4);
    both(window_.recv_scales, scales_, scale_bytes);
    both(window_.recv_indices, indices_, k * 4);
    both(window_.recv_origin, origins_, 2 * 4);
  }
  transport_->exchange(sends, receives, stream);
  const Kernel& ingest = *kernels.internode_ingest;
  device_.launch(ingest, geometry,
                 LaunchArgs(ingest)
                     .set("counts", counts_)
                     .set("tokens_in", tokens_)
                     .set("weights_in", weights_)
                     .set("scales_in", scales_)
                     .set("indices_in", indices_)
                     .set("origins_in", origins_)
                     .set("route", route)
                     .set("replay", replay)
                     .set("per_source", rows_per_peer_)
                     .set("rank", rank_)
                     .set("w", table)
                     .build(),
                 stream);
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
                     .set("per_source", rows_per_peer_)
                     .set("rank", rank_)
                     .set("w", table)
                     .build(),
                 stream);
  const bool scatter = config_.combine_mode == CombineMode::Scatter;
  const size_t rows = size_t(rows_per_peer_), k = size_t(config_.num_experts_per_token);
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

void InternodeExchange::clear_outbox_state() {
  for (int peer = 0; peer < world_; ++peer)
    if (off_node(peer)) device_.fill_zero(outbox(peer) + window_.state, window_.state_bytes);
}

}  // namespace epjit::ep
