// An op's host state (the dispatch awaiting combine, the stream calls launch
// on, the routings' setup stream) is not locked: two threads' calls
// overlapping on one op would mix their launches and their bookkeeping. A
// public call holds one of these for its whole length; a call that overlaps
// another is refused, never queued (a queue would hide a program whose ranks
// order their calls differently), and the call it overlapped goes on.
#pragma once

#include <atomic>
#include <string>

#include "epjit/error.h"

namespace epjit::ep {

class OneCallAtATime {
 public:
  // `running`: the op's running call's name, null when none.
  OneCallAtATime(std::atomic<const char*>& running, const char* call, int rank) : running_(running) {
    const char* other = nullptr;
    if (!running_.compare_exchange_strong(other, call, std::memory_order_acquire))
      throw Error(std::string(call) + " on rank " + std::to_string(rank) + " while another thread's " + other +
                      " runs on the same op",
                  "one call at a time on an op (an op is not thread-safe; ranks as threads each build their own)",
                  "serialize the calls on this op (a lock around them), or give each thread its own op");
  }
  ~OneCallAtATime() { running_.store(nullptr, std::memory_order_release); }
  OneCallAtATime(const OneCallAtATime&) = delete;
  OneCallAtATime& operator=(const OneCallAtATime&) = delete;

 private:
  std::atomic<const char*>& running_;
};

}  // namespace epjit::ep
