// The bootstrap and the fd exchange under hostile or broken peers (issue 14):
// every check here failed at abf6ab6. A stranger's connection or memfd never
// becomes a rank's peer, idle connections cannot delay a group, numbers from
// the wire and from the caller are bounded before use, collectives are
// matched and time out, and unused ids cost no thread.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "../../common/errors.h"
#include "../../common/scoped_environment.h"
#include "../../../runtime/comm/socket.h"
#include "../../../runtime/comm/wire.h"
#include "epjit/comm/communicator.h"
#include "epjit/device.h"
#include "epjit/error.h"

namespace epjit {
namespace {

using Seconds = std::chrono::duration<double>;

using testing::errorOf;

// The bootstrap's port, as the unique id carries it.
uint16_t portOf(const UniqueId& id) {
  uint32_t port = 0;
  std::memcpy(&port, id.bytes.data() + 4, 4);
  return uint16_t(port);
}

comm::Secret secretOf(const UniqueId& id) {
  comm::Reader r{std::span<const uint8_t>(id.bytes.data(), id.bytes.size())};
  r.u32();
  r.u32();
  r.text();
  r.fixed<comm::kGroupIdBytes>();
  return r.fixed<comm::kSecretBytes>();
}

comm::GroupId groupOf(const UniqueId& id) {
  comm::Reader r{std::span<const uint8_t>(id.bytes.data(), id.bytes.size())};
  r.u32();
  r.u32();
  r.text();
  return r.fixed<comm::kGroupIdBytes>();
}

int connectTcp(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Fixes a test rank's receive buffer small (64 KB): the kernel, autotuning it
// to tens of MB, could otherwise hold what the root must queue or wait on.
void keepReceiveBufferSmall(const comm::Socket& socket) {
  const int bytes = 64 << 10;
  ASSERT_EQ(::setsockopt(socket.fd(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes), 0);
}

// A connection to the bootstrap of `id` that answered its challenge with a
// Hello holding the group's secret, as rank `rank` of `world`: the next
// message is the root's answer (Welcome, or a Failure).
comm::Socket helloAsRank(const UniqueId& id, uint32_t rank, uint32_t world, const comm::Bytes& blob) {
  const int fd = connectTcp(portOf(id));
  if (fd < 0) throw Error("cannot reach the bootstrap", "", "");
  comm::Socket socket(fd);
  const comm::Bytes challenge = socket.receive_message(comm::Clock::now() + std::chrono::seconds(5), "challenge");
  comm::Reader c{challenge};
  if (c.u8() != uint8_t(comm::Message::Challenge)) throw Error("no challenge", "", "");
  const comm::Nonce root_nonce = c.fixed<comm::kNonceBytes>();
  const comm::Nonce rank_nonce{};
  socket.send_message(comm::Writer()
                          .u8(uint8_t(comm::Message::Hello))
                          .u32(comm::kMagic)
                          .fixed(groupOf(id))
                          .fixed(rank_nonce)
                          .u32(rank)
                          .u32(world)
                          .bytes(blob)
                          .fixed(comm::hello_mac(secretOf(id), groupOf(id), root_nonce, rank_nonce, rank, world))
                          .out,
                      "root");
  return socket;
}

// Runs `body(rank)` for every rank on its own thread; returns each rank's error text ("" if none).
std::vector<std::string> onThreads(int world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& error) {
        errors[size_t(r)] = error.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

size_t threadCount() {
  size_t count = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (dirent* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') ++count;
    ::closedir(dir);
  }
  return count;
}

// Abstract Unix sockets of epjit ranks visible in /proc/net/unix, as a stranger sees them.
std::vector<std::string> epjitLocalSockets() {
  std::vector<std::string> names;
  std::ifstream table("/proc/net/unix");
  std::string line;
  while (std::getline(table, line)) {
    const size_t at = line.find("@epjit-");
    if (at != std::string::npos) names.push_back(line.substr(at + 1));
  }
  return names;
}

// A stranger process (of another user with as_nobody) that, for about two
// seconds, offers a 4 KiB memfd claiming to be rank 1's 1 MiB window to every
// epjit local socket it sees, as an attacker on the host would.
pid_t forkMemfdStranger(bool as_nobody) {
  const pid_t stranger = fork();
  if (stranger != 0) return stranger;
  if (as_nobody && (::setgid(65534) != 0 || ::setuid(65534) != 0)) _exit(3);
  const int memfd = memfd_create("stranger", MFD_CLOEXEC);
  if (ftruncate(memfd, 4096) != 0) _exit(1);
  for (int round = 0; round < 400; ++round) {
    for (const std::string& name : epjitLocalSockets()) {
      try {
        comm::Socket channel = comm::Socket::connect_unix(name, comm::Clock::now() + std::chrono::milliseconds(50));
        channel.send_fd(memfd, comm::Writer().u32(1).u64(1 << 20).fixed(Mac{}).out);
      } catch (...) {
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  _exit(0);
}

TEST(BootstrapSecurity, AWrongSecretIsRefusedWithoutNamingWhy) {
  UniqueId id = Communicator::get_unique_id();
  id.bytes[60] ^= 0x01;  // inside the secret (after magic, port, the address and the group id)
  auto device = make_host_device();
  const std::string error = errorOf([&] { Communicator::init(2, 1, id, *device, {5, std::nullopt}); });
  EXPECT_NE(error.find("authentication failed"), std::string::npos) << error;
}

TEST(BootstrapSecurity, IdleConnectionsDoNotDelayTheGroup) {
  const UniqueId id = Communicator::get_unique_id();
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) idle.push_back(connectTcp(portOf(id)));  // beyond the pending limit, too
  const auto start = std::chrono::steady_clock::now();
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, rank, id, *device, {20, std::nullopt});
    comm->barrier();
  });
  const double took = Seconds(std::chrono::steady_clock::now() - start).count();
  for (int fd : idle)
    if (fd >= 0) ::close(fd);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_LT(took, 5.0) << "100 idle connections held the group for " << took << " s";
}

TEST(BootstrapSecurity, AHugeWorldSizeIsAnErrorNotAnAbort) {
  const UniqueId id = Communicator::get_unique_id();
  auto device = make_host_device();
  const std::string local = errorOf([&] { Communicator::init(2147483647, 0, id, *device, {2, std::nullopt}); });
  EXPECT_NE(local.find("world_size <= 65536"), std::string::npos) << local;
  // The same from the wire, by a peer that holds the secret: refused, the root keeps serving.
  comm::Socket socket = helloAsRank(id, 0, 2147483647, comm::Bytes{1, 2, 3});
  const auto deadline = comm::Clock::now() + std::chrono::seconds(5);
  const comm::Bytes answer = socket.receive_message(deadline, "answer");
  comm::Reader a{answer};
  EXPECT_EQ(a.u8(), uint8_t(comm::Message::Failure));
  EXPECT_NE(a.text().find("outside [1, 65536]"), std::string::npos);
  // The process is alive and the bootstrap still forms groups.
  const UniqueId next = Communicator::get_unique_id();
  EXPECT_EQ(onThreads(1, [&](int) { Communicator::init(1, 0, next, *device, {5, std::nullopt})->barrier(); }),
            std::vector<std::string>{""});
}

TEST(BootstrapSecurity, AWorldSizeMismatchIsReportedToEveryRank) {
  const UniqueId id = Communicator::get_unique_id();
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 fixes world 2 first
    Communicator::init(rank == 0 ? 2 : 3, rank, id, *device, {5, std::nullopt});
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[size_t(r)].find("world_size 3"), std::string::npos) << errors[size_t(r)];
}

TEST(BootstrapSecurity, MismatchedCollectivesFailOnEveryRank) {
  const UniqueId id = Communicator::get_unique_id();
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, rank, id, *device, {10, std::nullopt});
    if (rank == 0) comm->barrier();
    else comm->allgather({1, 2, 3});
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find("collectives do not match"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("barrier #1"), std::string::npos) << errors[size_t(r)];
  }
}

TEST(BootstrapSecurity, AnAlltoallNeedsOnePartPerRankAndMatchingCalls) {
  const UniqueId id = Communicator::get_unique_id();
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, rank, id, *device, {10, std::nullopt});
    try {
      comm->alltoall({{1}});  // one part for two ranks: refused before anything is sent
    } catch (const Error& error) {
      if (std::string(error.what()).find("alltoall with 1 parts") == std::string::npos) throw;
    }
    if (rank == 0) comm->alltoall({{1}, {2}});
    else comm->allgather({1, 2, 3});
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find("collectives do not match"), std::string::npos) << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("alltoall #1"), std::string::npos) << errors[size_t(r)];
  }
}

