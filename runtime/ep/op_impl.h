// The EpDispatchCombineOp's private state and the helpers its files share
// (op.cpp: construction's entry points, kernel_spec, accessors; op_setup.cpp:
// validation, binding, allocation, release; op_calls.cpp: dispatch and
// combine; routing.cpp, std_moe.cpp, status.cpp: the calls of those names).
#pragma once

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

// The cache of ops built without one of their own.
KernelCache& process_cache();
// A process-wide number telling ops apart (routings name the op they belong to).
uint64_t new_op_id();
// "[2, 3]", for messages.
std::string shape_text(std::span<const int64_t> shape);
// Checks one tensor argument: its dtype, its shape (`expected`; with
// at_least_rows, any first dimension of at least expected[0]) and that it
// has data; throws epjit::Error naming the call and the argument.
void expect_tensor(const char* call, const char* what, const TensorRef& tensor, DType dtype,
                   std::initializer_list<int64_t> expected, bool at_least_rows = false);
// Blocks for `items` pieces of work, `per_block` to a block: at least one,
// at most `most` (the schedule's grid; the kernels stride over the rest).
inline int64_t blocks_for(int64_t items, int64_t per_block, int64_t most) {
  return std::clamp<int64_t>((items + per_block - 1) / per_block, 1, most);
}
// A word of the op's memory, read after the op's stream's work (only).
int32_t read_word(Device& device, Stream& stream, const void* base, size_t byte_offset);

// Which halves of a dispatch or combine one launch runs: a one-phase call
// both; a split call its send half, then (dispatch_recv, combine_recv) its
// receive half.
enum class Halves { Send, Receive, Both };

// A dispatch's kernel arguments, kept from its send half for its receive half.
struct DispatchLaunch {
  const void *input = nullptr, *weights = nullptr, *scales = nullptr, *indices = nullptr;
  void* route = nullptr;
  int64_t tokens = 0;
  bool replay = false, v2 = false;
  void *kept_indices = nullptr, *kept_origins = nullptr;
  const void* token_count = nullptr;  // DispatchOptions::token_count
  // keep_call where the kernel does not keep the origins: copied once the receive half is queued.
  Routing* copy_origins_into = nullptr;
  DispatchResult result;
};

// A combine's arguments, the same way.
struct CombineLaunch {
  const void *input = nullptr, *weights = nullptr, *expert_out = nullptr;
  const void* indices = nullptr;  // weighted entries: the origin's top-k indices
  bool staged = false;
  int64_t tokens = 0;
  const void* token_count = nullptr;  // the dispatch's (DispatchOptions::token_count)
  void* output = nullptr;             // the caller's [tokens, hidden] (combine's output=, weighted entries'), else out_tokens
  void* output_weights = nullptr;     // the caller's [tokens, top-k] f32 (combine's output_weights=), else out_weights
  CombineResult result;
};

struct EpDispatchCombineOp::Impl {
  EpDispatchCombineConfig config;
  Communicator& comm;
  Device& device;
  const uint64_t id = new_op_id();
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
  void* moe_codes = nullptr;   // std_moe_quant
  void* moe_scales = nullptr;
  void* expert_counts = nullptr;  // local_expert_counts_device()'s output
  void* narrow_indices = nullptr;  // ep_narrow_indices' output: a call's int64 ids as int32

  double fetch_seconds = 0;
  int32_t peer_timeout_ms = 0;  // resolved once (config, else EPJIT_PEER_TIMEOUT_S, else 30 s)

  int64_t dispatched_tokens = -1;  // tokens of the dispatch awaiting combine; -1 none
  // The received count of the dispatch awaiting combine once the host has
  // read it (received_counts()); -1 until then. Its combine then takes
  // inputs of that many rows: the kernel reads no more.
  int64_t received_read = -1;
  bool packed_since_dispatch = false;  // std_moe_pack ran after the dispatch awaiting combine
  // The dispatch awaiting combine took slots from the receive counters (not a
  // replay). Another such dispatch must wait for a combine: a peer that has
  // finished this one could add to a counter this rank's last block has not
  // read and cleared yet. A replay takes no slots, so it may follow directly.
  bool pending_counted_slots = false;
  void* route_in_use = nullptr;    // the route map of the pending dispatch
  bool pending_v2 = false;         // the pending dispatch ran internode v2 (its combine must too)
  const void* pending_token_count = nullptr;  // the pending dispatch's count on the device, or null
  // A split call between its halves (dispatch_send .. dispatch_recv,
  // combine_send .. combine_recv): what its receive half launches.
  std::optional<DispatchLaunch> awaiting_dispatch_recv;
  std::optional<CombineLaunch> awaiting_combine_recv;
  bool closed = false;    // calls throw
  bool released = false;  // memory freed (at close(), or at destruction)
  std::atomic<const char*> running_call{nullptr};  // see OneCallAtATime

