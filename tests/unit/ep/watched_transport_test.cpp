// The watched internode transport (NCCL's, on GPUs) over a fake engine on
// the host device: the watcher thread, the abort, failure(), the refusal of
// later transfers and recover(). The fake stands in for NCCL only; the
// events, streams and communicator are the host device's own.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "../../../runtime/ep/watched_transport.h"
#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit::ep {
// External linkage: stores into it are not optimized away.
extern void* kept_at_exit[3];
void* kept_at_exit[3] = {};

namespace {

using namespace std::chrono_literals;

// What the fakes share with the test, across remakes.
struct EngineLog {
  std::atomic<int> exchanges{0}, aborts{0}, remakes{0};
  std::atomic<bool> stall_next{false};        // the next enqueue waits for an abort (a stuck ncclGroupEnd)
  std::atomic<bool> remake_refused{false};    // an adopted communicator
  std::mutex mutex;
  std::optional<std::string> error;           // what async_error() reports
};

class FakeEngine final : public StreamTransferEngine {
 public:
  explicit FakeEngine(EngineLog& log) : log_(log) {}
  std::string name() const override { return "fake engine"; }
  void exchange(std::span<const TransferSegment>, std::span<const TransferSegment>, Stream&) override {
    if (aborted_) throw Error("a transfer on an aborted fake engine", "a live engine", "recover first");
    ++log_.exchanges;
    if (!log_.stall_next.exchange(false)) return;
    std::unique_lock lock(mutex_);
    woken_.wait(lock, [this] { return aborted_.load(); });
    throw Error("the fake engine's enqueue was aborted", "a peer that joins", "none: the test wants this");
  }
  std::optional<std::string> async_error() const override {
    std::lock_guard lock(log_.mutex);
    return log_.error;
  }
  void abort() override {
    {
      std::lock_guard lock(mutex_);
      if (aborted_.exchange(true)) return;
    }
    ++log_.aborts;
    woken_.notify_all();
  }
  std::unique_ptr<StreamTransferEngine> remake(Communicator&) override {
    if (log_.remake_refused) throw Error("cannot remake an adopted fake", "an owned engine", "build a new op");
    ++log_.remakes;
    return std::make_unique<FakeEngine>(log_);
  }

 private:
  EngineLog& log_;
  std::mutex mutex_;
  std::condition_variable woken_;
  std::atomic<bool> aborted_{false};
};

class WatchedTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = make_host_device();
    comm_ = Communicator::init(1, 0, Communicator::get_unique_id(), *device_, {10, std::nullopt});
    stream_ = device_->create_stream();
  }
  std::unique_ptr<InternodeTransport> make(std::chrono::milliseconds timeout) {
    return make_watched_transport(*comm_, std::make_unique<FakeEngine>(log_), timeout);
  }
  void exchange(InternodeTransport& transport) {
    const TransferSegment to_peer{1, nullptr, 0};
    transport.exchange({&to_peer, 1}, {&to_peer, 1}, *stream_);
  }
  // Waits (up to `most`) for the transport to report a failure.
  std::optional<std::string> failureWithin(InternodeTransport& transport, std::chrono::milliseconds most) {
    const auto until = std::chrono::steady_clock::now() + most;
    while (std::chrono::steady_clock::now() < until) {
      if (auto why = transport.failure()) return why;
      std::this_thread::sleep_for(5ms);
    }
    return transport.failure();
  }

  // The watcher publishes a failure, then aborts: waits (up to 3 s) for the abort.
  int abortsWithin3s() {
    for (int i = 0; i < 600 && log_.aborts == 0; ++i) std::this_thread::sleep_for(5ms);
    return log_.aborts;
  }

  EngineLog log_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Stream> stream_;
};

TEST_F(WatchedTransportTest, FinishedTransfersNeverFail) {
  auto transport = make(300ms);
  for (int i = 0; i < 20; ++i) exchange(*transport);
  stream_->synchronize();
  std::this_thread::sleep_for(400ms);  // past the timeout: finished transfers are not timed
  EXPECT_FALSE(transport->failure());
  EXPECT_EQ(log_.exchanges, 20);
  EXPECT_EQ(log_.aborts, 0);
  EXPECT_EQ(transport->name(), "fake engine");
}

