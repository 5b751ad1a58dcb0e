#include "epjit/ep/op.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <span>

#include "epjit/error.h"
#include "epjit/kernel_module.h"
#include "epjit/logging.h"
#include "epjit/window_layout.h"
#include "collective_start.h"
#include "internode.h"
#include "one_call_at_a_time.h"
#include "op_kernels.h"

namespace epjit::ep {

namespace {

KernelCache& process_cache() {
  static KernelCache cache;
  return cache;
}

std::atomic<uint64_t> next_op_id{1};

std::string shape_text(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

}  // namespace

DType tensor_type_of(DataType type, const TargetInfo& target) {
  switch (type) {
    case DataType::BF16: return DType::BF16;
    case DataType::F32: return DType::F32;
    case DataType::FP8: return target.fp8_e4m3 == Fp8Format::E4M3FNUZ ? DType::FP8_E4M3FNUZ : DType::FP8_E4M3FN;
    case DataType::FP4: return DType::FP4_E2M1;
  }
  return DType::BF16;
}

namespace {

// Checks one tensor argument: its dtype, its shape (`expected`; with
// at_least_rows, any first dimension of at least expected[0]) and that it
// has data. `expected` is a list, not a vector: every call checks its
// tensors this way, and a small call's latency includes the host's own work
// one for one.
void expect_tensor(const char* call, const char* what, const TensorRef& tensor, DType dtype,
                   std::initializer_list<int64_t> expected, bool at_least_rows = false) {
  const std::span<const int64_t> shape(expected.begin(), expected.size());
  if (tensor.dtype != dtype)
    throw Error(std::string(call) + ": " + what + " is " + name_of(tensor.dtype), std::string(name_of(dtype)),
                std::string("pass ") + what + " as " + name_of(dtype) + " (the op's configuration fixes it)");
  const bool rows_ok = !tensor.shape.empty() && (at_least_rows ? tensor.shape[0] >= shape[0] : tensor.shape[0] == shape[0]);
  bool ok = tensor.shape.size() == shape.size() && rows_ok;
  for (size_t i = 1; ok && i < shape.size(); ++i) ok = tensor.shape[i] == shape[i];
  if (!ok)
    throw Error(std::string(call) + ": " + what + " has shape " + shape_text(tensor.shape),
                (at_least_rows ? "at least " : "") + shape_text(shape), "reshape or reallocate " + std::string(what));
  if (tensor.data == nullptr && shape[0] > 0)
    throw Error(std::string(call) + ": " + what + " has no data pointer", "device memory of shape " + shape_text(shape),
                "pass an allocated tensor");
}

// A word of the op's memory, read after the op's stream's work (only).
int32_t read_word(Device& device, Stream& stream, const void* base, size_t byte_offset) {
  int32_t value = 0;
  device.copy_to_host(&value, static_cast<const char*>(base) + byte_offset, 4, stream);
  return value;
}

}  // namespace

KernelSpec kernel_spec(const EpDispatchCombineConfig& config) {
  if (config.target.empty())
    throw Error("kernel_spec of a config without a target", "config.target set", "set the target to warm kernels for");
  // One binary serves every schedule variant: the kernels stride over tokens
  // by the launched grid, and the largest block bounds what the compilers
  // plan registers for.
  int warps_per_block = 1;
  for (const ScheduleEntry& entry : config.resolved_schedule())
    warps_per_block = std::max({warps_per_block, entry.dispatch_warps, entry.combine_warps});
  KernelSpec spec{kEpTemplate, {}, config.target};
  spec.set("token_words", int64_t(config.dispatch_token_bytes() / 4))
      .set("scale_bytes", int64_t(config.scale_bytes_per_token()))
      .set("hidden", config.hidden_dim)
      .set("topk", config.num_experts_per_token)
      .set("experts_per_rank", config.num_experts_per_rank)
      .set("world", config.world_size)
      .set("gpu_per_node", config.nodes_gpu_count())
      .set("max_tokens", config.max_num_inp_token_per_rank)
      .set("capacity", config.total_recv_tokens())
      .set("forward_route_rows", forward_route_rows(config))
      .set("combine_mode", name_of(config.combine_mode))
      .set("quant", name_of(config.quant_type))
      .set("std_moe", config.enable_std_moe)
      .set("low_latency", config.uses_low_latency_combine())
      .set("combine_elem", name_of(config.combine_type()))
      .set("warps_per_block", warps_per_block);
  return spec;
}

const char* name_of(DType type) {
  switch (type) {
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
    case DType::FP8_E4M3FN: return "float8_e4m3fn";
    case DType::FP8_E4M3FNUZ: return "float8_e4m3fnuz";
    case DType::FP4_E2M1: return "float4_e2m1";
  }
  return "?";
}

int bits_of(DType type) {
  switch (type) {
    case DType::BF16: return 16;
    case DType::F32:
    case DType::I32: return 32;
    case DType::U8:
    case DType::FP8_E4M3FN:
    case DType::FP8_E4M3FNUZ: return 8;
    case DType::FP4_E2M1: return 4;
  }
  return 8;
}

Routing::Routing(Device& device, Stream& stream, size_t route_bytes, uint64_t op_id)
    : device_(device), op_id_(op_id) {
  route_ = device_.allocate(route_bytes);
  device_.fill_zero(route_, route_bytes, stream);  // a map of a routing never dispatched reads as "nothing sent"
}
Routing::~Routing() {
  device_.release(route_);
  device_.release(kept_);
}

struct EpDispatchCombineOp::Impl {
  EpDispatchCombineConfig config;
  Communicator& comm;
  Device& device;
  const uint64_t id = next_op_id++;
  std::unique_ptr<Stream> own_stream;
  Stream* default_stream = nullptr;  // the options' stream, else own_stream
  Stream* stream = nullptr;          // where calls launch now (set_stream)
  KernelCache* cache = nullptr;
  std::vector<ScheduleEntry> schedule;
  std::unique_ptr<KernelModule> module;
  EpKernels kernels;
  // The module's interface record, kept past close() (route_map() and
  // recorded_call() answer then too); `buffers` points into it.
  ModuleInterface record;
  EpBuffers buffers;
  WindowLayout layout;  // from the module's interface record
  EpWindowMap window;
  std::shared_ptr<SymmetricBuffer> arena;
  std::unique_ptr<InternodeExchange> internode;  // ranks on other nodes (gpu_per_node < world_size)
  void* nccl_communicator = nullptr;             // OpOptions': the caller's ncclComm_t, or null

  Window window_table{};  // every kernel's window parameter (by value)
  void* route = nullptr;            // the op's own route map
  void* outputs_memory = nullptr;   // the "outputs" buffer, and its parts:
  void* std_moe_memory = nullptr;   // the "std_moe" buffer (with enable_std_moe), and its parts:
  void* out_tokens = nullptr;
  void* out_weights = nullptr;
  void* moe_tokens = nullptr;
  void* moe_counts = nullptr;
  void* moe_sources = nullptr;
  void* moe_combine_in = nullptr;
  void* expert_counts = nullptr;  // local_expert_counts_device()'s output

  double fetch_seconds = 0;
  int32_t peer_timeout_ms = 0;  // resolved once (config, else EPJIT_PEER_TIMEOUT_S, else 30 s)

