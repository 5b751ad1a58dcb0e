// The op's limits (max_num_inp_token_per_rank, and the receive capacity that
// follows from it) are runtime parameters of its template: the kernels read
// them from the window table, and the op sizes its window and buffers from
// the interface record's linear counts. Ops that differ only in their limits
// share one module, and each still matches the reference, with calls at its
// limit, below it and empty. EPJIT_SPECIALIZE_LIMITS=1 compiles the limits in
// instead (the A/B of docs/PERFORMANCE.md): one module per limit, same results.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "../common/ep_harness.h"

namespace epjit::testing {
namespace {

// A memory-only cache of its own, so its compiles are this test's.
KernelCache& freshCache() {
  static KernelCache cache([] {
    CacheOptions options = CacheOptions::from_environment();
    options.dir.clear();
    options.readonly_dirs.clear();
    options.opt_level = 1;
    return options;
  }());
  return cache;
}

EpCase caseAtLimit(int64_t limit) {
  EpCase c;
  c.name = "limit_" + std::to_string(limit);
  c.world = 2;
  c.max_tokens = limit;
  c.calls = {limit, std::min<int64_t>(limit, 7), 0, limit, 1};
  c.seed = uint32_t(limit);
  return c;
}

std::string runAtLimit(int64_t limit, KernelCache& cache) {
  const EpCase c = caseAtLimit(limit);
  return runRanks(c.world, Ranks::Threads, cache,
                  [&](int rank, Communicator& comm, KernelCache& ranks_cache) { return runRank(c, rank, comm, ranks_cache); },
                  c.gpu_per_node);
}

TEST(OneModuleForEveryLimit, SixteenTokenLimitsCompileOnceAndEachMatchesTheReference) {
  ASSERT_EQ(std::getenv("EPJIT_SPECIALIZE_LIMITS"), nullptr) << "this test checks the default; unset it";
  KernelCache& cache = freshCache();
  const uint64_t before = cache.stats().compiles;
  // Odd limits, as a framework's batch buckets are not all powers of two.
  std::vector<int64_t> limits = {1, 2, 3, 5, 8, 13, 21, 34, 37, 55, 89, 100, 128, 200, 333, 512};
  for (int64_t limit : limits) EXPECT_EQ(runAtLimit(limit, cache), "") << "max_num_inp_token_per_rank " << limit;
  // Two modules: the combine protocol auto picks is a property of the op
  // (the low-latency combine up to 32 tokens, the staged one above), one
  // module each; nothing else about the limits reaches the kernels.
  EXPECT_EQ(cache.stats().compiles - before, 2u) << "ops that differ only in their limits must share a module";
}

TEST(OneModuleForEveryLimit, SpecializedLimitsCompileOneModuleEachWithTheSameResults) {
  KernelCache& cache = freshCache();
  ASSERT_EQ(setenv("EPJIT_SPECIALIZE_LIMITS", "1", 1), 0);
  const uint64_t before = cache.stats().compiles;
  // Both above the low-latency crossover: one protocol, so the default would
  // serve both from the module the test above compiled.
  for (int64_t limit : {37, 55}) EXPECT_EQ(runAtLimit(limit, cache), "") << "max_num_inp_token_per_rank " << limit;
  const uint64_t compiled = cache.stats().compiles - before;
  unsetenv("EPJIT_SPECIALIZE_LIMITS");
  EXPECT_EQ(compiled, 2u) << "EPJIT_SPECIALIZE_LIMITS=1 compiles each limit into its own module";
}

}  // namespace
}  // namespace epjit::testing
