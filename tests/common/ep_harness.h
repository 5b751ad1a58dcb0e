// End-to-end harness: one EpDispatchCombineOp per rank (threads of this
// process, or forked processes), fed deterministic random inputs, checked
// against the reference after every dispatch and every combine. Every rank
// derives every rank's inputs from the seed, so each can run the oracle.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "epjit/cache.h"
#include "epjit/comm/communicator.h"
#include "epjit/device.h"
#include "epjit/ep/op.h"
#include "epjit/ep/reference.h"
#include "epjit/numerics.h"
#include "id_pipe.h"

namespace epjit::ep {
// gtest prints a parameter of this type by its name ("v2", not a byte dump).
inline void PrintTo(InternodeKernel kernel, std::ostream* os) { *os << name_of(kernel); }
}  // namespace epjit::ep

namespace epjit::testing {

using namespace epjit::ep;

// Masked: uniform, with about a quarter of the slots -1 ("no expert", as
// DeepEP and vLLM mask padded slots) and every fifth token masked entirely.
// Repeats: uniform, with every third token naming its first expert twice.
enum class RoutingKind { Uniform, Skewed, Local, Masked, Repeats };
enum class Ranks { Threads, Processes };

struct EpCase {
  std::string name;
  std::string target = "host";
  int world = 2;
  Ranks ranks = Ranks::Threads;
  int64_t hidden = 320;
  int topk = 3;
  int experts_per_rank = 4;
  int64_t max_tokens = 37;
  DataType data_type = DataType::BF16;
  std::optional<DataType> dispatch_type, combine_type;
  CombineMode mode = CombineMode::Gather;
  QuantType quant = QuantType::None;
  int scale_dim = 0, scale_type_size = 0;
  RoutingKind routing = RoutingKind::Uniform;
  // Tokens per call on rank 0; rank r sends max(0, n - r % 2) (n = max stays max).
  std::vector<int64_t> calls = {37, 0, 1, 37, 13};
  bool std_moe = false;
  // With std_moe: std_moe_combine = weighted_entries (DeepEP's low-latency
  // combine): each origin token must be its expert rows weighted by its own
  // top-k weights (reference::weighted_entries_combine); with zero_copy the
  // experts write into op.std_moe_combine_input().
  bool entry_combine = false;
  // With std_moe: the pack also writes fp8 codes and DeepEP's scales; each
  // live packed row's must be numerics.h quantize_fp8_deepep_block's (the
  // codes and scales are poisoned before every pack).
  StdMoeQuant std_moe_quant = StdMoeQuant::None;
  bool replay = false;  // each call also replays its routing with new payloads
  // With replay: the replay follows the dispatch directly (MORI's order) and
  // combine answers the replay; the dispatch's own results are still checked.
  bool replay_before_combine = false;
  // With replay: the routing replays after a round trip through route_map()
  // and load_routing() into a fresh Routing (a saved routing, as shipped).
  bool replay_through_map = false;
  bool weights = true;  // combine weights
  bool zero_copy = false;  // gather: experts write into op.combine_input()
  // Dispatches (not replays) and combines run as split calls: the send
  // half, other work on the op's stream, then the receive half.
  bool split_phase = false;
  // Each call passes max_tokens rows, its tokens first and padding after
  // (payloads and valid experts that must not be sent), with its token count
  // in device memory (DispatchOptions::token_count).
  bool device_count = false;
  uint32_t seed = 1;
  double peer_timeout_s = 0;  // 0: the default
  // Internode: nodes of gpu_per_node consecutive ranks (the communicator's
  // node teams too); ranks of other nodes are reached through the transport.
  std::optional<int> gpu_per_node;
  InternodeKernel internode_kernel = InternodeKernel::Auto;
  int64_t internode_auto_ll_max_tokens = 512;
  // Every dispatch (and load_routing) passes the call's largest count, rank
  // 0's, as DispatchOptions::max_tokens_across_ranks.
  bool pass_max_tokens_across_ranks = false;
  std::optional<bool> low_latency_combine;  // unset: auto
  // Set as EPJIT_INTERNODE_TRANSPORT in each rank before its op is built
  // (process ranks: every rank its own environment). Empty: the default.
  std::string internode_transport;
  // Dispatch geometry (unset: the target's schedule). A call with no more
  // top-k entries than dispatch blocks sends each entry with a whole block.
  std::optional<int> dispatch_blocks, warps_per_block;
  // Combine blocks (unset: the schedule's): a few received rows on more warps
  // than rows split into pieces (scatter's stage 1, the sums).
  std::optional<int> combine_blocks;
  // Rows arrive in source order (rank-major, each rank's in token order):
  // every received row must be where the reference, which lists them in
  // that order, has it.
  bool source_order = false;
  // Runs on every rank right before each dispatch is launched, once the
  // ranks have met (fault injection: a rank stopping itself there).
  std::function<void(int call, int rank, Communicator& comm)> before_dispatch;
};

// gtest prints a case by its name, not as a dump of its bytes.
inline void PrintTo(const EpCase& c, std::ostream* os) { *os << c.name << " (" << c.target << ", world " << c.world << ")"; }

inline EpDispatchCombineConfig configFor(const EpCase& c, int rank) {
  EpDispatchCombineConfig config;
  config.rank = rank;
  config.world_size = c.world;
  config.hidden_dim = c.hidden;
  config.max_num_inp_token_per_rank = c.max_tokens;
  config.num_experts_per_rank = c.experts_per_rank;
  config.num_experts_per_token = c.topk;
  config.data_type = c.data_type;
  config.dispatch_data_type = c.dispatch_type;
  config.combine_data_type = c.combine_type;
  config.scale_dim = c.scale_dim;
  config.scale_type_size = c.scale_type_size;
  config.combine_mode = c.mode;
  config.quant_type = c.quant;
  config.enable_std_moe = c.std_moe;
  config.target = c.target;
  config.peer_timeout_s = c.peer_timeout_s;
  config.dispatch_block_num = c.dispatch_blocks;
  config.warp_num_per_block = c.warps_per_block;
  config.combine_block_num = c.combine_blocks;
  config.gpu_per_node = c.gpu_per_node;
  config.internode_kernel = c.internode_kernel;
  config.internode_auto_ll_max_tokens = c.internode_auto_ll_max_tokens;
  config.low_latency_combine = c.low_latency_combine;
  config.receive_order = c.source_order ? ReceiveOrder::Source : ReceiveOrder::Arrival;
  config.std_moe_combine = c.entry_combine ? StdMoeCombine::WeightedEntries : StdMoeCombine::RankSums;
  config.std_moe_quant = c.std_moe_quant;
  return config;
}

// The case run with the combine protocol auto does not pick for it, named
// "staged_..." or "low_latency_...", when it could run both and sets none;
// else nothing.
inline std::vector<EpCase> otherProtocol(const EpCase& c) {
  const EpDispatchCombineConfig config = configFor(c, 0);
  if (c.low_latency_combine || !config.low_latency_combine_obstacle().empty()) return {};
  EpCase other = c;
  other.low_latency_combine = !config.uses_low_latency_combine();
  other.name = (*other.low_latency_combine ? "low_latency_" : "staged_") + c.name;
  return {other};
}

inline int64_t tokensOn(const EpCase& c, int64_t n, int rank) {
  return n >= c.max_tokens ? c.max_tokens : std::max<int64_t>(0, n - rank % 2);
}

// What every rank of a call passes as max_tokens_across_ranks: rank 0's
// count, the largest, when the case passes it.
inline std::optional<int64_t> largestTokensOf(const EpCase& c, int64_t n) {
  return c.pass_max_tokens_across_ranks ? std::optional<int64_t>(tokensOn(c, n, 0)) : std::nullopt;
}

// One rank's inputs for one call.
inline reference::RankInput makeInput(const EpCase& c, const EpDispatchCombineConfig& config, int call, int rank,
                                      int64_t tokens) {
  std::mt19937 rng(c.seed * 7919u + uint32_t(call) * 104729u + uint32_t(rank) * 1299709u);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  reference::RankInput in;
  in.tokens = int(tokens);
  const size_t elements = size_t(tokens) * size_t(c.hidden);
  in.payload.resize(size_t(tokens) * config.dispatch_token_bytes());
  for (size_t i = 0; i < elements; ++i) reference::store_dispatched_element(config, in.payload.data(), i, normal(rng));
  const int k = c.topk, epr = c.experts_per_rank, experts = c.world * epr;
  in.weights.resize(size_t(tokens) * size_t(k));
  for (float& w : in.weights) w = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  in.scales.resize(size_t(tokens) * config.scale_bytes_per_token());
  for (uint8_t& b : in.scales) b = uint8_t(rng());
  in.indices.resize(size_t(tokens) * size_t(k));
  for (int64_t t = 0; t < tokens; ++t) {
    // Distinct experts per token, from the pool the routing allows.
    int first = 0, pool = experts;
    if (c.routing == RoutingKind::Skewed) pool = epr;  // everything to rank 0
    if (c.routing == RoutingKind::Local) first = rank * epr, pool = epr;
    std::vector<int> choices(static_cast<size_t>(pool));
    for (int e = 0; e < pool; ++e) choices[size_t(e)] = first + e;
    std::shuffle(choices.begin(), choices.end(), rng);
    for (int j = 0; j < k; ++j) in.indices[size_t(t) * size_t(k) + size_t(j)] = choices[size_t(j % pool)];
    if (c.routing == RoutingKind::Masked)
      for (int j = 0; j < k; ++j)
        if (t % 5 == 4 || rng() % 4 == 0) in.indices[size_t(t) * size_t(k) + size_t(j)] = -1;
    if (c.routing == RoutingKind::Repeats && k > 1 && t % 3 == 0)
      in.indices[size_t(t) * size_t(k) + 1] = in.indices[size_t(t) * size_t(k)];
  }
  return in;
}

// The expert computation each rank applies to what it received: decode the
// payload and scale it by a factor of the rank, so contributions from
// different ranks differ and a misrouted sum shows.
inline std::vector<uint8_t> expertOutput(const EpDispatchCombineConfig& config, int rank,
                                         const std::vector<uint8_t>& payload) {
  return reference::scaled_expert_output(config, payload.data(), 1.0f + 0.25f * float(rank));
}

inline TensorRef tensor(void* data, DType type, std::vector<int64_t> shape) { return {data, type, std::move(shape)}; }

inline DType payloadDType(const EpDispatchCombineConfig& config) {
  return tensor_type_of(config.dispatch_type(), config.target_info());
}

// Collects the first few failures of one rank.
class Failures {
 public:
  explicit Failures(int rank) : rank_(rank) {}
  template <typename... Parts>
  void add(const Parts&... parts) {
    if (++count_ > 8) return;
    std::ostringstream os;
    os << "rank " << rank_ << ": ";
    (os << ... << parts);
    text_ += os.str() + "\n";
  }
  bool any() const { return count_ > 0; }
  std::string text() const { return count_ > 8 ? text_ + "... " + std::to_string(count_ - 8) + " more\n" : text_; }