  int64_t dispatched_tokens = -1;  // tokens of the dispatch awaiting combine; -1 none
  // The dispatch awaiting combine took slots from the receive counters (not a
  // replay). Another such dispatch must wait for a combine: a peer that has
  // finished this one could add to a counter this rank's last block has not
  // read and cleared yet. A replay takes no slots, so it may follow directly.
  bool pending_counted_slots = false;
  void* route_in_use = nullptr;    // the route map of the pending dispatch
  bool pending_v2 = false;         // the pending dispatch ran internode v2 (its combine must too)
  bool closed = false;    // calls throw
  bool released = false;  // memory freed (at close(), or at destruction)
  std::atomic<const char*> running_call{nullptr};  // see OneCallAtATime

  OneCallAtATime one_call(const char* call) { return {running_call, call, config.rank}; }

  Impl(EpDispatchCombineConfig c, Communicator& communicator, OpOptions options)
      : config(std::move(c)), comm(communicator), device(communicator.device()) {
    resolve_and_validate();
    nccl_communicator = options.nccl_communicator;
    stream = options.stream;
    if (!stream) {
      own_stream = device.create_stream();
      stream = own_stream.get();
    }
    default_stream = stream;
    cache = options.cache ? options.cache : &process_cache();
    schedule = config.resolved_schedule();
    fetch_kernels();
    allocate();
  }

  ~Impl() { release(); }

  void resolve_and_validate() {
    if (config.target.empty()) {
      const char* env = std::getenv("EPJIT_TARGET");
      config.target = env && *env ? env : device.default_target();
    }
    config.validate();
    peer_timeout_ms = config.peer_timeout_ms();
    if (config.rank != comm.rank() || config.world_size != comm.world_size())
      throw Error("EpDispatchCombineConfig rank/world_size = " + std::to_string(config.rank) + "/" +
                      std::to_string(config.world_size) + " do not match the communicator's " +
                      std::to_string(comm.rank()) + "/" + std::to_string(comm.world_size()),
                  "the communicator's rank and world size", "build the config from comm.rank() and comm.world_size()");
    if (config.internode()) check_internode_kernel();
    if (config.nodes_gpu_count() != comm.node().size())
      throw Error("EpDispatchCombineConfig.gpu_per_node = " + std::to_string(config.nodes_gpu_count()) +
                      " does not match the communicator's node of " + std::to_string(comm.node().size()) + " ranks",
                  "gpu_per_node equal to the ranks the communicator groups on one node",
                  "set gpu_per_node to the communicator's node size, or leave both unset");
    const TargetInfo& target = config.target_info();
    if (target.vendor != device.vendor()) {
      const Vendor vendor = device.vendor();
      throw Error("target " + std::string(target.name) + " does not run on the " + std::string(device.kind()) +
                      " device",
                  "a target of the device's kind: " +
                      target_names_where([vendor](const TargetInfo& t) { return t.vendor == vendor; }),
                  vendor == Vendor::Cpu ? "pick a host target (the host-gfx* ones carry that GPU's numerics)"
                                        : "leave config.target unset (the device's own), or set it to one of those");
    }
    // A GPU runs warps of its own width; the host runs any width as lane loops.
    if (target.is_simt() && target.wave_size != device.wave_size())
      throw Error("target " + std::string(target.name) + " has wave size " + std::to_string(target.wave_size) +
                      " but the " + std::string(device.kind()) + " device runs " + std::to_string(device.wave_size()),
                  "the device's own target", "leave config.target unset, or set it to " + device.default_target());
  }

  // auto picks per call by the token count, and every rank of a call must
  // pick alike (their transfers pair up): say so once where a user reads it.
  void check_internode_kernel() const {
    if (config.internode_kernel == InternodeKernel::Auto) {
      static std::once_flag logged;
      const int64_t crossover = config.internode_auto_ll_max_tokens;
      std::call_once(logged, [crossover] {
        log().info("internode_kernel auto: calls of at most {} tokens run v2_ll, larger ones v2; every rank of a call "
                   "must be on the same side, or pass the call's largest count as max_tokens_across_ranks",
                   crossover);
      });
    }
  }

  // Fetches the op's module and binds it: its kernels, and where its
  // regions, state words and error codes are, all from its interface record.
  void fetch_kernels() {
    const auto start = std::chrono::steady_clock::now();
    module = std::make_unique<KernelModule>(device, cache->get(kernel_spec(config)));
    fetch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const ModuleInterface& record = module->interface();
    if (record.target.wave_size != config.target_info().wave_size)
      throw Error(record.template_name + " was built for wave size " + std::to_string(record.target.wave_size) +
                      ", but target " + config.target + " runs " + std::to_string(config.target_info().wave_size),
                  "a module built for the config's target", "remove the stale cache entry (epjit-cache rm)");
    kernels = EpKernels::bind(*module, config);
    this->record = record;
    buffers = EpBuffers::of(this->record);
    fit_schedule_to_device();
    layout = WindowLayout::of(record);
    window = EpWindowMap::of(record, layout);
    require_region_bytes("recv_tokens", size_t(capacity()) * config.dispatch_token_bytes());
    require_region_bytes("recv_weights", size_t(capacity()) * size_t(config.num_experts_per_token) * 4);
    require_region_bytes("recv_scales", size_t(capacity()) * config.scale_bytes_per_token());
    require_region_bytes("recv_indices", size_t(capacity()) * size_t(config.num_experts_per_token) * 4);
    require_region_bytes("recv_origin", size_t(capacity()) * 2 * 4);
    if (config.combine_mode == CombineMode::Gather)
      require_region_bytes("combine_rows", size_t(capacity()) * config.combine_token_bytes());
  }

  // The blocks of every EP kernel wait for each other (the rank's meeting), so
  // a grid must fit on the device at once or it hangs. Fewer blocks give the
  // same results (the kernels stride over tokens by the grid): the schedule is
  // cut to what the device holds, and that is logged once per process.
  void fit_schedule_to_device() {
    const Kernel* combine = combine_kernel();
    for (ScheduleEntry& entry : schedule) {
      entry.dispatch_blocks = fit_blocks(*kernels.dispatch, entry.dispatch_blocks, entry.dispatch_warps);
      entry.combine_blocks = fit_blocks(*combine, entry.combine_blocks, entry.combine_warps);
      if (kernels.std_moe_pack)
        entry.dispatch_blocks = fit_blocks(*kernels.std_moe_pack, entry.dispatch_blocks, entry.dispatch_warps);
      if (kernels.std_moe_unpack)
        entry.combine_blocks = fit_blocks(*kernels.std_moe_unpack, entry.combine_blocks, entry.combine_warps);
      // v2's partials kernel meets its own grid (it stages rows, then every
      // block waits for the node's ranks) on the combine geometry.
      if (builds_v2(config))
        entry.combine_blocks = fit_blocks(*kernels.internode_partials, entry.combine_blocks, entry.combine_warps);
    }
  }

  // The combine kernel of the op's protocol and mode.
  const Kernel* combine_kernel() const {
    if (kernels.combine_low_latency) return kernels.combine_low_latency;
    return config.combine_mode == CombineMode::Gather ? kernels.combine_gather : kernels.combine_scatter;
  }

  int fit_blocks(const Kernel& kernel, int blocks, int warps) {
    const uint32_t resident = device.resident_blocks(kernel, uint32_t(warps));
    if (resident == 0)
      throw Error(kernel.name + " cannot hold one block of " + std::to_string(warps) + " warps on this " +
                      std::string(device.kind()) + " device (too many registers or too much shared memory per block)",
                  "a block size the device can run", "lower the schedule's warps for this shape (config.schedule)");
    if (uint32_t(blocks) <= resident) return blocks;
    static std::once_flag logged;
    std::call_once(logged, [&] {
      log().warn("{}: {} blocks of {} warps do not fit on the device at once ({} do); launching {} (same results)",
                 kernel.name, blocks, warps, resident, resident);
    });
    return int(resident);
  }

