// The internode paths of an EpDispatchCombineOp: what a rank holds for the
// ranks of other nodes and the steps around the op's kernels (docs/EP.md
// "Internode"; templates/ep/internode.mlir, ep/internode_v2.mlir).
//
// For every off-node rank, a local stand-in window of the op's layout (its
// outbox): the window table points at it where it would point at that rank's
// window, so dispatch and combine address every rank alike. Around them:
//   v2_ll dispatch: ep_dispatch -> transfer (outboxes -> inboxes, every
//                   off-node rank) -> ep_internode_ingest
//         combine:  ep_internode_return_pack -> transfer back ->
//                   (scatter: ep_internode_return_unpack) -> ep_combine_*
//   v2    dispatch: ep_dispatch (forward=1) -> transfer (rail peers only) ->
//                   ep_internode_forward
//         combine:  ep_internode_partials -> transfer back (f32 partials) ->
//                   ep_internode_sum
// Each transfer moves fixed sizes, `rows_per_peer` rows per (source,
// destination) pair, so nothing is read on the host between kernels.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epjit/comm/communicator.h"
#include "epjit/ep/config.h"
#include "internode_transport.h"
#include "op_kernels.h"

namespace epjit::ep {

// Slots per (source, destination) pair: a source sends an off-node rank (or
// node) each token at most once, into slots below capacity; the seed rounds
// the count up to a multiple of the wave size.
int64_t internode_rows_per_peer(const EpDispatchCombineConfig& config);

// Whether the op may run internode v2 on some calls (internode_kernel v2 or auto).
bool builds_v2(const EpDispatchCombineConfig& config);

// Inbox rows whose forwarding a route map records for internode v2 (0 when
// the op never runs v2): the template parameter that sizes the route's
// route_forward part.
int64_t forward_route_rows(const EpDispatchCombineConfig& config);

class InternodeExchange {
 public:
  // Allocates the outboxes, inboxes and return buffers; picks the transport
  // (EPJIT_INTERNODE_TRANSPORT, docs/EP.md; nccl over the caller's
  // ncclComm_t when one is given).
  InternodeExchange(const EpDispatchCombineConfig& config, Communicator& comm, const EpWindowMap& window,
                    void* adopted_nccl_comm);
  ~InternodeExchange();
  InternodeExchange(const InternodeExchange&) = delete;
  InternodeExchange& operator=(const InternodeExchange&) = delete;

  // The window table's bases: the node's windows, and the outboxes elsewhere.
  std::vector<void*> window_bases(const std::vector<void*>& node_windows) const;
  int64_t rows_per_peer() const { return rows_per_peer_; }

  // After ep_dispatch: the outboxes cross, and the inboxes join the received
  // rows (v2_ll) or are forwarded to their destinations on this node (v2;
  // `forward_route` is where the route keeps v2's forward route).
  void after_dispatch(const EpKernels& kernels, LaunchGeometry geometry, const Window& table, void* route,
                      void* forward_route, bool replay, bool v2, Stream& stream);
  // Source order (ep/order), between ep_order_count and ep_order_slots: this
  // rank's totals per destination (ep_order_totals) to every off-node rank's
  // order rows, and theirs into this rank's.
  void exchange_order_totals(const EpKernels& kernels, LaunchGeometry geometry, const Window& table, int64_t tokens,
                             const void* token_count, Stream& stream);
  // The order rows ep_order_slots reads: [world] rows of each rank's totals
  // per destination, then the prefix row it writes (null without source order).
  void* order_rows() const { return order_rows_; }
  // v2_ll, before the combine kernel: each off-node source's expert outputs go back.
  void before_combine(const EpKernels& kernels, LaunchGeometry geometry, const Window& table, const void* input,
                      const void* weights, bool weighted, const void* route, Stream& stream);
  // v2's combine: node partials and the transfer back (a split call's send
  // half), then the origin's sum into output / out_weights (its receive half).
  struct V2Combine {
    const void* input;
    const void* weights;  // null: unweighted
    bool staged;          // input is the window's combine rows (combine_input())
    const void* route;
    const void* forward_route;
    int64_t tokens;
    void* output;
    void* out_weights;
  };
  void combine_v2(const EpKernels& kernels, LaunchGeometry geometry, const Window& table, const V2Combine& call,
                  bool partials, bool sum, Stream& stream);
  // reset(): the outboxes' counters and counts, ordered on the op's stream.
  void clear_outbox_state(Stream& stream);
  // Why the transport's transfers failed, once they have (check()).
  std::optional<std::string> transport_failure() const { return transport_->failure(); }
  // reset(), collective: the transport ready again after any rank's failure.
  void recover_transport(Communicator& comm) { transport_->recover(comm); }