 private:
  int rank_;
  int count_ = 0;
  std::string text_;
};

// The kernel cache the e2e tests of one binary share, under its work directory
// (kept between runs: keys cover templates, headers, compiler and toolchain).
inline KernelCache& e2eCache(const std::string& work_dir) {
  static KernelCache cache([&] {
    CacheOptions options = CacheOptions::from_environment();
    options.dir = work_dir + "/ep-kernel-cache";
    options.opt_level = 1;
    return options;
  }());
  return cache;
}

constexpr uint8_t kPoison = 0xA5;

inline float bitsAsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One rank's whole run of a case. Returns "" or what went wrong.
inline std::string runRank(const EpCase& c, int rank, Communicator& comm, KernelCache& cache) {
  Failures failures(rank);
  const EpDispatchCombineConfig config0 = configFor(c, rank);
  if (!c.internode_transport.empty()) ::setenv("EPJIT_INTERNODE_TRANSPORT", c.internode_transport.c_str(), 1);
  Device& device = comm.device();
  // Device copies of this rank's inputs, and the expert outputs (below):
  // freed when the run ends by a return or by a call that throws, after the
  // op (declared later, so destroyed first) has finished with them.
  std::vector<std::unique_ptr<void, std::function<void(void*)>>> owned;
  auto allocate = [&](size_t bytes) {
    owned.emplace_back(device.allocate(bytes), [&device](void* p) { device.release(p); });
    return owned.back().get();
  };
  EpDispatchCombineOp op(config0, comm, {&cache, nullptr});
  const EpDispatchCombineConfig& config = op.config();
  const int k = c.topk;
  const int64_t cap = op.capacity(), hidden = c.hidden, max_tokens = c.max_tokens;
  const size_t token_bytes = config.dispatch_token_bytes(), row_bytes = config.combine_token_bytes();
  const size_t scale_bytes = config.scale_bytes_per_token();
  std::unique_ptr<Routing> routing = c.replay ? op.make_routing() : nullptr;
  // With replay, calls record with keep_call into two routings in turn: after
  // each recording dispatch the other one (the call before's) must still hold
  // that call's received origins, indices and count, though this dispatch has
  // overwritten the op's own and the caller's indices.
  std::unique_ptr<Routing> routing_before = c.replay ? op.make_routing() : nullptr;
  struct KeptCall {
    int call;
    int32_t total;
    std::vector<int32_t> origins, indices;
  };
  std::optional<KeptCall> kept_before;

  void* d_payload = allocate(std::max<size_t>(16, size_t(max_tokens) * token_bytes));
  void* d_weights = allocate(std::max<size_t>(16, size_t(max_tokens * k) * 4));
  void* d_scales = allocate(std::max<size_t>(16, size_t(max_tokens) * scale_bytes));
  void* d_indices = allocate(std::max<size_t>(16, size_t(max_tokens * k) * 4));
  void* d_expert = allocate(size_t(cap) * row_bytes);
  void* d_expert_weights = allocate(size_t(cap * k) * 4);
  const int64_t moe_rows = int64_t(c.world) * max_tokens;
  void* d_moe_out = c.std_moe ? allocate(size_t(c.experts_per_rank * moe_rows * hidden) * 2) : nullptr;
  // Work queued between a split call's halves: a copy on the op's stream
  // that no half reads or writes.
  constexpr size_t kBetweenBytes = 1 << 16;
  void* d_count = c.device_count ? allocate(16) : nullptr;
  void* d_between_from = c.split_phase ? allocate(kBetweenBytes) : nullptr;
  void* d_between_to = c.split_phase ? allocate(kBetweenBytes) : nullptr;
  auto workBetweenHalves = [&] { device.copy_async(d_between_to, d_between_from, kBetweenBytes, op.stream()); };
  // A combine as the case runs it: whole, or its send half, that work, and its receive half.
  auto combineAsCased = [&](auto&& send, auto&& whole) -> CombineResult {
    if (!c.split_phase) return whole();
    send();
    workBetweenHalves();
    return op.combine_recv();
  };
  // The expert weights combine is given (none without c.weights).
  auto expertWeights = [&]() -> std::optional<TensorRef> {
    if (!c.weights) return std::nullopt;
    return tensor(d_expert_weights, DType::F32, {cap, k});
  };

  DispatchResult last_dispatch{};
  CombineResult last_combine{};
  bool have_pointers = false;

  auto oneDispatch = [&](int call, int64_t n_rank0, bool replay) {
    std::vector<reference::RankInput> inputs;
    const int variant = replay ? 1000 + call : call;  // replay: same routing, new payloads
    for (int r = 0; r < c.world; ++r) {
      reference::RankInput in = makeInput(c, config, variant, r, tokensOn(c, n_rank0, r));
      if (replay) {  // keep the recorded call's indices
        in.indices = makeInput(c, config, call, r, tokensOn(c, n_rank0, r)).indices;
      }
      in.max_tokens_across_ranks = largestTokensOf(c, n_rank0);
      inputs.push_back(std::move(in));
    }
    const reference::RankInput& mine = inputs[size_t(rank)];
    const int64_t n = mine.tokens;
    if (!mine.payload.empty()) device.copy_to_device(d_payload, mine.payload.data(), mine.payload.size());
    if (!mine.weights.empty()) device.copy_to_device(d_weights, mine.weights.data(), mine.weights.size() * 4);
    if (!mine.scales.empty()) device.copy_to_device(d_scales, mine.scales.data(), mine.scales.size());
    if (!mine.indices.empty()) device.copy_to_device(d_indices, mine.indices.data(), mine.indices.size() * 4);
    // Padding past the count: rows a call that sent them would deliver
    // somewhere (valid experts), so a row sent or counted shows.
    const int64_t rows = c.device_count ? max_tokens : n;
    if (c.device_count) {
      const int64_t pad = max_tokens - n;
      std::vector<uint8_t> pad_payload(size_t(pad) * token_bytes, 0x3c), pad_scales(size_t(pad) * scale_bytes, 0x3c);
      std::vector<float> pad_weights(size_t(pad * k), 0.5f);
      std::vector<int32_t> pad_indices(size_t(pad * k));
      for (size_t i = 0; i < pad_indices.size(); ++i) pad_indices[i] = int32_t(i % size_t(config.num_experts()));
      if (pad) {
        device.copy_to_device(static_cast<char*>(d_payload) + size_t(n) * token_bytes, pad_payload.data(),
                              pad_payload.size());
        device.copy_to_device(static_cast<float*>(d_weights) + n * k, pad_weights.data(), pad_weights.size() * 4);
        if (scale_bytes)
          device.copy_to_device(static_cast<char*>(d_scales) + size_t(n) * scale_bytes, pad_scales.data(),
                                pad_scales.size());
        device.copy_to_device(static_cast<int32_t*>(d_indices) + n * k, pad_indices.data(), pad_indices.size() * 4);
      }
      const int32_t count = int32_t(n);
      device.copy_to_device(d_count, &count, 4);
    }

    // Poison what this call must write, once no peer is still using it.
    op.stream().synchronize();
    comm.barrier();
    if (have_pointers) {
      std::vector<uint8_t> poison(size_t(cap) * std::max(token_bytes, size_t(k) * 4), kPoison);
      device.copy_to_device(last_dispatch.tokens.data, poison.data(), size_t(cap) * token_bytes);
      device.copy_to_device(last_dispatch.weights.data, poison.data(), size_t(cap * k) * 4);
      device.copy_to_device(last_dispatch.indices.data, poison.data(), size_t(cap * k) * 4);
      std::vector<uint8_t> out_poison(size_t(max_tokens) * std::max(row_bytes, size_t(k) * 4), kPoison);
      if (last_combine.tokens.data)  // none yet when a replay follows the first dispatch
        device.copy_to_device(last_combine.tokens.data, out_poison.data(), size_t(max_tokens) * row_bytes);
      if (last_combine.weights.data)
        device.copy_to_device(last_combine.weights.data, out_poison.data(), size_t(max_tokens * k) * 4);
    }
    comm.barrier();

    const TensorRef input = tensor(d_payload, payloadDType(config), {rows, hidden});
    const TensorRef weights = tensor(d_weights, DType::F32, {rows, k});
    const TensorRef indices = tensor(d_indices, DType::I32, {rows, k});
    std::optional<TensorRef> scales;
    if (c.scale_dim) {
      const DType scale_type = c.scale_type_size == 4 ? DType::F32 : c.scale_type_size == 2 ? DType::BF16 : DType::U8;
      scales = tensor(d_scales, scale_type, {rows, c.scale_dim});
    }
    if (c.before_dispatch) c.before_dispatch(call, rank, comm);
    if (routing && !replay) std::swap(routing, routing_before);
    const DispatchOptions options{.max_tokens_across_ranks = mine.max_tokens_across_ranks,
                                  .keep_call = routing != nullptr,
                                  .token_count = c.device_count ? d_count : nullptr};
    DispatchResult result;
    if (replay) {
      result = op.dispatch_replay(input, weights, scales, indices, *routing);
    } else if (c.split_phase) {
      result = op.dispatch_send(input, weights, scales, indices, routing.get(), options);
      workBetweenHalves();
      op.dispatch_recv();
    } else {
      result = op.dispatch(input, weights, scales, indices, routing.get(), options);
    }
    op.check();
    if (routing && !replay) {
      if (kept_before) {
        const RecordedCall kept = op.recorded_call(*routing_before);
        KeptCall got{kept_before->call, 0, std::vector<int32_t>(kept_before->origins.size()),
                     std::vector<int32_t>(size_t(kept.indices.shape[0] * kept.indices.shape[1]))};
        device.copy_to_host(&got.total, kept.total_recv.data, 4);
        device.copy_to_host(got.origins.data(), kept.origins.data, got.origins.size() * 4);
        if (!got.indices.empty()) device.copy_to_host(got.indices.data(), kept.indices.data, got.indices.size() * 4);
        // The origins of the rows received, as the call left them (the kept
        // rows past its count are no one's: the kernel keeps only what arrived).
        const auto received_words = std::ptrdiff_t(std::clamp<int32_t>(kept_before->total, 0, int32_t(cap))) * 2;
        const bool same_origins = std::equal(got.origins.begin(), got.origins.begin() + received_words,
                                             kept_before->origins.begin());
        if (got.total != kept_before->total || !same_origins || got.indices != kept_before->indices)
          failures.add("call ", call, ": the routing of call ", kept_before->call,
                       " no longer holds that call's count, origins and indices (keep_call)");
      }
      kept_before = KeptCall{call, 0, std::vector<int32_t>(size_t(cap) * 2), mine.indices};
      device.copy_to_host(&kept_before->total, result.total_recv.data, 4);
      device.copy_to_host(kept_before->origins.data(), result.origins.data, kept_before->origins.size() * 4);
    }

    // Dispatch against the reference, keyed by (source rank, source token).
    const auto received = reference::dispatch(config, inputs);
    const auto& expected = received[size_t(rank)];
    int32_t total = 0;
    device.copy_to_host(&total, result.total_recv.data, 4);
    if (size_t(total) != expected.size()) failures.add("call ", call, ": total_recv ", total, ", expected ", expected.size());
    std::vector<uint8_t> tokens(size_t(cap) * token_bytes), scales_out(size_t(cap) * scale_bytes);
    std::vector<float> weights_out(size_t(cap * k));
    std::vector<int32_t> indices_out(size_t(cap * k)), origins(size_t(cap) * 2);
    device.copy_to_host(tokens.data(), result.tokens.data, tokens.size());
    device.copy_to_host(weights_out.data(), result.weights.data, weights_out.size() * 4);
    device.copy_to_host(indices_out.data(), result.indices.data, indices_out.size() * 4);
    device.copy_to_host(origins.data(), result.origins.data, origins.size() * 4);
    if (scale_bytes) device.copy_to_host(scales_out.data(), result.scales.data, scales_out.size());
    // Received tokens per local expert, on the host and on the device (its
    // output poisoned first, so a count the kernel leaves unwritten shows).
    {
      const int epr = config.num_experts_per_rank;
      std::vector<int> want(size_t(epr), 0), want_every(size_t(epr), 0);
      for (const auto& token : expected)
        for (size_t j = 0; j < token.indices.size(); ++j) {
          const int32_t e = token.indices[j];
          if (e < 0 || e >= c.world * epr || e / epr != rank) continue;
          want_every[size_t(e % epr)]++;  // MORI's rule: every entry
          if (std::find(token.indices.begin(), token.indices.begin() + long(j), e) == token.indices.begin() + long(j))
            want[size_t(e % epr)]++;
        }
      using Rule = EpDispatchCombineOp::ExpertCountRule;
      for (const auto& [rule, expected_counts] : {std::pair{Rule::DistinctPerToken, &want}, {Rule::EveryEntry, &want_every}}) {
        const char* name = rule == Rule::EveryEntry ? " (every entry)" : "";
        if (op.local_expert_counts(rule) != *expected_counts)
          failures.add("call ", call, ": local_expert_counts", name, " differs");
        const TensorRef counts = op.local_expert_counts_device(rule);
        op.stream().synchronize();
        const std::vector<int32_t> poison_counts(size_t(epr), 0x7f7f7f7f);
        device.copy_to_device(counts.data, poison_counts.data(), size_t(epr) * 4);
        op.local_expert_counts_device(rule);
        op.stream().synchronize();
        std::vector<int32_t> got(static_cast<size_t>(epr));
        device.copy_to_host(got.data(), counts.data, got.size() * 4);
        if (std::vector<int>(got.begin(), got.end()) != *expected_counts)
          failures.add("call ", call, ": local_expert_counts_device", name, " differs");
      }
    }
    std::map<std::pair<int, int>, size_t> where;  // (source rank, token) -> expected index
    for (size_t i = 0; i < expected.size(); ++i) where[{expected[i].source_rank, expected[i].source_token}] = i;
    std::vector<int> expected_row_of(size_t(std::max(total, 0)), -1);
    std::vector<bool> seen(expected.size(), false);
    for (int32_t i = 0; i < std::min<int32_t>(total, int32_t(cap)); ++i) {
      const int origin = origins[size_t(i) * 2];
      const auto it = where.find({origin / int(max_tokens), origin % int(max_tokens)});
      if (it == where.end() || seen[it->second]) {
        failures.add("call ", call, ": received row ", i, " has origin ", origin, " which is not expected (or twice)");
        continue;
      }
      seen[it->second] = true;
      expected_row_of[size_t(i)] = int(it->second);
      if (c.source_order && it->second != size_t(i))
        failures.add("call ", call, ": received row ", i, " is from rank ", expected[it->second].source_rank, " token ",
                     expected[it->second].source_token, ", which source order puts at row ", it->second);
      const reference::ReceivedToken& want = expected[it->second];
      if (std::memcmp(&tokens[size_t(i) * token_bytes], want.payload.data(), token_bytes) != 0)
        failures.add("call ", call, ": payload of row ", i, " (from rank ", want.source_rank, " token ", want.source_token,
                     ") differs");
      if (std::memcmp(&weights_out[size_t(i) * k], want.weights.data(), size_t(k) * 4) != 0)
        failures.add("call ", call, ": weights of row ", i, " differ");
      if (std::memcmp(&indices_out[size_t(i) * k], want.indices.data(), size_t(k) * 4) != 0)
        failures.add("call ", call, ": indices of row ", i, " differ");
      if (scale_bytes && std::memcmp(&scales_out[size_t(i) * scale_bytes], want.scales.data(), scale_bytes) != 0)
        failures.add("call ", call, ": scales of row ", i, " differ");
      const std::vector<int> dests = reference::destinations(config, want.indices.data());
      const int ordinal = int(std::find(dests.begin(), dests.end(), rank) - dests.begin());
      if (origins[size_t(i) * 2 + 1] != ordinal)
        failures.add("call ", call, ": row ", i, " ordinal ", origins[size_t(i) * 2 + 1], ", expected ", ordinal);
    }
    if (have_pointers) {
      for (int64_t i = total; i < cap; ++i)
        for (size_t b = 0; b < token_bytes; ++b)
          if (tokens[size_t(i) * token_bytes + b] != kPoison) {
            failures.add("call ", call, ": row ", i, " past total_recv was written");
            break;
          }
    }
    last_dispatch = result;
    return std::make_tuple(inputs, received, expected_row_of, tokens, weights_out, total);
  };

  auto oneCombine = [&](int call, const std::vector<reference::RankInput>& inputs,
                        const std::vector<std::vector<reference::ReceivedToken>>& received,
                        const std::vector<int>& expected_row_of, const std::vector<uint8_t>& tokens,
                        const std::vector<float>& recv_weights, int32_t total) {
    // Expert outputs: this rank's rows in receive order; every rank's in the reference's order.
    std::vector<uint8_t> mine(size_t(cap) * row_bytes, 0);
    for (int32_t i = 0; i < std::min<int32_t>(total, int32_t(cap)); ++i) {
      const std::vector<uint8_t> payload(tokens.begin() + long(size_t(i) * token_bytes),
                                         tokens.begin() + long(size_t(i + 1) * token_bytes));
      const std::vector<uint8_t> row = expertOutput(config, rank, payload);
      std::copy(row.begin(), row.end(), mine.begin() + long(size_t(i) * row_bytes));
    }
    std::vector<std::vector<std::vector<uint8_t>>> outputs(size_t(c.world));
    for (int d = 0; d < c.world; ++d)
      for (const reference::ReceivedToken& token : received[size_t(d)])
        outputs[size_t(d)].push_back(expertOutput(config, d, token.payload));
    const auto combined = reference::combine(config, received, outputs, inputs);
    const int64_t n = inputs[size_t(rank)].tokens;

    CombineResult result;
    if (c.std_moe) {
      const bool quantized = c.std_moe_quant != StdMoeQuant::None;
      const int64_t blocks = hidden / 128;
      const size_t code_bytes = size_t(c.experts_per_rank * moe_rows * hidden);
      const size_t scale_bytes = size_t(c.experts_per_rank * moe_rows * blocks) *
                                 (c.std_moe_quant == StdMoeQuant::DeepEpFp8Ue8m0 ? 1 : 4);
      if (quantized) {
        const StdMoeResult before = op.std_moe_outputs();
        const std::vector<uint8_t> poison(std::max(code_bytes, scale_bytes), 0x7D);
        device.copy_to_device(before.codes.data, poison.data(), code_bytes);
        device.copy_to_device(before.scales.data, poison.data(), scale_bytes);
      }
      StdMoeResult packed = op.std_moe_pack();
      op.stream().synchronize();
      std::vector<uint8_t> codes(quantized ? code_bytes : 0), scales(quantized ? scale_bytes : 0);
      if (quantized) {
        device.copy_to_host(codes.data(), packed.codes.data, code_bytes);
        device.copy_to_host(scales.data(), packed.scales.data, scale_bytes);
      }
      // Packed row p of local expert e in fp8: its codes and its blocks' scales
      // where DeepEP's low-latency dispatch puts them.
      auto checkQuantizedRow = [&](int e, int p, const uint16_t* row) {
        const bool round = c.std_moe_quant != StdMoeQuant::DeepEpFp8;
        const size_t packed_row = size_t(e * moe_rows + p);
        for (int64_t b = 0; b < blocks; ++b) {
          float x[128];
          uint8_t want[128];
          for (int i = 0; i < 128; ++i) x[i] = decode_bf16(row[b * 128 + i]);
          const float scale_inv = quantize_fp8_deepep_block(x, 128, round, want);
          if (std::memcmp(&codes[packed_row * size_t(hidden) + size_t(b) * 128], want, 128) != 0) {
            failures.add("call ", call, ": fp8 codes of block ", b, " of std-MoE row ", p, " of expert ", e, " differ");
            return;
          }
          if (c.std_moe_quant == StdMoeQuant::DeepEpFp8Ue8m0) {
            const size_t word = (size_t(e) * size_t(blocks / 4) + size_t(b / 4)) * size_t(moe_rows) + size_t(p);
            if (scales[word * 4 + size_t(b % 4)] != ue8m0_of(scale_inv))
              failures.add("call ", call, ": UE8M0 scale of block ", b, " of std-MoE row ", p, " of expert ", e,
                           " is ", int(scales[word * 4 + size_t(b % 4)]), ", expected ", int(ue8m0_of(scale_inv)));
          } else {
            float got;
            std::memcpy(&got, &scales[((size_t(e) * size_t(blocks) + size_t(b)) * size_t(moe_rows) + size_t(p)) * 4], 4);
            if (std::memcmp(&got, &scale_inv, 4) != 0)
              failures.add("call ", call, ": scale of block ", b, " of std-MoE row ", p, " of expert ", e, " is ", got,
                           ", expected ", scale_inv);
          }
        }
      };
      // Check the layout, then run identity-scaled experts on it: expert e of
      // this rank returns its rows times (1 + e / 8), summed per token by unpack.
      const reference::StdMoeLayout layout = reference::std_moe_layout(config, rank, received[size_t(rank)]);
      std::vector<int32_t> counts(size_t(c.experts_per_rank)), sources(size_t(c.experts_per_rank * moe_rows));
      device.copy_to_host(counts.data(), packed.counts.data, counts.size() * 4);
      device.copy_to_host(sources.data(), packed.sources.data, sources.size() * 4);
      std::vector<uint16_t> moe(size_t(c.experts_per_rank * moe_rows * hidden));
      device.copy_to_host(moe.data(), packed.tokens.data, moe.size() * 2);
      std::vector<uint16_t> moe_out(moe.size(), 0);
      for (int e = 0; e < c.experts_per_rank; ++e) {
        if (counts[size_t(e)] != layout.counts[size_t(e)])
          failures.add("call ", call, ": std-MoE count of local expert ", e, " is ", counts[size_t(e)], ", expected ",
                       layout.counts[size_t(e)]);
        std::vector<int> got_sources;
        for (int p = 0; p < counts[size_t(e)] && p < moe_rows; ++p) {
          const size_t packed_row = size_t(e * moe_rows + p);
          const int source = sources[packed_row];
          got_sources.push_back(expected_row_of.at(size_t(source)));
          if (std::memcmp(&moe[packed_row * size_t(hidden)], &tokens[size_t(source) * token_bytes], token_bytes) != 0)
            failures.add("call ", call, ": std-MoE row ", p, " of expert ", e, " is not receive row ", source);
          if (quantized) checkQuantizedRow(e, p, &moe[packed_row * size_t(hidden)]);
          for (int64_t h = 0; h < hidden; ++h)
            moe_out[packed_row * size_t(hidden) + size_t(h)] =
                encode_bf16(decode_bf16(moe[packed_row * size_t(hidden) + size_t(h)]) * (1.0f + float(e) / 8.0f));
        }
        std::vector<int> want_sources = layout.received_index[size_t(e)];
        std::sort(got_sources.begin(), got_sources.end());
        std::sort(want_sources.begin(), want_sources.end());
        if (got_sources != want_sources) failures.add("call ", call, ": std-MoE sources of local expert ", e, " differ");
      }
      if (c.entry_combine) {
        const TensorRef expert_out = c.zero_copy ? op.std_moe_combine_input()
                                                 : tensor(d_moe_out, DType::BF16, {c.experts_per_rank, moe_rows, hidden});
        device.copy_to_device(expert_out.data, moe_out.data(), moe_out.size() * 2);
        const TensorRef origin_weights = tensor(d_weights, DType::F32, {n, k});
        const TensorRef origin_indices = tensor(d_indices, DType::I32, {n, k});
        // Zero-copy cases also have the sums written to a buffer of the caller's.
        std::optional<TensorRef> output;
        if (c.zero_copy) output = tensor(d_expert, DType::BF16, {n, hidden});
        result = combineAsCased(
            [&] { op.std_moe_combine_send(expert_out, origin_weights, origin_indices, output); },
            [&] { return op.std_moe_combine(expert_out, origin_weights, origin_indices, output); });
        op.check();
        if (output && result.tokens.data != d_expert) failures.add("call ", call, ": the sums are not in `output`");
        const std::vector<uint8_t> want = reference::weighted_entries_combine(
            config, inputs[size_t(rank)], [&](int32_t expert, const uint8_t* row) {
              std::vector<uint16_t> out(static_cast<size_t>(hidden));
              const float factor = 1.0f + float(expert % c.experts_per_rank) / 8.0f;
              for (int64_t h = 0; h < hidden; ++h) {
                uint16_t bits;
                std::memcpy(&bits, row + size_t(h) * 2, 2);
                out[size_t(h)] = encode_bf16(decode_bf16(bits) * factor);
              }
              return out;
            });
        std::vector<uint8_t> out(size_t(n) * row_bytes);
        if (n) device.copy_to_host(out.data(), result.tokens.data, out.size());
        for (int64_t t = 0; t < n; ++t)
          if (std::memcmp(&out[size_t(t) * row_bytes], &want[size_t(t) * row_bytes], row_bytes) != 0) {
            failures.add("call ", call, ": weighted-entries combine of token ", t, " differs");
            break;
          }
        last_combine = result;
        return;
      }
      device.copy_to_device(d_moe_out, moe_out.data(), moe_out.size() * 2);
      // What unpack must produce for each received row, and what combine then sums.
      for (int d = 0; d < c.world; ++d) {
        for (size_t i = 0; i < received[size_t(d)].size(); ++i) {
          const reference::ReceivedToken& token = received[size_t(d)][i];
          std::vector<float> sum;
          for (int j = 0; j < k; ++j) {
            const int32_t e = token.indices[size_t(j)];
            if (e < 0 || e / c.experts_per_rank != d || std::find(token.indices.begin(), token.indices.begin() + j, e) !=
                                                    token.indices.begin() + j)
              continue;
            std::vector<float> term(static_cast<size_t>(hidden));
            for (int64_t h = 0; h < hidden; ++h) {
              uint16_t bits;
              std::memcpy(&bits, &token.payload[size_t(h) * 2], 2);
              term[size_t(h)] = decode_bf16(encode_bf16(decode_bf16(bits) * (1.0f + float(e % c.experts_per_rank) / 8.0f)));
            }
            if (sum.empty()) sum = term;
            else for (int64_t h = 0; h < hidden; ++h) sum[size_t(h)] += term[size_t(h)];
          }
          std::vector<uint8_t> row(row_bytes);
          for (int64_t h = 0; h < hidden; ++h) {
            const uint16_t bits = encode_bf16(sum[size_t(h)]);
            std::memcpy(&row[size_t(h) * 2], &bits, 2);
          }
          outputs[size_t(d)][i] = row;
        }
      }
      const auto moe_combined = reference::combine(config, received, outputs, inputs);
      device.copy_to_device(d_expert_weights, recv_weights.data(), recv_weights.size() * 4);
      const TensorRef expert_out = tensor(d_moe_out, DType::BF16, {c.experts_per_rank, moe_rows, hidden});
      result = combineAsCased([&] { op.std_moe_combine_send(expert_out, expertWeights()); },
                              [&] { return op.std_moe_combine(expert_out, expertWeights()); });
      op.check();
      std::vector<uint8_t> out(size_t(n) * row_bytes);
      if (n) device.copy_to_host(out.data(), result.tokens.data, out.size());
      if (out != moe_combined[size_t(rank)]) failures.add("call ", call, ": std-MoE combine output differs");
    } else {
      const DType row_type = config.combine_type() == DataType::F32 ? DType::F32 : DType::BF16;
      const TensorRef expert_in = c.zero_copy ? op.combine_input() : tensor(d_expert, row_type, {cap, hidden});
      device.copy_to_device(expert_in.data, mine.data(), mine.size());
      device.copy_to_device(d_expert_weights, recv_weights.data(), recv_weights.size() * 4);
      result = combineAsCased([&] { op.combine_send(expert_in, expertWeights()); },
                              [&] { return op.combine(expert_in, expertWeights()); });
      op.check();
      std::vector<uint8_t> out(size_t(max_tokens) * row_bytes);
      device.copy_to_host(out.data(), result.tokens.data, out.size());
      const std::vector<uint8_t>& want = combined[size_t(rank)];
      for (int64_t t = 0; t < n; ++t) {
        if (std::memcmp(&out[size_t(t) * row_bytes], &want[size_t(t) * row_bytes], row_bytes) != 0) {
          size_t h = 0;
          const size_t element = row_bytes / size_t(hidden);
          while (h < size_t(hidden) &&
                 std::memcmp(&out[size_t(t) * row_bytes + h * element], &want[size_t(t) * row_bytes + h * element],
                             element) == 0)
            ++h;
          failures.add("call ", call, ": combined token ", t, " differs first at element ", h);
        }
      }
      if (have_pointers) {
        for (size_t b = size_t(n) * row_bytes; b < out.size(); ++b)
          if (out[b] != kPoison) {
            failures.add("call ", call, ": combine wrote past its ", n, " tokens");
            break;
          }
      }
    }
    // Combined weights: the sum of the token's weights over its destinations, in the combine's order.
    if (c.weights && n) {
      std::vector<float> got(size_t(n * k));
      device.copy_to_host(got.data(), result.weights.data, got.size() * 4);
      const reference::RankInput& in = inputs[size_t(rank)];
      for (int64_t t = 0; t < n; ++t) {
        const std::vector<float> want = reference::combined_weights(config, rank, in.tokens_auto_picks_by(),
                                                                    &in.indices[size_t(t * k)],
                                                                    &in.weights[size_t(t * k)]);
        for (int j = 0; j < k; ++j) {
          if (got[size_t(t * k + j)] != want[size_t(j)]) {
            failures.add("call ", call, ": combined weight [", t, ", ", j, "] = ", got[size_t(t * k + j)],
                         ", expected ", want[size_t(j)]);
            break;
          }
        }
      }
    }
    last_combine = result;
  };

  for (size_t call = 0; call < c.calls.size(); ++call) {
    auto [inputs, received, expected_row_of, tokens, recv_weights, total] = oneDispatch(int(call), c.calls[call], false);
    if (c.replay && c.replay_before_combine) {
      have_pointers = true;
      auto [r_inputs, r_received, r_rows, r_tokens, r_weights, r_total] = oneDispatch(int(call), c.calls[call], true);
      oneCombine(int(call), r_inputs, r_received, r_rows, r_tokens, r_weights, r_total);
      if (failures.any()) break;
      continue;
    }
    oneCombine(int(call), inputs, received, expected_row_of, tokens, recv_weights, total);
    have_pointers = true;
    if (c.replay) {
      if (c.replay_through_map) {
        std::unique_ptr<Routing> loaded = op.make_routing();
        op.load_routing(*loaded, op.route_map(*routing), tokensOn(c, c.calls[call], rank),
                        {.max_tokens_across_ranks = largestTokensOf(c, c.calls[call])});
        routing = std::move(loaded);
        kept_before.reset();  // a loaded map keeps no call
      }
      auto [r_inputs, r_received, r_rows, r_tokens, r_weights, r_total] = oneDispatch(int(call), c.calls[call], true);
      oneCombine(int(call), r_inputs, r_received, r_rows, r_tokens, r_weights, r_total);
    }
    if (failures.any()) break;
  }
  op.close();
  return failures.text();
}

using RankBody = std::function<std::string(int rank, Communicator& comm, KernelCache& cache)>;
using DeviceFactory = std::function<std::unique_ptr<Device>(int rank)>;

// Runs `rank_body` on world ranks; returns every rank's failures. Thread
// ranks share `cache` and one host device; process ranks each open their own
// cache on its directory and their device from `make_device` (GPUs: one per rank).
inline std::string runRanks(int world, Ranks mode, KernelCache& cache, const RankBody& rank_body,
                            std::optional<int> gpu_per_node = std::nullopt,
                            const DeviceFactory& make_device = [](int) { return make_host_device(); }) {
  const CommOptions options{60, gpu_per_node};
  std::string failures;
  if (mode == Ranks::Threads) {
    const UniqueId id = Communicator::get_unique_id();
    auto device = make_device(0);
    std::vector<std::string> results(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto comm = Communicator::init(world, r, id, *device, options);
          results[size_t(r)] = rank_body(r, *comm, cache);
          comm->destroy();
        } catch (const std::exception& error) {
          results[size_t(r)] = "rank " + std::to_string(r) + " threw: " + error.what();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::string& r : results) failures += r;
    return failures;
  }
  // Processes: every rank is a child, forked before the unique id exists
  // (IdPipe says why); a pipe per rank carries its failures back.
  std::vector<std::pair<pid_t, int>> children;
  IdPipe id_pipe;
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      id_pipe.close_writing();
      alarm(900);
      std::string result;
      try {
        const std::optional<UniqueId> id = id_pipe.receive();
        if (!id) _exit(4);
        KernelCache own_cache(cache.options());
        auto device = make_device(r);
        auto comm = Communicator::init(world, r, *id, *device, options);
        result = rank_body(r, *comm, own_cache);
        comm->destroy();
      } catch (const std::exception& error) {
        result = "rank " + std::to_string(r) + " threw: " + error.what();
      }
      if (!result.empty() && write(fds[1], result.data(), result.size()) < 0) _exit(3);
      _exit(result.empty() ? 0 : 1);
    }
    close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  if (!id_pipe.send(Communicator::get_unique_id(), world)) failures += "cannot pass the unique id\n";
  id_pipe.close_writing();
  for (auto [pid, fd] : children) {
    std::string text;
    char buffer[4096];
    ssize_t got;
    while ((got = read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, size_t(got));
    close(fd);
    int status = 0;
    waitpid(pid, &status, 0);
    failures += text;
    if (!WIFEXITED(status)) failures += "a rank process died (signal " + std::to_string(WTERMSIG(status)) + ")\n";
    else if (WEXITSTATUS(status) != 0 && text.empty()) failures += "a rank process exited " + std::to_string(WEXITSTATUS(status)) + "\n";
  }
  return failures;
}

}  // namespace epjit::testing