  // The op hands out views into regions; each must hold what its view spans.
  void require_region_bytes(const char* name, size_t needed) const {
    const size_t held = layout.bytes[module->interface().region_index(name)];
    if (held < needed)
      throw Error("window region " + std::string(name) + " of " + module->interface().template_name + " holds " +
                      std::to_string(held) + " bytes for " + config.target,
                  std::to_string(needed) + " bytes (what the op's results span for this config)",
                  "the template and the op disagree: report this as a bug");
  }

  static void* part_of(void* buffer, const BufferPartInfo& part) { return static_cast<char*>(buffer) + part.offset; }

  void* allocate_zeroed(size_t bytes) {
    void* pointer = device.allocate(std::max<size_t>(bytes, 16));
    device.fill_zero(pointer, std::max<size_t>(bytes, 16));
    return pointer;
  }

  void allocate() {
    arena = comm.allocate_symmetric(layout.total);
    if (config.internode()) {
      internode = std::make_unique<InternodeExchange>(config, comm, window, nccl_communicator);
      window_table = layout.table(internode->window_bases(arena->peers));
    } else {
      window_table = layout.table(arena->peers);
    }
    route = allocate_zeroed(buffers.route->bytes);
    clear_forward_route(route, *stream);
    outputs_memory = allocate_zeroed(buffers.outputs->bytes);
    out_tokens = part_of(outputs_memory, *buffers.out_tokens);
    out_weights = part_of(outputs_memory, *buffers.out_weights);
    expert_counts = part_of(outputs_memory, *buffers.expert_counts);
    if (config.enable_std_moe) {
      std_moe_memory = allocate_zeroed(buffers.std_moe->bytes);
      moe_tokens = part_of(std_moe_memory, *buffers.moe_tokens);
      moe_counts = part_of(std_moe_memory, *buffers.moe_counts);
      moe_sources = part_of(std_moe_memory, *buffers.moe_sources);
      // Gather's unpacked rows are the window's combine rows
      // (combine_input()); scatter's, where it has them, this part.
      if (buffers.moe_combine_in->count > 0) moe_combine_in = part_of(std_moe_memory, *buffers.moe_combine_in);
    }
    write_peer_timeout();
    comm.barrier();  // every rank's window exists before any kernel touches a peer's
  }

  // The kernels' peer waits read their bound from a state word, so a timeout
  // setting never changes generated code.
  void write_peer_timeout() {
    const int32_t milliseconds = peer_timeout_ms;
    device.copy_to_device(state_word(window.peer_timeout_word), &milliseconds, 4, *stream);
  }

  // An op closed or dropped while a framework captures other work (torch's
  // global capture mode forbids waits and frees on every thread) must not end
  // that capture: its own stream is not capturing (close() refuses that), and
  // its memory is no graph's.
  void release() {
    if (released) return;
    released = closed = true;
    std::unique_ptr<CaptureExemption> exemption;
    try {
      exemption = device.exempt_from_capture();
      stream->synchronize();
    } catch (const std::exception& error) {
      log().warn("EpDispatchCombineOp: synchronize before release failed: {}", error.what());
    }
    for (void* pointer : {route, outputs_memory, std_moe_memory})
      if (pointer) device.release(pointer);
    internode.reset();
    module.reset();
    arena.reset();
  }

  void require_open(const char* call) const {
    if (closed)
      throw Error(std::string(call) + " on a closed EpDispatchCombineOp", "an open op",
                  "construct a new op (close() freed the arena)");
  }
  // A call that waits for the op's stream on the host cannot be part of a
  // graph: it is refused before it touches the stream, so a capture in
  // progress (the op's or a framework's) stays valid.
  void require_not_capturing(const char* call) const {
    if (stream->capturing())
      throw Error(std::string(call) + " while the op's stream is capturing a graph (it waits for the stream on the "
                                      "host, and a capture does not run what it records)",
                  "check(), local_expert_counts(), load_routing(), reset() and close() between graph launches, "
                  "outside a capture",
                  std::string("end the capture, launch the graph, then call ") + call +
                      "(); local_expert_counts_device() counts inside a graph");
  }

  // Why the internode transport's transfers failed, once they have; nothing
  // on one node.
  std::optional<std::string> transport_failure() const {
    return internode ? internode->transport_failure() : std::nullopt;
  }

  // A call after a failed internode transfer would queue behind an aborted
  // communicator: check() says why, reset() recovers.
  void require_working_transport(const char* call) const {
    if (auto why = transport_failure())
      throw Error(std::string(call) + " after an internode transfer failed (" + *why + ")", "a working transport",
                  "check() reports it; reset() on every rank recovers");
  }

  // The schedule variant of a call of n tokens, from the schedule resolved once at construction.
  const ScheduleEntry& geometry_for(int64_t n) const { return schedule_entry_for(schedule, n); }

  // The local window at a region's byte offset (an EpWindowMap field).
  char* local(size_t offset) const { return static_cast<char*>(arena->local) + offset; }
  char* state_word(int64_t word) const { return local(window.state) + 4 * word; }
  // Where a route map keeps v2's forward route (after its own words).
  void* forward_route(void* route_map) const { return part_of(route_map, *buffers.route_forward); }
  // A new map's forward route forwards nothing: rows a dispatch never
  // forwarded stay -1, so route_map() hands out only entries load_routing accepts.
  void clear_forward_route(void* route_map, Stream& on) const {
    const std::vector<int32_t> none(buffers.route_forward->count, -1);
    if (!none.empty()) device.copy_to_device(forward_route(route_map), none.data(), none.size() * 4, on);
  }
  // Where make_routing() fills a new routing's memory, made at its first
  // call: not the op's stream, which may be capturing a graph (a fill there
  // would join the graph, and waiting for it is refused), and whose earlier
  // work a new routing need not wait for.
  std::unique_ptr<Stream> routing_setup;
  Stream& routing_setup_stream() {
    if (!routing_setup) routing_setup = device.create_stream();
    return *routing_setup;
  }
  int64_t capacity() const { return config.total_recv_tokens(); }

  TensorRef total_recv_tensor() const { return {state_word(window.total_recv_word), DType::I32, {1}}; }

