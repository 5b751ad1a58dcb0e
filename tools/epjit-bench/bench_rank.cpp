// One rank of epjit-bench: every point first passes the identity-expert check
// (experts return their input, so combine(dispatch(x))[t] is the sum of U[t]
// copies of x[t], U[t] the distinct ranks token t went to, each copy through
// the combine leg's numerics), then dispatch and combine are timed with events.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "baselines.h"
#include "bench.h"
#include "epjit/ep/op.h"
#include "epjit/ep/reference.h"
#include "epjit/error.h"
#include "epjit/numerics.h"

namespace epjit::bench {

using namespace epjit::ep;

ep::EpDispatchCombineConfig Options::config(int rank) const {
  EpDispatchCombineConfig c;
  c.rank = rank;
  c.world_size = world;
  c.hidden_dim = hidden;
  c.max_num_inp_token_per_rank = *std::max_element(tokens.begin(), tokens.end());
  c.num_experts_per_rank = experts_per_rank;
  c.num_experts_per_token = topk;
  c.data_type = dtype;
  if (combine_dtype) {
    c.dispatch_data_type = dtype;
    c.combine_data_type = combine_dtype;
  }
  c.combine_mode = combine_mode;
  c.quant_type = quant;
  c.enable_std_moe = std_moe;
  c.dispatch_block_num = dispatch_blocks;
  c.warp_num_per_block = dispatch_warps;
  c.combine_block_num = combine_blocks;
  c.combine_warp_num_per_block = combine_warps;
  c.target = target;
  c.gpu_per_node = gpu_per_node;
  c.internode_kernel = internode_kernel;
  c.low_latency_combine = low_latency_combine;
  c.receive_order = receive_order;
  return c;
}

namespace {

struct Inputs {
  std::vector<uint8_t> payload;
  std::vector<float> weights;
  std::vector<int32_t> indices;
};

Inputs make_inputs(const Options& o, const EpDispatchCombineConfig& config, int rank, int64_t n) {
  std::mt19937 rng(o.seed * 2654435761u + uint32_t(rank) * 40503u + uint32_t(n));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  const size_t elements = size_t(n) * size_t(o.hidden);
  in.payload.assign(size_t(n) * config.dispatch_token_bytes(), 0);
  for (size_t i = 0; i < elements; ++i) reference::store_dispatched_element(config, in.payload.data(), i, normal(rng));
  in.weights.resize(size_t(n) * size_t(o.topk));
  for (float& w : in.weights) w = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  const int epr = o.experts_per_rank, experts = o.world * epr;
  in.indices.resize(size_t(n) * size_t(o.topk));
  std::vector<int> pool;
  for (int64_t t = 0; t < n; ++t) {
    pool.clear();
    if (o.routing == RoutingKind::Uniform)
      for (int e = 0; e < experts; ++e) pool.push_back(e);
    else
      for (int e = 0; e < epr; ++e) pool.push_back((o.routing == RoutingKind::Local ? rank : 0) * epr + e);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int j = 0; j < o.topk; ++j) in.indices[size_t(t * o.topk + j)] = pool[size_t(j) % pool.size()];
  }
  return in;
}

float round_to(DataType type, float v) { return type == DataType::F32 ? v : decode_bf16(encode_bf16(v)); }

// The identity check of one point: "" or what differed.
std::string identity_check(const Options& o, const EpDispatchCombineConfig& config, const Inputs& in, int64_t n,
                           const std::vector<uint8_t>& out, const std::vector<float>& out_weights) {
  const size_t hidden = size_t(o.hidden), k = size_t(o.topk), row_bytes = config.combine_token_bytes();
  const DataType type = config.combine_type();
  for (int64_t t = 0; t < n; ++t) {
    const int32_t* experts = &in.indices[size_t(t) * k];
    // Per destination rank in first-appearance order: how many distinct local experts.
    std::vector<std::pair<int, int>> dests;
    for (size_t j = 0; j < k; ++j) {
      const int d = experts[j] / o.experts_per_rank;
      if (std::find(experts, experts + j, experts[j]) != experts + j) continue;
      auto it = std::find_if(dests.begin(), dests.end(), [&](const auto& p) { return p.first == d; });
      if (it == dests.end()) dests.push_back({d, 1});
      else it->second++;
    }
    const uint8_t* x = &in.payload[size_t(t) * config.dispatch_token_bytes()];
    // Each destination's contribution, summed in the combine's order
    // (reference::summation_groups: one group, or internode v2's two levels).
    auto contribution = [&](int dest) {
      const int local_experts =
          std::find_if(dests.begin(), dests.end(), [&](const auto& p) { return p.first == dest; })->second;
      std::vector<float> row(hidden);
      for (size_t i = 0; i < hidden; ++i) {
        const float c = round_to(type, reference::dispatched_element(config, x, i));
        float s = c;  // std-MoE: the rank's experts' outputs summed, rounded once
        if (o.std_moe)
          for (int e = 1; e < local_experts; ++e) s += c;
        row[i] = o.std_moe ? round_to(type, s) : c;
      }
      return reference::through_quantization(config, std::move(row));
    };
    std::vector<float> acc;
    for (const std::vector<int>& group : reference::summation_groups(config, config.rank, n, experts)) {
      std::vector<float> partial;
      for (int dest : group) {
        std::vector<float> row = contribution(dest);
        if (partial.empty()) partial = std::move(row);
        else for (size_t i = 0; i < hidden; ++i) partial[i] += row[i];
      }
      if (acc.empty()) acc = std::move(partial);
      else for (size_t i = 0; i < hidden; ++i) acc[i] += partial[i];
    }
    if (acc.empty()) acc.assign(hidden, 0.0f);
    for (size_t i = 0; i < hidden; ++i) {
      const float want = round_to(type, acc[i]);
      float got;
      if (type == DataType::F32) {
        std::memcpy(&got, &out[size_t(t) * row_bytes + 4 * i], 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, &out[size_t(t) * row_bytes + 2 * i], 2);
        got = decode_bf16(bits);
      }
      if (std::memcmp(&got, &want, 4) != 0)
        return "token " + std::to_string(t) + " element " + std::to_string(i) + ": combine gave " +
               std::to_string(got) + ", identity experts give " + std::to_string(want) + " (" +
               std::to_string(dests.size()) + " destination ranks)";
    }
    const std::vector<float> weights =
        reference::combined_weights(config, config.rank, n, experts, &in.weights[size_t(t) * k]);
    for (size_t j = 0; j < k; ++j) {
      if (out_weights[size_t(t) * k + j] != weights[j])
        return "token " + std::to_string(t) + " weight " + std::to_string(j) + ": combine gave " +
               std::to_string(out_weights[size_t(t) * k + j]) + ", expected " + std::to_string(weights[j]);
    }
  }
  return "";
}

// Captures one dispatch and one combine as two graphs, then times their
// replays like the eager calls (the identity check already ran eagerly).
template <typename Dispatch, typename Combine>
void time_graphs(const Options& o, EpDispatchCombineOp& op, Device& device,
                 std::vector<std::unique_ptr<Event>>& events, Dispatch& dispatch, Combine& combine, RankPoint& point) {
  device.begin_capture(op.stream());
  const DispatchResult dispatched = dispatch(o.replay);
  std::unique_ptr<Graph> dispatch_graph = device.end_capture(op.stream());
  device.begin_capture(op.stream());
  combine(dispatched);
  std::unique_ptr<Graph> combine_graph = device.end_capture(op.stream());
  for (int i = 0; i < o.warmup; ++i) {
    dispatch_graph->launch(op.stream());
    combine_graph->launch(op.stream());
  }
  for (int i = 0; i < o.iterations; ++i) {
    events[size_t(3 * i)]->record(op.stream());
    dispatch_graph->launch(op.stream());
    events[size_t(3 * i + 1)]->record(op.stream());
    combine_graph->launch(op.stream());
    events[size_t(3 * i + 2)]->record(op.stream());
  }
  op.check();
  for (int i = 0; i < o.iterations; ++i) {
    point.graph_dispatch_us += 1000.0 * events[size_t(3 * i + 1)]->elapsed_ms(*events[size_t(3 * i)]);
    point.graph_combine_us += 1000.0 * events[size_t(3 * i + 2)]->elapsed_ms(*events[size_t(3 * i + 1)]);
  }
  point.graph_dispatch_us /= o.iterations;
  point.graph_combine_us /= o.iterations;
  events[0]->record(op.stream());
  for (int i = 0; i < o.iterations; ++i) {
    dispatch_graph->launch(op.stream());
    combine_graph->launch(op.stream());
  }
  events[1]->record(op.stream());
  op.check();
  point.graph_round_trip_us = 1000.0 * events[1]->elapsed_ms(*events[0]) / o.iterations;

  device.begin_capture(op.stream());
  combine(dispatch(o.replay));
  std::unique_ptr<Graph> round_trip_graph = device.end_capture(op.stream());
  for (int i = 0; i < o.warmup; ++i) round_trip_graph->launch(op.stream());
  events[0]->record(op.stream());
  for (int i = 0; i < o.iterations; ++i) round_trip_graph->launch(op.stream());
  events[1]->record(op.stream());
  op.check();
  point.one_graph_round_trip_us = 1000.0 * events[1]->elapsed_ms(*events[0]) / o.iterations;
}

}  // namespace