  OneCallAtATime one_call(const char* call) { return {running_call, call, config.rank}; }

  Impl(EpDispatchCombineConfig c, Communicator& communicator, OpOptions options);

  ~Impl() { release(); }

  void resolve_and_validate();

  // auto picks per call by the token count, and every rank of a call must
  // pick alike (their transfers pair up): say so once where a user reads it.
  void check_internode_kernel() const;

  // Fetches the op's module and binds it: its kernels, and where its
  // regions, state words and error codes are, all from its interface record.
  void fetch_kernels();

  // The blocks of every EP kernel wait for each other (the rank's meeting), so
  // a grid must fit on the device at once or it hangs. Fewer blocks give the
  // same results (the kernels stride over tokens by the grid): the schedule is
  // cut to what the device holds, and that is logged once per process.
  void fit_schedule_to_device();

  // The combine kernel of the op's protocol and mode.
  const Kernel* combine_kernel() const {
    if (kernels.combine_low_latency) return kernels.combine_low_latency;
    if (kernels.combine_entries) return kernels.combine_entries;
    return config.combine_mode == CombineMode::Gather ? kernels.combine_gather : kernels.combine_scatter;
  }

  int fit_blocks(const Kernel& kernel, int blocks, int warps);

  // The op hands out views into regions; each must hold what its view spans.
  void require_region_bytes(const char* name, size_t needed) const;

  static void* part_of(void* buffer, const BufferPartInfo& part) { return static_cast<char*>(buffer) + part.offset; }

  void* allocate_zeroed(size_t bytes) {
    void* pointer = device.allocate(std::max<size_t>(bytes, 16));
    device.fill_zero(pointer, std::max<size_t>(bytes, 16));
    return pointer;
  }

