// Baselines measured in the same run, on the same GPUs (issue 6): NCCL moving
// the bytes a dispatch or combine moves, and the peer-copy ceilings.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "epjit/cache.h"
#include "epjit/comm/communicator.h"

namespace epjit::bench {

// NCCL over the same ranks (epjit/comm/nccl.h: EPJIT_NCCL_LIBRARY, else libnccl.so.2).
class Baselines {
 public:
  // Collective; buffers for exchanges of up to max_bytes each way.
  Baselines(Communicator& comm, size_t max_bytes);
  ~Baselines();
  // One grouped ncclSend/ncclRecv round where this rank sends send_bytes[p]
  // to each rank p (itself included); mean microseconds. Collective.
  double nccl_exchange_us(const std::vector<size_t>& send_bytes, int warmup, int iterations);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Each rank writes 64 MiB of 14,336-byte rows (bf16 tokens of hidden 7168)
// into the next rank's memory at once: enough to saturate a link.
struct Ceilings {
  double copy_engine_GBps = 0;  // cuMemcpyDtoDAsync into the peer's mapping
  double sm_writes_GBps = 0;    // the ep_peer_copy kernel, 132 blocks x 16 warps
  size_t bytes = 0;
  // ep_peer_copy with no rows (the EP kernels' launch path: the window table
  // by value, dependent launch on sm90, 128 blocks x 16 warps) timed like a
  // leg, an event before and after each launch: the least a call can take.
  double launch_floor_us = 0;
};
Ceilings measure_ceilings(Communicator& comm, KernelCache& cache, const std::string& target, int warmup,
                          int iterations);
// The ep_peer_copy specialization measure_ceilings runs (what --warm-only builds).
KernelSpec peer_copy_spec(const std::string& target);

}  // namespace epjit::bench
