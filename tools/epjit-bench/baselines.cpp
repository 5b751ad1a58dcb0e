// The baselines epjit-bench measures on the same GPUs in the same run:
// NCCL moving the same bytes between the same ranks (grouped ncclSend/ncclRecv,
// the all-to-all MoE frameworks fall back to), and the peer-copy ceilings
// (copy engine, and SM-driven writes by the ep_peer_copy template).
#include "baselines.h"

#include <cstdlib>
#include <cstring>

#include "epjit/comm/nccl.h"
#include "epjit/error.h"
#include "epjit/kernel_module.h"
#include "epjit/window_layout.h"

namespace epjit::bench {

namespace {

template <typename Body>
double time_us(Device& device, Stream& stream, int warmup, int iterations, Body&& body) {
  for (int i = 0; i < warmup; ++i) body();
  auto start = device.create_event(EventUse::timing), stop = device.create_event(EventUse::timing);
  start->record(stream);
  for (int i = 0; i < iterations; ++i) body();
  stop->record(stream);
  stop->synchronize();
  return 1000.0 * stop->elapsed_ms(*start) / iterations;
}

}  // namespace

struct Baselines::Impl {
  Communicator& comm;
  Device& device;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<NcclCommunicator> nccl;
  void* send = nullptr;
  void* recv = nullptr;
  size_t buffer_bytes = 0;

  Impl(Communicator& c, size_t max_bytes)
      : comm(c), device(c.device()), stream(device.create_stream()), nccl(NcclCommunicator::create(c)) {
    buffer_bytes = std::max<size_t>(max_bytes, 256);
    send = device.allocate(buffer_bytes);
    recv = device.allocate(buffer_bytes);
  }
  ~Impl() {
    device.release(send);
    device.release(recv);
  }
};

Baselines::Baselines(Communicator& comm, size_t max_bytes) : impl_(std::make_unique<Impl>(comm, max_bytes)) {}
Baselines::~Baselines() = default;

double Baselines::nccl_exchange_us(const std::vector<size_t>& send_bytes, int warmup, int iterations) {
  Impl& b = *impl_;
  const int world = b.comm.world_size(), rank = b.comm.rank();
  // Every rank learns what it receives from each peer.
  std::vector<uint8_t> mine(size_t(world) * 8);
  std::memcpy(mine.data(), send_bytes.data(), mine.size());
  const auto all = b.comm.allgather(mine);
  std::vector<size_t> recv_bytes(static_cast<size_t>(world));
  for (int s = 0; s < world; ++s) std::memcpy(&recv_bytes[size_t(s)], all[size_t(s)].data() + 8 * rank, 8);
  size_t send_total = 0, recv_total = 0;
  for (int p = 0; p < world; ++p) send_total += send_bytes[size_t(p)], recv_total += recv_bytes[size_t(p)];
  if (send_total > b.buffer_bytes || recv_total > b.buffer_bytes)
    throw Error("the NCCL baseline needs " + std::to_string(std::max(send_total, recv_total)) + " bytes",
                "at most the buffer of " + std::to_string(b.buffer_bytes), "report this as a bug");
  std::vector<NcclCommunicator::Transfer> sends, receives;
  size_t send_at = 0, recv_at = 0;
  for (int p = 0; p < world; ++p) {
    sends.push_back({p, static_cast<char*>(b.send) + send_at, send_bytes[size_t(p)]});
    receives.push_back({p, static_cast<char*>(b.recv) + recv_at, recv_bytes[size_t(p)]});
    send_at += send_bytes[size_t(p)];
    recv_at += recv_bytes[size_t(p)];
  }
  void* stream = b.stream->native_handle();
  b.comm.barrier();
  return time_us(b.device, *b.stream, warmup, iterations, [&] { b.nccl->exchange(sends, receives, stream); });
}

namespace {

constexpr size_t kCeilingRowWords = 3584;  // one 14,336-byte row: a bf16 token of hidden 7168
constexpr size_t kCeilingRows = (size_t(64) << 20) / (kCeilingRowWords * 4);

}  // namespace

KernelSpec peer_copy_spec(const std::string& target) {
  KernelSpec spec{"ep_peer_copy", {}, target};
  spec.set("row_words", int64_t(kCeilingRowWords)).set("window_rows", int64_t(kCeilingRows));
  return spec;
}

Ceilings measure_ceilings(Communicator& comm, KernelCache& cache, const std::string& target, int warmup,
                          int iterations) {
  Device& device = comm.device();
  auto stream = device.create_stream();
  const int world = comm.world_size(), rank = comm.rank(), peer = (rank + 1) % world;
  const size_t rows = kCeilingRows;
  const size_t bytes = rows * kCeilingRowWords * 4;
  const KernelModule module(device, cache.get(peer_copy_spec(target)));
  const Kernel& kernel = module.kernel("ep_peer_copy");
  const WindowLayout layout = WindowLayout::of(module.interface());
  auto window_memory = comm.allocate_symmetric(layout.total);
  void* source = device.allocate(bytes);
  device.fill_zero(source, bytes);
  const Window window = layout.table(window_memory->peers);
  void* target_memory = static_cast<char*>(window_memory->peers.at(size_t(peer))) +
                        layout.offsets[module.interface().region_index("buffer")];

  Ceilings ceilings;
  comm.barrier();
  const double ce_us = time_us(device, *stream, warmup, iterations,
                               [&] { device.copy_async(target_memory, source, bytes, *stream); });
  comm.barrier();
  const KernelArgs args =
      LaunchArgs(kernel).set("source", source).set("rows", rows).set("peer", peer).set("w", window).build();
  const double sm_us = time_us(device, *stream, warmup, iterations,
                               [&] { device.launch(kernel, {132, 16}, args, *stream); });
  const KernelArgs idle =
      LaunchArgs(kernel).set("source", source).set("rows", 0).set("peer", peer).set("w", window).build();
  for (int i = 0; i < warmup; ++i) device.launch(kernel, {128, 16}, idle, *stream);
  std::vector<std::unique_ptr<Event>> marks;
  for (int i = 0; i < 2 * iterations; ++i) marks.push_back(device.create_event(EventUse::timing));
  for (int i = 0; i < iterations; ++i) {
    marks[size_t(2 * i)]->record(*stream);
    device.launch(kernel, {128, 16}, idle, *stream);
    marks[size_t(2 * i + 1)]->record(*stream);
  }
  stream->synchronize();
  for (int i = 0; i < iterations; ++i)
    ceilings.launch_floor_us += 1000.0 * marks[size_t(2 * i + 1)]->elapsed_ms(*marks[size_t(2 * i)]) / iterations;
  comm.barrier();  // no peer writes into this window any more
  ceilings.copy_engine_GBps = double(bytes) / (ce_us * 1e3);
  ceilings.sm_writes_GBps = double(bytes) / (sm_us * 1e3);
  ceilings.bytes = bytes;
  device.release(source);
  return ceilings;
}

}  // namespace epjit::bench
