// The communicator: ranks find each other through a TCP bootstrap (one rank
// makes a unique id holding the bootstrap address and a random token; a peer
// without the token is refused), then allocate symmetric memory that every
// rank of a node maps (host: memfd passed over Unix sockets with SCM_RIGHTS;
// CUDA/HIP: IPC handles). Ranks may be threads of one process or processes.
// Every wait is bounded (EPJIT_COMM_TIMEOUT_S); a vanished peer is an error.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epjit/device.h"

namespace epjit {

// Opaque and fixed-size: pass it to every rank (bytes over any channel).
struct UniqueId {
  std::array<uint8_t, 128> bytes{};
};

struct CommOptions {
  double timeout_seconds = 0;        // 0: EPJIT_COMM_TIMEOUT_S, default 120
  std::optional<int> gpu_per_node;   // node teams of consecutive ranks; unset: by hostname
};

struct Team {
  std::vector<int> ranks;  // world ranks, ascending
  int index_of(int rank) const;  // -1 when not a member
  int size() const { return int(ranks.size()); }
};

// One symmetric allocation: the local copy and, for every world rank on this
// rank's node, a pointer to that rank's copy mapped here (null off-node).
struct SymmetricBuffer {
  void* local = nullptr;
  size_t bytes = 0;
  std::vector<void*> peers;
};

class Communicator {
 public:
  // On one rank (its process hosts the bootstrap until every rank is done).
  static UniqueId get_unique_id();
  // On every rank; returns when all world_size ranks have joined. Throws
  // epjit::Error on a bad id, a refused token, or a timeout.
  static std::unique_ptr<Communicator> init(int world_size, int rank, const UniqueId& id, Device& device,
                                            CommOptions options = {});
  ~Communicator();

  int rank() const;
  int world_size() const;
  const Team& world() const;
  const Team& node() const;
  const std::string& hostname_of(int rank) const;
  // The device this rank's symmetric memory lives on.
  Device& device() const;

  void barrier();
  // Every rank's bytes, indexed by rank.
  std::vector<std::vector<uint8_t>> allgather(const std::vector<uint8_t>& mine);
  // to_each[r] goes to rank r; returns what each rank sent this one, by
  // rank. Through the bootstrap (a control channel, not a data path: the
  // internode host transport stands in for a network with it).
  std::vector<std::vector<uint8_t>> alltoall(const std::vector<std::vector<uint8_t>>& to_each);
  // Collective: every rank allocates `bytes` (zeroed) and maps its node peers' copies.
  std::shared_ptr<SymmetricBuffer> allocate_symmetric(size_t bytes);
  // Bytes of this rank's own copies of symmetric allocations alive now (the
  // windows of the ops built on it, until each op's memory is released):
  // ops built and closed over and over must leave it where it was.
  uint64_t symmetric_bytes() const;
  // Collective; also done by the destructor. Further calls throw.
  void destroy();

  class Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epjit
