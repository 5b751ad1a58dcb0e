// Building an op: validation against the communicator and the device, the
// kernels and the interface record, the window and the buffers; and freeing it.
#include "op_impl.h"

namespace epjit::ep {

EpDispatchCombineOp::Impl::Impl(EpDispatchCombineConfig c, Communicator& communicator, OpOptions options)
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

void EpDispatchCombineOp::Impl::resolve_and_validate() {
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
void EpDispatchCombineOp::Impl::check_internode_kernel() const {
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
void EpDispatchCombineOp::Impl::fetch_kernels() {
  const auto start = std::chrono::steady_clock::now();
  module = std::make_unique<KernelModule>(device, cache->get(kernel_spec(config)));
  fetch_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ModuleInterface& record = module->interface();
  if (record.target.wave_size != config.target_info().wave_size)
    throw Error(record.template_name + " was built for wave size " + std::to_string(record.target.wave_size) +
                    ", but target " + config.target + " runs " + std::to_string(config.target_info().wave_size),
                "a module built for the config's target", "remove the stale cache entry (epjit-cache rm)");
  kernels = EpKernels::bind(*module, config);
  // The module serves every limit; the op's copy of its record is sized for this op's.
  std::map<std::string, uint64_t, std::less<>> limits;
  for (const auto& [name, value] : runtime_limits(config))
    if (record.has_runtime_param(name)) limits[name] = value;
  this->record = record.bind(limits);
  buffers = EpBuffers::of(this->record);
  fit_schedule_to_device();
  layout = WindowLayout::of(this->record);
  window = EpWindowMap::of(this->record, layout);
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
void EpDispatchCombineOp::Impl::fit_schedule_to_device() {
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

int EpDispatchCombineOp::Impl::fit_blocks(const Kernel& kernel, int blocks, int warps) {
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
void EpDispatchCombineOp::Impl::require_region_bytes(const char* name, size_t needed) const {
  const size_t held = layout.bytes[module->interface().region_index(name)];
  if (held < needed)
    throw Error("window region " + std::string(name) + " of " + module->interface().template_name + " holds " +
                    std::to_string(held) + " bytes for " + config.target,
                std::to_string(needed) + " bytes (what the op's results span for this config)",
                "the template and the op disagree: report this as a bug");
}

void EpDispatchCombineOp::Impl::allocate() {
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
  narrow_indices = part_of(outputs_memory, *buffers.narrow_indices);
  if (config.enable_std_moe) {
    std_moe_memory = allocate_zeroed(buffers.std_moe->bytes);
    moe_tokens = part_of(std_moe_memory, *buffers.moe_tokens);
    moe_counts = part_of(std_moe_memory, *buffers.moe_counts);
    moe_sources = part_of(std_moe_memory, *buffers.moe_sources);
    // Gather's unpacked rows are the window's combine rows
    // (combine_input()); scatter's, where it has them, this part.
    if (buffers.moe_combine_in->count > 0) moe_combine_in = part_of(std_moe_memory, *buffers.moe_combine_in);
    if (kernels.std_moe_quantize) {
      moe_codes = part_of(std_moe_memory, *buffers.moe_codes);
      moe_scales = part_of(std_moe_memory, *buffers.moe_scales);
    }
  }
  write_peer_timeout();
  comm.barrier();  // every rank's window exists before any kernel touches a peer's
}

// An op closed or dropped while a framework captures other work (torch's
// global capture mode forbids waits and frees on every thread) must not end
// that capture: its own stream is not capturing (close() refuses that), and
// its memory is no graph's.
void EpDispatchCombineOp::Impl::release() {
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

}  // namespace epjit::ep