TEST(BootstrapSecurity, ACollectiveTimesOutAfterTheCommTimeout) {
  const UniqueId id = Communicator::get_unique_id();
  std::atomic<bool> done{false};
  std::string error;
  double took = 0;
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, rank, id, *device, {0.5, std::nullopt});
    if (rank == 1) {
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // never enters the barrier
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    error = errorOf([&] { comm->barrier(); });
    took = Seconds(std::chrono::steady_clock::now() - start).count();
    done = true;
  });
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
  EXPECT_LT(took, 2.0);
}

// A rank that stops reading its replies (a stopped process, or one hung
// between sending a contribution and reading the result) delays nobody else:
// the bootstrap queues its replies and serves the other ranks at once. Rank 0
// here is a raw connection that contributes 6 MB to an allgather and never
// reads; the 18 MB result is more than its socket takes. At 7f850d8 the
// bootstrap blocked on rank 0's socket (replies go out in rank order) and
// ranks 1 and 2 timed out.
TEST(BootstrapSecurity, ARankThatStopsReadingDelaysNobodyElse) {
  constexpr uint32_t kWorld = 3;
  constexpr size_t kBytes = size_t(6) << 20;
  const UniqueId id = Communicator::get_unique_id();
  const auto payload = [](int rank) {
    comm::Bytes bytes(kBytes);
    for (size_t i = 0; i < kBytes; ++i) bytes[i] = uint8_t(size_t(rank) * 31 + i * 7 + (i >> 12));
    return bytes;
  };
  // Rank 0 joins by hand: the handshake, then (once the others joined) the table, a
  // contribution, and silence.
  comm::Socket stalled =
      helloAsRank(id, 0, kWorld, comm::Writer().text("a-stalled-host").text("epjit-stalled").out);
  ASSERT_NO_FATAL_FAILURE(keepReceiveBufferSmall(stalled));  // the kernel cannot hold the 18 MB result for it
  const auto deadline = comm::Clock::now() + std::chrono::seconds(10);
  ASSERT_EQ(stalled.receive_message(deadline, "welcome").at(0), uint8_t(comm::Message::Welcome));
  std::atomic<int> served{0};
  std::atomic<bool> stop_waiting{false};
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 1; rank < int(kWorld); ++rank)
    ranks.emplace_back([&, rank] {
      try {
        auto device = make_host_device();
        auto comm = Communicator::init(int(kWorld), rank, id, *device, {20, std::nullopt});
        const auto all = comm->allgather(payload(rank));
        for (int r = 0; r < int(kWorld); ++r)
          if (all[size_t(r)] != payload(r)) errors[size_t(rank)] += "rank " + std::to_string(r) + "'s part differs; ";
        ++served;
        while (!stop_waiting) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        comm->destroy();  // the bootstrap closes once rank 0 is gone
      } catch (const std::exception& error) {
        errors[size_t(rank)] = error.what();
        ++served;
      }
    });
  const auto start = std::chrono::steady_clock::now();
  const std::string stalled_error = testing::errorOf([&] {
    if (stalled.receive_message(comm::Clock::now() + std::chrono::seconds(20), "table").at(0) !=
        uint8_t(comm::Message::Table))
      throw Error("not the table", "", "");
    stalled.send_message(comm::Writer()
                             .u8(uint8_t(comm::Message::Gather))
                             .u64(1)
                             .u8(uint8_t(comm::Collective::Allgather))
                             .bytes(payload(0))
                             .out,
                         "root");
  });
  while (served < int(kWorld) - 1 && std::chrono::steady_clock::now() - start < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double took = Seconds(std::chrono::steady_clock::now() - start).count();
  stalled = comm::Socket();  // rank 0 goes away; the others may leave now
  stop_waiting = true;
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(errors, (std::vector<std::string>{"", "", ""}));
  EXPECT_LT(took, 10.0) << "ranks 1 and 2 waited " << took << " s behind a rank that does not read";
}

