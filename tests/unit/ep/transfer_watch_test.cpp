// TransferWatch: when an internode transfer on a stream counts as failed.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <thread>
#include <optional>
#include <string>

#include "../../../runtime/ep/transfer_watch.h"

namespace epjit::ep {
namespace {

using namespace std::chrono_literals;
using Clock = TransferWatch::Clock;

// A transfer whose state the test sets.
struct FakeTransfer {
  bool ready = false;
  bool finished = false;
  TransferWatch::Transfer probe(const std::string& what) {
    return {[this] { return ready; }, [this] { return finished; }, what};
  }
};

struct Engine {
  std::optional<std::string> error;
  auto probe() {
    return [this] { return error; };
  }
};

TEST(TransferWatch, FinishedTransfersAreDroppedAndNothingFails) {
  Engine engine;
  TransferWatch watch(100ms, engine.probe());
  FakeTransfer a, b;
  watch.watch(a.probe("a"));
  watch.watch(b.probe("b"));
  const auto t0 = Clock::now();
  a.ready = b.ready = true;
  EXPECT_FALSE(watch.look(t0));
  a.finished = true;
  EXPECT_FALSE(watch.look(t0 + 50ms));
  EXPECT_EQ(watch.watched(), 1u);
  b.finished = true;
  EXPECT_FALSE(watch.look(t0 + 5s));
  EXPECT_EQ(watch.watched(), 0u);
}

TEST(TransferWatch, ATransferIsTimedFromWhenItCouldStart) {
  Engine engine;
  TransferWatch watch(100ms, engine.probe());
  FakeTransfer stuck;
  watch.watch(stuck.probe("internode transfer with rank(s) 3"));
  const auto t0 = Clock::now();
  // Work queued before it runs for a long time: not the transfer's fault.
  EXPECT_FALSE(watch.look(t0));
  EXPECT_FALSE(watch.look(t0 + 10s));
  stuck.ready = true;
  EXPECT_FALSE(watch.look(t0 + 10s + 1ms));
  EXPECT_FALSE(watch.look(t0 + 10s + 101ms));  // exactly the bound: not yet over it
  const auto why = watch.look(t0 + 10s + 102ms);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("internode transfer with rank(s) 3"), std::string::npos) << *why;
  EXPECT_NE(why->find("101 ms"), std::string::npos) << *why;
  EXPECT_NE(why->find("peer timeout 100 ms"), std::string::npos) << *why;
  EXPECT_EQ(watch.watched(), 0u);  // its engine is aborted: nothing left to time
}

TEST(TransferWatch, OneStuckTransferFailsWhileLaterOnesFinish) {
  Engine engine;
  TransferWatch watch(100ms, engine.probe());
  FakeTransfer stuck, other;
  watch.watch(stuck.probe("stuck"));
  watch.watch(other.probe("other"));
  const auto t0 = Clock::now();
  stuck.ready = other.ready = true;
  EXPECT_FALSE(watch.look(t0));
  other.finished = true;  // on another stream (set_stream): finishes first
  EXPECT_FALSE(watch.look(t0 + 60ms));
  const auto why = watch.look(t0 + 200ms);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("stuck"), std::string::npos) << *why;
}

TEST(TransferWatch, AnEngineErrorFailsAtOnceEvenWithNothingWatched) {
  Engine engine;
  TransferWatch watch(30s, engine.probe());
  FakeTransfer pending;
  pending.ready = true;
  watch.watch(pending.probe("pending"));
  const auto t0 = Clock::now();
  EXPECT_FALSE(watch.look(t0));
  engine.error = "remote process exited or there was a network error";
  const auto why = watch.look(t0 + 1ms);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("remote process exited"), std::string::npos) << *why;
  EXPECT_EQ(watch.watched(), 0u);
  // A graph's replays are not watched, but the engine's errors still are.
  EXPECT_TRUE(watch.look(t0 + 2ms));
}

TEST(TransferWatch, AFinishedTransferNeverTimesOut) {
  Engine engine;
  TransferWatch watch(1ms, engine.probe());
  FakeTransfer done;
  done.ready = done.finished = true;
  watch.watch(done.probe("done"));
  EXPECT_FALSE(watch.look(Clock::now() + 1h));
}

// The op's thread adds transfers while the watcher's looks (the sanitize-thread
// run checks the locking): every transfer finishes in time, none fails, and
// the finished ones are all dropped.
TEST(TransferWatch, TransfersAddedWhileTheWatcherLooks) {
  Engine engine;
  TransferWatch watch(10s, engine.probe());
  constexpr int kTransfers = 2000;
  std::deque<std::atomic<bool>> done(kTransfers);
  std::atomic<bool> adding{true};
  std::atomic<int> failures{0};
  std::thread watcher([&] {
    while (adding || watch.watched() > 0)
      if (watch.look(Clock::now())) ++failures;
  });
  for (int i = 0; i < kTransfers; ++i) {
    std::atomic<bool>& flag = done[size_t(i)];
    watch.watch({[] { return true; }, [&flag] { return flag.load(); }, "transfer " + std::to_string(i)});
    if (i > 0) done[size_t(i - 1)] = true;
  }
  done[kTransfers - 1] = true;
  adding = false;
  watcher.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(watch.watched(), 0u);
}

}  // namespace
}  // namespace epjit::ep
