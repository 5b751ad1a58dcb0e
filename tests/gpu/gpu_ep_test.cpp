// The EP op on GPUs, every suite once per vendor API (Cuda/..., Hip/...) on
// the target of the GPU found (gpu_devices.h), one process per rank and GPU
// (or ranks sharing GPUs, EPJIT_GPU_TEST_RANKS_PER_GPU): the host e2e matrix
// against the reference on world 1 and on every GPU present,
// dispatch->combine captured in one graph and replayed 50 times with fresh
// inputs, 10,000 alternating calls with random token counts, a peer that
// never arrives turning into the timeout error, and internode over NCCL
// (CUDA) or RCCL (HIP). Skipped, with the reason, where an API has no GPU.
// With EPJIT_GPU_WARM_ONLY=DIR it instead builds every kernel these tests use
// for the targets of EPJIT_GPU_WARM_TARGETS into the cache at DIR (no GPU
// needed), for scripts/gpu/prepare.sh to ship.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <sstream>
#include <thread>

#include "../common/ep_harness.h"
#include "../common/errors.h"
#include "gpu_devices.h"
#include "epjit/comm/nccl.h"
#include "epjit/error.h"
#include "epjit/targets/TargetInfo.h"

namespace epjit::testing {
namespace {

// EPJIT_GPU_TEST_RANKS_PER_GPU=N (default 1) lets up to N ranks share each
// GPU: the multi-rank cases then run where fewer GPUs are lent. Ranks are
// processes, so the GPU time-slices their contexts and each grid is resident
// alone; a meeting inside a kernel waits for the peers' slices. (Under MPS
// they run side by side, but MPS does not keep every rank's grid resident at
// once: at world 4 the meetings time out.) It checks the protocol on one
// GPU's memory model, not NVLink or xGMI, and times nothing.
int ranksPerGpu() {
  static const int n = [] {
    const char* text = std::getenv("EPJIT_GPU_TEST_RANKS_PER_GPU");
    if (!text || !*text) return 1;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value < 1 || value > 8)
      throw Error("EPJIT_GPU_TEST_RANKS_PER_GPU=" + std::string(text), "an integer from 1 to 8",
                  "unset it, or set how many ranks may share one GPU");
    return int(value);
  }();
  return n;
}

// The most ranks a test may run here on the API's GPUs.
int rankSlots(GpuApi api) { return gpusOf(api).count * ranksPerGpu(); }

// Why a case of `world` ranks cannot run here on the API's GPUs, or "".
std::string worldSkip(GpuApi api, int world) {
  if (std::string none = noGpu(api); !none.empty()) return none;
  const int count = gpusOf(api).count;
  if (rankSlots(api) < world)
    return std::to_string(world) + " GPUs needed, " + std::to_string(count) +
           " present (EPJIT_GPU_TEST_RANKS_PER_GPU lets ranks share them)";
  return "";
}

KernelCache& gpuCache() {
  static KernelCache cache;  // EPJIT_CACHE_DIR: the imported bundle on the GPU host
  return cache;
}

// Rank r on GPU r (or r modulo the GPUs present, where ranks share them).
DeviceFactory gpuRanks(GpuApi api) {
  return [api](int rank) { return makeGpu(api, rank % std::max(1, gpusOf(api).count)); };
}

// `c` on the target of the API's GPUs (cases are written without one).
EpCase onGpu(GpuApi api, EpCase c) {
  c.target = gpusOf(api).target;
  return c;
}

// A suite's case and the API it runs on; named by the case.
struct GpuCase {
  GpuApi api;
  EpCase c;
};
void PrintTo(const GpuCase& gpu_case, std::ostream* os) { *os << apiName(gpu_case.api) << " " << gpu_case.c.name; }
std::string gpuCaseName(const ::testing::TestParamInfo<GpuCase>& info) { return info.param.c.name; }

std::vector<GpuCase> onApi(GpuApi api, std::vector<EpCase> cases) {
  std::vector<GpuCase> out;
  for (EpCase& c : cases) out.push_back({api, std::move(c)});
  return out;
}

// The suites without cases of their own run once per API, named by it.
class OnEveryGpuApi : public ::testing::TestWithParam<GpuApi> {};
std::string apiParamName(const ::testing::TestParamInfo<GpuApi>& info) { return apiName(info.param); }
#define EPJIT_INSTANTIATE_PER_GPU_API(suite)                                                          \
  INSTANTIATE_TEST_SUITE_P(Cuda, suite, ::testing::Values(GpuApi::Cuda), apiParamName); \
  INSTANTIATE_TEST_SUITE_P(Hip, suite, ::testing::Values(GpuApi::Hip), apiParamName)

std::vector<EpCase> gpuCases(int world) {
  using enum DataType;
  const CombineMode scatter = CombineMode::Scatter;
  const std::string w = "_w" + std::to_string(world);
  std::vector<EpCase> cases;
  auto add = [&](EpCase c) {
    c.name += w;
    c.world = world;
    c.ranks = Ranks::Processes;
    cases.push_back(std::move(c));
  };
  add({.name = "bf16_gather"});
  add({.name = "bf16_scatter", .mode = scatter});
  add({.name = "f32_gather", .data_type = F32});
  add({.name = "fp8_gather", .data_type = FP8});
  add({.name = "fp8_scales_scatter", .data_type = FP8, .mode = scatter, .scale_dim = 7, .scale_type_size = 4});
  add({.name = "asym_fp8_bf16", .dispatch_type = FP8, .combine_type = BF16});
  // FP4 tokens (E2M1 two to a byte, MX scales beside them) dispatched, their
  // combine leg bf16: every target moves them, sm90 included.
  add({.name = "fp4_scales_gather", .data_type = FP4, .scale_dim = 10, .scale_type_size = 1});
  add({.name = "quant_direct", .mode = scatter, .quant = QuantType::Fp8DirectCast});
  add({.name = "quant_blockwise", .mode = scatter, .quant = QuantType::Fp8Blockwise});
  add({.name = "std_moe", .mode = scatter, .std_moe = true});
  add({.name = "std_moe_quant_blockwise", .mode = scatter, .quant = QuantType::Fp8Blockwise, .std_moe = true});
  add({.name = "replay", .replay = true});
  add({.name = "hidden7168_top8", .hidden = 7168, .topk = 8, .experts_per_rank = 8, .max_tokens = 64,
       .calls = {64, 0, 1, 37}});
  add({.name = "top1", .topk = 1});
  add({.name = "zero_copy", .zero_copy = true});
  add({.name = "skewed", .topk = 3, .routing = RoutingKind::Skewed});
  add({.name = "masked_gather", .routing = RoutingKind::Masked});
  add({.name = "masked_std_moe", .routing = RoutingKind::Masked, .std_moe = true});
  add({.name = "masked_replay", .routing = RoutingKind::Masked, .replay = true});
  std::mt19937 rng(2026);
  std::vector<int64_t> counts(200);
  for (int64_t& n : counts) n = std::uniform_int_distribution<int64_t>(0, 37)(rng);
  add({.name = "alternating_200", .hidden = 128, .calls = counts});
  // Source order (DeepEP's): every row where the reference lists it.
  add({.name = "source_order", .source_order = true});
  add({.name = "source_order_hidden7168_top8_device_count", .hidden = 7168, .topk = 8, .experts_per_rank = 8,
       .max_tokens = 64, .calls = {64, 0, 1, 37}, .device_count = true, .source_order = true});
  add({.name = "source_order_alternating_200", .hidden = 128, .calls = counts, .source_order = true});
  // Standard MoE with weighted entries (DeepEP's low-latency combine bits).
  add({.name = "entries", .std_moe = true, .entry_combine = true});
  add({.name = "entries_hidden7168_top8_zero_copy", .hidden = 7168, .topk = 8, .experts_per_rank = 8,
       .max_tokens = 64, .routing = RoutingKind::Masked, .calls = {64, 0, 1, 37}, .std_moe = true,
       .entry_combine = true, .zero_copy = true});
  // Standard MoE in fp8 (std_moe_quant: DeepEP's low-latency fp8 dispatch),
  // each scale form: codes and scales bit for bit against numerics.h.
  add({.name = "entries_fp8_hidden7168_top8", .hidden = 7168, .topk = 8, .experts_per_rank = 8, .max_tokens = 64,
       .calls = {64, 0, 1, 37}, .std_moe = true, .entry_combine = true, .std_moe_quant = StdMoeQuant::DeepEpFp8});
  add({.name = "entries_fp8_pow2_masked", .hidden = 640, .routing = RoutingKind::Masked, .std_moe = true,
       .entry_combine = true, .std_moe_quant = StdMoeQuant::DeepEpFp8Pow2});
  add({.name = "entries_fp8_ue8m0_hidden7168_top8", .hidden = 7168, .topk = 8, .experts_per_rank = 8,
       .max_tokens = 128, .calls = {128, 1, 7}, .std_moe = true, .entry_combine = true,
       .std_moe_quant = StdMoeQuant::DeepEpFp8Ue8m0});
  // Every case that could run either combine protocol also runs the one
  // auto does not pick for it (otherProtocol).
  for (size_t i = 0, n = cases.size(); i < n; ++i)
    for (EpCase& other : otherProtocol(cases[i])) cases.push_back(std::move(other));
  // Split calls (send half, other work on the stream, receive half) in every
  // kernel family: each combine protocol, quant, std-MoE, and a replay.
  for (size_t i = 0, n = cases.size(); i < n; ++i) {
    for (const char* family : {"bf16_gather", "low_latency_bf16_gather", "staged_bf16_gather", "bf16_scatter",
                               "quant_blockwise", "std_moe", "replay", "hidden7168_top8", "alternating_200",
                               "source_order", "entries"}) {
      if (cases[i].name != family + w) continue;
      EpCase split = cases[i];
      split.split_phase = true;
      split.name = "split_" + split.name;
      cases.push_back(std::move(split));
    }
  }
  return cases;
}

// World 1 and every world up to the GPUs a 4-GPU host has (3: an odd world).
std::vector<EpCase> allGpuCases() {
  std::vector<EpCase> cases;
  for (int world = 1; world <= 4; ++world)
    for (EpCase& c : gpuCases(world)) cases.push_back(std::move(c));
  return cases;
}

// Internode (v2_ll and v2) on GPUs: nodes of gpu_per_node ranks, with NCCL between
// them (the default on GPUs; one GPU per rank) and with the host transport
// (EPJIT_INTERNODE_TRANSPORT=host; nodes of one rank may then share a GPU,
// since no two ranks meet inside a kernel).
std::vector<EpCase> internodeGpuCases() {
  using enum DataType;
  const CombineMode scatter = CombineMode::Scatter;
  std::vector<EpCase> cases;
  std::mt19937 rng(2026);
  std::vector<int64_t> counts(100);
  for (int64_t& n : counts) n = std::uniform_int_distribution<int64_t>(0, 37)(rng);
  for (const InternodeKernel kernel : {InternodeKernel::V2LowLatency, InternodeKernel::V2})
  for (const char* transport : {"nccl", "host"}) {
    for (auto [world, per_node] : {std::pair{2, 1}, {3, 1}, {4, 2}}) {
      auto add = [&](EpCase c) {
        c.name = std::string(kernel == InternodeKernel::V2 ? "internode_v2_" : "internode_") + transport + "_w" +
                 std::to_string(world) + "_g" + std::to_string(per_node) + "_" + c.name;
        c.world = world;
        c.gpu_per_node = per_node;
        c.internode_kernel = kernel;
        c.internode_transport = transport;
        c.ranks = Ranks::Processes;
        cases.push_back(std::move(c));
      };
      add({.name = "bf16_gather"});
      add({.name = "bf16_scatter", .mode = scatter});
      add({.name = "fp8_scales", .data_type = FP8, .scale_dim = 7, .scale_type_size = 4});
      add({.name = "std_moe_scatter", .mode = scatter, .std_moe = true});
      add({.name = "masked_replay", .routing = RoutingKind::Masked, .replay = true});
      add({.name = "skewed_top8_h7168", .hidden = 7168, .topk = 8, .experts_per_rank = 8, .max_tokens = 64,
           .routing = RoutingKind::Skewed, .calls = {64, 0, 1, 37}});
      add({.name = "alternating_100", .hidden = 128, .calls = counts});
      // Source order across nodes runs v2_ll only (v2 is refused with it).
      if (kernel == InternodeKernel::V2LowLatency) {
        add({.name = "source_order_scatter_replay", .mode = scatter, .replay = true, .source_order = true});
        add({.name = "source_order_top8_h7168", .hidden = 7168, .topk = 8, .experts_per_rank = 8, .max_tokens = 64,
             .routing = RoutingKind::Skewed, .calls = {64, 0, 1, 37}, .source_order = true});
      }
    }
  }
  // auto under DP attention: ranks of a call on two sides of its crossover
  // (41 tokens on even ranks, 40 on odd ones, crossover 40), each passing the
  // call's largest count, so all run v2 (or all v2_ll at 7 / 6 tokens).
  for (const char* transport : {"nccl", "host"})
    for (auto [world, per_node] : {std::pair{2, 1}, {3, 1}, {4, 2}})
      cases.push_back({.name = std::string("internode_auto_straddling_") + transport + "_w" + std::to_string(world) +
                               "_g" + std::to_string(per_node),
                       .world = world, .ranks = Ranks::Processes, .hidden = 128, .max_tokens = 60,
                       .calls = {41, 7, 41, 60, 1}, .replay = true, .gpu_per_node = per_node,
                       .internode_auto_ll_max_tokens = 40, .pass_max_tokens_across_ranks = true,
                       .internode_transport = transport});
  return cases;
}

// Why an internode case cannot run here on the API's GPUs, or "".
std::string internodeSkip(GpuApi api, const EpCase& c) {
  if (std::string none = noGpu(api); !none.empty()) return none;
  const int count = gpusOf(api).count;
  const bool shares_gpus = count < c.world;
  if (shares_gpus && c.internode_transport == "nccl")
    return std::string(api == GpuApi::Cuda ? "NCCL" : "RCCL") + " needs a GPU per rank: " +
           std::to_string(c.world) + " needed, " + std::to_string(count) + " present";
  if (shares_gpus && c.gpu_per_node.value_or(c.world) > 1) return worldSkip(api, c.world);
  return "";
}

class GpuEp : public ::testing::TestWithParam<GpuCase> {};
class GpuEpInternode : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuEpInternode, MatchesTheReference) {
  const GpuApi api = GetParam().api;
  if (const std::string why = internodeSkip(api, GetParam().c); !why.empty()) GTEST_SKIP() << why;
  const EpCase c = onGpu(api, GetParam().c);
  const std::string failures =
      runRanks(c.world, Ranks::Processes, gpuCache(),
               [&](int rank, Communicator& comm, KernelCache& cache) { return runRank(c, rank, comm, cache); },
               c.gpu_per_node, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

INSTANTIATE_TEST_SUITE_P(Cuda, GpuEpInternode, ::testing::ValuesIn(onApi(GpuApi::Cuda, internodeGpuCases())),
                         gpuCaseName);
INSTANTIATE_TEST_SUITE_P(Hip, GpuEpInternode, ::testing::ValuesIn(onApi(GpuApi::Hip, internodeGpuCases())),
                         gpuCaseName);

TEST_P(GpuEp, MatchesTheReference) {
  const GpuApi api = GetParam().api;
  if (const std::string why = worldSkip(api, GetParam().c.world); !why.empty()) GTEST_SKIP() << why;
  const EpCase c = onGpu(api, GetParam().c);
  const std::string failures =
      runRanks(c.world, Ranks::Processes, gpuCache(),
               [&](int rank, Communicator& comm, KernelCache& cache) { return runRank(c, rank, comm, cache); },
               std::nullopt, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

INSTANTIATE_TEST_SUITE_P(Cuda, GpuEp, ::testing::ValuesIn(onApi(GpuApi::Cuda, allGpuCases())), gpuCaseName);
INSTANTIATE_TEST_SUITE_P(Hip, GpuEp, ::testing::ValuesIn(onApi(GpuApi::Hip, allGpuCases())), gpuCaseName);

// dispatch -> combine (identity experts: combine reads the dispatched rows
// themselves) captured once in a CUDA graph, checked eagerly first, then 50
// replays with fresh inputs (payload, weights and routing) copied in; the
// dispatch records into a routing made during the capture, and a check()
// between the legs is refused without invalidating it.
// Split (c.split_phase): dispatch_send alone in one graph, the rest
// (dispatch_recv, combine_send, combine_recv) in a second, and between their
// launches another stream's work that the op's stream waits for by events.
std::string graphRank(const EpCase& c, int rank, Communicator& comm, KernelCache& cache, int replays) {
  Failures failures(rank);
  EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
  const EpDispatchCombineConfig& config = op.config();
  Device& device = comm.device();
  const int64_t n = c.max_tokens, k = c.topk, hidden = c.hidden;
  const size_t row_bytes = config.combine_token_bytes();
  void* x = device.allocate(size_t(n) * config.dispatch_token_bytes());
  void* w = device.allocate(size_t(n * k) * 4);
  void* idx = device.allocate(size_t(n * k) * 4);
  const TensorRef input{x, DType::BF16, {n, hidden}}, weights{w, DType::F32, {n, k}}, indices{idx, DType::I32, {n, k}};
  // c.device_count: n rows passed, call-dependent counts of them moved (the
  // count in device memory), padding of valid experts after them.
  void* count_word = device.allocate(16);
  int64_t moved = n;
  auto load = [&](int call) {
    moved = c.device_count ? (int64_t(call) * 37 + 5) % (n + 1) : n;
    std::vector<reference::RankInput> inputs;
    for (int r = 0; r < c.world; ++r) inputs.push_back(makeInput(c, config, call, r, moved));
    if (c.device_count) {
      std::vector<int32_t> padding(size_t(n * k));
      for (size_t i = 0; i < padding.size(); ++i) padding[i] = int32_t(i % size_t(config.num_experts()));
      device.copy_to_device(idx, padding.data(), padding.size() * 4);
      const int32_t count = int32_t(moved);
      device.copy_to_device(count_word, &count, 4);
    }
    if (moved) {
      device.copy_to_device(x, inputs[size_t(rank)].payload.data(), inputs[size_t(rank)].payload.size());
      device.copy_to_device(w, inputs[size_t(rank)].weights.data(), inputs[size_t(rank)].weights.size() * 4);
      device.copy_to_device(idx, inputs[size_t(rank)].indices.data(), inputs[size_t(rank)].indices.size() * 4);
    }
    return inputs;
  };
  const DispatchOptions counted{.token_count = c.device_count ? count_word : nullptr};
  // Checks the combine; returns the reference's dispatch (what each rank received).
  auto verify = [&](int call, const std::vector<reference::RankInput>& inputs, const CombineResult& result) {
    auto received = reference::dispatch(config, inputs);
    std::vector<std::vector<std::vector<uint8_t>>> outputs(size_t(c.world));
    for (int d = 0; d < c.world; ++d)
      for (const auto& token : received[size_t(d)]) outputs[size_t(d)].push_back(token.payload);
    const auto want = reference::combine(config, received, outputs, inputs);
    std::vector<uint8_t> got(size_t(moved) * row_bytes);
    if (moved) device.copy_to_host(got.data(), result.tokens.data, got.size());
    if (got != want[size_t(rank)])
      failures.add("call ", call, " (", moved, " tokens): combine(dispatch(x)) differs from the reference");
    return received;
  };
  // Eager first.
  auto inputs = load(0);
  DispatchResult d = op.dispatch(input, weights, std::nullopt, indices, nullptr, counted);
  CombineResult r = op.combine(d.tokens, d.weights);
  op.check();
  verify(0, inputs, r);
  // Capture, then replay with fresh inputs. The captured dispatch records
  // (keeping its call) into a routing made inside the capture, as a
  // framework's capture of a dispatch that returns one makes it: each replay
  // must leave that call's count and indices in it.
  device.begin_capture(op.stream());
  // A routing to record (made in the capture, keeping its call) unless the count is on the device.
  std::unique_ptr<Routing> recorded = c.device_count ? nullptr : op.make_routing();
  const DispatchOptions options = c.device_count ? counted : DispatchOptions{.keep_call = true};
  std::unique_ptr<Graph> send_graph;
  if (c.split_phase) {
    d = op.dispatch_send(input, weights, std::nullopt, indices, recorded.get(), options);
    send_graph = device.end_capture(op.stream());
    device.begin_capture(op.stream());
    op.dispatch_recv();
  } else {
    d = op.dispatch(input, weights, std::nullopt, indices, recorded.get(), options);
  }
  // A call that waits on the host is refused without ending the capture.
  if (const std::string refused = errorOf([&] { op.check(); });
      refused.find("while the op's stream is capturing a graph") == std::string::npos)
    failures.add("check() in the capture: '", refused, "'");
  if (c.split_phase) {
    op.combine_send(d.tokens, d.weights);
    r = op.combine_recv();
  } else {
    r = op.combine(d.tokens, d.weights);
  }
  std::unique_ptr<Graph> graph = device.end_capture(op.stream());
  // The work between the halves: a copy on another stream, ordered after the
  // send half and before the receive half by events.
  std::unique_ptr<Stream> other = device.create_stream();
  std::unique_ptr<Event> sent = device.create_event(EventUse::completion);
  std::unique_ptr<Event> other_done = device.create_event(EventUse::completion);
  constexpr size_t kOtherBytes = 8 << 20;
  void* other_from = device.allocate(kOtherBytes);
  void* other_to = device.allocate(kOtherBytes);
  for (int replay = 1; replay <= replays && !failures.any(); ++replay) {
    inputs = load(replay);
    comm.barrier();  // nobody replays into a peer still reading the previous call
    if (send_graph) {
      send_graph->launch(op.stream());
      sent->record(op.stream());
      sent->enqueue_wait(*other);
      device.copy_async(other_to, other_from, kOtherBytes, *other);
      other_done->record(*other);
      other_done->enqueue_wait(op.stream());
    }
    graph->launch(op.stream());
    op.check();
    const auto received = verify(replay, inputs, r);
    if (!recorded) continue;
    const RecordedCall kept = op.recorded_call(*recorded);
    int32_t kept_total = -1;
    std::vector<int32_t> kept_indices(size_t(n * k));
    device.copy_to_host(&kept_total, kept.total_recv.data, 4);
    device.copy_to_host(kept_indices.data(), kept.indices.data, kept_indices.size() * 4);
    if (kept_total != int32_t(received[size_t(rank)].size()))
      failures.add("replay ", replay, ": the routing made in the capture kept ", kept_total, " received rows, not ",
                   received[size_t(rank)].size());
    if (kept_indices != inputs[size_t(rank)].indices)
      failures.add("replay ", replay, ": the routing made in the capture kept other indices than the replay's");
  }
  graph.reset();
  send_graph.reset();
  other->synchronize();
  op.close();
  for (void* p : {x, w, idx, other_from, other_to, count_word}) device.release(p);
  return failures.text();
}

// The NCCL communicator the internode transport and the bench's baselines
// use, on one GPU: loaded by dlopen, created over epjit's bootstrap, and a
// grouped send to itself of an odd number of bytes arrives intact; adopting
// a null communicator is an error.
class GpuNccl : public OnEveryGpuApi {};

TEST_P(GpuNccl, AOneRankCommunicatorMovesBytesToItself) {
  const GpuApi api = GetParam();
  if (const std::string none = noGpu(api); !none.empty()) GTEST_SKIP() << none;
  const std::string failures = runRanks(
      1, Ranks::Processes, gpuCache(),
      [&](int, Communicator& comm, KernelCache&) -> std::string {
        Device& device = comm.device();
        auto nccl = NcclCommunicator::create(comm);
        const size_t bytes = 1000003;
        std::vector<uint8_t> pattern(bytes);
        for (size_t i = 0; i < bytes; ++i) pattern[i] = uint8_t(i * 131 + 7);
        void* from = device.allocate(bytes);
        void* to = device.allocate(bytes);
        device.copy_to_device(from, pattern.data(), bytes);
        device.fill_zero(to, bytes);
        auto stream = device.create_stream();
        nccl->exchange({{0, from, bytes}}, {{0, to, bytes}}, stream->native_handle());
        stream->synchronize();
        std::vector<uint8_t> got(bytes);
        device.copy_to_host(got.data(), to, bytes);
        device.release(from);
        device.release(to);
        std::string f;
        if (got != pattern) f += "the bytes sent to itself differ\n";
        const std::string adopted = errorOf([&] { NcclCommunicator::adopt(comm, nullptr); });
        if (adopted.find("null ncclComm_t") == std::string::npos) f += "adopting null: '" + adopted + "'\n";
        std::fprintf(stderr, "NCCL library: %s\n", nccl->library().c_str());
        return f;
      },
      std::nullopt, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuNccl);

// The tests run once per API and internode kernel, named by the kernel.
using ApiAndKernel = std::tuple<GpuApi, InternodeKernel>;
const auto kBothInternodeKernels = ::testing::Values(InternodeKernel::V2LowLatency, InternodeKernel::V2);
std::string internodeKernelName(const ::testing::TestParamInfo<ApiAndKernel>& info) {
  return std::get<1>(info.param) == InternodeKernel::V2 ? "v2" : "v2_ll";
}
#define EPJIT_INSTANTIATE_PER_INTERNODE_KERNEL(suite)                                                         \
  INSTANTIATE_TEST_SUITE_P(Cuda, suite, ::testing::Combine(::testing::Values(GpuApi::Cuda), kBothInternodeKernels), \
                           internodeKernelName);                                                              \
  INSTANTIATE_TEST_SUITE_P(Hip, suite, ::testing::Combine(::testing::Values(GpuApi::Hip), kBothInternodeKernels),   \
                           internodeKernelName)

// The internode kernels' NCCL sends and receives are captured with them
// (both modes move fixed sizes, so nothing is read on the host): two nodes
// of one GPU each, replayed with fresh inputs, every replay exact.
class GpuEpInternodeGraph : public ::testing::TestWithParam<ApiAndKernel> {};

TEST_P(GpuEpInternodeGraph, ReplaysFromAGraph) {
  const auto [api, kernel] = GetParam();
  EpCase c{.name = "graph_internode", .world = 2, .hidden = 7168, .topk = 8, .experts_per_rank = 16,
           .max_tokens = 96, .gpu_per_node = 1, .internode_kernel = kernel, .internode_transport = "nccl"};
  if (const std::string why = internodeSkip(api, c); !why.empty()) GTEST_SKIP() << why;
  c = onGpu(api, c);
  const std::string failures = runRanks(
      c.world, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        ::setenv("EPJIT_INTERNODE_TRANSPORT", "nccl", 1);
        return graphRank(c, rank, comm, cache, 50);
      },
      c.gpu_per_node, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

EPJIT_INSTANTIATE_PER_INTERNODE_KERNEL(GpuEpInternodeGraph);

// The host transport waits for the stream on the host, so a capture of an
// op that uses it is refused with an epjit::Error before anything crosses;
// the op then runs eagerly as before.
class GpuEpGraph : public OnEveryGpuApi {};

TEST_P(GpuEpGraph, TheHostTransportRefusesACapture) {
  const GpuApi api = GetParam();
  EpCase c{.name = "capture_host_transport", .world = 2, .hidden = 128, .topk = 2, .experts_per_rank = 4,
           .max_tokens = 8, .gpu_per_node = 1, .internode_kernel = InternodeKernel::V2LowLatency,
           .internode_transport = "host"};
  if (const std::string why = internodeSkip(api, c); !why.empty()) GTEST_SKIP() << why;
  c = onGpu(api, c);
  const std::string failures = runRanks(
      c.world, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        ::setenv("EPJIT_INTERNODE_TRANSPORT", "host", 1);
        std::string f;
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        Device& device = comm.device();
        const int64_t n = 4, k = c.topk;
        void* x = device.allocate(size_t(n * c.hidden) * 2);
        void* w = device.allocate(size_t(n * k) * 4);
        void* idx = device.allocate(size_t(n * k) * 4);
        device.fill_zero(x, size_t(n * c.hidden) * 2);
        device.fill_zero(w, size_t(n * k) * 4);
        const std::vector<int32_t> experts = {0, 4, 1, 5, 2, 6, 3, 7};  // every token to both ranks
        device.copy_to_device(idx, experts.data(), experts.size() * 4);
        const TensorRef input{x, DType::BF16, {n, c.hidden}}, weights{w, DType::F32, {n, k}},
            indices{idx, DType::I32, {n, k}};
        device.begin_capture(op.stream());
        const std::string refused = errorOf([&] { op.dispatch(input, weights, std::nullopt, indices); });
        device.end_capture(op.stream());
        if (refused.find("inside a graph capture") == std::string::npos)
          f += "rank " + std::to_string(rank) + ": capture not refused: '" + refused + "'\n";
        const DispatchResult d = op.dispatch(input, weights, std::nullopt, indices);
        op.combine(d.tokens, d.weights);
        if (const std::string after = errorOf([&] { op.check(); }); !after.empty())
          f += "rank " + std::to_string(rank) + " eager after the refusal: " + after + "\n";
        op.close();
        for (void* p : {x, w, idx}) device.release(p);
        return f;
      },
      c.gpu_per_node, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuEpGraph);

// Graph replays and the 10,000-call stress run with each combine protocol
// (auto picks the staged one at these sizes).
using ApiAndProtocol = std::tuple<GpuApi, bool>;  // bool: the low-latency combine protocol
class GpuEpGraphReplay : public ::testing::TestWithParam<ApiAndProtocol> {};
class GpuEpStress : public ::testing::TestWithParam<ApiAndProtocol> {};
std::string protocolName(const ::testing::TestParamInfo<ApiAndProtocol>& info) {
  return std::get<1>(info.param) ? "LowLatency" : "Staged";
}
#define EPJIT_INSTANTIATE_PER_PROTOCOL(suite)                                                                       \
  INSTANTIATE_TEST_SUITE_P(Cuda, suite, ::testing::Combine(::testing::Values(GpuApi::Cuda), ::testing::Bool()), \
                           protocolName);                                                                          \
  INSTANTIATE_TEST_SUITE_P(Hip, suite, ::testing::Combine(::testing::Values(GpuApi::Hip), ::testing::Bool()),   \
                           protocolName)

// The graph replays' case: 96 tokens of hidden 7168, top-8, on as many rank
// processes as the host holds (up to 4), with the combine protocol `low_latency`.
EpCase graphCase(const char* name, GpuApi api, bool low_latency) {
  return onGpu(api, {.name = name, .world = std::min(rankSlots(api), 4), .hidden = 7168, .topk = 8,
                     .experts_per_rank = 16, .max_tokens = 96, .low_latency_combine = low_latency});
}

// What graphRank reports on every rank of `c`.
std::string replayGraphs(GpuApi api, const EpCase& c, int replays) {
  return runRanks(
      c.world, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) { return graphRank(c, rank, comm, cache, replays); },
      std::nullopt, gpuRanks(api));
}

TEST_P(GpuEpGraphReplay, CapturedDispatchCombineReplaysWithFreshInputs) {
  const auto [api, low_latency] = GetParam();
  if (const std::string none = noGpu(api); !none.empty()) GTEST_SKIP() << none;
  EXPECT_EQ(replayGraphs(api, graphCase("graph", api, low_latency), 50), "");
}

// One graph captured at the op's maximum replayed at 37 token counts from 0
// to 96, each count written to device memory before its replay
// (DispatchOptions::token_count): only the count's rows move.
TEST_P(GpuEpGraphReplay, OneGraphAtTheMaximumServesEveryTokenCount) {
  const auto [api, low_latency] = GetParam();
  if (const std::string none = noGpu(api); !none.empty()) GTEST_SKIP() << none;
  EpCase c = graphCase("count_graph", api, low_latency);
  c.device_count = true;
  EXPECT_EQ(replayGraphs(api, c, 37), "");
}

// The same with split calls: dispatch_send in one graph, dispatch_recv and
// the split combine in another, another stream's copy between them.
TEST_P(GpuEpGraphReplay, SplitCallsReplayFromTwoGraphsWithOtherWorkBetweenTheHalves) {
  const auto [api, low_latency] = GetParam();
  if (const std::string none = noGpu(api); !none.empty()) GTEST_SKIP() << none;
  EpCase c = graphCase("split_graph", api, low_latency);
  c.split_phase = true;
  EXPECT_EQ(replayGraphs(api, c, 50), "");
}

EPJIT_INSTANTIATE_PER_PROTOCOL(GpuEpGraphReplay);

// 10,000 dispatch/combine pairs with random token counts, no reset: every
// call's identity combine checked against the reference.
TEST_P(GpuEpStress, TenThousandAlternatingCalls) {
  const auto [api, low_latency] = GetParam();
  if (const std::string none = noGpu(api); !none.empty()) GTEST_SKIP() << none;
  const EpCase c = onGpu(api, {.name = "stress", .world = std::min(rankSlots(api), 4), .hidden = 256, .topk = 4,
                               .experts_per_rank = 4, .max_tokens = 64, .low_latency_combine = low_latency});
  const std::string failures = runRanks(
      c.world, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        Failures f(rank);
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        const EpDispatchCombineConfig& config = op.config();
        Device& device = comm.device();
        const int64_t k = c.topk, hidden = c.hidden;
        void* x = device.allocate(size_t(c.max_tokens * hidden) * 2);
        void* w = device.allocate(size_t(c.max_tokens * k) * 4);
        void* idx = device.allocate(size_t(c.max_tokens * k) * 4);
        std::mt19937 rng(99);
        for (int call = 0; call < 10000 && !f.any(); ++call) {
          const int64_t n0 = std::uniform_int_distribution<int64_t>(0, c.max_tokens)(rng);
          std::vector<reference::RankInput> inputs;
          for (int r = 0; r < c.world; ++r) inputs.push_back(makeInput(c, config, call, r, tokensOn(c, n0, r)));
          const auto& mine = inputs[size_t(rank)];
          const int64_t n = mine.tokens;
          if (n) {
            device.copy_to_device(x, mine.payload.data(), mine.payload.size());
            device.copy_to_device(w, mine.weights.data(), mine.weights.size() * 4);
            device.copy_to_device(idx, mine.indices.data(), mine.indices.size() * 4);
          }
          const DispatchResult d = op.dispatch({x, DType::BF16, {n, hidden}}, {w, DType::F32, {n, k}}, std::nullopt,
                                               {idx, DType::I32, {n, k}});
          const CombineResult r = op.combine(d.tokens, d.weights);
          op.check();
          const auto received = reference::dispatch(config, inputs);
          std::vector<std::vector<std::vector<uint8_t>>> outputs(size_t(c.world));
          for (int dst = 0; dst < c.world; ++dst)
            for (const auto& token : received[size_t(dst)]) outputs[size_t(dst)].push_back(token.payload);
          const auto want = reference::combine(config, received, outputs, inputs);
          std::vector<uint8_t> got(size_t(n * hidden) * 2);
          if (n) device.copy_to_host(got.data(), r.tokens.data, got.size());
          if (got != want[size_t(rank)]) f.add("call ", call, " (", n, " tokens): combine(dispatch(x)) differs");
          comm.barrier();  // the next call's inputs are copied while no peer reads
        }
        op.close();
        for (void* p : {x, w, idx}) device.release(p);
        return f.text();
      },
      std::nullopt, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

EPJIT_INSTANTIATE_PER_PROTOCOL(GpuEpStress);

// Rank 1 never dispatches: rank 0's dispatch wait gives up after the peer
// timeout measured on the GPU (%globaltimer), not after a spin count; the 20
// rounds queued behind it fail at once; reset() on both recovers.
class GpuEpTimeout : public OnEveryGpuApi {};

TEST_P(GpuEpTimeout, APeerThatNeverArrivesIsATimeout) {
  const GpuApi api = GetParam();
  if (const std::string why = worldSkip(api, 2); !why.empty()) GTEST_SKIP() << why;
  constexpr double kTimeout = 3.0;
  EpCase c = onGpu(api, {.name = "timeout", .world = 2, .hidden = 128, .topk = 2, .experts_per_rank = 4,
                         .max_tokens = 4});
  c.peer_timeout_s = kTimeout;
  const std::string failures = runRanks(
      2, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        std::string f;
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        Device& device = comm.device();
        void* x = device.allocate(4096);
        void* w = device.allocate(4096);
        void* idx = device.allocate(4096);
        const int32_t experts[4] = {0, 5, 6, 1};
        device.copy_to_device(idx, experts, sizeof experts);
        const TensorRef input{x, DType::BF16, {2, 128}}, weights{w, DType::F32, {2, 2}},
            indices{idx, DType::I32, {2, 2}};
        if (rank == 0) {
          const auto start = std::chrono::steady_clock::now();
          for (int round = 0; round < 20; ++round) {
            const DispatchResult d = op.dispatch(input, weights, std::nullopt, indices);
            op.combine(d.tokens, d.weights);
          }
          std::string message;
          try {
            op.check();
          } catch (const Error& error) {
            message = error.what();
          }
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (message.find("a peer did not arrive") == std::string::npos)
            f += "rank 0: expected the timeout error, got '" + message + "'\n";
          if (seconds < kTimeout || seconds > kTimeout + 2)
            f += "rank 0: 20 queued rounds failed after " + std::to_string(seconds) + " s (timeout " +
                 std::to_string(kTimeout) + " s)\n";
          std::fprintf(stderr, "rank 0: the wait gave up after %.2f s (timeout %.1f s, 20 rounds queued)\n", seconds,
                       kTimeout);
        }
        op.reset();
        const DispatchResult d = op.dispatch(input, weights, std::nullopt, indices);
        op.combine(d.tokens, d.weights);
        try {
          op.check();
        } catch (const Error& error) {
          f += "rank " + std::to_string(rank) + " after reset: " + error.what() + "\n";
        }
        op.close();
        for (void* p : {x, w, idx}) device.release(p);
        return f;
      },
      std::nullopt, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuEpTimeout);

// Internode over NCCL, rank 1 never calls: rank 0's transfer waits in
// NCCL's kernels, which have no timeout of their own. The transfer watch
// aborts the NCCL communicator one peer timeout after the transfer could
// start, so check() returns (with why) instead of hanging, a call before
// reset() is refused, and reset() on both ranks makes a new communicator.
class GpuEpInternodeTimeout : public ::testing::TestWithParam<ApiAndKernel> {};

TEST_P(GpuEpInternodeTimeout, AnOffNodePeerThatNeverArrivesAbortsTheTransfer) {
  const auto [api, kernel] = GetParam();
  constexpr double kTimeout = 3.0;
  EpCase c{.name = "internode_timeout", .world = 2, .hidden = 128, .topk = 2, .experts_per_rank = 4,
           .max_tokens = 4, .gpu_per_node = 1, .internode_kernel = kernel, .internode_transport = "nccl"};
  c.peer_timeout_s = kTimeout;
  if (const std::string why = internodeSkip(api, c); !why.empty()) GTEST_SKIP() << why;
  c = onGpu(api, c);
  const std::string failures = runRanks(
      2, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        std::string f;  // NCCL is the GPUs' default transport: nothing to set
        const std::string who = "rank " + std::to_string(rank) + ": ";
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        Device& device = comm.device();
        void* x = device.allocate(4096);
        void* w = device.allocate(4096);
        void* idx = device.allocate(4096);
        device.fill_zero(x, 4096);
        device.fill_zero(w, 4096);
        const int32_t experts[4] = {0, 5, 6, 1};  // both tokens to both ranks
        device.copy_to_device(idx, experts, sizeof experts);
        const TensorRef input{x, DType::BF16, {2, 128}}, weights{w, DType::F32, {2, 2}},
            indices{idx, DType::I32, {2, 2}};
        if (rank == 0) {
          const auto start = std::chrono::steady_clock::now();
          const DispatchResult d = op.dispatch(input, weights, std::nullopt, indices);
          op.combine(d.tokens, d.weights);
          const std::string message = errorOf([&] { op.check(); });
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (message.find("an internode transfer failed") == std::string::npos)
            f += who + "expected the transfer failure, got '" + message + "'\n";
          if (seconds < kTimeout || seconds > kTimeout + 3)
            f += who + "the transfer failed after " + std::to_string(seconds) + " s (timeout " +
                 std::to_string(kTimeout) + " s)\n";
          const std::string refused = errorOf([&] { op.dispatch(input, weights, std::nullopt, indices); });
          if (refused.find("after an internode transfer failed") == std::string::npos)
            f += who + "a dispatch before reset() was not refused: '" + refused + "'\n";
          std::fprintf(stderr, "rank 0: check() reported the transfer after %.2f s (timeout %.1f s): %s\n", seconds,
                       kTimeout, message.c_str());
        }
        op.reset();
        for (int round = 0; round < 3; ++round) {
          const DispatchResult d = op.dispatch(input, weights, std::nullopt, indices);
          op.combine(d.tokens, d.weights);
          if (const std::string after = errorOf([&] { op.check(); }); !after.empty())
            f += who + "after reset, round " + std::to_string(round) + ": " + after + "\n";
        }
        op.close();
        for (void* p : {x, w, idx}) device.release(p);
        return f;
      },
      c.gpu_per_node, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

EPJIT_INSTANTIATE_PER_INTERNODE_KERNEL(GpuEpInternodeTimeout);

// Stream memory operations from the driver library itself (epjit's runtime
// has no use for them): CUDA's cuStreamWaitValue32_v2 / cuStreamWriteValue32_v2,
// HIP's hipStreamWaitValue32 / hipStreamWriteValue32 (the runtime epjit
// loaded). A stream held at a wait on a device word stands for a
// framework's stream that is busy for as long as it likes.
class StreamGate {
 public:
  explicit StreamGate(GpuApi api) : api_(api) {
    if (api == GpuApi::Cuda) {
      library_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!library_) return;
      cuda_wait_ = reinterpret_cast<CudaOp>(dlsym(library_, "cuStreamWaitValue32_v2"));
      cuda_write_ = reinterpret_cast<CudaOp>(dlsym(library_, "cuStreamWriteValue32_v2"));
      return;
    }
    for (const char* name : {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"})
      if ((library_ = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD))) break;
    if (!library_) return;
    hip_wait_ = reinterpret_cast<HipWait>(dlsym(library_, "hipStreamWaitValue32"));
    hip_write_ = reinterpret_cast<HipWrite>(dlsym(library_, "hipStreamWriteValue32"));
  }
  ~StreamGate() {
    if (library_) dlclose(library_);
  }
  bool ok() const { return api_ == GpuApi::Cuda ? cuda_wait_ && cuda_write_ : hip_wait_ && hip_write_; }
  std::string missing() const {
    return api_ == GpuApi::Cuda ? "cuStreamWaitValue32_v2 / cuStreamWriteValue32_v2 not in libcuda.so.1\n"
                                : "hipStreamWaitValue32 / hipStreamWriteValue32 not in the loaded libamdhip64\n";
  }
  // `stream` stops until *word >= value; `open` (on another stream) sets it. 0 or the driver's error code.
  int hold(Stream& stream, void* word, uint32_t value) const {
    if (api_ == GpuApi::Cuda)
      return cuda_wait_(stream.native_handle(), reinterpret_cast<unsigned long long>(word), value, 0 /*GEQ*/);
    return hip_wait_(stream.native_handle(), word, value, 0 /*hipStreamWaitValueGte*/, 0xFFFFFFFFu);
  }
  int open(Stream& stream, void* word, uint32_t value) const {
    if (api_ == GpuApi::Cuda)
      return cuda_write_(stream.native_handle(), reinterpret_cast<unsigned long long>(word), value, 0);
    return hip_write_(stream.native_handle(), word, value, 0);
  }

 private:
  using CudaOp = int (*)(void* stream, unsigned long long word, uint32_t value, unsigned flags);
  using HipWait = int (*)(void* stream, void* word, uint32_t value, unsigned flags, uint32_t mask);
  using HipWrite = int (*)(void* stream, void* word, uint32_t value, unsigned flags);
  GpuApi api_;
  void* library_ = nullptr;
  CudaOp cuda_wait_ = nullptr, cuda_write_ = nullptr;
  HipWait hip_wait_ = nullptr;
  HipWrite hip_write_ = nullptr;
};

// One world-1 rank of `c` whose streams a StreamGate holds: its dispatch
// inputs (call `call`, n tokens) in device memory, a zeroed gate word, and a
// stream held at it until open() (on a stream of its own) lets it go.
struct GatedRank {
  GatedRank(Device& device, const EpCase& c, const EpDispatchCombineConfig& config, int call, int rank, int64_t n)
      : device(device), n(n), k(c.topk), hidden(c.hidden), inputs{makeInput(c, config, call, rank, n)} {
    const reference::RankInput& mine = inputs[0];
    x = device.allocate(mine.payload.size());
    w = device.allocate(mine.weights.size() * 4);
    idx = device.allocate(mine.indices.size() * 4);
    device.copy_to_device(x, mine.payload.data(), mine.payload.size());
    device.copy_to_device(w, mine.weights.data(), mine.weights.size() * 4);
    device.copy_to_device(idx, mine.indices.data(), mine.indices.size() * 4);
    word = device.allocate(4);
    device.fill_zero(word, 4);
    held = device.create_stream();
    opener = device.create_stream();
  }
  ~GatedRank() {
    for (void* p : {x, w, idx, word}) device.release(p);
  }
  int hold(const StreamGate& gate) { return gate.hold(*held, word, 1); }
  int open(const StreamGate& gate) { return gate.open(*opener, word, 1); }
  DispatchResult dispatch(EpDispatchCombineOp& op, Routing* record = nullptr) {
    return op.dispatch({x, DType::BF16, {n, hidden}}, {w, DType::F32, {n, k}}, std::nullopt, {idx, DType::I32, {n, k}},
                       record);
  }

  Device& device;
  const int64_t n, k, hidden;
  const std::vector<reference::RankInput> inputs;
  void *x = nullptr, *w = nullptr, *idx = nullptr, *word = nullptr;
  std::unique_ptr<Stream> held, opener;
};

// What the op reads back or clears between its calls (the host expert
// counts, check(), make_routing(), load_routing(), reset()) waits for the
// op's stream only. Another stream of the device, held at a stream wait the
// whole time, must not hold them up; they used to synchronize the context.
class GpuEpStreams : public OnEveryGpuApi {};

TEST_P(GpuEpStreams, ReadBacksWaitForTheOpsStreamOnly) {
  const GpuApi api = GetParam();
  if (const std::string none = noGpu(api); !none.empty()) GTEST_SKIP() << none;
  const EpCase c = onGpu(api, {.name = "stress", .world = 1, .hidden = 256, .topk = 4, .experts_per_rank = 4,
                               .max_tokens = 64});
  const std::string failures = runRanks(
      1, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        Failures f(rank);
        const StreamGate gate(api);
        if (!gate.ok()) return gate.missing();
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        const EpDispatchCombineConfig& config = op.config();
        Device& device = comm.device();
        GatedRank gated(device, c, config, 5, rank, 37);
        const int64_t n = gated.n, k = gated.k, hidden = gated.hidden;
        const std::vector<reference::RankInput>& inputs = gated.inputs;
        const reference::RankInput& mine = inputs[0];
        if (const int status = gated.hold(gate); status != 0)
          return "the stream wait failed with driver status " + std::to_string(status) + "\n";

        std::atomic<const char*> step{"make_routing"};
        std::vector<uint8_t> got(size_t(n * hidden) * 2);
        std::vector<int> counts;
        // Freed after the stream is let go: a free (cuMemFree) waits for the whole device.
        std::unique_ptr<Routing> routing, loaded;
        auto calls = std::async(std::launch::async, [&] {
          routing = op.make_routing();
          step = "dispatch";
          const DispatchResult d = gated.dispatch(op, routing.get());
          step = "dispatch's kernels";
          op.stream().synchronize();
          step = "local_expert_counts";
          counts = op.local_expert_counts();
          step = "combine and check";
          const CombineResult r = op.combine(d.tokens, d.weights);
          op.check();
          device.copy_to_host(got.data(), r.tokens.data, got.size(), op.stream());
          step = "make_routing and load_routing";
          loaded = op.make_routing();
          op.load_routing(*loaded, op.route_map(*routing), n);
          step = "reset";
          op.reset();
          step = "done";
        });
        if (calls.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
          f.add("the op's ", step.load(), " waited for another stream (30 s) while that stream was held");
        if (const int status = gated.open(gate); status != 0)
          f.add("the stream write failed with driver status ", status);
        gated.held->synchronize();
        calls.get();
        // The calls were right, too: the expert counts and combine(dispatch(x)).
        int64_t counted = 0;
        for (const int count : counts) counted += count;
        int64_t want_counted = 0;
        for (int64_t t = 0; t < n; ++t)
          for (int j = 0; j < k; ++j) {
            const int32_t* row = &mine.indices[size_t(t * k)];
            if (row[j] != kNoExpert && std::find(row, row + j, row[j]) == row + j) ++want_counted;
          }
        if (counted != want_counted) f.add("local_expert_counts sum to ", counted, ", expected ", want_counted);
        const auto received = reference::dispatch(config, inputs);
        std::vector<std::vector<std::vector<uint8_t>>> outputs(1);
        for (const auto& token : received[0]) outputs[0].push_back(token.payload);
        if (got != reference::combine(config, received, outputs, inputs)[0]) f.add("combine(dispatch(x)) differs");
        op.close();
        return f.text();
      },
      std::nullopt, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

// DeepEP's previous_event and async_finish on the native op: a call made
// after wait_for(event) does not start until the event's stream passes the
// record (here a stream held by the gate), and the host is not blocked
// meanwhile; record() marks the call's end for another stream to wait for.
TEST_P(GpuEpStreams, ACallWaitsOnTheDeviceForAnEventOfAnotherStream) {
  const GpuApi api = GetParam();
  if (const std::string none = noGpu(api); !none.empty()) GTEST_SKIP() << none;
  const EpCase c = onGpu(api, {.name = "events", .world = 1, .hidden = 256, .topk = 4, .experts_per_rank = 4,
                               .max_tokens = 64});
  const std::string failures = runRanks(
      1, Ranks::Processes, gpuCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        Failures f(rank);
        const StreamGate gate(api);
        if (!gate.ok()) return gate.missing();
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        const EpDispatchCombineConfig& config = op.config();
        Device& device = comm.device();
        GatedRank gated(device, c, config, 9, rank, 29);
        std::unique_ptr<Event> before = device.create_event(EventUse::completion);
        std::unique_ptr<Event> after = device.create_event(EventUse::completion);
        if (const int status = gated.hold(gate); status != 0)
          return "the stream wait failed with driver status " + std::to_string(status) + "\n";
        before->record(*gated.held);
        op.wait_for(*before);
        const DispatchResult d = gated.dispatch(op);
        op.record(*after);  // the host got here: nothing above waited for the held stream
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (after->completed()) f.add("the dispatch ran before the event it waits for");
        if (const int status = gated.open(gate); status != 0)
          f.add("the stream write failed with driver status ", status);
        after->synchronize();
        if (!before->completed()) f.add("the op's event completed before the one it waited for");
        int32_t total = -1;
        device.copy_to_host(&total, d.total_recv.data, 4, op.stream());
        if (total != int32_t(reference::dispatch(config, gated.inputs)[0].size()))
          f.add("total_recv is ", total, " after the wait");
        op.check();
        gated.held->synchronize();
        op.close();
        return f.text();
      },
      std::nullopt, gpuRanks(api));
  EXPECT_EQ(failures, "");
}

EPJIT_INSTANTIATE_PER_GPU_API(GpuEpStreams);

// The targets EPJIT_GPU_WARM_TARGETS names (comma-separated; default sm90).
std::vector<std::string> warmTargets() {
  const char* text = std::getenv("EPJIT_GPU_WARM_TARGETS");
  std::vector<std::string> targets;
  std::stringstream list(text && *text ? text : "sm90");
  for (std::string name; std::getline(list, name, ',');) {
    const TargetInfo* target = find_target(name);
    if (!target || target->is_host())
      throw Error("EPJIT_GPU_WARM_TARGETS names '" + name + "'", "GPU targets: " + target_names_where([](auto& t) {
                    return !t.is_host();
                  }),
                  "list the targets of the GPU hosts the bundle is for, e.g. sm90,sm100 or gfx942");
    targets.push_back(name);
  }
  return targets;
}

// Not a test of its own: with EPJIT_GPU_WARM_ONLY=DIR, builds every kernel
// the tests above use, for each target of EPJIT_GPU_WARM_TARGETS, into DIR
// (run on the build machine: NVRTC needs no GPU, nor clang for AMD).
TEST(GpuEpWarm, BuildsTheKernelsForAGpuHost) {
  const char* dir = std::getenv("EPJIT_GPU_WARM_ONLY");
  if (!dir || !*dir) GTEST_SKIP() << "set EPJIT_GPU_WARM_ONLY=DIR (and EPJIT_GPU_WARM_TARGETS) to warm the kernels";
  CacheOptions options = CacheOptions::from_environment();
  options.dir = dir;
  KernelCache cache(options);
  std::vector<EpCase> shapes = allGpuCases();
  for (int world = 1; world <= 4; ++world) {
    for (const bool low_latency : {false, true}) {
      shapes.push_back({.name = "graph", .world = world, .hidden = 7168, .topk = 8, .experts_per_rank = 16,
                        .max_tokens = 96, .low_latency_combine = low_latency});
      shapes.push_back({.name = "stress", .world = world, .hidden = 256, .topk = 4, .experts_per_rank = 4,
                        .max_tokens = 64, .low_latency_combine = low_latency});
    }
  }
  shapes.push_back({.name = "timeout", .world = 2, .hidden = 128, .topk = 2, .experts_per_rank = 4, .max_tokens = 4});
  for (EpCase& c : internodeGpuCases()) shapes.push_back(std::move(c));
  shapes.push_back({.name = "capture_host_transport", .world = 2, .hidden = 128, .topk = 2, .experts_per_rank = 4,
                    .max_tokens = 8, .gpu_per_node = 1, .internode_kernel = InternodeKernel::V2LowLatency});
  for (const InternodeKernel kernel : {InternodeKernel::V2LowLatency, InternodeKernel::V2}) {
    shapes.push_back({.name = "graph_internode", .world = 2, .hidden = 7168, .topk = 8, .experts_per_rank = 16,
                      .max_tokens = 96, .gpu_per_node = 1, .internode_kernel = kernel});
    shapes.push_back({.name = "internode_timeout", .world = 2, .hidden = 128, .topk = 2, .experts_per_rank = 4,
                      .max_tokens = 4, .gpu_per_node = 1, .internode_kernel = kernel});
  }
  std::vector<EpCase> cases;
  for (const std::string& target : warmTargets())
    for (EpCase c : shapes) {
      c.target = target;
      cases.push_back(std::move(c));
    }
  for (const EpCase& c : cases) {
    const KernelSpec spec = kernel_spec(configFor(c, 0));
    EXPECT_NO_THROW(cache.get(spec)) << spec.canonical();
  }
}

}  // namespace
}  // namespace epjit::testing
