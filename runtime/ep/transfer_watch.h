// When an internode transfer has failed, for transports whose transfers run
// on the op's stream and never block the host (NCCL/RCCL): a peer that dies
// or stops calling leaves the engine's kernels waiting forever, and every
// host wait on the stream with them. The watch decides the failure; its owner
// aborts the engine so that the stream drains, and the op reports why.
//
// A transfer has failed when the engine reports an asynchronous error, or
// when it could start (the work before it on the stream has finished) and has
// not finished within the peer timeout, the bound the kernels' own peer waits
// keep. Pure logic over probes and a given time, so tests drive it.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace epjit::ep {

class TransferWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Transfer {
    std::function<bool()> ready;     // the work before the transfer has finished
    std::function<bool()> finished;  // the transfer has finished
    std::string what;                // for the message: "dispatch transfer with ranks 2, 3"
  };
  // `engine_error` says why the engine failed, or nothing while it has not.
  TransferWatch(std::chrono::milliseconds bound, std::function<std::optional<std::string>()> engine_error);

  // Thread-safe: the op adds transfers while the watcher looks.
  void watch(Transfer transfer);
  // Looks once at `now`: why transfers failed, or nothing. The watched
  // transfers are dropped at a failure (their engine is aborted then).
  std::optional<std::string> look(Clock::time_point now);
  size_t watched() const;
  std::chrono::milliseconds bound() const { return bound_; }

 private:
  struct Watched {
    Transfer transfer;
    std::optional<Clock::time_point> ready_since;  // when a look first found it ready
  };
  const std::chrono::milliseconds bound_;
  const std::function<std::optional<std::string>()> engine_error_;
  mutable std::mutex mutex_;
  std::vector<Watched> watched_;
};

}  // namespace epjit::ep