 private:
  // combine_v2's first half: the partials kernel, then their transfer to the origins' nodes.
  void send_partials_v2(const EpKernels& kernels, LaunchGeometry geometry, const Window& table, const V2Combine& call,
                        Stream& stream);
  bool off_node(int peer) const { return peer / per_node_ != rank_ / per_node_; }
  // The peers a transfer pairs this rank with: every off-node rank (v2_ll),
  // or its rail peers, one per other node (v2).
  bool exchanges_with(int peer, bool v2) const { return off_node(peer) && (!v2 || peer % per_node_ == rank_ % per_node_); }
  char* outbox(int peer) const { return static_cast<char*>(outboxes_[size_t(peer)]); }
  // Block `block` of rows_per_peer rows in a [blocks][rows_per_peer] buffer.
  char* peer_rows(void* base, int block, size_t row_bytes) const {
    return static_cast<char*>(base) + size_t(block) * size_t(rows_per_peer_) * row_bytes;
  }
  // The inbox block of source `peer`: v2_ll's ingest reads them by source
  // rank, v2's forward by source node (so a v2-only op holds one block per node).
  int inbox_block(int peer, bool v2) const { return v2 ? peer / per_node_ : peer; }
  size_t transfer_rows(bool v2) const { return size_t(v2 ? rows_per_peer_ : v2_ll_transfer_rows_); }
  void connect_peers();          // one small transfer with every peer, at construction
  void* allocate(size_t bytes);  // freed with this object
  void* allocate_zeroed(size_t bytes);
  // An outbox is read and written only in its state words and the first
  // rows_per_peer rows of the regions a send, a seal or a return touches;
  // the window's later regions (scatter's inbox, std-MoE's) are never
  // addressed through it, so it ends where the last touched bytes do.
  static size_t outbox_bytes(const EpDispatchCombineConfig& config, const EpWindowMap& window, int64_t rows);

  const EpDispatchCombineConfig& config_;
  Device& device_;
  const EpWindowMap& window_;
  const int rank_, world_, per_node_, nodes_;
  const bool v2_ll_built_;  // the op may run v2_ll (internode_kernel v2_ll or auto)
  const int64_t rows_per_peer_;
  // Rows a v2_ll transfer moves per peer block. A rank sends a token at most
  // once to each rank, so a call of n tokens fills at most n rows of a block;
  // under auto, v2_ll runs only for calls of at most
  // internode_auto_ll_max_tokens tokens on every rank (the rule auto's ranks
  // keep), so that many rows carry any v2_ll call and the rest of each block
  // stays home. v2's blocks move whole: auto runs it above the crossover.
  const int64_t v2_ll_transfer_rows_;
  const size_t outbox_bytes_;  // the window's layout up to the last byte an outbox is used at
  std::unique_ptr<InternodeTransport> transport_;
  std::vector<void*> outboxes_;  // by world rank; null on this rank's node
  void* idle_outbox_ = nullptr;  // v2 only: state words for the off-node ranks no token goes to
  std::vector<void*> owned_;     // everything allocate_zeroed returned
  // Inboxes, [world][rows_per_peer] rows of each kind (on-node entries unused).
  void* order_rows_ = nullptr;  // receive_order source: [world + 1][world] f32
  void *counts_ = nullptr, *tokens_ = nullptr, *weights_ = nullptr, *scales_ = nullptr, *indices_ = nullptr,
       *origins_ = nullptr;
  // v2_ll's return leg: what this rank sends back, and (scatter) what comes back.
  void *rows_out_ = nullptr, *weights_out_ = nullptr, *rows_in_ = nullptr, *weights_in_ = nullptr;
  // v2's f32 node partials, [nodes][rows_per_peer] rows: what this rank sends
  // back for the rows it forwarded, what comes back for its own tokens; and
  // its own tokens' own-node partials, [max tokens] rows.
  void *partials_out_ = nullptr, *partial_weights_out_ = nullptr, *partials_in_ = nullptr,
       *partial_weights_in_ = nullptr, *own_partials_ = nullptr, *own_weights_ = nullptr;
};

}  // namespace epjit::ep
