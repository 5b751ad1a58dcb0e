// EpDispatchCombineOp: MORI EPv2's dispatch/combine op, bound at construction
// to a communicator. Construction validates the config, lays out and
// allocates the symmetric arena, fetches the op's kernels from the cache
// (compiling them on a miss) and loads them; dispatch() and combine() then
// only check their inputs on the host and enqueue launches: no compile, no
// allocation, no host synchronization. docs/EP.md describes the protocol.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "epjit/cache.h"
#include "epjit/comm/communicator.h"
#include "epjit/device.h"
#include "epjit/ep/config.h"

namespace epjit::ep {

// Element types of the tensors the op takes and returns. FP8 is named by its
// format, so a tensor of the wrong fp8 flavor for the target is refused.
enum class DType : uint8_t { BF16, F32, I32, U8, FP8_E4M3FN, FP8_E4M3FNUZ, FP4_E2M1, I64 };

// Every element type's facts, in one table: what errors call it, what torch
// and ml_dtypes call it, its bits, and the payload type (DataType: fp8 as
// "the target's fp8") it carries, if any. The Python layers read this table
// instead of keeping their own.
struct ElementType {
  DType dtype;
  const char* name;            // "bf16", "float8_e4m3fnuz", ...
  const char* framework_name;  // torch's and ml_dtypes': "bfloat16", "float4_e2m1fn_x2", ...
  int bits;                    // FP4: 4, packed two per byte, element 2i in the low nibble
  std::optional<DataType> payload;
  std::optional<Fp8Format> fp8;  // the fp8 format of an fp8 dtype
};
std::span<const ElementType> element_types();
const ElementType& element_type(DType type);
inline const char* name_of(DType type) { return element_type(type).name; }
inline int bits_of(DType type) { return element_type(type).bits; }
// The tensor dtype of a payload type on a target (fp8: the target's flavor).
DType tensor_type_of(DataType type, const TargetInfo& target);

// A dense row-major tensor in device memory (host memory on the host device).
// Shapes count logical elements (an FP4 row of hidden elements is hidden / 2 bytes).
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
};

struct DispatchResult {
  TensorRef tokens;   // [capacity, hidden], dispatch type
  TensorRef weights;  // [capacity, top-k] f32
  TensorRef scales;   // [capacity, scale_dim] of scale_type_size bytes (data null when none)
  TensorRef indices;  // [capacity, top-k] i32
  // [capacity, 2] i32: per received row, source rank * max_num_inp_token_per_rank
  // + source token, and the row's ordinal among that token's destinations
  // (MORI's get_dispatch_src_token_pos).
  TensorRef origins;
  // [1] i32 on the device: how many leading rows arrived. Read it after the
  // stream (or a later event) completes; the op never synchronizes.
  TensorRef total_recv;
};

struct CombineResult {
  TensorRef tokens;   // [tokens of the last dispatch, hidden], combine type
  TensorRef weights;  // [tokens, top-k] f32; data null when combine had no weights
};

struct StdMoeResult {
  TensorRef tokens;   // [experts_per_rank, world_size * max tokens, hidden] bf16
  TensorRef counts;   // [experts_per_rank] i32 on the device
  TensorRef sources;  // [experts_per_rank, world_size * max tokens] i32: receive row of each packed row
  // With std_moe_quant (data null without): the packed rows in OCP E4M3,
  // [experts_per_rank, rows, hidden], and their DeepEP per-128 scales stored
  // column-major per expert: f32 [experts_per_rank, hidden / 128, rows]
  // (amax / 448, or its power of two), or for deepep_fp8_ue8m0 i32 words
  // [experts_per_rank, hidden / 512, rows] whose byte b % 4 is block b's
  // UE8M0 scale. DeepEP's packed_recv_x_scales is this tensor's
  // transpose(1, 2). Rows past an expert's count hold stale values.
  TensorRef codes;
  TensorRef scales;
};

class EpDispatchCombineOp;

// The kernel specialization an op of this config (target set) uses: what to
// warm ahead of time (epjit-bench --warm-only, or KernelCache::get directly).
// One binary serves every schedule variant of the config.
KernelSpec kernel_spec(const EpDispatchCombineConfig& config);