  // DispatchOptions::keep_call: a routing's kept origins, then its indices.
  // The dispatch kernel writes the indices (the caller's, in hand at launch).
  // The origins are complete only once every peer's rows arrived: the
  // kernel's last block copies the received rows' origins after its meeting
  // where kernel_keeps_origins(), else they are copied after the kernel.
  size_t kept_origins_bytes() const { return buffers.kept_origins->bytes(); }
  // The last block's warps copy the origins of the rows received once they
  // are in (the lead warp's meeting over, ep.block_any tells the others).
  // What MORI's return_routing adds to a plain call (recording, keeping, the
  // handle), measured on 1 x H200 at capacity 8192 (BENCHMARKS.md, "A kept
  // call's origins copied by the last block"):
  //   tokens                1-128   512      1024     2048     8192
  //   the block             1.8-3.3 0.9-1.1  1.3-1.4  1.5-1.6  1.9-2.4 us
  //   a copy after it       4.0-7.3 1.7-7.4  2.2-2.5  0.9-1.4  0.7-1.1 us
  // A small call's GPU waits for the copy's launch; by 2048 tokens the host
  // is ahead and the copy engine beats one block. So the block keeps a call
  // of up to 1024 tokens, a copy larger ones. Internode, rows from other
  // nodes arrive after the dispatch kernel (v2_ll's ingest, v2's forward):
  // the copy stays.
  static constexpr int64_t kKernelKeptOriginsMaxTokens = 1024;
  bool kernel_may_keep_origins() const { return !config.internode(); }
  bool kernel_keeps_origins(int64_t tokens) const {
    return kernel_may_keep_origins() && tokens <= kKernelKeptOriginsMaxTokens;
  }
  void* kept_indices_of(const Routing& routing) const { return part_of(routing.kept_, *buffers.kept_indices); }
  void keep_origins(Routing& routing, const DispatchResult& result) {
    device.copy_async(part_of(routing.kept_, *buffers.kept_origins), result.origins.data, kept_origins_bytes(),
                      *stream);
  }
  // The kernel copies whole 16-byte lines (its kept_from parameter asks
  // for 16 bytes), so it keeps indices that start on one; others (a view
  // that starts mid-line, as indices[1:] with top-6 does) are one device
  // copy after it: the same words, logged once.
  bool kernel_keeps_indices(const TensorRef& indices) const {
    if (pointer_aligned_for(*kernels.dispatch, "kept_from", indices.data)) return true;
    static std::once_flag logged;
    std::call_once(logged, [] {
      log().info("dispatch keep_call: the indices do not start on a 16-byte line; they are kept by a device copy "
                 "after the kernel instead of by the kernel (same result)");
    });
    return false;
  }
  void keep_indices_by_copy(Routing& routing, const TensorRef& indices) {
    const size_t bytes = size_t(indices.shape[0]) * size_t(config.num_experts_per_token) * 4;
    if (bytes) device.copy_async(kept_indices_of(routing), indices.data, bytes, *stream);
  }

  void check_dispatch_inputs(const char* call, const TensorRef& input, const TensorRef& weights,
                             const std::optional<TensorRef>& scales, const TensorRef& indices, bool counts_slots) {
    require_open(call);
    require_working_transport(call);
    if (counts_slots && dispatched_tokens >= 0 && pending_counted_slots)
      throw Error(std::string(call) + " while the previous dispatch awaits its combine",
                  "a combine between two dispatches that take slots (a replay may follow a dispatch directly)",
                  "call combine() first, replay a recorded routing, or reset() to abandon the previous dispatch");
    if (input.shape.size() != 2)
      throw Error(std::string(call) + ": input has shape " + shape_text(input.shape), "[tokens, hidden_dim]",
                  "pass a 2-D token tensor");
    const int64_t n = input.shape[0];
    if (n < 0 || n > config.max_num_inp_token_per_rank)
      throw Error(std::string(call) + ": " + std::to_string(n) + " tokens on rank " + std::to_string(config.rank),
                  "at most max_num_inp_token_per_rank = " + std::to_string(config.max_num_inp_token_per_rank),
                  "split the batch or build the op with a larger max_num_inp_token_per_rank");
    const int64_t k = config.num_experts_per_token;
    expect_tensor(call, "input", input, tensor_type_of(config.dispatch_type(), config.target_info()),
                  {n, config.hidden_dim});
    expect_tensor(call, "weights", weights, DType::F32, {n, k});
    expect_tensor(call, "indices", indices, DType::I32, {n, k});
    if (config.scale_dim > 0) {
      if (!scales)
        throw Error(std::string(call) + ": no scales", "[tokens, scale_dim = " + std::to_string(config.scale_dim) + "]",
                    "pass the per-token scales, or build the op with scale_dim = 0");
      if (bits_of(scales->dtype) != 8 * config.scale_type_size)
        throw Error(std::string(call) + ": scales are " + name_of(scales->dtype), 
                    "elements of scale_type_size = " + std::to_string(config.scale_type_size) + " bytes",
                    "pass scales of the configured element size");
      expect_tensor(call, "scales", *scales, scales->dtype, {n, config.scale_dim});
    } else if (scales && scales->data) {
      throw Error(std::string(call) + ": scales given to an op built with scale_dim = 0", "no scales",
                  "drop the scales, or build the op with scale_dim and scale_type_size");
    }
    // Before anything is launched: a misaligned vector access would fault the device.
    const Kernel& dispatch_kernel = *kernels.dispatch;
    require_pointer_alignment(dispatch_kernel, "input", input.data, call, "input");
    require_pointer_alignment(dispatch_kernel, "weights", weights.data, call, "weights");
    if (scales) require_pointer_alignment(dispatch_kernel, "scales", scales->data, call, "scales");
    require_pointer_alignment(dispatch_kernel, "indices", indices.data, call, "indices");
    // Memory the host addresses can be read now; GPU kernels flag bad experts (check()).
    if (device.host_addressable()) {
      const auto* experts = static_cast<const int32_t*>(indices.data);
      for (int64_t i = 0; i < n * k; ++i) {
        if (experts[i] != kNoExpert && (experts[i] < 0 || experts[i] >= config.num_experts()))
          throw Error(std::string(call) + ": indices[" + std::to_string(i / k) + ", " + std::to_string(i % k) +
                          "] = " + std::to_string(experts[i]) + " on rank " + std::to_string(config.rank),
                      "an expert in [0, " + std::to_string(config.num_experts()) + "), or -1 for none",
                      "fix the router's indices");
      }
    }
  }

  // Whether a call of n tokens (this rank's) runs internode v2: by the
  // largest count of any rank when the caller gives it, else by n.
  bool call_runs_internode_v2(const char* call, int64_t n, const DispatchOptions& options) const {
    if (const std::optional<int64_t> largest = options.max_tokens_across_ranks) {
      if (*largest < n || *largest > config.max_num_inp_token_per_rank)
        throw Error(std::string(call) + ": max_tokens_across_ranks = " + std::to_string(*largest) + " with " +
                        std::to_string(n) + " tokens on rank " + std::to_string(config.rank),
                    "the largest token count of any rank in this call, in [" + std::to_string(n) +
                        ", max_num_inp_token_per_rank = " + std::to_string(config.max_num_inp_token_per_rank) + "]",
                    "pass the maximum of every rank's token count for this call (the same on every rank), or leave "
                    "it unset");
      return config.runs_internode_v2(*largest);
    }
    return config.runs_internode_v2(n);
  }

  DispatchResult launch_dispatch(const TensorRef& input, const TensorRef& weights,
                                 const std::optional<TensorRef>& scales, const TensorRef& indices, void* route_map,
                                 bool replay, bool v2, void* kept_indices = nullptr,
                                 void* kept_origins = nullptr) {
    const int64_t n = input.shape[0];
    const ScheduleEntry& geometry = geometry_for(n);
    const Kernel& kernel = *kernels.dispatch;
    device.launch(kernel, {uint32_t(geometry.dispatch_blocks), uint32_t(geometry.dispatch_warps)},
                  LaunchArgs(kernel)
                      .set("input", input.data)
                      .set("weights", weights.data)
                      .set("scales", scales ? scales->data : nullptr)
                      .set("indices", indices.data)
                      .set("route", route_map)
                      .set("tokens", n)
                      .set("rank", config.rank)
                      .set("replay", replay)
                      .set("forward", v2)
                      .set("kept_from", kept_indices ? indices.data : nullptr)
                      .set("kept_indices", kept_indices)
                      .set("keep", kept_indices != nullptr)
                      .set("kept_origins", kept_origins)
                      .set("keep_origins", kept_origins != nullptr)
                      .set("w", window_table)
                      .build(),
                  *stream);
    if (internode)
      internode->after_dispatch(kernels, {uint32_t(geometry.dispatch_blocks), uint32_t(geometry.dispatch_warps)},
                                window_table, route_map, forward_route(route_map), replay, v2, *stream);
    dispatched_tokens = n;
    pending_counted_slots = !replay;
    pending_v2 = v2;

    const int64_t cap = capacity(), k = config.num_experts_per_token;
    DispatchResult result;
    result.tokens = {local(window.recv_tokens), tensor_type_of(config.dispatch_type(), config.target_info()),
                     {cap, config.hidden_dim}};
    result.weights = {local(window.recv_weights), DType::F32, {cap, k}};
    if (config.scale_dim > 0)
      result.scales = {local(window.recv_scales), scales->dtype, {cap, config.scale_dim}};
    result.indices = {local(window.recv_indices), DType::I32, {cap, k}};
    result.origins = {local(window.recv_origin), DType::I32, {cap, 2}};
    result.total_recv = total_recv_tensor();
    return result;
  }

