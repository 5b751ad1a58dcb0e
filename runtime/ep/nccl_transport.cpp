#include <string>
#include <vector>

#include "epjit/comm/nccl.h"
#include "epjit/error.h"
#include "internode_transport.h"

namespace epjit::ep {

namespace {

// Grouped ncclSend/ncclRecv on the op's stream: enqueued, never waited for,
// and capturable in a CUDA/HIP graph (the sizes are the op's fixed ones).
class NcclTransport final : public InternodeTransport {
 public:
  NcclTransport(std::unique_ptr<NcclCommunicator> nccl, int rank)
      : nccl_(std::move(nccl)), rank_(rank), name_("nccl (" + nccl_->library() + ")") {}

  std::string_view name() const override { return name_; }

  void exchange(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives,
                Stream& stream) override {
    std::vector<NcclCommunicator::Transfer> out, in;
    for (const TransferSegment& send : sends) out.push_back({checked(send), send.data, send.bytes});
    for (const TransferSegment& receive : receives) in.push_back({checked(receive), receive.data, receive.bytes});
    nccl_->exchange(out, in, stream.native_handle());
  }

 private:
  int checked(const TransferSegment& segment) const {
    if (segment.peer == rank_)
      throw Error("an internode segment addressed to this rank", "another rank", "report this as a bug");
    return segment.peer;
  }

  std::unique_ptr<NcclCommunicator> nccl_;
  int rank_;
  std::string name_;
};

}  // namespace

std::unique_ptr<InternodeTransport> make_nccl_transport(Communicator& comm, void* adopted_nccl_comm) {
  auto nccl = adopted_nccl_comm ? NcclCommunicator::adopt(comm, adopted_nccl_comm) : NcclCommunicator::create(comm);
  return std::make_unique<NcclTransport>(std::move(nccl), comm.rank());
}

}  // namespace epjit::ep