// The values of the template's runtime parameters for this config: its
// limits (max_tokens, capacity, the internode forward rows). The op binds
// its module's interface record to them, and the kernels read them from the
// window table, so the module serves every value.
std::map<std::string, uint64_t, std::less<>> runtime_limits(const EpDispatchCombineConfig& config);

// EPJIT_SPECIALIZE_LIMITS=1: compile the limits into the kernels instead
// (one module per limit), for the A/B of what constants buy.
bool specialize_limits();

// A dispatch's destination map (per source token, the slots it took on each
// destination) and this rank's received count, kept on the device so a later
// dispatch of the same routing can reuse it without allocating slots.
// Destroying one frees device memory, which on CUDA and HIP waits for every
// stream of the device: keep routings and record into them again.
class Routing {
 public:
  ~Routing();
  Routing(const Routing&) = delete;
  Routing& operator=(const Routing&) = delete;
  int64_t tokens() const { return tokens_; }
  bool recorded() const { return tokens_ >= 0; }
  // Whether the recorded call ran internode v2 (its replays do too).
  bool runs_internode_v2() const { return internode_v2_; }

 private:
  friend class EpDispatchCombineOp;
  Routing(Device& device, Stream& stream, size_t route_bytes, uint64_t op_id);
  Device& device_;
  void* route_ = nullptr;
  uint64_t op_id_;
  int64_t tokens_ = -1;
  // Internode v2: whether the map holds this rank's forward route (a
  // recorded dispatch, or a whole route_map() loaded back). A map loaded
  // without it (as a MORI handle's tensors give) replays only v2_ll calls.
  bool forward_route_ = false;
  bool internode_v2_ = false;
  // DispatchOptions::keep_call: the recorded call's received origins and its
  // indices (the record's "kept" buffer); valid while kept_call_.
  void* kept_ = nullptr;
  bool kept_call_ = false;
};

// What a caller knows about a dispatch beyond its own tensors.
struct DispatchOptions {
  // The largest token count any rank brings to this call, the same on every
  // rank (DP attention gives ranks batches of different sizes; frameworks
  // gather them). internode_kernel auto picks v2_ll or v2 by the call's token
  // count, and the ranks of a call must pick alike (their transfers pair up):
  // with this set every rank picks by it. Unset: each rank picks by its own
  // count, so every rank's count must be on the same side of
  // internode_auto_ll_max_tokens. In [n, max_num_inp_token_per_rank].
  std::optional<int64_t> max_tokens_across_ranks;
  // With a routing to record into: the routing also keeps what the call
  // received (its received_origins()) and the indices it was called with, so
  // recorded_call() still answers after later dispatches overwrite the op's
  // own (a MORI routing handle exposes both). The dispatch kernel writes the
  // indices. The origins are complete only once every peer's rows arrived:
  // in a call of up to 1024 tokens on one node the kernel's last block
  // copies those of the rows received after its meeting; larger calls and
  // internode ones copy them once on the op's stream after it. Only for
  // callers who read them.
  bool keep_call = false;
  // The call's token count on the device: an int32 scalar (e.g. a [1] or [] i32
  // tensor) the call reads when it runs. It moves the first count rows of
  // `input` (clamped to [0, rows passed]); the rest are padding: not sent, not
  // counted, and combine leaves their output rows as they were. One graph
  // captured with input at max_num_inp_token_per_rank rows then serves every
  // batch size: write the count, replay. The memory must hold the count until
  // the combine has run (it reads it too). One node only, and not with a
  // routing to record (a routing's replay needs its count on the host).
  const void* token_count = nullptr;
};

// What a dispatch recorded with DispatchOptions::keep_call kept in its
// routing: memory of the routing, valid until it records or loads again.
struct RecordedCall {
  TensorRef total_recv;  // [1] i32: how many leading rows arrived
  TensorRef origins;     // [capacity, 2] i32: the call's received_origins() (its first total_recv rows)
  TensorRef indices;     // [tokens, top-k] i32: the indices the call was given
};

struct OpOptions {
  KernelCache* cache = nullptr;  // null: a process-wide cache from the environment
  Stream* stream = nullptr;      // null: the op makes its own
  // Internode ops on GPUs: the caller's ncclComm_t (an NCCL/RCCL communicator
  // of the same ranks), used and not destroyed; null: the op creates one
  // over `comm` when its transport is nccl.
  void* nccl_communicator = nullptr;
};