  void allocate();

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
  void release();

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
  // A kept call's origins are copied by the dispatch kernel's last block up
  // to the target's crossover (TargetInfo::crossovers), by a copy after it
  // above. Internode, rows from other nodes arrive after the dispatch kernel
  // (v2_ll's ingest, v2's forward): the copy stays.
  bool kernel_may_keep_origins() const { return !config.internode(); }
  bool kernel_keeps_origins(int64_t tokens) const {
    return kernel_may_keep_origins() && tokens <= config.target_info().crossovers.kernel_kept_origins_max_tokens;
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

  // The top-k ids as the kernels read them: int32 ids as they are; int64 ids
  // (frameworks' type) narrowed into the op's narrow_indices by
  // ep_narrow_indices on the op's stream (an id outside int32 becomes
  // INT32_MAX, which the kernels report as out of range). Checked before.
  TensorRef indices_for_kernels(const TensorRef& indices) {
    if (indices.dtype != DType::I64) return indices;
    const int64_t entries = indices.shape[0] * config.num_experts_per_token;
    if (entries > 0) {
      const Kernel& kernel = *kernels.narrow_indices;
      const ScheduleEntry& geometry = geometry_for(indices.shape[0]);
      constexpr int64_t kSegment = 512;  // ep/narrow's entries per warp
      const int64_t warps = geometry.dispatch_warps;
      const int64_t blocks = blocks_for(entries, kSegment * warps, geometry.dispatch_blocks);
      device.launch(kernel, {uint32_t(blocks), uint32_t(warps)},
                    LaunchArgs(kernel)
                        .set("wide", indices.data)
                        .set("narrow", narrow_indices)
                        .set("entries", entries)
                        .build(),
                    *stream);
    }
    return {narrow_indices, DType::I32, indices.shape};
  }
  // The top-k ids' dtype a call takes: int32, or int64 (narrowed for the kernels).
  static DType index_type_of(const TensorRef& indices) { return indices.dtype == DType::I64 ? DType::I64 : DType::I32; }

  void check_dispatch_inputs(const char* call, const TensorRef& input, const TensorRef& weights,
                             const std::optional<TensorRef>& scales, const TensorRef& indices, bool counts_slots,
                             const void* token_count = nullptr);
  // DispatchOptions::token_count: what it needs and what it cannot serve.
  void check_token_count(const char* call, const void* token_count, const Routing* record) const;

  // Whether a call of n tokens (this rank's) runs internode v2: by the
  // largest count of any rank when the caller gives it, else by n.
  bool call_runs_internode_v2(const char* call, int64_t n, const DispatchOptions& options) const;

  // A dispatch's launch: the state its combine reads, its result, and its
  // first (or only) launch; a split call's receive half is queued later by
  // enqueue_dispatch(..., Halves::Receive).
  DispatchLaunch launch_dispatch(const TensorRef& input, const TensorRef& weights,
                                 const std::optional<TensorRef>& scales, const TensorRef& indices, void* route_map,
                                 bool replay, bool v2, Halves halves, void* kept_indices = nullptr,
                                 void* kept_origins = nullptr, Routing* copy_origins_into = nullptr,
                                 const void* token_count = nullptr);
  void enqueue_dispatch(const DispatchLaunch& call, Halves halves);
  // receive_order source: ep/order's kernels, which write the route's slots
  // (then the dispatch replays them); on the send half's grid.
  void enqueue_source_order(int64_t tokens, const void* indices, void* route_map, const void* token_count,
                            Halves halves);
  // dispatch() and dispatch_send(): checks, the routing to record, the launch.
  DispatchLaunch dispatch_call(const char* call, const TensorRef& input, const TensorRef& weights,
                               const std::optional<TensorRef>& scales, const TensorRef& indices, Routing* record,
                               const DispatchOptions& options, Halves halves);

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
                               Halves halves, const void* expert_out = nullptr,
                               const std::optional<TensorRef>& output = std::nullopt,
                               const std::optional<TensorRef>& output_weights = std::nullopt);
  void enqueue_combine(const CombineLaunch& call, Halves halves);
  // enqueue_combine, then the op's state: a send half awaits its receive
  // half, a whole call ends the dispatch it answered.
  CombineResult enqueue_combine_call(const CombineLaunch& launch, Halves halves);
  StdMoeResult std_moe_outputs() const {
    const int64_t experts = config.num_experts_per_rank;
    const int64_t rows = int64_t(config.world_size) * config.max_num_inp_token_per_rank;
    StdMoeResult result{{moe_tokens, DType::BF16, {experts, rows, config.hidden_dim}},
                        {moe_counts, DType::I32, {experts}},
                        {moe_sources, DType::I32, {experts, rows}}};
    if (moe_codes) {
      const int64_t blocks = config.hidden_dim / 128;
      const bool words = config.std_moe_quant == StdMoeQuant::DeepEpFp8Ue8m0;
      result.codes = {moe_codes, DType::FP8_E4M3FN, {experts, rows, config.hidden_dim}};
      result.scales = words ? TensorRef{moe_scales, DType::I32, {experts, blocks / 4, rows}}
                            : TensorRef{moe_scales, DType::F32, {experts, blocks, rows}};
    }
    return result;
  }
  CombineResult std_moe_combine_call(const char* call, const TensorRef& expert_out,
                                     const std::optional<TensorRef>& weights, const std::optional<TensorRef>& indices,
                                     const std::optional<TensorRef>& output, Halves halves);
  // std_moe_combine with weighted entries (ep_combine_entries).
  CombineResult entries_combine_call(const char* call, const TensorRef& expert_out, const std::optional<TensorRef>& weights,
                                     const std::optional<TensorRef>& indices, const std::optional<TensorRef>& output,
                                     Halves halves);

  // The kernels' `phases` argument for `halves` (the template's bits).
  int64_t phase_bits(Halves halves) const {
    switch (halves) {
      case Halves::Send: return window.phase_send;
      case Halves::Receive: return window.phase_receive;
      case Halves::Both: return window.phase_send | window.phase_receive;
    }
    return 0;
  }
  // A launch's grid for `halves` of a call on the schedule's `grid`: a send
  // half within send_block_num, a combine's receive half within
  // recv_block_num; a dispatch's receive half is one block (its lead warp
  // waits and publishes; keep_origins copies on that block's warps).
  LaunchGeometry split_grid(LaunchGeometry grid, Halves halves, bool dispatch) const {
    if (halves == Halves::Send && config.send_block_num)
      grid.blocks = std::min(grid.blocks, uint32_t(*config.send_block_num));
    if (halves == Halves::Receive) {
      if (dispatch) grid.blocks = 1;
      else if (config.recv_block_num) grid.blocks = std::min(grid.blocks, uint32_t(*config.recv_block_num));
    }
    return grid;
  }
  // Between a split call's halves only its receive (and calls that launch
  // nothing of the op's: streams, events, check(), reset(), close()) may come.
  void require_no_split_call_open(const char* call) const {
    const char* open = awaiting_dispatch_recv ? "dispatch_send" : awaiting_combine_recv ? "combine_send" : nullptr;
    if (!open) return;
    const std::string receive = awaiting_dispatch_recv ? "dispatch_recv" : "combine_recv";
    throw Error(std::string(call) + " between " + open + "() and its " + receive + "()",
                receive + "() next: a split call's halves enclose no other call of the op",
                "call " + receive + "() first (or reset() on every rank to abandon the call)");
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

}  // namespace epjit::ep