// What a rank that contributes without reading its results can make the root
// hold is bounded: past 16 unread replies its connection is closed. A raw
// rank of a group of one sends 40 allgathers of 4 MB (each completes at once)
// and reads nothing until then; it gets fewer than 40 results, then the close.
TEST(BootstrapSecurity, ARankThatNeverReadsCannotPileUpReplies) {
  constexpr int kContributions = 40;
  const UniqueId id = Communicator::get_unique_id();
  comm::Socket rank = helloAsRank(id, 0, 1, comm::Writer().text("a-host").text("epjit-unread").out);
  ASSERT_NO_FATAL_FAILURE(keepReceiveBufferSmall(rank));  // the kernel cannot stand in for the root's queue
  const comm::Bytes contribution(size_t(4) << 20, 0x5A);
  const std::string sending = testing::errorOf([&] {
    for (int i = 1; i <= kContributions; ++i)
      rank.send_message(comm::Writer()
                            .u8(uint8_t(comm::Message::Gather))
                            .u64(uint64_t(i))
                            .u8(uint8_t(comm::Collective::Allgather))
                            .bytes(contribution)
                            .out,
                        "root");
  });
  // The root has read the last contributions (the kernel may still have held
  // them when the sends returned) before the rank starts to read.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  int results = 0;
  const std::string reading = testing::errorOf([&] {
    for (;;) {
      const comm::Bytes message = rank.receive_message(comm::Clock::now() + std::chrono::seconds(20), "root");
      if (message.at(0) == uint8_t(comm::Message::Result)) ++results;
    }
  });
  EXPECT_LT(results, kContributions) << sending;
  EXPECT_NE(reading.find("closed the connection"), std::string::npos) << reading;
}