class EpDispatchCombineOp {
 public:
  // Collective over `comm` (allocates symmetric memory). An empty
  // config.target becomes EPJIT_TARGET, else the device's target.
  EpDispatchCombineOp(EpDispatchCombineConfig config, Communicator& comm, OpOptions options = {});
  ~EpDispatchCombineOp();
  EpDispatchCombineOp(const EpDispatchCombineOp&) = delete;
  EpDispatchCombineOp& operator=(const EpDispatchCombineOp&) = delete;

  // input [n, hidden] of the dispatch type, weights [n, top-k] f32, scales
  // [n, scale_dim] (or none when scale_dim is 0), indices [n, top-k] i32, n at
  // most max_num_inp_token_per_rank. `record` (from make_routing()) keeps the
  // routing for a later dispatch_replay().
  DispatchResult dispatch(const TensorRef& input, const TensorRef& weights, const std::optional<TensorRef>& scales,
                          const TensorRef& indices, Routing* record = nullptr, const DispatchOptions& options = {});
  // The same routing as `routing` was recorded with (same n and indices on
  // every rank), new payloads: skips slot allocation, and runs the internode
  // kernel the recorded call ran.
  DispatchResult dispatch_replay(const TensorRef& input, const TensorRef& weights,
                                 const std::optional<TensorRef>& scales, const TensorRef& indices,
                                 const Routing& routing);
  // input [>= capacity, hidden] of the combine type (rows past total_recv
  // are not read), weights [>= capacity, top-k] f32 or none; after
  // received_counts() (one node), at least the received count's rows.
  // `output` [tokens, hidden] of the combine type and `output_weights`
  // [tokens, top-k] f32 (with weights): the caller's tensors the combine
  // writes instead of the op's buffers (one node only); the result names them.
  CombineResult combine(const TensorRef& input, const std::optional<TensorRef>& weights = std::nullopt,
                        const std::optional<TensorRef>& output = std::nullopt,
                        const std::optional<TensorRef>& output_weights = std::nullopt);
  // Gather combine: where expert outputs can be written so combine() need
  // not stage them (pass this tensor as combine's input). [capacity, hidden];
  // valid between a dispatch and its combine (peers read it during combine).
  TensorRef combine_input();

  // Standard MoE (enable_std_moe): the last dispatch's tokens packed per local
  // expert, and back: expert outputs in that layout summed per received token
  // into combine()'s input, then combined. With std_moe_combine =
  // weighted_entries, each (token, k) output row goes back to its origin,
  // which sums the rows with `weights` [n, k] f32 (its own top-k weights, not
  // the received ones) in top-k order, rounded once (DeepEP's low-latency
  // combine); `indices` [n, k] i32 are the dispatch's (entries may be masked
  // to -1 since); the result has no weights and is written to `output`
  // [n, hidden] bf16 when given (else the op's own buffer). Without it,
  // `weights` are combine()'s and `indices` and `output` are refused.
  StdMoeResult std_moe_pack();
  // Where std_moe_pack writes (the same tensors it returns), without a launch:
  // callers of a split dispatch take them before dispatch_recv and pack.
  StdMoeResult std_moe_outputs();
  CombineResult std_moe_combine(const TensorRef& expert_out, const std::optional<TensorRef>& weights = std::nullopt,
                                const std::optional<TensorRef>& indices = std::nullopt,
                                const std::optional<TensorRef>& output = std::nullopt);
  // weighted_entries: where expert outputs can be written in std_moe_pack's
  // layout so std_moe_combine need not stage them (pass this tensor as its
  // expert_out; DeepEP's zero-copy combine buffer). Valid between a dispatch
  // and its combine.
  TensorRef std_moe_combine_input();

