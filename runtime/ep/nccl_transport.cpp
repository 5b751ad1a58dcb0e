#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epjit/comm/nccl.h"
#include "epjit/error.h"
#include "internode_transport.h"
#include "watched_transport.h"

namespace epjit::ep {

namespace {

// Grouped ncclSend/ncclRecv on the op's stream: enqueued, never waited for,
// and capturable in a CUDA/HIP graph (the sizes are the op's fixed ones).
class NcclEngine final : public StreamTransferEngine {
 public:
  explicit NcclEngine(std::unique_ptr<NcclCommunicator> nccl) : nccl_(std::move(nccl)) {}

  std::string name() const override { return "nccl (" + nccl_->library() + ")"; }

  void exchange(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives,
                Stream& stream) override {
    std::vector<NcclCommunicator::Transfer> out, in;
    for (const TransferSegment& send : sends) out.push_back({send.peer, send.data, send.bytes});
    for (const TransferSegment& receive : receives) in.push_back({receive.peer, receive.data, receive.bytes});
    nccl_->exchange(out, in, stream.native_handle());
  }

  std::optional<std::string> async_error() const override { return nccl_->async_error(); }
  void abort() override { nccl_->abort(); }

  std::unique_ptr<StreamTransferEngine> remake(Communicator& comm) override {
    if (nccl_->adopted())
      throw Error("reset(): an internode transfer failed, and the NCCL communicator the op adopted is aborted",
                  "a live NCCL communicator", "make a new ncclComm_t (or process group) and a new op on every rank");
    return std::make_unique<NcclEngine>(NcclCommunicator::create(comm));
  }

 private:
  std::unique_ptr<NcclCommunicator> nccl_;
};

}  // namespace

std::unique_ptr<InternodeTransport> make_nccl_transport(Communicator& comm, void* adopted_nccl_comm,
                                                        std::chrono::milliseconds peer_timeout) {
  auto nccl = adopted_nccl_comm ? NcclCommunicator::adopt(comm, adopted_nccl_comm) : NcclCommunicator::create(comm);
  return make_watched_transport(comm, std::make_unique<NcclEngine>(std::move(nccl)), peer_timeout);
}

}  // namespace epjit::ep