TEST(BootstrapSecurity, UnusedIdsCostNoThreadOrSocket) {
  Communicator::get_unique_id();  // the bootstrap itself may start here
  const size_t before = threadCount();
  for (int i = 0; i < 300; ++i) Communicator::get_unique_id();
  EXPECT_LE(threadCount(), before) << "a thread per unique id";
}

TEST(BootstrapSecurity, AStrangersMemfdIsNeverMapped) {
  // A process of the same user that knows nothing of the group's secret
  // floods every epjit local socket with a 4 KiB memfd while a group of two
  // allocates 1 MiB: the ranks map only each other's memory (no SIGBUS, the
  // pattern each wrote is what the other reads).
  const UniqueId id = Communicator::get_unique_id();
  const pid_t stranger = forkMemfdStranger(false);
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, rank, id, *device, {20, std::nullopt});
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the stranger has found the sockets
    for (int round = 0; round < 3; ++round) {
      auto buffer = comm->allocate_symmetric(1 << 20);
      auto* mine = static_cast<uint32_t*>(buffer->local);
      for (size_t i = 0; i < (1 << 18); ++i) mine[i] = uint32_t(rank * 7919 + i);
      comm->barrier();
      const int peer = 1 - rank;
      const auto* theirs = static_cast<const uint32_t*>(buffer->peers[size_t(peer)]);
      for (size_t i = 0; i < (1 << 18); i += 1021)
        if (theirs[i] != uint32_t(peer * 7919 + i)) throw Error("rank " + std::to_string(rank) + " mapped a stranger's memory", "", "");
      comm->barrier();
    }
  });
  ::kill(stranger, SIGKILL);
  waitpid(stranger, nullptr, 0);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

TEST(BootstrapSecurity, AnotherUsersConnectionToTheLocalSocketIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a second user (nobody)";
  const UniqueId id = Communicator::get_unique_id();
  const pid_t stranger = forkMemfdStranger(true);
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, rank, id, *device, {20, std::nullopt});
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto buffer = comm->allocate_symmetric(1 << 20);
    static_cast<uint32_t*>(buffer->local)[1000] = uint32_t(rank + 1);
    comm->barrier();
    if (static_cast<const uint32_t*>(buffer->peers[size_t(1 - rank)])[1000] != uint32_t(2 - rank))
      throw Error("a foreign mapping", "", "");
    comm->barrier();
  });
  ::kill(stranger, SIGKILL);
  int status = 0;
  waitpid(stranger, &status, 0);
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

// The epjit local sockets this process listens on (its ranks'), found through
// the socket inodes among its own fds.
std::vector<std::string> ownLocalSockets() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> names;
  std::ifstream table("/proc/net/unix");
  std::string line;
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, refs, protocol, flags, type, state, inode;
    fields >> slot >> refs >> protocol >> flags >> type >> state >> inode;
    const size_t at = line.find("@epjit-");
    if (at != std::string::npos && inodes.count(inode)) names.push_back(line.substr(at + 1));
  }
  return names;
}

