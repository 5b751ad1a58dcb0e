// The communicator on the host device: ranks as threads and as processes,
// collectives, symmetric memory every node peer maps (memfd + SCM_RIGHTS
// across processes), node teams, and the failures that must be errors rather
// than hangs: a wrong token, a rank that never arrives, a rank that vanishes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "../../common/id_pipe.h"
#include "epjit/comm/communicator.h"
#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit {
namespace {

// A pattern a rank writes into its symmetric copy and peers check.
uint32_t pattern(int rank, size_t i) { return uint32_t(rank) * 1000003u + uint32_t(i); }

// What one rank does: collectives, then symmetric memory. Returns "" or what failed.
std::string exercise(Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size();
  comm.barrier();
  const auto gathered = comm.allgather({uint8_t(rank * 10), uint8_t(world)});
  for (int r = 0; r < world; ++r)
    if (gathered[size_t(r)] != std::vector<uint8_t>{uint8_t(r * 10), uint8_t(world)}) return "allgather mismatch";
  // alltoall: rank r sends rank d (r, d, then r + d bytes of r ^ d); each
  // receives exactly its parts, empty ones included.
  std::vector<std::vector<uint8_t>> parts(static_cast<size_t>(world));
  for (int d = 0; d < world; ++d) {
    parts[size_t(d)] = {uint8_t(rank), uint8_t(d)};
    parts[size_t(d)].resize(size_t(2 + rank + d), uint8_t(rank ^ d));
  }
  if (rank == 0 && world > 1) parts[1].clear();
  const auto received = comm.alltoall(parts);
  for (int s = 0; s < world; ++s) {
    std::vector<uint8_t> expected = {uint8_t(s), uint8_t(rank)};
    expected.resize(size_t(2 + s + rank), uint8_t(s ^ rank));
    if (s == 0 && rank == 1) expected.clear();
    if (received[size_t(s)] != expected) return "alltoall: wrong part from rank " + std::to_string(s);
  }
  const size_t words = 4099;  // odd size
  auto buffer = comm.allocate_symmetric(words * 4);
  auto* local = static_cast<uint32_t*>(buffer->local);
  for (size_t i = 0; i < words; ++i)
    if (local[i] != 0) return "symmetric memory not zeroed";
  for (size_t i = 0; i < words; ++i) local[i] = pattern(rank, i);
  comm.barrier();
  for (int peer : comm.node().ranks) {
    const auto* theirs = static_cast<const uint32_t*>(buffer->peers[size_t(peer)]);
    if (!theirs) return "no mapping of node peer " + std::to_string(peer);
    for (size_t i = 0; i < words; ++i)
      if (theirs[i] != pattern(peer, i)) return "peer " + std::to_string(peer) + " copy differs at " + std::to_string(i);
  }
  for (int r = 0; r < world; ++r)
    if (comm.node().index_of(r) < 0 && buffer->peers[size_t(r)]) return "off-node rank mapped";
  comm.barrier();  // nobody unmaps while others still read
  return "";
}

class ThreadRanks : public ::testing::TestWithParam<int> {};

TEST_P(ThreadRanks, CollectivesAndSymmetricMemory) {
  const int world = GetParam();
  const UniqueId id = Communicator::get_unique_id();
  auto device = make_host_device();
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto comm = Communicator::init(world, r, id, *device, {10, std::nullopt});
        if (comm->node().size() != world) failures[size_t(r)] = "node team should hold every rank on one host";
        else failures[size_t(r)] = exercise(*comm);
      } catch (const std::exception& error) {
        failures[size_t(r)] = error.what();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[size_t(r)], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(World, ThreadRanks, ::testing::Values(1, 2, 4, 8));

// Ranks 1..3 are child processes; rank 0 is this process (which hosts the
// bootstrap). The children are forked before the id exists (IdPipe says why).
TEST(ProcessRanks, SymmetricMemoryCrossesProcessesThroughFds) {
  const int world = 4;
  testing::IdPipe id_pipe;
  std::vector<pid_t> children;
  for (int r = 1; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      id_pipe.close_writing();  // only the parent writes
      try {
        const std::optional<UniqueId> id = id_pipe.receive();
        if (!id) _exit(3);
        auto device = make_host_device();
        auto comm = Communicator::init(world, r, *id, *device, {10, std::nullopt});
        const std::string failure = exercise(*comm);
        if (!failure.empty()) fprintf(stderr, "rank %d: %s\n", r, failure.c_str());
        comm->destroy();
        _exit(failure.empty() ? 0 : 1);
      } catch (const std::exception& error) {
        fprintf(stderr, "rank %d: %s\n", r, error.what());
        _exit(2);
      }
    }
    children.push_back(pid);
  }
  const UniqueId id = Communicator::get_unique_id();
  ASSERT_TRUE(id_pipe.send(id, world - 1));
  auto device = make_host_device();
  auto comm = Communicator::init(world, 0, id, *device, {10, std::nullopt});
  EXPECT_EQ(exercise(*comm), "");
  comm->destroy();
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a child rank failed";
  }
}

