#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "epjit/comm/nccl.h"
#include "epjit/error.h"
#include "epjit/logging.h"
#include "internode_transport.h"
#include "transfer_watch.h"

namespace epjit::ep {

namespace {

// How often the watcher looks: a failure is reported at most this late, and
// an idle op costs one wake-up per period.
constexpr std::chrono::milliseconds kWatchPeriod{10};

std::string peers_of(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives) {
  std::vector<int> peers;
  for (auto segments : {sends, receives})
    for (const TransferSegment& segment : segments)
      if (std::find(peers.begin(), peers.end(), segment.peer) == peers.end()) peers.push_back(segment.peer);
  std::string text;
  for (int peer : peers) text += (text.empty() ? "" : ", ") + std::to_string(peer);
  return text;
}

// Events to mark transfers with, reused: a call would otherwise create and
// destroy two. An event comes back when the watch drops its transfer.
class EventPool {
 public:
  explicit EventPool(Device& device) : device_(device) {}
  std::shared_ptr<Event> take() {
    std::unique_ptr<Event> event;
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        event = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (!event) event = device_.create_event();
    return {event.release(), [this](Event* returned) {
              std::lock_guard lock(mutex_);
              spare_.emplace_back(returned);
            }};
  }

 private:
  Device& device_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Event>> spare_;
};

// Grouped ncclSend/ncclRecv on the op's stream: enqueued, never waited for,
// and capturable in a CUDA/HIP graph (the sizes are the op's fixed ones).
// A watcher thread aborts the NCCL communicator when a transfer fails
// (TransferWatch), so that no host wait on the stream hangs on a dead peer.
class NcclTransport final : public InternodeTransport {
 public:
  NcclTransport(Communicator& comm, void* adopted_nccl_comm, std::chrono::milliseconds peer_timeout)
      : events_(comm.device()),
        rank_(comm.rank()),
        nccl_(adopted_nccl_comm ? NcclCommunicator::adopt(comm, adopted_nccl_comm) : NcclCommunicator::create(comm)),
        name_("nccl (" + nccl_->library() + ")"),
        watch_(peer_timeout, [this] { return nccl_->async_error(); }) {
    start_watcher();
  }

  ~NcclTransport() override { stop_watcher(); }

  std::string_view name() const override { return name_; }

  void exchange(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives,
                Stream& stream) override {
    if (auto why = failure())
      throw Error("rank " + std::to_string(rank_) + ": an internode transfer after an earlier one failed (" + *why + ")",
                  "a working transport", "reset() the op on every rank first, or build a new one");
    std::vector<NcclCommunicator::Transfer> out, in;
    for (const TransferSegment& send : sends) out.push_back({checked(send), send.data, send.bytes});
    for (const TransferSegment& receive : receives) in.push_back({checked(receive), receive.data, receive.bytes});
    // A graph's transfers run at its replays, where no event of ours marks
    // them: the watcher still sees the engine's own errors there.
    const bool timed = !stream.capturing();
    std::shared_ptr<Event> ready, finished;
    if (timed) {
      ready = events_.take();
      ready->record(stream);
    }
    {
      std::lock_guard engine(engine_mutex_);
      nccl_->exchange(out, in, stream.native_handle());
    }
    if (!timed) return;
    finished = events_.take();
    finished->record(stream);
    watch_.watch({[ready] { return ready->completed(); }, [finished] { return finished->completed(); },
                  "internode transfer with rank(s) " + peers_of(sends, receives)});
  }

  std::optional<std::string> failure() const override {
    std::lock_guard lock(failure_mutex_);
    return failure_;
  }

  // Collective. Every rank's NCCL communicator is remade when any rank's
  // failed: a rank whose own transfers went through still holds one its
  // peers have aborted.
  void recover(Communicator& comm) override {
    const bool failed_here = failure().has_value() || nccl_->aborted();
    int failed_rank = -1;
    const auto flags = comm.allgather(std::vector<uint8_t>{uint8_t(failed_here)});
    for (size_t r = 0; r < flags.size() && failed_rank < 0; ++r)
      if (!flags[r].empty() && flags[r][0]) failed_rank = int(r);
    if (failed_rank < 0) return;
    stop_watcher();
    nccl_->abort();
    if (nccl_->adopted())
      throw Error("reset(): rank " + std::to_string(failed_rank) +
                      "'s internode transfer failed, and the NCCL communicator the op adopted is aborted",
                  "a live NCCL communicator", "make a new ncclComm_t (or process group) and a new op on every rank");
    nccl_ = NcclCommunicator::create(comm);
    {
      std::lock_guard lock(failure_mutex_);
      failure_.reset();
    }
    log().warn("rank {}: internode transport: a new NCCL communicator after rank {}'s transfer failed", rank_,
               failed_rank);
    start_watcher();
  }

 private:
  int checked(const TransferSegment& segment) const {
    if (segment.peer == rank_)
      throw Error("an internode segment addressed to this rank", "another rank", "report this as a bug");
    return segment.peer;
  }

  void start_watcher() {
    stopping_ = false;
    watcher_ = std::thread([this] { watch_loop(); });
  }

  void stop_watcher() {
    {
      std::lock_guard lock(wake_mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

  void watch_loop() {
    std::unique_lock lock(wake_mutex_);
    while (!wake_.wait_for(lock, kWatchPeriod, [this] { return stopping_; })) {
      std::optional<std::string> why;
      try {
        why = watch_.look(TransferWatch::Clock::now());
      } catch (const std::exception& error) {
        why = std::string("watching the transfers failed: ") + error.what();
      }
      if (!why) continue;
      {
        std::lock_guard failure_lock(failure_mutex_);
        failure_ = *why;
      }
      log().error("rank {}: {}; aborting the NCCL communicator so that the op's stream drains", rank_, *why);
      // Not while the op's thread is enqueueing on the communicator, unless
      // that enqueue is itself stuck on the peer: then abort is the way out.
      const bool quiet = engine_mutex_.try_lock_for(std::chrono::seconds(1));
      nccl_->abort();
      if (quiet) engine_mutex_.unlock();
      return;  // recover() starts a new watcher with the new communicator
    }
  }

  EventPool events_;  // before watch_: the watch's transfers hold its events
  int rank_;
  std::timed_mutex engine_mutex_;  // enqueueing on nccl_, against the watcher's abort
  std::unique_ptr<NcclCommunicator> nccl_;
  std::string name_;
  TransferWatch watch_;
  mutable std::mutex failure_mutex_;
  std::optional<std::string> failure_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread watcher_;
};

}  // namespace

std::unique_ptr<InternodeTransport> make_nccl_transport(Communicator& comm, void* adopted_nccl_comm,
                                                        std::chrono::milliseconds peer_timeout) {
  return std::make_unique<NcclTransport>(comm, adopted_nccl_comm, peer_timeout);
}

}  // namespace epjit::ep