// A stranger fills both ranks' local-socket backlogs (and holds the
// connections) before they allocate: each rank drains its own while it sends,
// so the allocation completes instead of two ranks each blocked in a connect
// to the other's full backlog.
TEST(BootstrapSecurity, AFullLocalSocketBacklogCannotHangAnAllocation) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a second user (nobody)";
  int to_stranger[2], from_stranger[2];
  ASSERT_EQ(pipe(to_stranger), 0);
  ASSERT_EQ(pipe(from_stranger), 0);
  const pid_t stranger = fork();  // before this process starts any thread
  if (stranger == 0) {
    close(to_stranger[1]);
    close(from_stranger[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(3);
    char names[1024] = {};
    ssize_t got = 0, n = 0;
    while ((n = read(to_stranger[0], names + got, sizeof names - 1 - size_t(got))) > 0) got += n;
    std::vector<int> held;
    std::istringstream list(names);
    for (std::string name; std::getline(list, name);) {
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::memcpy(address.sun_path + 1, name.data(), name.size());
      const socklen_t length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
      for (int i = 0; i < 2000; ++i) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
          ::close(fd);
          break;  // the backlog is full
        }
        held.push_back(fd);
      }
    }
    const char filled = char(held.size() > 200 ? 1 : 0);
    if (write(from_stranger[1], &filled, 1) != 1) _exit(4);
    ::pause();
    _exit(0);
  }
  close(to_stranger[0]);
  close(from_stranger[1]);
  const UniqueId id = Communicator::get_unique_id();
  std::atomic<double> allocation_seconds{0};
  char filled = 0;
  const auto errors = onThreads(2, [&](int rank) {
    auto device = make_host_device();
    auto comm = Communicator::init(2, rank, id, *device, {20, std::nullopt});
    comm->barrier();
    if (rank == 0) {
      std::string names;
      for (const std::string& name : ownLocalSockets()) names += name + "\n";
      if (write(to_stranger[1], names.data(), names.size()) != ssize_t(names.size())) throw Error("pipe", "", "");
      close(to_stranger[1]);
      if (read(from_stranger[0], &filled, 1) != 1) throw Error("the stranger did not report", "", "");
    }
    comm->barrier();
    const auto start = std::chrono::steady_clock::now();
    auto buffer = comm->allocate_symmetric(1 << 16);
    allocation_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    static_cast<uint32_t*>(buffer->local)[7] = uint32_t(rank + 1);
    comm->barrier();
    if (static_cast<const uint32_t*>(buffer->peers[size_t(1 - rank)])[7] != uint32_t(2 - rank))
      throw Error("a foreign mapping", "", "");
    comm->barrier();
  });
  ::kill(stranger, SIGKILL);
  waitpid(stranger, nullptr, 0);
  close(from_stranger[0]);
  EXPECT_EQ(filled, 1) << "the stranger could not fill the backlogs";
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_LT(allocation_seconds.load(), 10.0);
}

TEST(HostSharedMemory, AShortOrUnsealedMemfdIsRefused) {
  auto device = make_host_device();
  const int fd = memfd_create("short", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  ShareableMemory memory;
  memory.fd = fd;
  memory.bytes = 1 << 20;
  EXPECT_NE(errorOf([&] { device->open_shareable(memory); }).find("not sealed"), std::string::npos);
  memory.bytes = 4096;  // the right size, but a peer could still shrink it
  EXPECT_NE(errorOf([&] { device->open_shareable(memory); }).find("not sealed"), std::string::npos);
  ::close(fd);
}

TEST(Environment, TimeoutsAreParsedStrictly) {
  const UniqueId id = Communicator::get_unique_id();
  auto device = make_host_device();
  for (const char* bad : {"5abc", "nan", "inf", "1e10", "-1", "0"}) {
    testing::ScopedEnvironment timeout("EPJIT_COMM_TIMEOUT_S", bad);
    const std::string error = errorOf([&] { Communicator::init(1, 0, id, *device); });
    EXPECT_NE(error.find("EPJIT_COMM_TIMEOUT_S is '" + std::string(bad) + "'"), std::string::npos) << bad << ": " << error;
  }
}

TEST(Environment, AnUnknownLogLevelIsRefusedWhereWorkStarts) {
  testing::ScopedEnvironment level("EPJIT_LOG_LEVEL", "verbose");
  const UniqueId id = Communicator::get_unique_id();
  auto device = make_host_device();
  const std::string error = errorOf([&] { Communicator::init(1, 0, id, *device, {2, std::nullopt}); });
  EXPECT_NE(error.find("EPJIT_LOG_LEVEL is 'verbose'"), std::string::npos) << error;
}

}  // namespace
}  // namespace epjit