RankResult run_rank(const Options& o, Communicator& comm, KernelCache& cache) {
  Device& device = comm.device();
  RankResult result;
  result.rank = comm.rank();
  const auto start = std::chrono::steady_clock::now();
  EpDispatchCombineOp op(o.config(comm.rank()), comm, {&cache, nullptr});
  result.construct_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.fetch_seconds = op.kernel_fetch_seconds();
  result.dependent_launch = device.overlaps_dependent_launches();
  const EpDispatchCombineConfig& config = op.config();
  const int64_t cap = op.capacity(), max_n = config.max_num_inp_token_per_rank, k = o.topk;
  const size_t token_bytes = config.dispatch_token_bytes(), row_bytes = config.combine_token_bytes();
  const DType row_type = config.combine_type() == DataType::F32 ? DType::F32 : DType::BF16;

  void* d_payload = device.allocate(std::max<size_t>(16, size_t(max_n) * token_bytes));
  void* d_weights = device.allocate(std::max<size_t>(16, size_t(max_n * k) * 4));
  void* d_indices = device.allocate(std::max<size_t>(16, size_t(max_n * k) * 4));
  // --device-count: every call passes max_n rows and its count in this word.
  void* d_count = o.device_count ? device.allocate(16) : nullptr;
  if (o.device_count) {
    // The padding rows route to expert 0: never read, but valid if they were.
    const std::vector<int32_t> zeros(size_t(max_n * k), 0);
    device.copy_to_device(d_indices, zeros.data(), zeros.size() * 4);
  }
  // Gather combine: experts write straight into the op's window (no staging
  // copy) unless --combine-from-buffer; scatter reads its input in place
  // from a buffer of the bench's.
  const bool in_place = config.combine_mode == CombineMode::Gather && !o.combine_from_buffer;
  void* d_expert = in_place ? nullptr : device.allocate(size_t(cap) * row_bytes);
  const TensorRef expert_in = in_place ? op.combine_input() : TensorRef{d_expert, row_type, {cap, o.hidden}};
  std::unique_ptr<Routing> routing = o.replay ? op.make_routing() : nullptr;
  std::unique_ptr<Baselines> baselines;
  if (o.baselines) {
    const size_t widest = std::max(token_bytes, row_bytes);
    baselines = std::make_unique<Baselines>(comm, size_t(o.world) * size_t(max_n) * widest);
    // The peer-write ceilings need the next rank's window mapped: one node.
    if (!config.internode()) {
      const Ceilings ceilings = measure_ceilings(comm, cache, config.target, o.warmup, o.iterations);
      result.ceiling_copy_engine_GBps = ceilings.copy_engine_GBps;
      result.ceiling_sm_writes_GBps = ceilings.sm_writes_GBps;
      result.launch_floor_us = ceilings.launch_floor_us;
    }
  }
  std::vector<std::unique_ptr<Event>> events;
  for (int i = 0; i < 3 * std::max(o.iterations, 1); ++i) events.push_back(device.create_event(EventUse::timing));

  for (int64_t n : o.tokens) {
    RankPoint point;
    point.tokens = n;
    const Inputs in = make_inputs(o, config, comm.rank(), n);
    if (n) {
      device.copy_to_device(d_payload, in.payload.data(), in.payload.size());
      device.copy_to_device(d_weights, in.weights.data(), in.weights.size() * 4);
      device.copy_to_device(d_indices, in.indices.data(), in.indices.size() * 4);
    }
    const int64_t rows = o.device_count ? max_n : n;
    if (o.device_count) {
      const int32_t count = int32_t(n);
      device.copy_to_device(d_count, &count, 4);
    }
    const DispatchOptions counted{.token_count = d_count};
    const TensorRef input{d_payload, tensor_type_of(config.dispatch_type(), config.target_info()), {rows, o.hidden}};
    const TensorRef weights{d_weights, DType::F32, {rows, k}}, indices{d_indices, DType::I32, {rows, k}};
    // --split: each call as its two halves with nothing between them (what a
    // split call costs over the one-phase call).
    auto dispatch = [&](bool replay) {
      if (replay) return op.dispatch_replay(input, weights, std::nullopt, indices, *routing);
      if (!o.split) return op.dispatch(input, weights, std::nullopt, indices, routing.get(), counted);
      DispatchResult sent = op.dispatch_send(input, weights, std::nullopt, indices, routing.get(), counted);
      op.dispatch_recv();
      return sent;
    };
    auto combine = [&](const DispatchResult& dispatched) {
      if (!o.split) {
        if (o.std_moe) return op.std_moe_combine(op.std_moe_pack().tokens, dispatched.weights);
        return op.combine(expert_in, dispatched.weights);
      }
      if (o.std_moe) op.std_moe_combine_send(op.std_moe_pack().tokens, dispatched.weights);
      else op.combine_send(expert_in, dispatched.weights);
      return op.combine_recv();
    };

    // Identity check (twice with replay: the recording dispatch and a replay).
    for (int pass = 0; pass < (o.replay ? 2 : 1) && point.check_failure.empty(); ++pass) {
      const DispatchResult dispatched = dispatch(pass == 1);
      op.check();
      int32_t total = 0;
      device.copy_to_host(&total, dispatched.total_recv.data, 4);
      point.received = total;
      std::vector<uint8_t> rows(size_t(total) * token_bytes), expert(size_t(total) * row_bytes);
      if (total) device.copy_to_host(rows.data(), dispatched.tokens.data, rows.size());
      for (int32_t i = 0; i < total; ++i) {
        const std::vector<uint8_t> row = reference::scaled_expert_output(config, &rows[size_t(i) * token_bytes], 1.0f);
        std::copy(row.begin(), row.end(), expert.begin() + long(size_t(i) * row_bytes));
      }
      if (total) device.copy_to_device(expert_in.data, expert.data(), expert.size());
      const CombineResult combined = combine(dispatched);
      op.check();
      std::vector<uint8_t> out(size_t(n) * row_bytes);
      std::vector<float> out_weights(size_t(n * k));
      if (n) {
        device.copy_to_host(out.data(), combined.tokens.data, out.size());
        device.copy_to_host(out_weights.data(), combined.weights.data, out_weights.size() * 4);
      }
      point.check_failure = identity_check(o, config, in, n, out, out_weights);
    }
    // Every rank times the same iterations, so they stay in step.
    const auto failures = comm.allgather({uint8_t(point.check_failure.empty() ? 0 : 1)});
    const bool all_passed = std::all_of(failures.begin(), failures.end(), [](const auto& f) { return f[0] == 0; });
    if (all_passed && !o.check_only) {
      for (int i = 0; i < o.warmup; ++i) combine(dispatch(o.replay));
      for (int i = 0; i < o.iterations; ++i) {
        events[size_t(3 * i)]->record(op.stream());
        const DispatchResult dispatched = dispatch(o.replay);
        events[size_t(3 * i + 1)]->record(op.stream());
        combine(dispatched);
        events[size_t(3 * i + 2)]->record(op.stream());
      }
      op.check();
      for (int i = 0; i < o.iterations; ++i) {
        point.dispatch_us += 1000.0 * events[size_t(3 * i + 1)]->elapsed_ms(*events[size_t(3 * i)]);
        point.combine_us += 1000.0 * events[size_t(3 * i + 2)]->elapsed_ms(*events[size_t(3 * i + 1)]);
      }
      point.dispatch_us /= o.iterations;
      point.combine_us /= o.iterations;
      events[0]->record(op.stream());
      const auto enqueue_start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iterations; ++i) combine(dispatch(o.replay));
      const auto enqueued = std::chrono::steady_clock::now();
      events[1]->record(op.stream());
      op.check();
      point.round_trip_us = 1000.0 * events[1]->elapsed_ms(*events[0]) / o.iterations;
      point.host_round_trip_us =
          std::chrono::duration<double, std::micro>(enqueued - enqueue_start).count() / o.iterations;
      if (o.graph) time_graphs(o, op, device, events, dispatch, combine, point);
    }
    // Where this rank's tokens go, and from where it receives (every rank's view).
    std::vector<int64_t> to_rank(size_t(o.world), 0);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int> seen;
      for (int64_t j = 0; j < k; ++j) {
        const int d = in.indices[size_t(t * k + j)] / o.experts_per_rank;
        if (std::find(seen.begin(), seen.end(), d) == seen.end()) seen.push_back(d), to_rank[size_t(d)]++;
      }
    }
    std::vector<uint8_t> mine(size_t(o.world) * 8);
    std::memcpy(mine.data(), to_rank.data(), mine.size());
    const auto everyone = comm.allgather(mine);
    std::vector<int64_t> from_rank(static_cast<size_t>(o.world));
    for (int s = 0; s < o.world; ++s) std::memcpy(&from_rank[size_t(s)], everyone[size_t(s)].data() + 8 * comm.rank(), 8);
    const int per_node = o.gpu_per_node.value_or(o.world);
    for (int s = 0; s < o.world; ++s) {
      if (s == comm.rank()) continue;
      (s / per_node == comm.rank() / per_node ? point.remote_received : point.network_received) +=
          double(from_rank[size_t(s)]);
    }
    if (baselines && all_passed && !o.check_only) {
      std::vector<size_t> dispatch_bytes(static_cast<size_t>(o.world)), combine_bytes(static_cast<size_t>(o.world));
      for (int p = 0; p < o.world; ++p) {
        dispatch_bytes[size_t(p)] = size_t(to_rank[size_t(p)]) * token_bytes;
        combine_bytes[size_t(p)] = size_t(from_rank[size_t(p)]) * row_bytes;  // each row back to its origin
      }
      point.nccl_dispatch_us = baselines->nccl_exchange_us(dispatch_bytes, o.warmup, o.iterations);
      point.nccl_combine_us = baselines->nccl_exchange_us(combine_bytes, o.warmup, o.iterations);
    }
    result.points.push_back(point);
    if (!all_passed) break;
  }
  result.cache = cache.stats();
  op.close();
  for (void* p : {d_payload, d_weights, d_indices, d_expert})
    if (p) device.release(p);
  return result;
}

}  // namespace epjit::bench