  // Split calls: a dispatch or combine in two halves on the op's stream,
  // the same results bit for bit as the one-phase call. The send half issues
  // the transfers (on at most config.send_block_num blocks) and this rank's
  // arrival, then the stream is free for other work (the other micro-batch's
  // attention or experts); the receive half waits for every rank and
  // finishes the call (dispatch_recv on one block, combine_recv on at most
  // config.recv_block_num). Between the halves the op takes no other call
  // but wait_for/record/set_stream, check(), reset() and close(); the
  // caller's inputs must stay as they are until the receive half has run
  // (combine_recv reads a rank's own rows in place). The outputs
  // dispatch_send returns are valid once dispatch_recv's work is done.
  // Both halves may be captured in CUDA/HIP graphs, in one graph or two.
  DispatchResult dispatch_send(const TensorRef& input, const TensorRef& weights,
                               const std::optional<TensorRef>& scales, const TensorRef& indices,
                               Routing* record = nullptr, const DispatchOptions& options = {});
  void dispatch_recv();
  void combine_send(const TensorRef& input, const std::optional<TensorRef>& weights = std::nullopt);
  void std_moe_combine_send(const TensorRef& expert_out, const std::optional<TensorRef>& weights = std::nullopt,
                            const std::optional<TensorRef>& indices = std::nullopt,
                            const std::optional<TensorRef>& output = std::nullopt);
  // The receive half of combine_send or std_moe_combine_send.
  CombineResult combine_recv();

  // Tokens each local expert receives in the dispatch awaiting combine,
  // counted on the host from its indices: synchronizes the stream. Refused
  // after combine, when a peer's next dispatch may be writing the rows.
  // Which received (token, k) entries a local expert's count includes: each
  // expert once per token (repeats in a token's top-k skipped), or every entry
  // (MORI's rule: the counts over all ranks sum to the valid entries sent).
  enum class ExpertCountRule { DistinctPerToken, EveryEntry };
  std::vector<int> local_expert_counts(ExpertCountRule rule = ExpertCountRule::DistinctPerToken);
  // The same counts computed on the device into [num_experts_per_rank] i32 of
  // the op's memory, enqueued on the op's stream (no synchronization): for
  // grouped GEMMs that read them on the GPU. Valid until the next call of it.
  TensorRef local_expert_counts_device(ExpertCountRule rule = ExpertCountRule::DistinctPerToken);
  // How many rows the dispatch awaiting combine received, and the tokens each
  // local expert got (as local_expert_counts), counted on the device and read
  // in one copy: synchronizes the op's stream. Uses local_expert_counts_device()'s
  // memory (its tensor then holds this rule's counts). expert_alignment > 1
  // rounds each expert's count up to a multiple of it (DeepEP's
  // num_recv_tokens_per_expert_list, the rows a grouped GEMM pads to); the
  // total stays the rows received.
  struct ReceivedCounts {
    int64_t total = 0;
    std::vector<int> per_expert;
  };
  ReceivedCounts received_counts(ExpertCountRule rule = ExpertCountRule::DistinctPerToken,
                                 int64_t expert_alignment = 1);
  // What a dispatch of `indices` ([n, top-k] i64, -1 for none) would send,
  // before it runs (DeepEP's get_dispatch_layout), into the caller's tensors:
  // per_rank [world_size] i32 (tokens each rank gets, a token once per rank),
  // per_expert [num_experts] i32 (entries each expert gets, repeats too) and
  // in_rank [n, world_size] u8 (1 where the token goes to the rank, else 0).
  // Negative ids and experts past the last count nowhere (the dispatch
  // refuses the latter). Across nodes, `per_node` [world_size / gpu_per_node]
  // i32 (tokens each node gets, a token once per node: DeepEP's
  // num_tokens_per_rdma_rank) when given; an op on one node refuses it.
  // Launches one kernel on the op's stream; no host synchronization, no
  // dispatch state: callable at any time between calls.
  void dispatch_layout(const TensorRef& indices, const TensorRef& per_rank, const TensorRef& per_expert,
                       const TensorRef& in_rank, const std::optional<TensorRef>& per_node = std::nullopt);
  // The caller's tensors for deliver_received(), `rows` rows each (the
  // tokens' first dimension, at most capacity()).
  struct ReceivedRows {
    TensorRef tokens;                        // [rows, hidden] of the dispatch type
    std::optional<TensorRef> scales;         // [rows, scale_dim] of scale_type_size bytes: exactly when scale_dim > 0
    std::optional<TensorRef> local_experts;  // [rows, top-k] i64, or none
    std::optional<TensorRef> weights;        // [rows, top-k] f32, or none
  };
  // Copies the received rows of the dispatch awaiting combine into the
  // caller's tensors, with each row's top-k as local expert ids (expert -
  // rank * num_experts_per_rank where this rank holds it, else -1) and the
  // weights of those entries (0 elsewhere): a framework's normal-mode
  // dispatch outputs (DeepEP's recv_x, recv_topk_idx, recv_topk_weights) in
  // one launch on the op's stream, no host synchronization. Rows past the
  // received count (a worst-case `rows`) keep their token and scale bytes and
  // get -1 ids and 0 weights.
  void deliver_received(const ReceivedRows& out);

