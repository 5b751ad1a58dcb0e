// epjit-bench: what one rank does (build the op, identity-expert check, time
// dispatch and combine over a token sweep) and what rank 0 reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "epjit/cache.h"
#include "epjit/comm/communicator.h"
#include "epjit/ep/config.h"

namespace epjit::bench {

enum class RoutingKind { Uniform, Skewed, Local };

struct Options {
  std::string target;  // "" until main() resolves it for the device
  std::string device = "host";  // host, cuda or hip (one GPU per rank process)
  int world = 4;
  bool processes = false;
  std::vector<int64_t> tokens = {1, 37, 128};
  int64_t hidden = 7168;
  int topk = 8;
  int experts_per_rank = 64;
  ep::DataType dtype = ep::DataType::BF16;
  std::optional<ep::DataType> combine_dtype;
  ep::QuantType quant = ep::QuantType::None;
  ep::CombineMode combine_mode = ep::CombineMode::Gather;
  bool std_moe = false;
  bool replay = false;
  bool split = false;  // dispatch_send + dispatch_recv, combine_send + combine_recv
  bool device_count = false;  // every call passes max rows, its token count in device memory
  // Gather: the experts' outputs come in a buffer of the caller's (as a
  // PyTorch caller passes one), so combine stages them into the window
  // first; otherwise they are written into combine_input() in place.
  bool combine_from_buffer = false;
  RoutingKind routing = RoutingKind::Uniform;
  uint32_t seed = 1;
  std::optional<int> dispatch_blocks, dispatch_warps, combine_blocks, combine_warps;
  bool check_only = false;
  bool graph = false;      // time dispatch and combine as captured graphs (GPUs)
  bool warm_only = false;  // build the op's kernels into the cache and stop
  bool baselines = false;  // also NCCL and the peer-copy ceilings (GPUs)
  std::optional<int> gpu_per_node;  // nodes of this many ranks (internode when < world)
  int ranks_per_gpu = 1;            // rank r runs on GPU r / ranks_per_gpu
  ep::InternodeKernel internode_kernel = ep::InternodeKernel::Auto;
  std::optional<bool> low_latency_combine;  // unset: auto
  ep::ReceiveOrder receive_order = ep::ReceiveOrder::Arrival;
  int warmup = 2;
  int iterations = 10;
  std::string json_path;
  std::string cache_dir;

  ep::EpDispatchCombineConfig config(int rank) const;
};

// One token count's measurements on one rank.
struct RankPoint {
  int64_t tokens = 0;
  int64_t received = 0;
  double dispatch_us = 0;
  double combine_us = 0;
  double graph_dispatch_us = 0;  // --graph: the same calls replayed from captured graphs
  double graph_combine_us = 0;
  // Dispatch then combine, called back to back with no event between them
  // (the loop a user's decode step runs): per pair. Programmatic dependent
  // launch can only overlap kernels here, never across the per-leg events.
  double round_trip_us = 0;
  // The host's own time per round trip: enqueuing the two calls, no wait.
  // Near round_trip_us, the calls are bound by the host, not the GPU.
  double host_round_trip_us = 0;
  double graph_round_trip_us = 0;  // --graph: the two captured graphs, back to back
  // --graph: dispatch and combine captured into one graph, as a decode step's
  // graph holds them (programmatic launch edges exist only inside one graph).
  double one_graph_round_trip_us = 0;
  double remote_received = 0;   // rows from the other ranks of this node (over NVLink)
  double network_received = 0;  // rows from other nodes (over the internode transport)
  double nccl_dispatch_us = 0;  // --baselines: NCCL moving the same bytes
  double nccl_combine_us = 0;
  std::string check_failure;  // "" when the identity check passed
};

struct RankResult {
  int rank = 0;
  double construct_seconds = 0;
  bool dependent_launch = false;  // the device overlaps dependent launches (EPJIT_DEPENDENT_LAUNCH)
  double fetch_seconds = 0;  // of which: kernels from the cache (a compile when cold) and module load
  CacheStats cache;
  double ceiling_copy_engine_GBps = 0;  // --baselines
  double ceiling_sm_writes_GBps = 0;
  double launch_floor_us = 0;  // --baselines, one node: an empty kernel timed like a leg
  std::vector<RankPoint> points;
};

// Runs every point on this rank; collective over `comm`.
RankResult run_rank(const Options& options, Communicator& comm, KernelCache& cache);

// Rank 0's table (stdout) and JSON record; returns the exit status.
int report(const Options& options, const std::vector<RankResult>& ranks, const std::string& transport,
           const std::string& device_name);

std::vector<uint8_t> serialize(const RankResult& result);
RankResult deserialize(const std::vector<uint8_t>& bytes);

const char* name_of(RoutingKind routing);

}  // namespace epjit::bench
