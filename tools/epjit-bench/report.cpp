// Rank 0's report: a table per point and, with --json, the full record
// (revision, target, device, transport, dtypes, quant, shape, graph mode).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "bench.h"
#include "epjit/error.h"
#include "epjit/version.h"

namespace epjit::bench {

using nlohmann::json;

const char* name_of(RoutingKind routing) {
  switch (routing) {
    case RoutingKind::Uniform: return "uniform";
    case RoutingKind::Skewed: return "skewed";
    case RoutingKind::Local: return "local";
  }
  return "?";
}

namespace {

// A byte stream of plain values (rank results cross the bootstrap as bytes).
class Writer {
 public:
  template <typename T>
  void put(const T& value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put(const std::string& text) {
    put(uint32_t(text.size()));
    bytes.insert(bytes.end(), text.begin(), text.end());
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string text() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string value(bytes_.begin() + long(at_), bytes_.begin() + long(at_ + n));
    at_ += n;
    return value;
  }

 private:
  void need(size_t n) const {
    if (at_ + n > bytes_.size())
      throw Error("a rank's bench result is truncated", "a complete result", "report this as a bug");
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> serialize(const RankResult& r) {
  Writer w;
  w.put(r.rank);
  w.put(r.construct_seconds);
  w.put(r.fetch_seconds);
  w.put(uint8_t(r.dependent_launch ? 1 : 0));
  w.put(r.cache);
  w.put(r.ceiling_copy_engine_GBps);
  w.put(r.ceiling_sm_writes_GBps);
  w.put(r.launch_floor_us);
  w.put(uint32_t(r.points.size()));
  for (const RankPoint& p : r.points) {
    w.put(p.tokens);
    w.put(p.received);
    w.put(p.dispatch_us);
    w.put(p.combine_us);
    w.put(p.graph_dispatch_us);
    w.put(p.graph_combine_us);
    w.put(p.round_trip_us);
    w.put(p.host_round_trip_us);
    w.put(p.graph_round_trip_us);
    w.put(p.one_graph_round_trip_us);
    w.put(p.remote_received);
    w.put(p.network_received);
    w.put(p.nccl_dispatch_us);
    w.put(p.nccl_combine_us);
    w.put(p.check_failure);
  }
  return w.bytes;
}

RankResult deserialize(const std::vector<uint8_t>& bytes) {
  Reader in(bytes);
  RankResult r;
  r.rank = in.get<int>();
  r.construct_seconds = in.get<double>();
  r.fetch_seconds = in.get<double>();
  r.dependent_launch = in.get<uint8_t>() != 0;
  r.cache = in.get<CacheStats>();
  r.ceiling_copy_engine_GBps = in.get<double>();
  r.ceiling_sm_writes_GBps = in.get<double>();
  r.launch_floor_us = in.get<double>();
  const uint32_t n = in.get<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) {
    RankPoint p;
    p.tokens = in.get<int64_t>();
    p.received = in.get<int64_t>();
    p.dispatch_us = in.get<double>();
    p.combine_us = in.get<double>();
    p.graph_dispatch_us = in.get<double>();
    p.graph_combine_us = in.get<double>();
    p.round_trip_us = in.get<double>();
    p.host_round_trip_us = in.get<double>();
    p.graph_round_trip_us = in.get<double>();
    p.one_graph_round_trip_us = in.get<double>();
    p.remote_received = in.get<double>();
    p.network_received = in.get<double>();
    p.nccl_dispatch_us = in.get<double>();
    p.nccl_combine_us = in.get<double>();
    p.check_failure = in.text();
    r.points.push_back(std::move(p));
  }
  return r;
}

int report(const Options& o, const std::vector<RankResult>& ranks, const std::string& transport,
           const std::string& device_name) {
  const ep::EpDispatchCombineConfig config = o.config(0);
  const double token_bytes = double(config.dispatch_token_bytes()), row_bytes = double(config.combine_token_bytes());
  std::printf("epjit-bench %s: target %s on %s, %d ranks (%s), hidden %lld, top-%d, %d experts (%d per rank)\n",
              std::string(git_revision()).c_str(), config.target.c_str(), device_name.c_str(), o.world,
              transport.c_str(), (long long)o.hidden, o.topk, o.world * o.experts_per_rank, o.experts_per_rank);
  std::printf("dispatch %s, combine %s (%s%s%s), quant %s, routing %s%s%s%s, graph mode %s\n",
              ep::name_of(config.dispatch_type()), ep::name_of(config.combine_type()), ep::name_of(o.combine_mode),
              config.uses_low_latency_combine() ? ", low-latency" : "", o.combine_from_buffer ? ", from a buffer" : "", ep::name_of(o.quant), name_of(o.routing),
              o.std_moe ? ", std-MoE" : "",
              o.replay ? ", routing replay"
                       : (config.receive_order == ep::ReceiveOrder::Source ? ", rows in source order" : ""),
              o.split ? (o.device_count ? ", split calls, token count on the device" : ", split calls (send + receive halves)")
                      : (o.device_count ? ", token count on the device (max rows passed)" : ""),
              o.graph ? "eager and graph" : "eager");
  const bool dependent_launch = ranks.front().dependent_launch;
  std::printf("programmatic dependent launch: %s\n",
              dependent_launch ? "on (kernels may launch before the one before them ends)" : "off");
  double construct_max = 0, fetch_max = 0;
  CacheStats total{};
  for (const RankResult& r : ranks) {
    construct_max = std::max(construct_max, r.construct_seconds);
    fetch_max = std::max(fetch_max, r.fetch_seconds);
    // Thread ranks share one cache: count it once.
    if (!o.processes && r.rank != 0) continue;
    total.memory_hits += r.cache.memory_hits;
    total.disk_hits += r.cache.disk_hits + r.cache.readonly_hits;
    total.compiles += r.cache.compiles;
    total.compile_seconds += r.cache.compile_seconds;
    total.lock_waits += r.cache.lock_waits;
  }
  std::printf("JIT: op construction %.3f s (slowest rank; kernels fetched and loaded in %.3f s); kernel cache %s: "
              "%llu compiled (%.2f s), %llu disk hits, %llu memory hits, %llu waits on another rank's compile\n",
              construct_max, fetch_max, total.compiles ? "cold" : "warm", (unsigned long long)total.compiles,
              total.compile_seconds, (unsigned long long)total.disk_hits, (unsigned long long)total.memory_hits,
              (unsigned long long)total.lock_waits);
  std::printf("\n%8s %10s %8s %13s %13s %14s %14s %13s %12s", "tokens", "recv/rank", "check", "dispatch us",
              "combine us", "dispatch GB/s", "combine GB/s", "round trip us", "host rt us");
  if (o.graph)
    std::printf(" %13s %13s %14s %14s %13s %14s", "graph disp us", "graph comb us", "graph disp GB/s", "graph comb GB/s",
                "graph rt us", "1-graph rt us");
  std::printf("\n");

  json points = json::array();
  json baseline_record;
  bool failed = false;
  for (size_t i = 0; i < ranks.front().points.size(); ++i) {
    double dispatch_us = 0, combine_us = 0, received = 0, dispatch_bw = 0, combine_bw = 0;
    double graph_dispatch_us = 0, graph_combine_us = 0, graph_dispatch_bw = 0, graph_combine_bw = 0;
    double round_trip_us = 0, host_round_trip_us = 0, graph_round_trip_us = 0, one_graph_round_trip_us = 0;
    std::string failure;
    for (const RankResult& r : ranks) {
      if (i >= r.points.size()) continue;
      const RankPoint& p = r.points[i];
      dispatch_us = std::max(dispatch_us, p.dispatch_us);
      combine_us = std::max(combine_us, p.combine_us);
      received += double(p.received);
      // Per-rank algorithm bandwidth: received bytes (local included) / time; scales not counted.
      if (p.dispatch_us > 0) dispatch_bw += double(p.received) * token_bytes / (p.dispatch_us * 1e3);
      if (p.combine_us > 0) combine_bw += double(p.received) * row_bytes / (p.combine_us * 1e3);
      graph_dispatch_us = std::max(graph_dispatch_us, p.graph_dispatch_us);
      graph_combine_us = std::max(graph_combine_us, p.graph_combine_us);
      round_trip_us = std::max(round_trip_us, p.round_trip_us);
      host_round_trip_us = std::max(host_round_trip_us, p.host_round_trip_us);
      graph_round_trip_us = std::max(graph_round_trip_us, p.graph_round_trip_us);
      one_graph_round_trip_us = std::max(one_graph_round_trip_us, p.one_graph_round_trip_us);
      if (p.graph_dispatch_us > 0) graph_dispatch_bw += double(p.received) * token_bytes / (p.graph_dispatch_us * 1e3);
      if (p.graph_combine_us > 0) graph_combine_bw += double(p.received) * row_bytes / (p.graph_combine_us * 1e3);
      if (!p.check_failure.empty() && failure.empty()) failure = "rank " + std::to_string(r.rank) + ": " + p.check_failure;
    }
    const double n = double(ranks.size());
    const int64_t tokens = ranks.front().points[i].tokens;
    std::printf("%8lld %10.1f %8s", (long long)tokens, received / n, failure.empty() ? "passed" : "FAILED");
    if (failure.empty() && !o.check_only) {
      std::printf(" %13.1f %13.1f %14.3f %14.3f %13.1f %12.1f", dispatch_us, combine_us, dispatch_bw / n,
                  combine_bw / n, round_trip_us, host_round_trip_us);
      if (o.graph)
        std::printf(" %13.1f %13.1f %14.3f %14.3f %13.1f %14.1f", graph_dispatch_us, graph_combine_us,
                    graph_dispatch_bw / n, graph_combine_bw / n, graph_round_trip_us, one_graph_round_trip_us);
    }
    std::printf("\n");
    if (!failure.empty()) {
      std::fprintf(stderr, "identity check failed at %lld tokens: %s\n", (long long)tokens, failure.c_str());
      failed = true;
    }
    json point = {{"tokens_per_rank", tokens}, {"received_per_rank", received / n},
                  {"identity_check", failure.empty() ? "passed" : failure}};
    if (failure.empty() && !o.check_only) {
      point["dispatch_us_max_rank"] = dispatch_us;
      point["combine_us_max_rank"] = combine_us;
      point["dispatch_algbw_GBps_per_rank"] = dispatch_bw / n;
      point["combine_algbw_GBps_per_rank"] = combine_bw / n;
      point["round_trip_us_max_rank"] = round_trip_us;
      point["host_round_trip_us_max_rank"] = host_round_trip_us;
      if (o.graph) {
        point["graph_dispatch_us_max_rank"] = graph_dispatch_us;
        point["graph_combine_us_max_rank"] = graph_combine_us;
        point["graph_dispatch_algbw_GBps_per_rank"] = graph_dispatch_bw / n;
        point["graph_combine_algbw_GBps_per_rank"] = graph_combine_bw / n;
        point["graph_round_trip_us_max_rank"] = graph_round_trip_us;
        point["one_graph_round_trip_us_max_rank"] = one_graph_round_trip_us;
      }
    }
    points.push_back(point);
  }
  if (o.baselines && !o.check_only) {
    double ce = 1e300, sm = 1e300, floor_us = 0;
    for (const RankResult& r : ranks) {
      ce = std::min(ce, r.ceiling_copy_engine_GBps), sm = std::min(sm, r.ceiling_sm_writes_GBps);
      floor_us = std::max(floor_us, r.launch_floor_us);
    }
    // The ceilings copy into the next rank's window: measured on one node only.
    const bool ceilings_measured = ce > 0 && sm > 0;
    if (ceilings_measured)
      std::printf("\nbaselines on the same GPUs: peer-write ceiling %.1f GB/s (copy engine), %.1f GB/s (SM writes, "
                  "ep_peer_copy); launch floor %.1f us (an empty kernel on the EP kernels' launch path, timed like a "
                  "leg); NCCL grouped send/recv of the same bytes\n",
                  ce, sm, floor_us);
    else
      std::printf("\nbaselines on the same GPUs: NCCL grouped send/recv of the same bytes over the same transport "
                  "(no peer-write ceilings: ranks across nodes)\n");
    std::printf("%8s %8s %8s %12s %12s %10s %10s %13s %9s %9s %13s %9s\n", "tokens", "NVLink", "network",
                "nccl disp us", "nccl comb us", "disp/nccl", "comb/nccl", "disp NVL GB/s", "vs CE", "vs SM",
                "comb NVL GB/s", "vs SM");
    json ceilings = ceilings_measured ? json{{"copy_engine_GBps", ce}, {"sm_writes_GBps", sm}} : json(nullptr);
    json launch_floor = ceilings_measured ? json(floor_us) : json(nullptr);
    for (size_t i = 0; i < ranks.front().points.size(); ++i) {
      double remote = 0, network = 0, received = 0, nccl_d = 0, nccl_c = 0, epjit_d = 0, epjit_c = 0;
      for (const RankResult& r : ranks) {
        if (i >= r.points.size()) continue;
        const RankPoint& p = r.points[i];
        remote += p.remote_received;
        network += p.network_received;
        received += double(p.received);
        nccl_d = std::max(nccl_d, p.nccl_dispatch_us);
        nccl_c = std::max(nccl_c, p.nccl_combine_us);
        epjit_d = std::max(epjit_d, p.dispatch_us);
        epjit_c = std::max(epjit_c, p.combine_us);
      }
      if (epjit_d <= 0) continue;
      const double n = double(ranks.size());
      const double share = received > 0 ? remote / received : 0;
      const double network_share = received > 0 ? network / received : 0;
      // Over NVLink per rank: dispatch sends the rows other ranks of the node
      // receive; combine moves each of them back to its origin.
      const double dispatch_nvlink_GBps = remote / n * token_bytes / (epjit_d * 1e3);
      const double combine_nvlink_GBps = epjit_c > 0 ? remote / n * row_bytes / (epjit_c * 1e3) : 0;
      auto percent_of = [&](double GBps, double ceiling) {
        char text[32] = "-";
        if (ceilings_measured) std::snprintf(text, sizeof text, "%.0f%%", 100 * GBps / ceiling);
        return std::string(text);
      };
      const std::string vs_ce = percent_of(dispatch_nvlink_GBps, ce), vs_sm = percent_of(dispatch_nvlink_GBps, sm);
      const std::string combine_vs_sm = percent_of(combine_nvlink_GBps, sm);
      std::printf("%8lld %7.0f%% %7.0f%% %12.1f %12.1f %9.2fx %9.2fx %13.1f %9s %9s %13.1f %9s\n",
                  (long long)ranks.front().points[i].tokens, 100 * share, 100 * network_share, nccl_d, nccl_c,
                  nccl_d / epjit_d, nccl_c / epjit_c, dispatch_nvlink_GBps, vs_ce.c_str(), vs_sm.c_str(), combine_nvlink_GBps,
                  combine_vs_sm.c_str());
      json& point = points[i];
      point["nvlink_share_of_received"] = share;
      point["network_share_of_received"] = network_share;
      point["nccl_dispatch_us_max_rank"] = nccl_d;
      point["nccl_combine_us_max_rank"] = nccl_c;
      point["dispatch_speedup_vs_nccl"] = nccl_d / epjit_d;
      point["combine_speedup_vs_nccl"] = nccl_c / epjit_c;
      point["dispatch_nvlink_GBps_per_rank"] = dispatch_nvlink_GBps;
      point["combine_nvlink_GBps_per_rank"] = combine_nvlink_GBps;
      if (ceilings_measured) {
        point["dispatch_vs_copy_engine_ceiling"] = dispatch_nvlink_GBps / ce;
        point["dispatch_vs_sm_write_ceiling"] = dispatch_nvlink_GBps / sm;
        point["combine_vs_copy_engine_ceiling"] = combine_nvlink_GBps / ce;
        point["combine_vs_sm_write_ceiling"] = combine_nvlink_GBps / sm;
      }
    }
    baseline_record = {{"ceilings", ceilings},
                       {"launch_floor_us", launch_floor},
                       {"nccl", "grouped ncclSend/ncclRecv of each rank's dispatch (combine) bytes per peer, "
                                "local included"}};
  }
  std::printf("\nbandwidth: received token bytes per rank (local included, scales not counted) / the slowest rank's "
              "mean time over %d iterations after %d warm-up\n",
              o.iterations, o.warmup);

  if (!o.json_path.empty()) {
    json record = {{"tool", "epjit-bench"},
                   {"revision", std::string(git_revision())},
                   {"version", std::string(version())},
                   {"target", config.target},
                   {"device", device_name},
                   {"transport", transport},
                   {"world_size", o.world},
                   {"gpu_per_node", o.gpu_per_node.value_or(o.world)},
                   {"ranks_per_gpu", o.ranks_per_gpu},
                   {"internode_kernel", o.config(0).internode() ? ep::name_of(o.internode_kernel) : "none (intranode)"},
                   {"dispatch_dtype", ep::name_of(config.dispatch_type())},
                   {"combine_dtype", ep::name_of(config.combine_type())},
                   {"quant", ep::name_of(o.quant)},
                   {"combine_mode", ep::name_of(o.combine_mode)},
                   {"combine_protocol", config.uses_low_latency_combine() ? "low-latency" : "staged"},
                   {"receive_order", ep::name_of(config.receive_order)},
                   {"std_moe", o.std_moe},
                   {"combine_from_buffer", o.combine_from_buffer},
                   {"routing_replay", o.replay},
                   {"split_calls", o.split},
                   {"token_count_on_device", o.device_count},
                   {"routing", name_of(o.routing)},
                   {"shape", {{"hidden", o.hidden}, {"topk", o.topk}, {"experts", o.world * o.experts_per_rank},
                              {"experts_per_rank", o.experts_per_rank}}},
                   {"graph_mode", o.graph ? "eager and graph (dispatch and combine captured as one graph each, and both in one)"
                                         : "eager"},
                   {"dependent_launch", dependent_launch},
                   {"iterations", o.iterations},
                   {"warmup", o.warmup},
                   {"seed", o.seed},
                   {"jit", {{"op_construct_seconds_max_rank", construct_max},
                            {"kernel_fetch_and_load_seconds_max_rank", fetch_max}, {"compiles", total.compiles},
                            {"compile_seconds", total.compile_seconds}, {"disk_hits", total.disk_hits},
                            {"memory_hits", total.memory_hits}}},
                   {"points", points}};
    if (!baseline_record.is_null()) record["baselines"] = baseline_record;
    std::ofstream out(o.json_path);
    if (!out) throw Error("cannot write " + o.json_path, "a writable path", "check --json");
    out << record.dump(2) << "\n";
  }
  return failed ? 1 : 0;
}

}  // namespace epjit::bench
