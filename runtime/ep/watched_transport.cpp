#include "watched_transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "epjit/error.h"
#include "epjit/logging.h"
#include "transfer_watch.h"

namespace epjit::ep {

namespace {

// How often the watcher looks: while transfers are in flight (a failure is
// reported at most this late), and while none is (only the engine's own
// errors can come then, from a graph's replays; an idle op wakes rarely).
constexpr std::chrono::milliseconds kWatchPeriod{10};
constexpr std::chrono::milliseconds kIdleWatchPeriod{100};
// How long the watcher waits for an enqueue in progress before aborting
// under it: an enqueue stuck on the peer (NCCL's first ncclGroupEnd with a
// peer waits for it) ends only with the abort.
constexpr std::chrono::seconds kEnqueueGrace{1};

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
    if (!event) event = device_.create_event(EventUse::completion);
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

class WatchedTransport;

// The live transports, so that their watchers stop at exit(): an op the
// program never destroyed would otherwise keep polling NCCL and the driver
// while their libraries are torn down. The atexit handler is registered
// after those libraries were loaded, so it runs before their destructors.
class LiveTransports {
 public:
  static LiveTransports& get() {
    static LiveTransports* live = new LiveTransports;  // never destroyed: exit() still reads it
    return *live;
  }
  void add(WatchedTransport* transport);
  void remove(WatchedTransport* transport) {
    std::lock_guard lock(mutex_);
    std::erase(transports_, transport);
  }

 private:
  static void stop_all();
  std::mutex mutex_;
  std::vector<WatchedTransport*> transports_;
  std::once_flag registered_;
};

class WatchedTransport final : public InternodeTransport {
 public:
  WatchedTransport(Communicator& comm, std::unique_ptr<StreamTransferEngine> engine,
                   std::chrono::milliseconds peer_timeout)
      : events_(comm.device()),
        rank_(comm.rank()),
        engine_(std::move(engine)),
        name_(engine_->name()),
        watch_(peer_timeout, [this] { return engine_->async_error(); }) {
    start_watcher();
    LiveTransports::get().add(this);
  }

  ~WatchedTransport() override {
    LiveTransports::get().remove(this);
    stop_watcher();
  }

  void stop_watcher() {
    {
      std::lock_guard lock(wake_mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watcher_.joinable()) watcher_.join();
  }

  std::string_view name() const override { return name_; }

  void exchange(std::span<const TransferSegment> sends, std::span<const TransferSegment> receives,
                Stream& stream) override {
    if (auto why = failure())
      throw Error("rank " + std::to_string(rank_) + ": an internode transfer after an earlier one failed (" + *why +
                      ")",
                  "a working transport", "reset() the op on every rank first, or build a new one");
    for (auto segments : {sends, receives})
      for (const TransferSegment& segment : segments)
        if (segment.peer == rank_)
          throw Error("an internode segment addressed to this rank", "another rank", "report this as a bug");
    // A graph's transfers run at its replays, where no event of ours marks
    // them: the watcher still sees the engine's own errors there.
    if (stream.capturing()) {
      std::lock_guard engine(engine_mutex_);
      engine_->exchange(sends, receives, stream);
      return;
    }
    // Watched from before the enqueue, which may itself wait on the peer.
    struct Progress {
      std::atomic<bool> enqueued{false}, abandoned{false};
    };
    auto progress = std::make_shared<Progress>();
    std::shared_ptr<Event> ready = events_.take(), finished = events_.take();
    ready->record(stream);
    watch_.watch({[ready] { return ready->completed(); },
                  [progress, finished] { return progress->abandoned || (progress->enqueued && finished->completed()); },
                  "internode transfer with rank(s) " + peers_of(sends, receives)});
    try {
      std::lock_guard engine(engine_mutex_);
      engine_->exchange(sends, receives, stream);
    } catch (...) {
      progress->abandoned = true;  // nothing of it runs: not a transfer to time
      throw;
    }
    finished->record(stream);
    progress->enqueued = true;
  }

  std::optional<std::string> failure() const override {
    std::lock_guard lock(failure_mutex_);
    return failure_;
  }

  // Collective. Every rank's engine is remade when any rank's failed: a rank
  // whose own transfers went through holds one its peers have aborted.
  void recover(Communicator& comm) override {
    const bool failed_here = failure().has_value();
    int failed_rank = -1;
    const auto flags = comm.allgather(std::vector<uint8_t>{uint8_t(failed_here)});
    for (size_t r = 0; r < flags.size() && failed_rank < 0; ++r)
      if (!flags[r].empty() && flags[r][0]) failed_rank = int(r);
    if (failed_rank < 0) return;
    stop_watcher();
    engine_->abort();
    engine_ = engine_->remake(comm);  // an adopted engine throws: the op stays failed
    {
      std::lock_guard lock(failure_mutex_);
      failure_.reset();
    }
    log().warn("rank {}: internode transport: a new {} after rank {}'s transfer failed", rank_, name_, failed_rank);
    start_watcher();
  }

 private:
  void start_watcher() {
    stopping_ = false;
    watcher_ = std::thread([this] { watch_loop(); });
  }

  // Not while the op's thread is enqueueing on the engine, unless that
  // enqueue is itself stuck on the peer: then the abort is the way out.
  // (try_lock in a loop, not timed_mutex: ThreadSanitizer does not see
  // pthread_mutex_clocklock and would report the unlock.)
  void abort_engine() {
    const auto until = std::chrono::steady_clock::now() + kEnqueueGrace;
    bool quiet = engine_mutex_.try_lock();
    while (!quiet && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      quiet = engine_mutex_.try_lock();
    }
    engine_->abort();
    if (quiet) engine_mutex_.unlock();
  }

  void watch_loop() {
    std::unique_lock lock(wake_mutex_);
    while (!wake_.wait_for(lock, watch_.watched() ? kWatchPeriod : kIdleWatchPeriod, [this] { return stopping_; })) {
      std::optional<std::string> why;
      try {
        why = watch_.look(TransferWatch::Clock::now());
      } catch (const std::exception& error) {
        why = std::string("watching the transfers failed: ") + error.what();
      }
      if (!why) continue;
      // Published before the abort: a check() that waited for the stream,
      // which drains once the engine is aborted, must find it.
      {
        std::lock_guard failure_lock(failure_mutex_);
        failure_ = *why;
      }
      log().error("rank {}: {}; aborting the {} so that the op's stream drains", rank_, *why, name_);
      abort_engine();
      return;  // recover() starts a new watcher with the new engine
    }
  }

  EventPool events_;  // before watch_: the watch's transfers hold its events
  int rank_;
  std::mutex engine_mutex_;  // enqueueing on engine_, against the watcher's abort
  std::unique_ptr<StreamTransferEngine> engine_;
  std::string name_;
  TransferWatch watch_;
  mutable std::mutex failure_mutex_;
  std::optional<std::string> failure_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread watcher_;
};

void LiveTransports::add(WatchedTransport* transport) {
  std::call_once(registered_, [] { std::atexit(stop_all); });
  std::lock_guard lock(mutex_);
  transports_.push_back(transport);
}

void LiveTransports::stop_all() {
  LiveTransports& live = get();
  std::lock_guard lock(live.mutex_);
  for (WatchedTransport* transport : live.transports_) transport->stop_watcher();
}

}  // namespace

std::unique_ptr<InternodeTransport> make_watched_transport(Communicator& comm,
                                                           std::unique_ptr<StreamTransferEngine> engine,
                                                           std::chrono::milliseconds peer_timeout) {
  return std::make_unique<WatchedTransport>(comm, std::move(engine), peer_timeout);
}

}  // namespace epjit::ep
