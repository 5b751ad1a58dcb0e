// epjit-bench: builds an EpDispatchCombineOp per rank, runs the identity-expert
// check at every point, then times dispatch and combine over a token sweep.
//
//   epjit-bench [--target host] [--world 4] [--ranks-as threads|processes]
//               [--tokens 1,37,128] [--hidden 7168] [--topk 8] [--experts-per-rank 64]
//               [--dtype bf16|f32|fp8|fp4] [--combine-dtype bf16|f32]
//               [--quant none|fp8_direct_cast|fp8_blockwise] [--combine-mode gather|scatter]
//               [--std-moe] [--replay] [--split] [--device-count] [--routing uniform|skewed|local] [--seed N]
//               [--low-latency-combine auto|on|off] [--receive-order arrival|source]
//               [--dispatch-blocks N] [--dispatch-warps N] [--combine-blocks N] [--combine-warps N]
//               [--iters N] [--warmup N] [--check-only] [--json FILE] [--cache-dir DIR]
//
// Exit status: 0; 1 when an identity check failed; 2 for an invalid
// configuration (the validation message); 3 when a run failed otherwise.
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "baselines.h"
#include "bench.h"
#include "epjit/ep/op.h"
#include "epjit/error.h"
#include "epjit/logging.h"

namespace {

using namespace epjit;
using namespace epjit::bench;

std::vector<int64_t> parse_tokens(const std::string& text) {
  std::vector<int64_t> tokens;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int64_t value = -1;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || value < 0)
      throw Error("--tokens '" + text + "' has '" + item + "'", "comma-separated token counts >= 0", "e.g. --tokens 1,37,128");
    tokens.push_back(value);
  }
  if (tokens.empty()) throw Error("--tokens is empty", "at least one token count", "e.g. --tokens 1,37,128");
  return tokens;
}

RoutingKind parse_routing(const std::string& text) {
  if (text == "uniform") return RoutingKind::Uniform;
  if (text == "skewed") return RoutingKind::Skewed;
  if (text == "local") return RoutingKind::Local;
  throw Error("--routing '" + text + "' is not known", "uniform, skewed or local", "pick one of them");
}

std::string cpu_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "CPU";
}

KernelCache make_cache(const std::string& dir) {
  CacheOptions options = CacheOptions::from_environment();
  if (!dir.empty()) options.dir = dir;
  return KernelCache(options);
}

// One GPU per rank (the rank's ordinal; --ranks-per-gpu ranks share one), or the host.
std::unique_ptr<Device> device_of_rank(const Options& o, int rank) {
  return make_device(o.device, o.device == "host" ? 0 : rank / o.ranks_per_gpu);
}

std::string gpu_name(const std::string& device) { return device == "hip" ? "AMD GPU (HIP)" : "CUDA GPU"; }

// Rank 0 gathers every rank's result (the others send theirs and return empty).
std::vector<RankResult> gather(Communicator& comm, const RankResult& mine) {
  const auto all = comm.allgather(serialize(mine));
  std::vector<RankResult> results;
  if (comm.rank() == 0)
    for (const auto& bytes : all) results.push_back(deserialize(bytes));
  return results;
}