  std::unique_ptr<Routing> make_routing();
  // A recorded routing's map as an i32 device tensor: per source token
  // (max_tokens * top-k words), its distinct destinations in order of first
  // appearance as rank * capacity + slot, then -1s; then the received count,
  // the tokens sent to each world rank off this node, and (ops that may run
  // internode v2) the forward route. The routing's memory: it answers after
  // close() too.
  TensorRef route_map(const Routing& routing) const;
  // What `routing`'s recorded call kept (DispatchOptions::keep_call). Reads
  // no op state, so it answers after close() too.
  RecordedCall recorded_call(const Routing& routing) const;
  // Makes `routing` (of this op) replay `map`, a map in route_map()'s layout
  // (in the op's device memory) recorded for `tokens` tokens, e.g. one
  // saved and restored by a framework. Checked on the host before use (every
  // entry -1 or a rank and slot inside the op, the count inside capacity), so
  // it synchronizes; a bad map throws and leaves the routing as it was.
  // `options` as the recorded dispatch had them (internode auto's choice).
  void load_routing(Routing& routing, const TensorRef& map, int64_t tokens, const DispatchOptions& options = {});
  // Synchronizes the op's stream and throws epjit::Error when a kernel
  // reported a problem (a peer that did not arrive within the peer timeout,
  // overflow, a bad expert). The problem stays reported, and every later
  // call's peer waits give up at once, until reset().
  void check();
  // Collective: synchronize, clear every counter, flag, epoch and error on all ranks.
  // Refused while the op's stream captures a graph. reset() and close() start
  // with a vote: a rank that refuses (a capture, a closed op, a fault its
  // stream reports) makes the call throw on every rank at once, naming that
  // rank and why, with no rank having begun it.
  void reset();
  // Collective: synchronize, wait for every rank, and free the arena (or,
  // with KeepUntilDestroyed, keep it until the op is destroyed, so views of
  // its results a binding handed out stay readable); later calls throw. A
  // Release after a KeepUntilDestroyed close frees the kept memory (before
  // the communicator it came from is destroyed). Refused, like reset(), while
  // the op's stream captures a graph, with the same vote.
  enum class Memory { Release, KeepUntilDestroyed };
  void close(Memory memory = Memory::Release);

  const EpDispatchCombineConfig& config() const;
  Stream& stream();
  // Later calls launch on `stream` (a framework's, to capture or order with
  // its work); null: the op's own. Not owned; it must outlive its use.
  void set_stream(Stream* stream);
  // The op's communication stream: OpOptions::stream, else the one it made.
  // Calls run there after set_stream(nullptr); the caller orders its own
  // stream after them with an event (record, then Event::enqueue_wait).
  Stream& default_stream();
  // Orders the op's calls with other streams' work, without the host waiting:
  // wait_for makes later calls on the op's stream start after `event`'s last
  // record (DeepEP's previous_event); record marks what the op's stream has
  // enqueued so far (DeepEP's async_finish event), for another stream to
  // wait for. Both are stream order only: memory stays the op's (docs/EP.md,
  // "Streams and events").
  void wait_for(Event& event);
  void record(Event& event);
  // Tokens the arena can receive per rank (max_total_recv_tokens resolved).
  int64_t capacity() const;
  // Seconds construction spent fetching and loading the kernels (a compile on a cache miss).
  double kernel_fetch_seconds() const;
  // The interface record of the op's kernels: their parameters, the window's
  // regions, the buffers the op allocates for them (the route map's parts,
  // ...), the constants. Layers above the op read layouts from it.
  const ModuleInterface& interface() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace epjit::ep
