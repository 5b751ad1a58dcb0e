#include <string>
#include <vector>

#include "../comm/wire.h"
#include "epjit/error.h"
#include "internode_transport.h"

namespace epjit::ep {

namespace {

// Segments that differ between two ranks mean their ops or their calls differ.
constexpr const char* kUnpairedSegmentsFix =
    "build every rank's op from the same configuration; with internode_kernel auto, keep every rank of a call on one "
    "side of internode_auto_ll_max_tokens, or pass the call's largest token count as max_tokens_across_ranks";

class HostTransport final : public InternodeTransport {
 public:
  HostTransport(Communicator& comm, Device& device) : comm_(comm), device_(device) {}

  std::string_view name() const override { return "host (a stand-in for the network, through the bootstrap)"; }

  void exchange(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives,
                Stream& stream) override {
    if (stream.capturing())
      throw Error("the host internode transport inside a graph capture (it waits for the stream on the host)",
                  "eager calls, or the nccl transport, whose sends and receives a graph captures",
                  "unset EPJIT_INTERNODE_TRANSPORT on GPUs (nccl is the default there), or call the op eagerly");
    stream.synchronize();  // the segments hold what the kernels before this wrote (and a failed one says so here)
    const size_t world = size_t(comm_.world_size());
    std::vector<comm::Bytes> outgoing(world);
    size_t total = 0;
    for (const TransferSegment& send : sends) {
      check_peer(send, "send");
      comm::Bytes& part = outgoing[size_t(send.peer)];
      const size_t at = part.size();
      part.resize(at + send.bytes);
      if (send.bytes) device_.copy_to_host(part.data() + at, send.data, send.bytes, stream);
      total += send.bytes;
    }
    // The bootstrap's frame bound, with room for the framing.
    if (total + 64 * world > comm::kMaxContributionBytes)
      throw Error("an internode exchange of " + std::to_string(total) + " bytes over the host transport",
                  "at most " + std::to_string(comm::kMaxContributionBytes) + " bytes per rank and call",
                  "the host transport is a test stand-in: use smaller shapes on host ranks, or a GPU build with NCCL");
    const std::vector<comm::Bytes> incoming = comm_.alltoall(outgoing);
    std::vector<size_t> read(world, 0);
    for (const TransferSegment& receive : receives) {
      check_peer(receive, "receive");
      const comm::Bytes& part = incoming[size_t(receive.peer)];
      size_t& at = read[size_t(receive.peer)];
      if (part.size() - at < receive.bytes)
        throw Error("rank " + std::to_string(receive.peer) + " sent " + std::to_string(part.size()) +
                        " bytes in an internode exchange, fewer than this rank receives from it",
                    "the same segments on both sides", kUnpairedSegmentsFix);
      if (receive.bytes) device_.copy_to_device(receive.data, part.data() + at, receive.bytes, stream);
      at += receive.bytes;
    }
    for (size_t peer = 0; peer < world; ++peer)
      if (read[peer] != incoming[peer].size())
        throw Error("rank " + std::to_string(peer) + " sent " + std::to_string(incoming[peer].size()) +
                        " bytes in an internode exchange, but this rank receives " + std::to_string(read[peer]),
                    "the same segments on both sides", kUnpairedSegmentsFix);
  }

 private:
  void check_peer(const TransferSegment& segment, const char* what) const {
    if (segment.peer < 0 || segment.peer >= comm_.world_size() || segment.peer == comm_.rank())
      throw Error("an internode " + std::string(what) + " segment for rank " + std::to_string(segment.peer),
                  "another rank in [0, " + std::to_string(comm_.world_size()) + ")", "report this as a bug");
  }

  Communicator& comm_;
  Device& device_;
};

}  // namespace

std::unique_ptr<InternodeTransport> make_host_transport(Communicator& comm, Device& device) {
  return std::make_unique<HostTransport>(comm, device);
}

}  // namespace epjit::ep