int run(const Options& o) {
  std::vector<RankResult> results;
  std::string device_name = o.device == "host" ? "host: " + cpu_name() : gpu_name(o.device);
  const std::string per_gpu =
      o.ranks_per_gpu == 1 ? "one process per GPU" : std::to_string(o.ranks_per_gpu) + " processes per GPU";
  std::string transport = o.device == "cuda"  ? "CUDA IPC, " + per_gpu
                          : o.device == "hip" ? "HIP IPC, " + per_gpu
                          : o.processes       ? "host shared memory (memfd), one process per rank"
                                              : "host shared memory, one thread per rank";
  const CommOptions comm_options{0, o.gpu_per_node};
  if (o.config(0).internode()) {
    const char* chosen = std::getenv("EPJIT_INTERNODE_TRANSPORT");
    const std::string between = chosen && *chosen ? chosen : o.device == "host" ? "host" : "nccl";
    transport += "; internode " + std::string(ep::name_of(o.internode_kernel)) + " between nodes of " +
                 std::to_string(*o.gpu_per_node) + " over " +
                 (between == "host" ? "the host transport (a stand-in for a network)" : between);
  }
  if (!o.processes) {
    const UniqueId id = Communicator::get_unique_id();
    KernelCache cache = make_cache(o.cache_dir);
    auto device = device_of_rank(o, 0);
    std::vector<std::string> errors(static_cast<size_t>(o.world));
    std::vector<std::thread> ranks;
    for (int r = 0; r < o.world; ++r) {
      ranks.emplace_back([&, r] {
        try {
          auto comm = Communicator::init(o.world, r, id, *device, comm_options);
          auto gathered = gather(*comm, run_rank(o, *comm, cache));
          if (r == 0) results = std::move(gathered);
          comm->destroy();
        } catch (const std::exception& error) {
          errors[size_t(r)] = error.what();
        }
      });
    }
    for (std::thread& rank : ranks) rank.join();
    for (int r = 0; r < o.world; ++r)
      if (!errors[size_t(r)].empty())
        throw Error("rank " + std::to_string(r) + " failed: " + errors[size_t(r)], "every rank to finish",
                    "see the message above");
  } else {
    // Ranks 1.. are forked before this process starts the bootstrap's thread
    // (a fork copies only the forking thread); the unique id follows by pipe.
    std::vector<pid_t> children;
    std::vector<int> id_pipes;
    for (int r = 1; r < o.world; ++r) {
      int fds[2];
      if (pipe(fds) != 0) throw Error("pipe failed", "a pipe per rank process", "raise the open-file limit");
      const pid_t pid = fork();
      if (pid == 0) {
        close(fds[1]);
        try {
          UniqueId id;
          if (read(fds[0], id.bytes.data(), id.bytes.size()) != ssize_t(id.bytes.size())) _exit(4);
          KernelCache cache = make_cache(o.cache_dir);
          auto device = device_of_rank(o, r);
          auto comm = Communicator::init(o.world, r, id, *device, comm_options);
          gather(*comm, run_rank(o, *comm, cache));
          comm->destroy();
          _exit(0);
        } catch (const std::exception& error) {
          std::fprintf(stderr, "epjit-bench: rank %d: %s\n", r, error.what());
          _exit(3);
        }
      }
      close(fds[0]);
      children.push_back(pid);
      id_pipes.push_back(fds[1]);
    }
    const UniqueId id = Communicator::get_unique_id();
    for (int fd : id_pipes) {
      if (write(fd, id.bytes.data(), id.bytes.size()) != ssize_t(id.bytes.size()))
        throw Error("cannot pass the unique id to a rank process", "a live child", "see its message above");
      close(fd);
    }
    KernelCache cache = make_cache(o.cache_dir);
    auto device = device_of_rank(o, 0);
    auto comm = Communicator::init(o.world, 0, id, *device, comm_options);
    results = gather(*comm, run_rank(o, *comm, cache));
    comm->destroy();
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error("a rank process failed", "every rank to finish", "see its message above");
    }
  }
  if (o.device != "host") device_name = gpu_name(o.device) + " (" + std::to_string(o.world) + " ranks)";
  return report(o, results, transport, device_name);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"epjit-bench: EP dispatch/combine, identity-checked then timed"};
  Options o;
  std::string tokens = "1,37,128", ranks_as = "threads", dtype = "bf16", combine_dtype, quant = "none",
              combine_mode = "gather", routing = "uniform";
  app.add_option("--target", o.target,
                 "target (" + target_names() + "; default: host on the host device, else the GPU's own: "
                 "sm90 or sm100 by compute capability, gfx942, gfx950, gfx1250 or gfx1200 by its architecture)");
  app.add_option("--device", o.device,
                 "host, cuda (NVIDIA) or hip (AMD); one GPU per rank: use --ranks-as processes")
      ->check(CLI::IsMember({"host", "cuda", "hip"}));
  app.add_option("--world", o.world, "ranks")->check(CLI::Range(1, 64));
  app.add_option("--ranks-as", ranks_as, "threads or processes")->check(CLI::IsMember({"threads", "processes"}));
  app.add_option("--tokens", tokens, "token counts per rank, comma-separated");
  app.add_option("--hidden", o.hidden, "token row length");
  app.add_option("--topk", o.topk, "experts per token");
  app.add_option("--experts-per-rank", o.experts_per_rank, "experts on each rank");
  app.add_option("--dtype", dtype, "dispatch payload type: bf16, f32, fp8, fp4");
  app.add_option("--combine-dtype", combine_dtype, "combine type when it differs (asymmetric legs): bf16, f32");
  app.add_option("--quant", quant, "none, fp8_direct_cast, fp8_blockwise (scatter combine)");
  app.add_option("--combine-mode", combine_mode, "gather or scatter");
  app.add_flag("--std-moe", o.std_moe, "pack into the standard-MoE layout and back");
  app.add_flag("--replay", o.replay, "time dispatches that replay a recorded routing");
  app.add_flag("--device-count", o.device_count,
               "every call passes the largest --tokens rows with its own count in device memory (one graph at the "
               "maximum serves every count)");
  app.add_flag("--split", o.split,
               "time split calls (dispatch_send + dispatch_recv, combine_send + combine_recv, nothing between)");
  app.add_flag("--combine-from-buffer", o.combine_from_buffer,
               "gather: pass combine a buffer of the bench's (combine stages it), not combine_input()");
  app.add_option("--routing", routing, "uniform, skewed (all to rank 0) or local (own rank)");
  app.add_option("--seed", o.seed, "input seed");
  app.add_option("--dispatch-blocks", o.dispatch_blocks, "geometry override");
  app.add_option("--dispatch-warps", o.dispatch_warps, "geometry override");
  app.add_option("--combine-blocks", o.combine_blocks, "geometry override");
  app.add_option("--combine-warps", o.combine_warps, "geometry override");
  app.add_option("--iters", o.iterations, "timed iterations per point")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed iterations per point")->check(CLI::NonNegativeNumber);
  app.add_flag("--check-only", o.check_only, "identity checks only, no timing");
  app.add_flag("--graph", o.graph,
               "also time dispatch and combine replayed from captured graphs, one per leg and both in one (GPUs)");
  app.add_flag("--baselines", o.baselines,
               "also measure NCCL moving the same bytes and the peer-copy ceilings (GPUs; EPJIT_NCCL_LIBRARY)");
  app.add_flag("--warm-only", o.warm_only, "build the op's kernels for --target into the cache, print their key, stop");
  app.add_option("--json", o.json_path, "write the full record as JSON");
  app.add_option("--cache-dir", o.cache_dir, "kernel cache directory (overrides EPJIT_CACHE_DIR)");
  app.add_option("--ranks-per-gpu", o.ranks_per_gpu,
                 "rank processes sharing each GPU (time-sliced, or side by side under MPS): the protocol on one "
                 "GPU, not the link")
      ->check(CLI::Range(1, 8));
  std::string internode_kernel = "auto";
  app.add_option("--gpu-per-node", o.gpu_per_node,
                 "ranks per node; fewer than --world runs the internode path between nodes")
      ->check(CLI::PositiveNumber);
  app.add_option("--internode-kernel", internode_kernel, "internode kernels: v2 (once per node, forwarded), v2_ll (once per rank) or auto (by token count)");
  std::string low_latency_combine = "auto";
  app.add_option("--low-latency-combine", low_latency_combine,
                 "the combine's protocol: on (flagged inboxes), off (staged, by --combine-mode) or auto (on for "
                 "intranode plain ops of at most 32 tokens per rank, the sweep's largest point, and more than one rank)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  std::string receive_order = "arrival";
  app.add_option("--receive-order", receive_order,
                 "where dispatch puts the rows it delivers: arrival (the senders' slot counter) or source (rank 0's "
                 "first, each rank's in token order; DeepEP's order)")
      ->check(CLI::IsMember({"arrival", "source"}));
  CLI11_PARSE(app, argc, argv);
  try {
    epjit::log();  // EPJIT_LOG_LEVEL errors surface here
    o.tokens = parse_tokens(tokens);
    o.processes = ranks_as == "processes";
    o.dtype = ep::parse_data_type(dtype, "dtype");
    if (!combine_dtype.empty()) o.combine_dtype = ep::parse_data_type(combine_dtype, "combine_data_type");
    o.quant = ep::parse_quant_type(quant);
    o.combine_mode = ep::parse_combine_mode(combine_mode);
    o.routing = parse_routing(routing);
    o.internode_kernel = ep::parse_internode_kernel(internode_kernel);
    if (low_latency_combine != "auto") o.low_latency_combine = low_latency_combine == "on";
    o.receive_order = ep::parse_receive_order(receive_order);
    const Vendor vendor = o.device == "hip" ? Vendor::Amd : o.device == "cuda" ? Vendor::Nvidia : Vendor::Cpu;
    if (o.target.empty()) {
      // The GPU's own target, read from it (in a child: the rank processes
      // open the device); --warm-only builds for a GPU that need not be here.
      if (vendor == Vendor::Cpu) {
        o.target = "host";
      } else if (o.warm_only) {
        throw Error("--warm-only on --device " + o.device + " without --target",
                    "the target of the GPUs the kernels are for, one of " +
                        target_names_where([vendor](const TargetInfo& t) { return t.vendor == vendor; }),
                    "pass --target");
      } else {
        const GpuSurvey survey = survey_gpus(o.device);
        if (survey.error) throw *survey.error;
        o.target = survey.target;
      }
    }
    if (o.replay && o.device_count)
      throw Error("--replay with --device-count",
                  "one of them: a replayed routing is recorded with its token count on the host",
                  "drop --replay or --device-count");
    if (const TargetInfo* target = find_target(o.target); target && target->vendor != vendor)
      throw Error("--target " + o.target + " on --device " + o.device,
                  "a target the device runs: " +
                      target_names_where([vendor](const TargetInfo& t) { return t.vendor == vendor; }),
                  "pass --target with one of those");
    ep::EpDispatchCombineConfig config = o.config(0);  // every rank's config differs only in rank
    config.validate();
    if (o.device != "host" && !o.processes && o.world > 1)
      throw Error("--device " + o.device + " with ranks as threads",
                  "--ranks-as processes (one process per GPU: CUDA/HIP IPC maps another process's memory)",
                  "add --ranks-as processes");
    if (o.ranks_per_gpu > 1 && o.device == "host")
      throw Error("--ranks-per-gpu " + std::to_string(o.ranks_per_gpu) + " on the host device",
                  "a GPU device (host ranks share the CPU anyway)", "drop --ranks-per-gpu, or run on --device cuda or hip");
    if (o.ranks_per_gpu > 1 && o.baselines)
      throw Error("--baselines with --ranks-per-gpu " + std::to_string(o.ranks_per_gpu),
                  "one GPU per rank (NCCL refuses two ranks on one GPU, and the link ceilings need two GPUs)",
                  "drop --baselines");
    if (o.baselines && o.device == "host")
      throw Error("--baselines on the host device", "a GPU device (NCCL and peer copies run on GPUs)",
                  "drop --baselines, or run with --device cuda or hip");
    if (o.graph && o.device == "host")
      throw Error("--graph on the host device", "a GPU device (graphs are CUDA/HIP stream capture)",
                  "drop --graph, or run with --device cuda or hip");
    if (o.routing == RoutingKind::Skewed || o.routing == RoutingKind::Local) {
      if (o.topk > o.experts_per_rank)
        throw Error("--routing " + routing + " with --topk " + std::to_string(o.topk) + " > --experts-per-rank " +
                        std::to_string(o.experts_per_rank),
                    "top-k distinct experts on one rank", "raise --experts-per-rank or lower --topk");
    }
  } catch (const epjit::Error& error) {
    std::fprintf(stderr, "epjit-bench: error: %s\n", error.what());
    return 2;
  }
  try {
    if (o.warm_only) {
      KernelCache cache = make_cache(o.cache_dir);
      const KernelSpec spec = ep::kernel_spec(o.config(0));
      cache.get(spec);
      std::printf("%s %s\n", cache.key(spec).c_str(), spec.canonical().c_str());
      // The peer-copy ceiling kernel --baselines uses.
      const KernelSpec peer_copy = bench::peer_copy_spec(o.target);
      cache.get(peer_copy);
      std::printf("%s %s\n", cache.key(peer_copy).c_str(), peer_copy.canonical().c_str());
      return 0;
    }
    return run(o);
  } catch (const epjit::Error& error) {
    std::fprintf(stderr, "epjit-bench: error: %s\n", error.what());
    return 3;
  }
}