TEST(Teams, GpuPerNodeGroupsConsecutiveRanks) {
  const int world = 4;
  const UniqueId id = Communicator::get_unique_id();
  auto device = make_host_device();
  std::vector<std::string> failures(world);
  std::vector<std::vector<int>> nodes(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto comm = Communicator::init(world, r, id, *device, {10, 2});
        nodes[size_t(r)] = comm->node().ranks;
        failures[size_t(r)] = exercise(*comm);
      } catch (const std::exception& error) {
        failures[size_t(r)] = error.what();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(failures[size_t(r)], "") << "rank " << r;
  EXPECT_EQ(nodes[0], (std::vector<int>{0, 1}));
  EXPECT_EQ(nodes[3], (std::vector<int>{2, 3}));
}

TEST(Bootstrap, APeerWithoutTheTokenIsRefused) {
  UniqueId id = Communicator::get_unique_id();
  id.bytes[30] ^= 0xFF;  // inside the token (after magic, port and the address "127.0.0.1")
  auto device = make_host_device();
  try {
    Communicator::init(2, 1, id, *device, {5, std::nullopt});
    FAIL() << "joined with a wrong token";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("authentication failed"), std::string::npos) << error.what();
  }
}

TEST(Bootstrap, ARankThatNeverArrivesIsATimeout) {
  const UniqueId id = Communicator::get_unique_id();
  auto device = make_host_device();
  const auto start = std::chrono::steady_clock::now();
  try {
    Communicator::init(2, 0, id, *device, {0.5, std::nullopt});
    FAIL() << "init returned without rank 1";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("timed out"), std::string::npos) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Bootstrap, AVanishedPeerFailsTheCollectiveInsteadOfHanging) {
  const UniqueId id = Communicator::get_unique_id();
  const pid_t child = fork();
  if (child == 0) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, 1, id, *device, {10, std::nullopt});
    _exit(0);  // vanishes without destroy(), mid-job
  }
  auto device = make_host_device();
  auto comm = Communicator::init(2, 0, id, *device, {10, std::nullopt});
  waitpid(child, nullptr, 0);
  try {
    comm->barrier();
    FAIL() << "a barrier with a vanished peer returned";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("rank 1"), std::string::npos) << error.what();
  }
}

// The process that made the unique id hosts the group's bootstrap, and it
// is often rank 0 of a job that exits right after destroy(). Its last
// collective's reply to every other rank must still arrive: the bootstrap
// answers replies in rank order, so rank 0 is told first and the others were
// cut off when rank 0's process exited at once (seen under ASan in CI). Each
// round is a new group of eight processes whose rank 0 makes the id, ends
// with a barrier and exits right after destroy(); every other rank must get
// through that barrier and its own destroy() without an error.
TEST(Bootstrap, TheRankHostingTheBootstrapMayExitRightAfterDestroy) {
  constexpr int kWorld = 8, kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    testing::IdPipe id_pipe;
    std::vector<pid_t> children;
    for (int r = 0; r < kWorld; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        if (r != 0) id_pipe.close_writing();
        try {
          std::optional<UniqueId> id;
          if (r == 0) {
            id = Communicator::get_unique_id();
            if (!id_pipe.send(*id, kWorld - 1)) _exit(3);
          } else if (!(id = id_pipe.receive())) {
            _exit(3);
          }
          auto device = make_host_device();
          auto comm = Communicator::init(kWorld, r, *id, *device, {20, std::nullopt});
          for (int i = 0; i < 3; ++i) comm->barrier();
          comm->destroy();
          _exit(0);
        } catch (const std::exception& error) {
          fprintf(stderr, "round %d, rank %d: %s\n", round, r, error.what());
          _exit(2);
        }
      }
      children.push_back(pid);
    }
    id_pipe.close_reading();
    id_pipe.close_writing();  // the children's copies are the only ones left
    for (int r = 0; r < kWorld; ++r) {
      int status = 0;
      waitpid(children[size_t(r)], &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << ": rank " << r << " failed";
    }
  }
}

TEST(Bootstrap, AnIdNotMadeByGetUniqueIdIsRejected) {
  UniqueId garbage;
  garbage.bytes.fill(0x42);
  auto device = make_host_device();
  try {
    Communicator::init(1, 0, garbage, *device);
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("not one Communicator::get_unique_id made"), std::string::npos);
  }
}

}  // namespace
}  // namespace epjit
