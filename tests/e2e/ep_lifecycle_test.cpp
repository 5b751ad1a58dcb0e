// Ops built and closed over and over on one communicator (a framework
// rebuilding its EP layer, MORI's test_op_lifecycle) leave the
// communicator's symmetric memory where it was: each op's window is freed
// when its memory is released (close(), or the op's end after
// close(KeepUntilDestroyed)), on every rank, and every op in between works.
#include <gtest/gtest.h>

#include "../common/ep_harness.h"

namespace epjit::testing {
namespace {

EpCase lifecycleCase(int round) {
  EpCase c;
  c.name = "lifecycle_" + std::to_string(round);
  c.world = 2;
  c.max_tokens = 5 + 7 * round;
  c.mode = round % 2 ? CombineMode::Scatter : CombineMode::Gather;
  c.std_moe = round % 3 == 2;
  c.calls = {c.max_tokens, 3};
  c.seed = uint32_t(100 + round);
  return c;
}

TEST(EpLifecycle, BuildingAndClosingOpsLeavesTheCommunicatorsMemoryAsItWas) {
  const std::string failures = runRanks(2, Ranks::Threads, e2eCache(EPJIT_TEST_WORK_DIR), [](int rank, Communicator& comm, KernelCache& cache) {
    std::string problems;
    const uint64_t before = comm.symmetric_bytes();
    for (int round = 0; round < 6; ++round) {
      const EpCase c = lifecycleCase(round);
      // The whole run of a case: its ops built, called, checked and dropped.
      problems += runRank(c, rank, comm, cache);
      if (comm.symmetric_bytes() != before)
        problems += "rank " + std::to_string(rank) + ": after round " + std::to_string(round) + " " +
                    std::to_string(comm.symmetric_bytes()) + " symmetric bytes held, " + std::to_string(before) +
                    " before\n";
      // close() releases at once; close(KeepUntilDestroyed) when the op goes.
      {
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        if (comm.symmetric_bytes() <= before) problems += "an op's window is not counted\n";
        op.close(round % 2 ? EpDispatchCombineOp::Memory::Release : EpDispatchCombineOp::Memory::KeepUntilDestroyed);
        const bool released = comm.symmetric_bytes() == before;
        if (released != bool(round % 2))
          problems += "close() " + std::string(round % 2 ? "did not release" : "released") + " the window\n";
      }
      if (comm.symmetric_bytes() != before) problems += "a closed op's end left its window\n";
    }
    return problems;
  });
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace epjit::testing
