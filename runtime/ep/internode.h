// The internode low-latency path (v2_ll) of an EpDispatchCombineOp: what a
// rank holds for the ranks of other nodes and the steps around the op's
// kernels (docs/EP.md "Internode"; templates/ep/internode.mlir).
//
// For every off-node rank, a local stand-in window of the op's layout (its
// outbox): the window table points at it where it would point at that rank's
// window, so dispatch and combine address every rank alike. Around them:
//   dispatch: ep_dispatch -> transfer (outboxes -> inboxes) -> ep_internode_ingest
//   combine:  ep_internode_return_pack -> transfer back ->
//             (scatter: ep_internode_return_unpack) -> ep_combine_*
// Each transfer moves fixed sizes, `rows_per_peer` rows per (source,
// destination) pair, so nothing is read on the host between kernels.
#pragma once

#include <memory>
#include <vector>

#include "epjit/comm/communicator.h"
#include "epjit/ep/config.h"
#include "internode_transport.h"
#include "op_kernels.h"

namespace epjit::ep {

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

  // After ep_dispatch: the outboxes cross, and the inboxes join the received rows.
  void after_dispatch(const EpKernels& kernels, LaunchGeometry geometry, const Window& table, void* route,
                      bool replay, Stream& stream);
  // Before the combine kernel: each off-node source's expert outputs go back.
  void before_combine(const EpKernels& kernels, LaunchGeometry geometry, const Window& table, const void* input,
                      const void* weights, bool weighted, const void* route, Stream& stream);
  // reset(): the outboxes' counters and counts (the caller has synchronized).
  void clear_outbox_state();

 private:
  bool off_node(int peer) const { return peer / per_node_ != rank_ / per_node_; }
  char* outbox(int peer) const { return static_cast<char*>(outboxes_[size_t(peer)]); }
  // Peer `peer`'s block of rows_per_peer rows in a [world][rows_per_peer] buffer.
  char* peer_rows(void* base, int peer, size_t row_bytes) const {
    return static_cast<char*>(base) + size_t(peer) * size_t(rows_per_peer_) * row_bytes;
  }
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
  const int rank_, world_, per_node_;
  const int64_t rows_per_peer_;
  const size_t outbox_bytes_;  // the window's layout up to the last byte an outbox is used at
  std::unique_ptr<InternodeTransport> transport_;
  std::vector<void*> outboxes_;  // by world rank; null on this rank's node
  std::vector<void*> owned_;     // everything allocate_zeroed returned
  // Inboxes, [world][rows_per_peer] rows of each kind (on-node entries unused).
  void *counts_ = nullptr, *tokens_ = nullptr, *weights_ = nullptr, *scales_ = nullptr, *indices_ = nullptr,
       *origins_ = nullptr;
  // Combine's return leg: what this rank sends back, and (scatter) what comes back.
  void *rows_out_ = nullptr, *weights_out_ = nullptr, *rows_in_ = nullptr, *weights_in_ = nullptr;
};

}  // namespace epjit::ep
