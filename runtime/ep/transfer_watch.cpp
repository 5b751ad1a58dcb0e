#include "transfer_watch.h"

#include <algorithm>
#include <utility>

namespace epjit::ep {

TransferWatch::TransferWatch(std::chrono::milliseconds bound,
                             std::function<std::optional<std::string>()> engine_error)
    : bound_(bound), engine_error_(std::move(engine_error)) {}

void TransferWatch::watch(Transfer transfer) {
  std::lock_guard lock(mutex_);
  watched_.push_back({std::move(transfer), std::nullopt});
}

size_t TransferWatch::watched() const {
  std::lock_guard lock(mutex_);
  return watched_.size();
}

std::optional<std::string> TransferWatch::look(Clock::time_point now) {
  std::lock_guard lock(mutex_);
  std::optional<std::string> failure;
  if (auto error = engine_error_()) {
    failure = "the transport reported an error: " + *error;
  } else {
    std::erase_if(watched_, [](Watched& w) { return w.transfer.finished(); });
    // A transfer is timed from the first look that finds it ready, not from
    // when it was queued: work queued before it is bounded on its own.
    for (Watched& w : watched_) {
      if (!w.ready_since && w.transfer.ready()) w.ready_since = now;
      if (w.ready_since && now - *w.ready_since > bound_) {
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - *w.ready_since);
        failure = "the " + w.transfer.what + " had not finished " + std::to_string(waited.count()) +
                  " ms after it could start (peer timeout " + std::to_string(bound_.count()) + " ms)";
        break;
      }
    }
  }
  if (failure) watched_.clear();
  return failure;
}

}  // namespace epjit::ep