  // Does std_moe_combine launch the unpack kernel before the combine? Only
  // internode, where the rows leave the node before the combine kernel runs.
  // Intranode the combine kernel unpacks itself: gather into its staged
  // rows, scatter without quant straight into the origins' inboxes, scatter
  // under quant into staging rows its quantizer then reads.
  bool unpacks_apart() const { return config.internode(); }

  // Does std-MoE scatter sum rows into a buffer before they leave (the unpack
  // kernel's output, stage 1's staging under quant)?
  bool scatter_stages_unpacked_rows() const {
    return config.combine_mode == CombineMode::Scatter &&
           (config.internode() || config.quant_type != QuantType::None);
  }

  // expert_out (std-MoE, !unpacks_apart()): the combine kernel unpacks the
  // standard-MoE layout itself; gather's `input` is then its staged rows.
  CombineResult launch_combine(const char* call, const TensorRef& input, const std::optional<TensorRef>& weights,
                               const void* expert_out = nullptr) {
    require_open(call);
    require_working_transport(call);
    if (dispatched_tokens < 0)
      throw Error(std::string(call) + " without a dispatch before it", "dispatch, then combine",
                  "call dispatch() first");
    const int64_t cap = capacity(), k = config.num_experts_per_token;
    const DType row_type = tensor_type_of(config.combine_type(), config.target_info());
    expect_tensor(call, "input", input, row_type, {cap, config.hidden_dim}, /*at_least_rows=*/true);
    const bool weighted = weights.has_value() && weights->data != nullptr;
    if (weighted) expect_tensor(call, "weights", *weights, DType::F32, {cap, k}, true);
    // Every kernel the caller's rows and weights may go to, before any is
    // launched: a misaligned vector access would fault the device.
    for (const Kernel* reader : {combine_kernel(), kernels.internode_return_pack, kernels.internode_partials}) {
      if (!reader) continue;
      require_pointer_alignment(*reader, "input", input.data, call, "input");
      if (weighted) require_pointer_alignment(*reader, "in_weights", weights->data, call, "weights");
    }
    const int64_t n = dispatched_tokens;
    const ScheduleEntry& geometry = geometry_for(n);
    const LaunchGeometry grid{uint32_t(geometry.combine_blocks), uint32_t(geometry.combine_warps)};
    const bool staged = input.data == local(window.combine_rows);  // written in place: combine_input()
    if (pending_v2) {
      internode->combine_v2(kernels, grid, window_table,
                            {input.data, weighted ? weights->data : nullptr, staged, route_in_use,
                             forward_route(route_in_use), n, out_tokens, out_weights},
                            *stream);
    } else {
      if (internode)
        internode->before_combine(kernels, grid, window_table, input.data, weighted ? weights->data : nullptr,
                                  weighted, route_in_use, *stream);
      const bool scatter = config.combine_mode == CombineMode::Scatter;
      const bool low_latency = kernels.combine_low_latency != nullptr;
      const Kernel& kernel = *combine_kernel();
      LaunchArgs args(kernel);
      args.set("input", input.data)
          .set("in_weights", weighted ? weights->data : nullptr)
          .set("output", out_tokens)
          .set("out_weights", out_weights)
          .set("route", route_in_use)
          .set("tokens", n)
          .set("rank", config.rank)
          .set("has_weights", weighted)
          .set("w", window_table);
      if (!low_latency) {
        args.set("expert_out", expert_out).set("unpacks", expert_out != nullptr);
        if (!scatter) args.set("staged", staged);
      }
      device.launch(kernel, grid, args.build(), *stream);
    }
    dispatched_tokens = -1;
    CombineResult result;
    result.tokens = {out_tokens, row_type, {n, config.hidden_dim}};
    if (weighted) result.weights = {out_weights, DType::F32, {n, k}};
    return result;
  }


  // The received rows (tokens, indices, the received count) are this rank's
  // from its dispatch until its combine; after the combine a peer's next
  // dispatch may already be writing them, so reading them then would count a
  // mix of two calls.
  void require_received_rows(const char* call) const {
    if (dispatched_tokens < 0)
      throw Error(std::string(call) + " without a dispatch awaiting combine (the received rows belong to the "
                      "next dispatch once combine ran: a peer may already be writing them)",
                  "dispatch, then " + std::string(call) + ", then combine",
                  std::string("call ") + call + "() after dispatch() and before combine()");
  }

  void require_std_moe(const char* call) const {
    if (!config.enable_std_moe)
      throw Error(std::string(call) + " on an op built without enable_std_moe", "enable_std_moe = true",
                  "build the op with enable_std_moe = true (bf16)");
  }
};

EpDispatchCombineOp::EpDispatchCombineOp(EpDispatchCombineConfig config, Communicator& comm, OpOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), comm, options)) {}

EpDispatchCombineOp::~EpDispatchCombineOp() = default;

DispatchResult EpDispatchCombineOp::dispatch(const TensorRef& input, const TensorRef& weights,
                                             const std::optional<TensorRef>& scales, const TensorRef& indices,
                                             Routing* record, const DispatchOptions& options) {
  const OneCallAtATime one_call = impl_->one_call("dispatch");
  Impl& op = *impl_;
  op.check_dispatch_inputs("dispatch", input, weights, scales, indices, /*counts_slots=*/true);
  if (record && record->op_id_ != op.id)
    throw Error("dispatch: the routing to record into belongs to another op", "a Routing from this op's make_routing()",
                "record with this op's make_routing()");
  if (options.keep_call && !record)
    throw Error("dispatch: keep_call without a routing to record into", "keep_call together with a record",
                "pass a make_routing() as the record, or leave keep_call unset");
  const bool v2 = op.call_runs_internode_v2("dispatch", input.shape[0], options);
  op.route_in_use = record ? record->route_ : op.route;
  const bool indices_by_kernel = options.keep_call && op.kernel_keeps_indices(indices);
  const bool origins_by_kernel = options.keep_call && op.kernel_keeps_origins(input.shape[0]);
  void* kept_indices = indices_by_kernel ? op.kept_indices_of(*record) : nullptr;
  void* kept_origins = origins_by_kernel ? op.part_of(record->kept_, *op.buffers.kept_origins) : nullptr;
  DispatchResult result =
      op.launch_dispatch(input, weights, scales, indices, op.route_in_use, false, v2, kept_indices, kept_origins);
  if (record) {
    record->tokens_ = input.shape[0];
    record->forward_route_ = true;
    record->internode_v2_ = v2;
    record->kept_call_ = options.keep_call;
    if (options.keep_call) {
      if (!origins_by_kernel) op.keep_origins(*record, result);
      if (!indices_by_kernel) op.keep_indices_by_copy(*record, indices);
    }
  }
  return result;
}

