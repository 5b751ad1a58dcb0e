// The internode transfer step of an EpDispatchCombineOp whose ranks span
// several nodes (docs/EP.md "Internode"): the op's kernels pack what goes to
// each off-node rank into local buffers, a transport moves them, and the
// kernels go on from the received buffers. A transport only moves bytes; it
// never interprets them.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "epjit/comm/communicator.h"
#include "epjit/device.h"

namespace epjit::ep {

// Bytes of device memory sent to, or received from, one peer rank.
struct TransferSegment {
  int peer = 0;
  void* data = nullptr;
  size_t bytes = 0;
};

class InternodeTransport {
 public:
  virtual ~InternodeTransport() = default;
  // For logs and errors: "host (a stand-in for the network)", "nccl".
  virtual std::string_view name() const = 0;
  // Every rank that sends to a peer lists, in the same order and sizes, what
  // that peer lists as its receives from it. Ordered after the work already
  // on `stream`; later work on `stream` sees the received bytes. Throws
  // epjit::Error when sizes disagree or a peer does not answer.
  virtual void exchange(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives,
                        Stream& stream) = 0;
  // Why transfers failed (a dead or absent peer, an engine error) once they
  // have, for a transport whose transfers run on the stream; a transport
  // that blocks in exchange() throws there instead.
  virtual std::optional<std::string> failure() const { return std::nullopt; }
  // reset(), collective: ready for calls again after any rank's failure.
  virtual void recover(Communicator& comm) { (void)comm; }
};

// Moves the segments through the communicator's bootstrap connections, after
// synchronizing `stream` (so it blocks the calling thread). It stands in for
// a network so that every internode kernel runs on host ranks in `make test`;
// it is not a data path for real runs (each exchange is a collective over
// the bootstrap root, at most kMaxContributionBytes per rank and call).
std::unique_ptr<InternodeTransport> make_host_transport(Communicator& comm, Device& device);

// Grouped ncclSend/ncclRecv (RCCL on AMD) enqueued on the op's stream:
// nothing blocks the host, and a CUDA/HIP graph can capture it. Over the
// caller's ncclComm_t when given, else one made over `comm` (collective).
// A transfer that has not finished `peer_timeout` after it could start, or
// an NCCL error, aborts the NCCL communicator (transfer_watch.h).
std::unique_ptr<InternodeTransport> make_nccl_transport(Communicator& comm, void* adopted_nccl_comm,
                                                        std::chrono::milliseconds peer_timeout);

}  // namespace epjit::ep
