// Fault injection on host ranks as processes: a rank killed in the middle of
// a queued loop, a rank stopped and continued. The survivors hear of a dead
// peer within the peer timeout (plus 2 s), calls queued behind the failed one
// fail at once, and a new communicator among the survivors computes exact
// results again; a rank that stalls for less than the timeout costs nothing;
// an off-node rank that dies is reported at once through the host transport.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <thread>

#include "../common/ep_harness.h"
#include "../common/id_pipe.h"
#include "epjit/error.h"

namespace epjit::testing {
namespace {

KernelCache& testCache() { return e2eCache(EPJIT_TEST_WORK_DIR); }

constexpr double kPeerTimeout = 2.0;

EpCase faultCase(int world) {
  EpCase c;
  c.name = "fault";
  c.world = world;
  c.hidden = 136;  // not a power of two
  c.topk = 3;
  c.experts_per_rank = 3;
  c.max_tokens = 11;
  c.calls = {11, 5, 0, 9};
  c.peer_timeout_s = kPeerTimeout;
  c.ranks = Ranks::Processes;
  return c;
}

// The harness reports a rank killed by a signal; here that rank was meant to die.
std::string withoutTheKilledRank(std::string failures) {
  const std::string killed = "a rank process died (signal " + std::to_string(SIGKILL) + ")\n";
  if (const size_t at = failures.find(killed); at != std::string::npos) failures.erase(at, killed.size());
  return failures;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Three healthy rounds of two tokens (to `experts`), then rank `victim`
// queues a dispatch and dies (SIGKILL: no destructor, no goodbye) while the
// others queue 30 more rounds and check(). A survivor must hear `expected`
// within the peer timeout plus 2 s. The op is abandoned, not closed: close()
// would wait for the dead rank.
std::string killAfterThreeRounds(const EpCase& c, int rank, int victim, Communicator& comm, KernelCache& cache,
                                 const std::array<int32_t, 6>& experts, const std::string& expected) {
  std::string f;
  Device& device = comm.device();
  EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
  void* x = device.allocate(1 << 16);
  void* w = device.allocate(1 << 12);
  void* idx = device.allocate(1 << 12);
  device.copy_to_device(idx, experts.data(), sizeof experts);
  const TensorRef input{x, DType::BF16, {2, c.hidden}}, weights{w, DType::F32, {2, 3}},
      indices{idx, DType::I32, {2, 3}};
  const auto round = [&] {
    const DispatchResult d = op.dispatch(input, weights, std::nullopt, indices);
    op.combine(d.tokens, d.weights);
  };
  for (int i = 0; i < 3; ++i) round();
  op.check();  // every rank is healthy
  comm.barrier();
  if (rank == victim) {
    op.dispatch(input, weights, std::nullopt, indices);
    ::raise(SIGKILL);
  }
  const auto killed_about = std::chrono::steady_clock::now();
  std::string message;
  try {
    for (int i = 0; i < 30; ++i) round();  // a transport that blocks raises here
    op.check();
  } catch (const Error& error) {
    message = error.what();
  }
  const double seconds = secondsSince(killed_about);
  if (message.find(expected) == std::string::npos)
    f += "rank " + std::to_string(rank) + ": expected '" + expected + "', got '" + message + "'\n";
  if (seconds > kPeerTimeout + 2)
    f += "rank " + std::to_string(rank) + ": the dead peer was reported after " + std::to_string(seconds) +
         " s (timeout " + std::to_string(kPeerTimeout) + " s)\n";
  std::fprintf(stderr, "rank %d: the dead peer was reported %.2f s after the kill\n", rank, seconds);
  for (void* p : {x, w, idx}) device.release(p);
  return f;
}

// Rank 2 of 3 dies (SIGKILL: no destructor, no goodbye) right after queuing a
// dispatch while the others queue 30 more rounds. Each survivor's check()
// reports the dead peer within the timeout plus 2 s of the kill, and the two
// survivors then form a new communicator (the new unique id travels through a
// pipe made before the fork) whose op gives exact results for a whole case.
TEST(EpFaults, AKilledRankIsReportedWithinTheTimeoutAndSurvivorsRecover) {
  IdPipe id_pipe;
  const EpCase c = faultCase(3);
  const std::string failures = runRanks(3, Ranks::Processes, testCache(), [&](int rank, Communicator& comm,
                                                                               KernelCache& cache) {
    Device& device = comm.device();
    std::string f =
        killAfterThreeRounds(c, rank, /*victim=*/2, comm, cache, {0, 4, 8, 1, 5, 7}, "a peer did not arrive");
    std::optional<UniqueId> id;
    if (rank == 0) {
      id = Communicator::get_unique_id();
      if (!id_pipe.send(*id)) return f + "pipe\n";
    } else if (!(id = id_pipe.receive())) {
      return f + "pipe\n";
    }
    auto survivors = Communicator::init(2, rank, *id, device, {60, std::nullopt});
    EpCase after = c;
    after.world = 2;
    f += runRank(after, rank, *survivors, cache);
    survivors->destroy();
    return f;
  });
  EXPECT_EQ(withoutTheKilledRank(failures), "");
}

// Internode on host ranks (two nodes of two; the host transport carries the
// off-node rows through the bootstrap): rank 3 dies right after queuing a
// dispatch. Each survivor's next call, or its check(), raises at once with
// the bootstrap's word that rank 3 is gone, instead of waiting for it.
TEST(EpFaults, AKilledOffNodeRankIsReportedByTheHostTransport) {
  EpCase c = faultCase(4);
  c.gpu_per_node = 2;
  c.internode_kernel = InternodeKernel::V2LowLatency;
  const std::string failures = runRanks(
      4, Ranks::Processes, testCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        // Every rank, both nodes; the bootstrap names the dead rank.
        return killAfterThreeRounds(c, rank, /*victim=*/3, comm, cache, {0, 4, 8, 1, 5, 10},
                                    "rank 3 closed its connection");
      },
      c.gpu_per_node);
  EXPECT_EQ(withoutTheKilledRank(failures), "");
}

// Rank 1 stops itself (SIGSTOP) right before its second dispatch, while the
// other ranks' kernels wait for it; rank 0 continues it after 0.6 of the
// timeout. No error, and every call's results are exact (the harness checks
// each against the reference).
TEST(EpFaults, ARankStoppedForLessThanTheTimeoutCostsNothing) {
  EpCase c = faultCase(3);
  c.before_dispatch = [](int call, int rank, Communicator& comm) {
    if (call != 1) return;
    const std::vector<uint8_t> mine{uint8_t(getpid() & 0xFF), uint8_t(getpid() >> 8 & 0xFF),
                                    uint8_t(getpid() >> 16 & 0xFF), uint8_t(getpid() >> 24 & 0xFF)};
    const auto pids = comm.allgather(mine);
    const pid_t stopped = pid_t(pids[1][0] | pids[1][1] << 8 | pids[1][2] << 16 | pids[1][3] << 24);
    if (rank == 0) {
      std::thread([stopped] {
        std::this_thread::sleep_for(std::chrono::duration<double>(0.6 * kPeerTimeout));
        ::kill(stopped, SIGCONT);
      }).detach();
    }
    if (rank == 1) ::raise(SIGSTOP);
  };
  const auto start = std::chrono::steady_clock::now();
  const std::string failures = runRanks(3, Ranks::Processes, testCache(), [&](int rank, Communicator& comm,
                                                                               KernelCache& cache) {
    return runRank(c, rank, comm, cache);
  });
  EXPECT_EQ(failures, "");
  EXPECT_GE(secondsSince(start), 0.6 * kPeerTimeout) << "rank 1 was never stopped";
}

}  // namespace
}  // namespace epjit::testing