DispatchResult EpDispatchCombineOp::dispatch_replay(const TensorRef& input, const TensorRef& weights,
                                                    const std::optional<TensorRef>& scales, const TensorRef& indices,
                                                    const Routing& routing) {
  const OneCallAtATime one_call = impl_->one_call("dispatch_replay");
  Impl& op = *impl_;
  op.check_dispatch_inputs("dispatch_replay", input, weights, scales, indices, /*counts_slots=*/false);
  if (routing.op_id_ != op.id || !routing.recorded())
    throw Error("dispatch_replay: the routing was not recorded by this op", "a Routing a dispatch of this op recorded",
                "pass record= to an earlier dispatch of this op, then replay that routing");
  if (routing.tokens_ != input.shape[0])
    throw Error("dispatch_replay: " + std::to_string(input.shape[0]) + " tokens, but the routing was recorded with " +
                    std::to_string(routing.tokens_),
                "the recorded token count (and the same indices)", "replay with the batch the routing was recorded for");
  if (routing.internode_v2_ && !routing.forward_route_)
    throw Error("dispatch_replay: the recorded call of " + std::to_string(routing.tokens_) +
                    " tokens ran internode v2, whose replay needs the forwarding slots this rank recorded, but the "
                    "routing was loaded from a map without them",
                "a routing recorded by a dispatch, or loaded from a whole route_map() (" +
                    std::to_string(op.buffers.route_words()) + " words)",
                "replay the recorded routing itself, load the whole route_map(), or build the op with "
                "internode_kernel v2_ll");
  op.route_in_use = routing.route_;
  return op.launch_dispatch(input, weights, scales, indices, routing.route_, true, routing.internode_v2_);
}

CombineResult EpDispatchCombineOp::combine(const TensorRef& input, const std::optional<TensorRef>& weights) {
  const OneCallAtATime one_call = impl_->one_call("combine");
  return impl_->launch_combine("combine", input, weights);
}