// An enqueue that waits on the peer (NCCL's first transfer with it) is timed
// too: the watcher aborts the engine under it after the timeout and a grace
// second, and the enqueue returns with the engine's error.
TEST_F(WatchedTransportTest, AStuckEnqueueIsAbortedAfterTheTimeout) {
  auto transport = make(100ms);
  log_.stall_next = true;
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    exchange(*transport);
  } catch (const Error& error) {
    message = error.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(message.find("aborted"), std::string::npos) << message;
  EXPECT_GE(seconds, 0.1);
  EXPECT_LE(seconds, 3.0);
  const auto why = transport->failure();  // published before the abort
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("internode transfer with rank(s) 1 had not finished"), std::string::npos) << *why;
  EXPECT_EQ(log_.aborts, 1);
}

TEST_F(WatchedTransportTest, AnEngineErrorAbortsAndLaterTransfersAreRefused) {
  auto transport = make(30s);
  exchange(*transport);
  {
    std::lock_guard lock(log_.mutex);
    log_.error = "remote process exited or there was a network error";
  }
  const auto why = failureWithin(*transport, 2s);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("remote process exited"), std::string::npos) << *why;
  EXPECT_EQ(abortsWithin3s(), 1);
  std::string refused;
  try {
    exchange(*transport);
  } catch (const Error& error) {
    refused = error.what();
  }
  EXPECT_NE(refused.find("after an earlier one failed"), std::string::npos) << refused;
  EXPECT_EQ(log_.exchanges, 1);  // the refused one never reached the engine
}

TEST_F(WatchedTransportTest, RecoverRemakesTheEngineAndTransfersGoOn) {
  auto transport = make(30s);
  transport->recover(*comm_);  // nothing failed: nothing remade
  EXPECT_EQ(log_.remakes, 0);
  {
    std::lock_guard lock(log_.mutex);
    log_.error = "connection closed by peer";
  }
  ASSERT_TRUE(failureWithin(*transport, 2s));
  {
    std::lock_guard lock(log_.mutex);
    log_.error.reset();  // the new communicator is healthy
  }
  transport->recover(*comm_);
  EXPECT_EQ(log_.remakes, 1);
  EXPECT_FALSE(transport->failure());
  exchange(*transport);
  stream_->synchronize();
  std::this_thread::sleep_for(50ms);  // the new watcher looks at least once
  EXPECT_FALSE(transport->failure());
  EXPECT_EQ(log_.exchanges, 1);
}

TEST_F(WatchedTransportTest, AnEngineThatCannotBeRemadeLeavesTheTransportFailed) {
  auto transport = make(30s);
  log_.remake_refused = true;
  {
    std::lock_guard lock(log_.mutex);
    log_.error = "connection closed by peer";
  }
  ASSERT_TRUE(failureWithin(*transport, 2s));
  std::string message;
  try {
    transport->recover(*comm_);
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("cannot remake an adopted fake"), std::string::npos) << message;
  EXPECT_TRUE(transport->failure());
}

// A program that exits with an op (and its transport) still alive: the
// watcher stops in exit() before what it polls is torn down. The child
// registers an exit handler first (so it runs after the watchers' stop) that
// marks the teardown and waits; an engine polled after that mark kills the
// child with SIGABRT.
std::atomic<bool> tearing_down{false};

class TeardownEngine final : public StreamTransferEngine {
 public:
  std::string name() const override { return "teardown engine"; }
  void exchange(std::span<const TransferSegment>, std::span<const TransferSegment>, Stream&) override {}
  std::optional<std::string> async_error() const override {
    if (tearing_down) std::abort();  // what NCCL would do if polled during its teardown, at best
    return std::nullopt;
  }
  void abort() override {}
  std::unique_ptr<StreamTransferEngine> remake(Communicator&) override { return nullptr; }
};

// Leaves a transport alive and exits; an exit handler registered before it
// (so it runs after the watchers' stop) marks the teardown and waits.
[[noreturn]] void exitWithALiveTransport() {
  std::atexit([] {
    tearing_down = true;
    std::this_thread::sleep_for(100ms);  // ten watch periods
  });
  auto device = make_host_device();
  auto comm = Communicator::init(1, 0, Communicator::get_unique_id(), *device, {10, std::nullopt});
  auto transport = make_watched_transport(*comm, std::make_unique<TeardownEngine>(), 30s);
  std::this_thread::sleep_for(30ms);  // the watcher polls
  // Never destroyed, as an op a program forgot; held by a global, so that
  // LeakSanitizer sees them reachable rather than leaked.
  kept_at_exit[0] = transport.release();
  kept_at_exit[1] = comm.release();
  kept_at_exit[2] = device.release();
  std::exit(0);
}

// In a fresh process (gtest re-runs this binary for it): one where earlier
// tests made transports would have registered the watchers' stop already.
TEST(WatchedTransportExit, WatchersStopBeforeTheLibrariesTearDown) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(exitWithALiveTransport(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace epjit::ep