StdMoeResult EpDispatchCombineOp::std_moe_pack() {
  const OneCallAtATime one_call = impl_->one_call("std_moe_pack");
  Impl& op = *impl_;
  op.require_open("std_moe_pack");
  op.require_std_moe("std_moe_pack");
  op.require_received_rows("std_moe_pack");
  const ScheduleEntry geometry = op.geometry_for(op.dispatched_tokens);
  const Kernel& kernel = *op.kernels.std_moe_pack;
  op.device.launch(kernel, {uint32_t(geometry.dispatch_blocks), uint32_t(geometry.dispatch_warps)},
                   LaunchArgs(kernel)
                       .set("packed", op.moe_tokens)
                       .set("counts", op.moe_counts)
                       .set("sources", op.moe_sources)
                       .set("rank", op.config.rank)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
  const int64_t experts = op.config.num_experts_per_rank;
  const int64_t rows = int64_t(op.config.world_size) * op.config.max_num_inp_token_per_rank;
  return {{op.moe_tokens, DType::BF16, {experts, rows, op.config.hidden_dim}},
          {op.moe_counts, DType::I32, {experts}},
          {op.moe_sources, DType::I32, {experts, rows}}};
}

CombineResult EpDispatchCombineOp::std_moe_combine(const TensorRef& expert_out, const std::optional<TensorRef>& weights) {
  const OneCallAtATime one_call = impl_->one_call("std_moe_combine");
  Impl& op = *impl_;
  op.require_open("std_moe_combine");
  op.require_std_moe("std_moe_combine");
  const int64_t experts = op.config.num_experts_per_rank;
  const int64_t rows = int64_t(op.config.world_size) * op.config.max_num_inp_token_per_rank;
  expect_tensor("std_moe_combine", "expert_out", expert_out, DType::BF16, {experts, rows, op.config.hidden_dim});
  if (op.dispatched_tokens < 0)
    throw Error("std_moe_combine without a dispatch before it", "dispatch, std_moe_pack, std_moe_combine",
                "call dispatch() and std_moe_pack() first");
  for (const Kernel* reader : {op.combine_kernel(), op.kernels.std_moe_unpack})
    if (reader) require_pointer_alignment(*reader, "expert_out", expert_out.data, "std_moe_combine", "expert_out");
  // Gather's staged rows (combine_input()); scatter's buffer of its own
  // where it stages them (under quant, and internode).
  void* unpacked = op.moe_combine_in ? op.moe_combine_in : op.local(op.window.combine_rows);
  const TensorRef combine_in{unpacked, DType::BF16, {op.capacity(), op.config.hidden_dim}};
  if (!op.unpacks_apart()) {
    if (op.config.combine_mode == CombineMode::Scatter) {
      // Under quant the kernel sums into its staging rows and quantizes them;
      // otherwise it reads expert_out, not its input rows, and `input` names
      // the same memory (at least capacity rows) for the checks.
      const TensorRef input = op.moe_combine_in ? combine_in
                                                : TensorRef{expert_out.data, DType::BF16,
                                                            {op.capacity(), op.config.hidden_dim}};
      return op.launch_combine("std_moe_combine", input, weights, expert_out.data);
    }
    const auto* out_begin = static_cast<const std::byte*>(expert_out.data);
    const auto* rows_begin = static_cast<const std::byte*>(unpacked);
    const size_t out_bytes = size_t(experts) * size_t(rows) * size_t(op.config.hidden_dim) * 2;
    const size_t rows_bytes = size_t(op.capacity()) * size_t(op.config.hidden_dim) * 2;
    if (out_begin < rows_begin + rows_bytes && rows_begin < out_begin + out_bytes)
      throw Error("std_moe_combine: expert_out overlaps combine_input(), the rows it unpacks into (they would be "
                  "overwritten while read)",
                  "expert outputs in a buffer of their own", "write the experts' outputs to another tensor");
    return op.launch_combine("std_moe_combine", combine_in, weights, expert_out.data);
  }
  const ScheduleEntry geometry = op.geometry_for(op.dispatched_tokens);
  const Kernel& kernel = *op.kernels.std_moe_unpack;
  op.device.launch(kernel, {uint32_t(geometry.combine_blocks), uint32_t(geometry.combine_warps)},
                   LaunchArgs(kernel)
                       .set("expert_out", expert_out.data)
                       .set("combine_in", unpacked)
                       .set("rank", op.config.rank)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
  return op.launch_combine("std_moe_combine", combine_in, weights);
}

std::vector<int> EpDispatchCombineOp::local_expert_counts(ExpertCountRule rule) {
  const OneCallAtATime one_call = impl_->one_call("local_expert_counts");
  Impl& op = *impl_;
  op.require_open("local_expert_counts");
  op.require_not_capturing("local_expert_counts");
  op.require_received_rows("local_expert_counts");
  // Read on the op's stream: after its dispatch, and a failed kernel throws here.
  const int total = read_word(op.device, *op.stream, op.state_word(op.window.total_recv_word), 0);
  const int k = op.config.num_experts_per_token, epr = op.config.num_experts_per_rank;
  std::vector<int32_t> indices(size_t(total) * size_t(k));
  if (!indices.empty())
    op.device.copy_to_host(indices.data(), op.local(op.window.recv_indices), indices.size() * 4, *op.stream);
  std::vector<int> counts(size_t(epr), 0);
  for (int i = 0; i < total; ++i) {
    const int32_t* row = &indices[size_t(i) * size_t(k)];
    for (int j = 0; j < k; ++j) {
      if (row[j] == kNoExpert || row[j] / epr != op.config.rank) continue;
      if (rule == ExpertCountRule::DistinctPerToken && std::find(row, row + j, row[j]) != row + j) continue;
      counts[size_t(row[j] % epr)]++;
    }
  }
  return counts;
}

TensorRef EpDispatchCombineOp::local_expert_counts_device(ExpertCountRule rule) {
  const OneCallAtATime one_call = impl_->one_call("local_expert_counts_device");
  Impl& op = *impl_;
  op.require_open("local_expert_counts_device");
  op.require_received_rows("local_expert_counts_device");
  // One block: the kernel clears the counts, then counts, with a block barrier between.
  const Kernel& kernel = *op.kernels.count_experts;
  const ScheduleEntry geometry = op.geometry_for(op.config.max_num_inp_token_per_rank);
  op.device.launch(kernel, {1, uint32_t(geometry.combine_warps)},
                   LaunchArgs(kernel)
                       .set("counts", op.expert_counts)
                       .set("rank", op.config.rank)
                       .set("every_entry", rule == ExpertCountRule::EveryEntry)
                       .set("w", op.window_table)
                       .build(),
                   *op.stream);
  return {op.expert_counts, DType::I32, {op.config.num_experts_per_rank}};
}

TensorRef EpDispatchCombineOp::combine_input() {
  Impl& op = *impl_;
  op.require_open("combine_input");
  if (op.config.combine_mode != CombineMode::Gather)
    throw Error("combine_input() on a scatter-combine op", "combine_mode = gather",
                "pass any [capacity, hidden] buffer to combine(): scatter reads its input in place");
  return {op.local(op.window.combine_rows), tensor_type_of(op.config.combine_type(), op.config.target_info()),
          {op.capacity(), op.config.hidden_dim}};
}

std::unique_ptr<Routing> EpDispatchCombineOp::make_routing() {
  const OneCallAtATime one_call = impl_->one_call("make_routing");
  Impl& op = *impl_;
  op.require_open("make_routing");
  // A dispatch that returns a routing may be captured into a graph (a
  // framework's, torch.cuda.graph) and make its routing there: the memory is
  // the caller's for as long as the routing lives, not the graph's, and is
  // ready on return, so neither the allocations nor the fills belong in it.
  const std::unique_ptr<CaptureExemption> exemption = op.device.exempt_from_capture();
  Stream& setup = op.routing_setup_stream();
  std::unique_ptr<Routing> routing(new Routing(op.device, setup, op.buffers.route->bytes, op.id));
  op.clear_forward_route(routing->route_, setup);
  // Here, not at the first keep_call: a dispatch is not exempt from a
  // capture's rules.
  routing->kept_ = op.device.allocate(op.buffers.kept->bytes);
  // Only a kept call's first total_recv origins are its own. Where the
  // kernel keeps them, the rows past those are not written (an earlier
  // call's stay, as in the window): they hold -1 ("no row") until one is,
  // never what the allocation held before (the copy after the kernel
  // writes every row).
  if (op.kernel_may_keep_origins())
    op.device.fill_bytes(op.part_of(routing->kept_, *op.buffers.kept_origins), 0xFF, op.kept_origins_bytes(), setup);
  return routing;
}

TensorRef EpDispatchCombineOp::route_map(const Routing& routing) const {
  const Impl& op = *impl_;  // the routing's memory, not the arena: it answers after close() too
  if (routing.op_id_ != op.id || !routing.recorded())
    throw Error("route_map: the routing was not recorded by this op", "a Routing a dispatch of this op recorded",
                "pass record= to a dispatch of this op first");
  return {routing.route_, DType::I32, {int64_t(op.buffers.route_words())}};
}

RecordedCall EpDispatchCombineOp::recorded_call(const Routing& routing) const {
  const Impl& op = *impl_;
  if (routing.op_id_ != op.id || !routing.recorded() || !routing.kept_call_)
    throw Error("recorded_call: the routing kept no call of this op",
                "a Routing a dispatch of this op recorded with DispatchOptions::keep_call (and has not recorded or "
                "loaded since without it)",
                "record with keep_call set, then read recorded_call()");
  return {{op.part_of(routing.route_, *op.buffers.route_received), DType::I32, {1}},
          {op.part_of(routing.kept_, *op.buffers.kept_origins), DType::I32, {op.capacity(), 2}},
          {op.kept_indices_of(routing), DType::I32, {routing.tokens_, op.config.num_experts_per_token}}};
}

void EpDispatchCombineOp::load_routing(Routing& routing, const TensorRef& map, int64_t tokens,
                                       const DispatchOptions& options) {
  const OneCallAtATime one_call = impl_->one_call("load_routing");
  Impl& op = *impl_;
  op.require_open("load_routing");
  op.require_not_capturing("load_routing");
  if (routing.op_id_ != op.id)
    throw Error("load_routing: the routing belongs to another op", "a Routing from this op's make_routing()",
                "load into this op's make_routing()");
  // The map's words, where the record places them (templates/ep/buffers.mlir).
  const EpBuffers& parts = op.buffers;
  const int64_t words = int64_t(parts.route_words()), own_words = int64_t(parts.own_route_words());
  const int64_t k = op.config.num_experts_per_token;
  // The whole map, or (internode v2) its own words without the forward route.
  const bool whole = map.shape.size() == 1 && map.shape[0] == words;
  expect_tensor("load_routing", "map", map, DType::I32, {whole ? words : own_words});
  if (tokens < 0 || tokens > op.config.max_num_inp_token_per_rank)
    throw Error("load_routing: " + std::to_string(tokens) + " tokens",
                "at most max_num_inp_token_per_rank = " + std::to_string(op.config.max_num_inp_token_per_rank),
                "pass the token count the map was recorded for");
  const bool v2 = op.call_runs_internode_v2("load_routing", tokens, options);
  std::vector<int32_t> host(size_t(words), -1);
  op.device.copy_to_host(host.data(), map.data, size_t(whole ? words : own_words) * 4, *op.stream);
  const int64_t cap = op.capacity(), ranks = op.config.world_size;
  const auto entries_at = int64_t(parts.route_entries->element_offset());
  const auto entries = int64_t(parts.route_entries->count);
  for (int64_t i = 0; i < entries; ++i) {
    int32_t& entry = host[size_t(entries_at + i)];
    if (i / k >= tokens) {  // rows past the recorded tokens: no kernel reads them
      entry = -1;
      continue;
    }
    if (entry != -1 && (entry < 0 || entry / cap >= ranks))
      throw Error("load_routing: map[" + std::to_string(entries_at + i) + "] = " + std::to_string(entry),
                  "-1, or rank * capacity + slot with rank < " + std::to_string(ranks) + " and slot < " +
                      std::to_string(cap),
                  "pass a map route_map() returned for this op's configuration");
  }
  const int32_t received = host[parts.route_received->element_offset()];
  if (received < 0 || received > cap)
    throw Error("load_routing: received count " + std::to_string(received), "in [0, capacity = " + std::to_string(cap) + "]",
                "pass a map route_map() returned for this op's configuration");
  // Then the tokens sent to each off-node rank (0 for the node's ranks).
  const int per_node = op.config.nodes_gpu_count();
  const auto sent_at = int64_t(parts.route_sent->element_offset());
  for (int peer = 0; peer < ranks; ++peer) {
    const int32_t sent = host[size_t(sent_at + peer)];
    const bool off_node = peer / per_node != op.config.rank / per_node;
    const int64_t most = off_node ? std::min<int64_t>(tokens, op.internode->rows_per_peer()) : 0;
    if (sent < 0 || sent > most)
      throw Error("load_routing: map[" + std::to_string(sent_at + peer) + "] (tokens sent to rank " +
                      std::to_string(peer) + ") = " + std::to_string(sent),
                  "in [0, " + std::to_string(most) + "]", "pass a map route_map() returned for this op's configuration");
  }
  // An entry naming another node's rank names a slot of this rank's outbox
  // for it, which holds only the tokens sent there: a slot past them would
  // reach past the outbox.
  for (int64_t i = entries_at; i < entries_at + entries; ++i) {
    const int32_t entry = host[size_t(i)];
    if (entry < 0 || entry / cap / per_node == op.config.rank / per_node) continue;
    const int32_t sent = host[size_t(sent_at + entry / cap)];
    if (entry % cap >= sent)
      throw Error("load_routing: map[" + std::to_string(i) + "] = " + std::to_string(entry) + " names slot " +
                      std::to_string(entry % cap) + " of the outbox for rank " + std::to_string(entry / cap) +
                      ", which the map says holds " + std::to_string(sent) + " tokens",
                  "a slot below the tokens sent to that rank", "pass a map route_map() returned for this op's configuration");
  }
  // The forward route: where this rank forwarded each inbox row, -1 or a
  // rank of its own node * capacity + slot.
  for (int64_t i = own_words; whole && i < words; ++i) {
    const int32_t entry = host[size_t(i)];
    const bool on_node = entry >= 0 && entry / cap / per_node == op.config.rank / per_node;
    if (entry != -1 && !(on_node && entry / cap < ranks))
      throw Error("load_routing: map[" + std::to_string(i) + "] (forward route) = " + std::to_string(entry),
                  "-1, or rank * capacity + slot with a rank of this rank's node and slot < " + std::to_string(cap),
                  "pass a map route_map() returned for this op's configuration");
  }
  op.device.copy_to_device(routing.route_, host.data(), host.size() * 4, *op.stream);
  routing.tokens_ = tokens;
  routing.forward_route_ = whole;
  routing.internode_v2_ = v2;
  routing.kept_call_ = false;  // a map carries no received rows
}

void EpDispatchCombineOp::check() {
  const OneCallAtATime one_call = impl_->one_call("check");
  Impl& op = *impl_;
  op.require_open("check");
  op.require_not_capturing("check");
  op.stream->synchronize();
  // The error word stays set until reset(): every call queued behind the
  // failed one gave up at once, and their results are not valid either.
  const std::string where = "rank " + std::to_string(op.config.rank) + ": ";
  // First: after a failed transfer the kernels behind it read inboxes that
  // never arrived, and what they report follows from that.
  if (auto why = op.transport_failure()) {
    // Under auto, ranks on two sides of the crossover make transfers that never pair.
    const std::string auto_rule =
        op.config.internode_kernel == InternodeKernel::Auto
            ? "; with internode_kernel auto, every rank of a call must have at most, or every rank more than, " +
                  std::to_string(op.config.internode_auto_ll_max_tokens) +
                  " tokens (internode_auto_ll_max_tokens), unless every rank passes the call's largest count as "
                  "max_tokens_across_ranks"
            : "";
    throw Error(where + "an internode transfer failed: " + *why + " (the peer died, stalled, or skipped a call)",
                "every rank calls dispatch and combine the same number of times, and each comes within the timeout" +
                    auto_rule,
                "reset() on every rank before going on (it makes a new NCCL communicator), or, if a rank died, build "
                "a new communicator and op from the survivors; raise EpDispatchCombineConfig.peer_timeout_s / "
                "EPJIT_PEER_TIMEOUT_S if off-node ranks are slow");
  }
  const int32_t code = read_word(op.device, *op.stream, op.state_word(op.window.error_word), 0);
  if (code == 0) return;
  if (code == op.window.error_peer_timeout)
    throw Error(where + "a peer did not arrive at a dispatch/combine meeting within the peer timeout of " +
                    std::to_string(op.peer_timeout_ms) + " ms (the peer died, stalled, or skipped a call)",
                "every rank calls dispatch and combine the same number of times, and each comes within the timeout",
                "reset() on every rank before going on (or, if a rank died, build a new communicator and op from the "
                "survivors); raise EpDispatchCombineConfig.peer_timeout_s / EPJIT_PEER_TIMEOUT_S if ranks are slow");
  if (code == op.window.error_capacity_exceeded)
    throw Error(where + "more tokens arrived than the receive capacity of " + std::to_string(op.capacity()),
                "at most max_total_recv_tokens tokens per rank and call",
                "raise max_total_recv_tokens (0 = world_size * max_num_inp_token_per_rank)");
  if (code == op.window.error_expert_out_of_range)
    throw Error(where + "a dispatch met an expert index outside [0, " + std::to_string(op.config.num_experts()) + ")",
                "indices in [0, world_size * num_experts_per_rank), or -1 for no expert", "fix the router's indices");
  if (code == op.window.error_internode_count)
    throw Error(where + "an off-node rank's transfer said it sent more rows than its " +
                    std::to_string(op.internode ? op.internode->rows_per_peer() : 0) +
                    " slots (or a negative count), or a replayed routing's received count is smaller than what "
                    "the off-node ranks sent; those rows were dropped",
                "counts written by an epjit op of the same configuration on every rank",
                "build every rank's op from the same configuration and epjit build, and replay only routings "
                "recorded (or route_map()s saved) by this op; reset() to go on");
  throw Error(where + "a kernel reported error code " + std::to_string(code), "0", "report this as a bug");
}

void EpDispatchCombineOp::reset() {
  const OneCallAtATime one_call = impl_->one_call("reset");
  Impl& op = *impl_;
  start_collective(op.comm, "reset", [&] {
    op.require_open("reset");
    op.require_not_capturing("reset");
    op.stream->synchronize();
  });
  if (op.internode) op.internode->recover_transport(op.comm);
  for (auto [offset, bytes] : {std::pair{op.window.state, op.window.state_bytes},
                                {op.window.signals, op.window.signals_bytes},
                                {op.window.moe_counts, op.window.moe_counts_bytes},
                                {op.window.flagged_rows, op.window.flagged_rows_bytes},
                                {op.window.flagged_weights, op.window.flagged_weights_bytes}})
    if (bytes) op.device.fill_zero(op.local(offset), bytes, *op.stream);
  if (op.internode) op.internode->clear_outbox_state(*op.stream);
  op.write_peer_timeout();
  op.dispatched_tokens = -1;
  op.comm.barrier();
}

void EpDispatchCombineOp::close(Memory memory) {
  const OneCallAtATime one_call = impl_->one_call("close");
  Impl& op = *impl_;
  if (op.closed) {
    // A close that kept the memory, then one that releases it (the communicator is going).
    if (memory == Memory::Release && !op.released) op.release();
    return;
  }
  // On return no peer reads this rank's window any more.
  start_collective(op.comm, "close", [&] {
    op.require_not_capturing("close");
    const std::unique_ptr<CaptureExemption> exemption = op.device.exempt_from_capture();  // as release()
    op.stream->synchronize();
  });
  op.closed = true;
  if (memory == Memory::Release) op.release();
}

const EpDispatchCombineConfig& EpDispatchCombineOp::config() const { return impl_->config; }
Stream& EpDispatchCombineOp::stream() { return *impl_->stream; }
void EpDispatchCombineOp::set_stream(Stream* stream) {
  const OneCallAtATime one_call = impl_->one_call("set_stream");
  impl_->stream = stream ? stream : impl_->default_stream;
}
int64_t EpDispatchCombineOp::capacity() const { return impl_->capacity(); }
double EpDispatchCombineOp::kernel_fetch_seconds() const { return impl_->fetch_seconds; }
const ModuleInterface& EpDispatchCombineOp::interface() const { return impl_->record; }

}  // namespace epjit::ep
