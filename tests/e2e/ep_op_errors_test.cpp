// Every way to misuse the op fails with an epjit::Error that says what was
// wrong, before any launch; kernel-side problems (overflow, a peer that never
// comes) surface through check(), and reset() recovers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "../common/errors.h"
#include "../common/ep_harness.h"
#include "../common/scoped_environment.h"
#include "epjit/error.h"

namespace epjit::testing {
namespace {

KernelCache& testCache() { return e2eCache(EPJIT_TEST_WORK_DIR); }

// The message `body` threw ("" when it did not throw).
template <typename Body>
std::string thrown(Body&& body) {
  return errorOf(std::forward<Body>(body));
}

// "" when `message` holds every part, else what is missing.
std::string expectParts(const std::string& what, const std::string& message, std::vector<std::string> parts) {
  if (message.empty()) return what + ": did not throw\n";
  for (const std::string& part : parts)
    if (message.find(part) == std::string::npos) return what + ": '" + message + "' lacks '" + part + "'\n";
  return "";
}

EpCase smallCase() {
  EpCase c;
  c.world = 1;
  c.hidden = 64;
  c.topk = 2;
  c.experts_per_rank = 4;
  c.max_tokens = 8;
  return c;
}

// Device buffers big enough for any call of the small case.
struct Buffers {
  explicit Buffers(Device& device) : device(device) {
    for (void*& p : pointers) p = device.allocate(1 << 16);
    std::vector<uint8_t> zeros(1 << 16, 0);
    for (void* p : pointers) device.copy_to_device(p, zeros.data(), zeros.size());
  }
  ~Buffers() {
    for (void* p : pointers) device.release(p);
  }
  Device& device;
  void* pointers[6]{};
};

// What `body(op, comm, buffers)` reports on the one rank of case `c`, run on
// a thread with an op of that case and fresh buffers.
template <typename Body>
std::string onOneRank(const EpCase& c, Body&& body) {
  return runRanks(1, Ranks::Threads, testCache(), [&](int rank, Communicator& comm, KernelCache& cache) {
    EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
    Buffers b(comm.device());
    return body(op, comm, b);
  });
}

// The calls a framework's normal-mode layer runs (dispatch_layout, int64
// top-k, received_counts, deliver_received, combine into the caller's
// tensors) check what crosses them before any launch.
TEST(EpOpErrors, TheFrameworkCallsCheckTheirTensors) {
  const EpCase c = smallCase();
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator& comm, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    const TensorRef input{x, DType::BF16, {3, 64}}, weights{w, DType::F32, {3, 2}};
    const TensorRef wide{idx, DType::I64, {3, 2}};
    f += expectParts("layout of int32 ids",
                     thrown([&] { op.dispatch_layout({idx, DType::I32, {3, 2}}, {y, DType::I32, {1}},
                                                     {yw, DType::I32, {4}}, {s, DType::U8, {3, 1}}); }),
                     {"indices is i32", "i64"});
    f += expectParts("layout counts per expert",
                     thrown([&] { op.dispatch_layout(wide, {y, DType::I32, {1}}, {yw, DType::I32, {3}},
                                                     {s, DType::U8, {3, 1}}); }),
                     {"per_expert has shape [3]", "[4]"});
    f += expectParts("layout counts per node on one node",
                     thrown([&] { op.dispatch_layout(wide, {y, DType::I32, {1}}, {yw, DType::I32, {4}},
                                                     {s, DType::U8, {3, 1}}, TensorRef{x, DType::I32, {1}}); }),
                     {"per_node counts for an op on one node", "gpu_per_node < world_size", "leave per_node out"});
    f += expectParts("received rows before a dispatch", thrown([&] { op.received_counts(); }),
                     {"received_counts without a dispatch awaiting combine"});
    const int64_t wrapped[6] = {0, 1, (int64_t(1) << 32) + 1, 2, 3, 0};  // the low word of [1, 0] is expert 1
    comm.device().copy_to_device(idx, wrapped, sizeof wrapped);
    f += expectParts("int64 id past int32", thrown([&] { op.dispatch(input, weights, std::nullopt, wide); }),
                     {"indices[1, 0] = 4294967297", "[0, 4)"});
    const int64_t good[6] = {0, 1, 2, -1, 3, 0};
    comm.device().copy_to_device(idx, good, sizeof good);
    op.dispatch(input, weights, std::nullopt, wide);
    f += expectParts("fewer combine rows before the count is read",
                     thrown([&] { op.combine({y, DType::BF16, {3, 64}}); }), {"input has shape [3, 64]", "at least [8, 64]"});
    f += expectParts("delivered ids dtype",
                     thrown([&] { op.deliver_received({{y, DType::BF16, {3, 64}}, std::nullopt,
                                                       TensorRef{yw, DType::I32, {3, 2}}, std::nullopt}); }),
                     {"local_experts is i32", "i64"});
    f += expectParts("delivered rows past capacity",
                     thrown([&] { op.deliver_received({{y, DType::BF16, {op.capacity() + 1, 64}}}); }),
                     {"capacity"});
    f += expectParts("scales to an op without",
                     thrown([&] { op.deliver_received({{y, DType::BF16, {3, 64}}, TensorRef{s, DType::F32, {3, 1}}}); }),
                     {"a scales tensor", "scale_dim = 0"});
    const EpDispatchCombineOp::ReceivedCounts counts = op.received_counts();
    if (counts.total != 3) f += "received_counts: total " + std::to_string(counts.total) + ", expected 3\n";
    if (counts.per_expert != std::vector<int>{2, 1, 1, 1})
      f += "received_counts: per expert not {2, 1, 1, 1}\n";
    // Padded per expert (DeepEP's expert_alignment); the rows stay as received.
    const EpDispatchCombineOp::ReceivedCounts padded =
        op.received_counts(EpDispatchCombineOp::ExpertCountRule::DistinctPerToken, 3);
    if (padded.total != 3 || padded.per_expert != std::vector<int>{3, 3, 3, 3})
      f += "received_counts(alignment 3): not 3 rows and {3, 3, 3, 3}\n";
    f += expectParts("expert alignment 0",
                     thrown([&] { op.received_counts(EpDispatchCombineOp::ExpertCountRule::DistinctPerToken, 0); }),
                     {"expert_alignment is 0", "expert_alignment >= 1"});
    f += expectParts("expert alignment past 2^30",
                     thrown([&] {
                       op.received_counts(EpDispatchCombineOp::ExpertCountRule::DistinctPerToken, int64_t(1) << 31);
                     }),
                     {"expert_alignment is 2147483648", "[1, 2^30]"});
    f += expectParts("output_weights without weights",
                     thrown([&] { op.combine({x, DType::BF16, {3, 64}}, std::nullopt, TensorRef{y, DType::BF16, {3, 64}},
                                             TensorRef{yw, DType::F32, {3, 2}}); }),
                     {"output_weights without weights"});
    f += expectParts("output rows",
                     thrown([&] { op.combine({x, DType::BF16, {3, 64}}, std::nullopt, TensorRef{y, DType::BF16, {2, 64}}); }),
                     {"output has shape [2, 64]", "[3, 64]"});
    // The received rows alone now, into the caller's output.
    if (const std::string why = thrown([&] { op.combine({x, DType::BF16, {3, 64}}, std::nullopt, TensorRef{y, DType::BF16, {3, 64}}); });
        !why.empty())
      f += "combine of the counted rows threw: " + why + "\n";
    op.check();
    return f;
  });
  EXPECT_EQ(failures, "");
}

TEST(EpOpErrors, BadCallsFailBeforeAnyLaunch) {
  const EpCase c = smallCase();
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator& comm, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    const TensorRef input{x, DType::BF16, {3, 64}}, weights{w, DType::F32, {3, 2}}, indices{idx, DType::I32, {3, 2}};
    f += expectParts("too many tokens",
                     thrown([&] { op.dispatch({x, DType::BF16, {9, 64}}, {w, DType::F32, {9, 2}}, std::nullopt,
                                              {idx, DType::I32, {9, 2}}); }),
                     {"9 tokens", "max_num_inp_token_per_rank = 8"});
    f += expectParts("input dtype", thrown([&] { op.dispatch({x, DType::F32, {3, 64}}, weights, std::nullopt, indices); }),
                     {"input is f32", "bf16"});
    f += expectParts("input hidden",
                     thrown([&] { op.dispatch({x, DType::BF16, {3, 63}}, weights, std::nullopt, indices); }),
                     {"input has shape [3, 63]", "[3, 64]"});
    f += expectParts("weights rows",
                     thrown([&] { op.dispatch(input, {w, DType::F32, {2, 2}}, std::nullopt, indices); }),
                     {"weights has shape [2, 2]", "[3, 2]"});
    f += expectParts("null indices",
                     thrown([&] { op.dispatch(input, weights, std::nullopt, {nullptr, DType::I32, {3, 2}}); }),
                     {"indices has no data pointer"});
    f += expectParts("scales without scale_dim",
                     thrown([&] { op.dispatch(input, weights, TensorRef{s, DType::F32, {3, 1}}, indices); }),
                     {"scale_dim = 0"});
    const int32_t bad[6] = {0, 1, 4, 2, 3, 0};
    comm.device().copy_to_device(idx, bad, sizeof bad);
    f += expectParts("expert out of range", thrown([&] { op.dispatch(input, weights, std::nullopt, indices); }),
                     {"indices[1, 0] = 4", "[0, 4)"});
    const int32_t negative[6] = {0, -1, -1, -1, -2, 0};  // -1 is "no expert"; -2 is an error
    comm.device().copy_to_device(idx, negative, sizeof negative);
    f += expectParts("negative expert", thrown([&] { op.dispatch(input, weights, std::nullopt, indices); }),
                     {"indices[2, 0] = -2", "or -1 for none"});
    f += expectParts("combine first", thrown([&] { op.combine({y, DType::BF16, {8, 64}}); }), {"without a dispatch"});
    f += expectParts("std-MoE off", thrown([&] { op.std_moe_pack(); }), {"enable_std_moe"});

    const int32_t good[6] = {0, 1, 2, 3, 3, 0};
    comm.device().copy_to_device(idx, good, sizeof good);
    // max_tokens_across_ranks is the call's largest count: not below this
    // rank's, not above the op's maximum (8).
    f += expectParts("largest count below this rank's",
                     thrown([&] { op.dispatch(input, weights, std::nullopt, indices, nullptr, {.max_tokens_across_ranks = 2}); }),
                     {"max_tokens_across_ranks = 2 with 3 tokens", "in [3, max_num_inp_token_per_rank = 8]",
                      "the same on every rank"});
    f += expectParts("largest count past the op's",
                     thrown([&] { op.dispatch(input, weights, std::nullopt, indices, nullptr, {.max_tokens_across_ranks = 9}); }),
                     {"max_tokens_across_ranks = 9", "in [3, max_num_inp_token_per_rank = 8]"});
    auto never_recorded = op.make_routing();
    f += expectParts("replay unrecorded",
                     thrown([&] { op.dispatch_replay(input, weights, std::nullopt, indices, *never_recorded); }),
                     {"not recorded"});
    f += expectParts("keep_call without a record",
                     thrown([&] { op.dispatch(input, weights, std::nullopt, indices, nullptr, {.keep_call = true}); }),
                     {"keep_call without a routing", "make_routing()"});
    auto routing = op.make_routing();
    op.dispatch(input, weights, std::nullopt, indices, routing.get());
    f += expectParts("recorded_call of a call not kept", thrown([&] { op.recorded_call(*routing); }),
                     {"kept no call", "keep_call"});
    f += expectParts("dispatch twice", thrown([&] { op.dispatch(input, weights, std::nullopt, indices); }),
                     {"awaits its combine", "call combine() first", "a replay may follow"});
    // A replay takes no slots: it may follow the dispatch directly (MORI's order),
    // and a dispatch may follow the replay.
    if (const std::string why = thrown([&] { op.dispatch_replay(input, weights, std::nullopt, indices, *routing); });
        !why.empty())
      f += "replay after dispatch threw: " + why + "\n";
    op.check();
    f += expectParts("combine dtype", thrown([&] { op.combine({y, DType::F32, {8, 64}}); }), {"input is f32", "bf16"});
    f += expectParts("combine rows", thrown([&] { op.combine({y, DType::BF16, {7, 64}}); }),
                     {"input has shape [7, 64]", "at least [8, 64]"});
    f += expectParts("combine weights", thrown([&] { op.combine({y, DType::BF16, {8, 64}}, TensorRef{yw, DType::F32, {8, 3}}); }),
                     {"weights has shape [8, 3]"});
    op.combine({y, DType::BF16, {8, 64}});
    op.check();
    // After combine the received rows are the next dispatch's (a peer may be writing them).
    for (const auto& [what, call] : std::initializer_list<std::pair<const char*, std::function<void()>>>{
             {"counts after combine", [&] { op.local_expert_counts(); }},
             {"device counts after combine", [&] { op.local_expert_counts_device(); }}})
      f += expectParts(what, thrown(call), {"without a dispatch awaiting combine", "before combine()"});
    // A map saved with route_map() loads into another routing and replays; a
    // crafted one is refused before any kernel reads it.
    {
      const TensorRef saved = op.route_map(*routing);
      const size_t words = size_t(saved.shape[0]);
      std::vector<int32_t> host(words);
      comm.device().copy_to_host(host.data(), saved.data, words * 4);
      void* copy = comm.device().allocate(words * 4);
      auto restored = op.make_routing();
      comm.device().copy_to_device(copy, host.data(), words * 4);
      if (const std::string why = thrown([&] { op.load_routing(*restored, {copy, DType::I32, {int64_t(words)}}, 3); });
          !why.empty())
        f += "load_routing of a saved map threw: " + why + "\n";
      op.dispatch_replay(input, weights, std::nullopt, indices, *restored);
      op.combine({y, DType::BF16, {8, 64}});
      op.check();
      std::vector<int32_t> crafted = host;
      crafted[0] = int32_t(op.capacity() * 5);  // rank 5 of a world of 1
      comm.device().copy_to_device(copy, crafted.data(), words * 4);
      f += expectParts("crafted map", thrown([&] { op.load_routing(*restored, {copy, DType::I32, {int64_t(words)}}, 3); }),
                       {"load_routing: map[0]", "rank < 1"});
      // The received count, where the record places it.
      const size_t received_at = op.interface().buffer("route").part("route_received").element_offset();
      crafted = host;
      crafted[received_at] = -7;  // a negative received count
      comm.device().copy_to_device(copy, crafted.data(), words * 4);
      f += expectParts("crafted count", thrown([&] { op.load_routing(*restored, {copy, DType::I32, {int64_t(words)}}, 3); }),
                       {"received count -7"});
      crafted = host;
      crafted.back() = 2;  // tokens "sent" to rank 0 of a one-node op, which has no off-node rank
      comm.device().copy_to_device(copy, crafted.data(), words * 4);
      f += expectParts("crafted sent count", thrown([&] { op.load_routing(*restored, {copy, DType::I32, {int64_t(words)}}, 3); }),
                       {"tokens sent to rank 0", "= 2", "[0, 0]"});
      f += expectParts("map too short", thrown([&] { op.load_routing(*restored, {copy, DType::I32, {2}}, 3); }),
                       {"map has shape [2]"});
      comm.device().release(copy);
    }
    f += expectParts("replay other count",
                     thrown([&] { op.dispatch_replay({x, DType::BF16, {2, 64}}, {w, DType::F32, {2, 2}}, std::nullopt,
                                                     {idx, DType::I32, {2, 2}}, *routing); }),
                     {"2 tokens", "recorded with 3"});
    op.close();
    f += expectParts("closed", thrown([&] { op.dispatch(input, weights, std::nullopt, indices); }), {"closed"});
    // A routing's map is its own memory: it can still be saved after close().
    if (const std::string why = thrown([&] { op.route_map(*routing); }); !why.empty())
      f += "route_map after close threw: " + why + "\n";
    return f;
  });
  EXPECT_EQ(failures, "");
}

// A stream that says a capture is in progress (the host device has no
// graphs), and whether anything waited for it.
class CapturingStream final : public Stream {
 public:
  void synchronize() override { waited = true; }
  bool capturing() const override { return true; }
  bool waited = false;
};

// The calls that wait for the op's stream on the host are refused while it
// captures, before they touch it (a capture stays valid), naming the call and
// what counts inside a graph instead; once the stream is the op's own again
// they run on what the refused calls left as it was.
// A split call's halves enclose no other call of the op: each call between
// them is refused with the receive half to call, a receive with no send
// before it is refused, and reset() abandons a call between its halves.
TEST(EpOpErrors, SplitCallsTakeTheirHalvesInOrder) {
  const EpCase c = smallCase();
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    const TensorRef input{x, DType::BF16, {3, 64}}, weights{w, DType::F32, {3, 2}}, indices{idx, DType::I32, {3, 2}};
    const TensorRef rows{y, DType::BF16, {op.capacity(), 64}};
    f += expectParts("dispatch_recv first", thrown([&] { op.dispatch_recv(); }),
                     {"dispatch_recv without a dispatch_send", "call dispatch_send() first"});
    f += expectParts("combine_recv first", thrown([&] { op.combine_recv(); }),
                     {"combine_recv without a combine_send", "call combine_send() first"});
    op.dispatch_send(input, weights, std::nullopt, indices);
    f += expectParts("dispatch between", thrown([&] { op.dispatch(input, weights, std::nullopt, indices); }),
                     {"dispatch between dispatch_send() and its dispatch_recv()", "call dispatch_recv() first"});
    f += expectParts("combine between", thrown([&] { op.combine(rows); }),
                     {"combine between dispatch_send()", "dispatch_recv"});
    f += expectParts("counts between", thrown([&] { (void)op.local_expert_counts(); }),
                     {"local_expert_counts between dispatch_send()"});
    f += expectParts("combine_recv of a dispatch", thrown([&] { op.combine_recv(); }),
                     {"combine_recv without a combine_send"});
    op.dispatch_recv();
    f += expectParts("a second dispatch_recv", thrown([&] { op.dispatch_recv(); }),
                     {"dispatch_recv without a dispatch_send"});
    op.combine_send(rows);
    f += expectParts("dispatch between combine's halves",
                     thrown([&] { op.dispatch_send(input, weights, std::nullopt, indices); }),
                     {"dispatch_send between combine_send() and its combine_recv()", "call combine_recv() first"});
    const CombineResult combined = op.combine_recv();
    if (combined.tokens.shape != std::vector<int64_t>{3, 64}) f += "combine_recv's result is not [3, 64]\n";
    // Abandoned by reset(): the next call starts afresh.
    op.dispatch_send(input, weights, std::nullopt, indices);
    op.reset();
    f += expectParts("receive after reset", thrown([&] { op.dispatch_recv(); }), {"without a dispatch_send"});
    op.dispatch(input, weights, std::nullopt, indices);
    op.combine(rows);
    op.check();
    return f;
  });
  EXPECT_EQ(failures, "");
}

// A count on the device is refused where it cannot serve: with a routing to
// record (its replay needs the count on the host) and misaligned.
TEST(EpOpErrors, ATokenCountOnTheDeviceIsRefusedWhereItCannotServe) {
  const EpCase c = smallCase();
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    const TensorRef input{x, DType::BF16, {8, 64}}, weights{w, DType::F32, {8, 2}}, indices{idx, DType::I32, {8, 2}};
    std::unique_ptr<Routing> routing = op.make_routing();
    f += expectParts("with a record",
                     thrown([&] { op.dispatch(input, weights, std::nullopt, indices, routing.get(), {.token_count = s}); }),
                     {"token count on the device with a routing to record", "without record"});
    f += expectParts("misaligned", thrown([&] {
                       op.dispatch(input, weights, std::nullopt, indices, nullptr,
                                   {.token_count = static_cast<char*>(s) + 2});
                     }),
                     {"token_count"});
    return f;
  });
  EXPECT_EQ(failures, "");
}

TEST(EpOpErrors, HostWaitingCallsAreRefusedWhileTheStreamCaptures) {
  const EpCase c = smallCase();
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator& comm, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    const int32_t experts[6] = {0, 1, 2, 3, 3, 0};
    comm.device().copy_to_device(idx, experts, sizeof experts);
    const TensorRef input{x, DType::BF16, {3, 64}}, weights{w, DType::F32, {3, 2}}, indices{idx, DType::I32, {3, 2}};
    auto recorded = op.make_routing();
    op.dispatch(input, weights, std::nullopt, indices, recorded.get());
    const std::vector<int> counts = op.local_expert_counts();
    auto loaded = op.make_routing();
    CapturingStream capturing;
    op.set_stream(&capturing);
    for (const auto& [call, body] : std::initializer_list<std::pair<const char*, std::function<void()>>>{
             {"check", [&] { op.check(); }},
             {"local_expert_counts", [&] { op.local_expert_counts(); }},
             {"load_routing", [&] { op.load_routing(*loaded, op.route_map(*recorded), 3); }},
             {"reset", [&] { op.reset(); }}})
      f += expectParts(call, thrown(body),
                       {std::string(call) + " while the op's stream is capturing a graph",
                        std::string("end the capture, launch the graph, then call ") + call + "()",
                        "local_expert_counts_device() counts inside a graph"});
    if (capturing.waited) f += "a refused call waited for the capturing stream\n";
    op.set_stream(nullptr);
    if (op.local_expert_counts() != counts) f += "the counts changed after the refusals\n";
    op.load_routing(*loaded, op.route_map(*recorded), 3);
    op.combine({y, DType::BF16, {8, 64}});
    op.check();
    return f;
  });
  EXPECT_EQ(failures, "");
}

// The kernels read rows (and top-4's indices and weights, 16 bytes a token)
// with 16-byte vector accesses, which fault a GPU at an address off a
// 16-byte line: such a tensor is refused before anything is launched, under
// the caller's name for it, and the op goes on. Where a kernel reads one
// element at a time (top-2's 8-byte indices) a view that starts one token
// in is a valid argument.
TEST(EpOpErrors, MisalignedTensorsAreRefusedBeforeAnyLaunch) {
  EpCase c = smallCase();
  c.topk = 4;
  std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    auto at = [](void* p, int bytes) { return static_cast<char*>(p) + bytes; };
    const TensorRef input{x, DType::BF16, {3, 64}}, weights{w, DType::F32, {3, 4}}, indices{idx, DType::I32, {3, 4}};
    f += expectParts("dispatch input",
                     thrown([&] { op.dispatch({at(x, 2), DType::BF16, {3, 64}}, weights, std::nullopt, indices); }),
                     {"dispatch: input is at 0x", "not a multiple of 16 bytes (2 past one)",
                      "ep_dispatch accesses 'input' with 16-byte vector loads", "a copy of the view"});
    f += expectParts("dispatch weights",
                     thrown([&] { op.dispatch(input, {at(w, 4), DType::F32, {3, 4}}, std::nullopt, indices); }),
                     {"dispatch: weights is at", "(4 past one)"});
    f += expectParts("dispatch indices",
                     thrown([&] { op.dispatch(input, weights, std::nullopt, {at(idx, 8), DType::I32, {3, 4}}); }),
                     {"dispatch: indices is at", "(8 past one)"});
    auto routing = op.make_routing();
    op.dispatch(input, weights, std::nullopt, indices, routing.get());  // nothing was taken by the refusals
    f += expectParts("replay input",
                     thrown([&] { op.dispatch_replay({at(x, 6), DType::BF16, {3, 64}}, weights, std::nullopt, indices,
                                                     *routing); }),
                     {"dispatch_replay: input is at", "(6 past one)"});
    f += expectParts("combine input", thrown([&] { op.combine({at(y, 2), DType::BF16, {8, 64}}); }),
                     {"combine: input is at", "(2 past one)", "16-byte vector loads"});
    f += expectParts("combine weights",
                     thrown([&] { op.combine({y, DType::BF16, {8, 64}}, TensorRef{at(yw, 4), DType::F32, {8, 4}}); }),
                     {"combine: weights is at", "(4 past one)"});
    op.combine({y, DType::BF16, {8, 64}}, TensorRef{yw, DType::F32, {8, 4}});
    op.check();
    return f;
  });
  c.topk = 2;
  failures += onOneRank(c, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    // indices[1:] and weights[1:] of a top-2 call: 8 bytes in.
    const TensorRef weights{static_cast<char*>(w) + 8, DType::F32, {3, 2}};
    const TensorRef indices{static_cast<char*>(idx) + 8, DType::I32, {3, 2}};
    if (const std::string why = thrown([&] { op.dispatch({x, DType::BF16, {3, 64}}, weights, std::nullopt, indices); });
        !why.empty())
      f += "top-2 indices one token in threw: " + why + "\n";
    op.combine({y, DType::BF16, {8, 64}});
    op.check();
    return f;
  });
  EXPECT_EQ(failures, "");
}

// Gather's std_moe_combine unpacks into combine_input()'s rows: expert
// outputs kept there (one expert per rank makes the shapes fit) would be
// overwritten while read, so they are refused, as are outputs off the
// 16-byte line its vector loads need; the op goes on.
TEST(EpOpErrors, StdMoeExpertOutputsInTheCombineRowsAreRefused) {
  EpCase c = smallCase();
  c.topk = 1;
  c.experts_per_rank = 1;
  c.std_moe = true;
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    op.dispatch({x, DType::BF16, {3, 64}}, {w, DType::F32, {3, 1}}, std::nullopt, {idx, DType::I32, {3, 1}});
    op.std_moe_pack();
    const TensorRef in_place{op.combine_input().data, DType::BF16, {1, 8, 64}};
    f += expectParts("expert outputs in the combine rows", thrown([&] { op.std_moe_combine(in_place); }),
                     {"expert_out overlaps combine_input()", "another tensor"});
    f += expectParts("expert outputs off a line",
                     thrown([&] { op.std_moe_combine({static_cast<char*>(y) + 2, DType::BF16, {1, 8, 64}}); }),
                     {"std_moe_combine: expert_out is at", "(2 past one)"});
    if (const std::string why = thrown([&] { op.std_moe_combine({y, DType::BF16, {1, 8, 64}}); }); !why.empty())
      f += "std_moe_combine from a buffer of its own threw: " + why + "\n";
    op.check();
    return f;
  });
  EXPECT_EQ(failures, "");
}

// Weighted entries read the origin's weights and indices and each entry's
// packed row: a combine without the pack, or without the origin's top-k, is
// refused before any launch; the zero-copy buffer exists only with it, and
// indices are refused on an op that sums rank by rank.
TEST(EpOpErrors, WeightedEntriesNeedThePackAndTheOriginsTopK) {
  EpCase c = smallCase();
  c.std_moe = true;
  c.entry_combine = true;
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    const TensorRef expert_out{y, DType::BF16, {4, 8, 64}};
    const TensorRef weights{w, DType::F32, {3, 2}}, indices{idx, DType::I32, {3, 2}};
    op.dispatch({x, DType::BF16, {3, 64}}, weights, std::nullopt, indices);
    f += expectParts("no pack", thrown([&] { op.std_moe_combine(expert_out, weights, indices); }),
                     {"without std_moe_pack after the dispatch", "call std_moe_pack()"});
    op.std_moe_pack();
    f += expectParts("no indices", thrown([&] { op.std_moe_combine(expert_out, weights); }),
                     {"without the origin's top-k weights and indices", "indices [3, 2] i32"});
    f += expectParts("indices of another shape",
                     thrown([&] { op.std_moe_combine(expert_out, weights, TensorRef{idx, DType::I32, {2, 2}}); }),
                     {"indices"});
    const TensorRef zero_copy = op.std_moe_combine_input();
    if (zero_copy.shape != std::vector<int64_t>{4, 8, 64}) f += "std_moe_combine_input() has another shape\n";
    if (const std::string why = thrown([&] { op.std_moe_combine(zero_copy, weights, indices); }); !why.empty())
      f += "std_moe_combine from std_moe_combine_input() threw: " + why + "\n";
    op.check();
    return f;
  });
  EXPECT_EQ(failures, "");
  EpCase sums = smallCase();
  sums.std_moe = true;
  const std::string refused = onOneRank(sums, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    std::string f;
    auto [x, w, idx, y, yw, s] = b.pointers;
    f += expectParts("zero-copy buffer of rank sums", thrown([&] { op.std_moe_combine_input(); }),
                     {"std_moe_combine = weighted_entries"});
    op.dispatch({x, DType::BF16, {3, 64}}, {w, DType::F32, {3, 2}}, std::nullopt, {idx, DType::I32, {3, 2}});
    op.std_moe_pack();
    f += expectParts("indices on rank sums",
                     thrown([&] {
                       op.std_moe_combine({y, DType::BF16, {4, 8, 64}}, std::nullopt, TensorRef{idx, DType::I32, {3, 2}});
                     }),
                     {"with indices on an op whose std_moe_combine sums rank by rank"});
    op.std_moe_combine({y, DType::BF16, {4, 8, 64}});
    op.check();
    return f;
  });
  EXPECT_EQ(refused, "");
}

TEST(EpOpErrors, Fp8OfTheWrongFlavorIsRefused) {
  EpCase c = smallCase();
  c.target = "host-gfx942";
  c.data_type = DataType::FP8;
  const std::string failures = onOneRank(c, [&](EpDispatchCombineOp& op, Communicator&, Buffers& b) {
    return expectParts("fp8 flavor",
                       thrown([&] { op.dispatch({b.pointers[0], DType::FP8_E4M3FN, {1, 64}},
                                                {b.pointers[1], DType::F32, {1, 2}}, std::nullopt,
                                                {b.pointers[2], DType::I32, {1, 2}}); }),
                       {"float8_e4m3fn", "float8_e4m3fnuz"});
  });
  EXPECT_EQ(failures, "");
}

// Internode refusals: quant across nodes (the seed's rule); a v2 replay of
// a map that lacks the forwarding slots (a MORI handle's tensors give only
// the route's own words); a map whose forward route names another node's rank.
TEST(EpOpErrors, InternodeRefusesWhatItCannotRun) {
  EpCase c = smallCase();
  c.world = 2;
  c.gpu_per_node = 1;
  c.internode_kernel = InternodeKernel::V2;
  const std::string failures = runRanks(
      2, Ranks::Threads, testCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        std::string f;
        EpDispatchCombineConfig config = configFor(c, rank);
        config.combine_mode = CombineMode::Scatter;
        config.quant_type = QuantType::Fp8DirectCast;
        f += expectParts("quant", thrown([&] { EpDispatchCombineOp(config, comm, {&cache, nullptr}); }),
                         {"intranode only", "quant_type=none"});

        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        Buffers b(comm.device());
        const int64_t n = 2, k = c.topk, hidden = c.hidden;
        const std::vector<int32_t> experts = {0, 4, 1, 5};  // both tokens to both ranks
        comm.device().copy_to_device(b.pointers[2], experts.data(), experts.size() * 4);
        const TensorRef input{b.pointers[0], DType::BF16, {n, hidden}}, weights{b.pointers[1], DType::F32, {n, k}},
            indices{b.pointers[2], DType::I32, {n, k}};
        f += expectParts("a token count on the device", thrown([&] {
                           op.dispatch(input, weights, std::nullopt, indices, nullptr, {.token_count = b.pointers[5]});
                         }),
                         {"token count on the device for an op with ranks on other nodes", "one node"});
        // v2's sum writes the op's buffers: a caller's output is refused on an op that may run it.
        const TensorRef rows = op.dispatch(input, weights, std::nullopt, indices).tokens;
        f += expectParts("combine into the caller's tensors over v2",
                         thrown([&] { op.combine(rows, std::nullopt, TensorRef{b.pointers[3], DType::BF16, {n, hidden}}); }),
                         {"caller's tensors on an op that may run internode v2", "internode_kernel v2", "'v2_ll'"});
        op.combine(rows);
        std::unique_ptr<Routing> recorded = op.make_routing();
        op.combine(op.dispatch(input, weights, std::nullopt, indices, recorded.get()).tokens);
        op.check();
        const TensorRef whole = op.route_map(*recorded);
        std::vector<int32_t> map(size_t(whole.shape[0]));
        op.stream().synchronize();
        comm.device().copy_to_host(map.data(), whole.data, map.size() * 4);
        const size_t own_words = op.interface().buffer("route").part("route_forward").element_offset();
        if (map.size() <= own_words) return f + "route_map() has no forward route\n";

        // Only the route's own words: loads, but a v2 call cannot replay it.
        std::unique_ptr<Routing> partial = op.make_routing();
        op.load_routing(*partial, {whole.data, DType::I32, {int64_t(own_words)}}, n);
        f += expectParts("replay without forwarding slots",
                         thrown([&] { op.dispatch_replay(input, weights, std::nullopt, indices, *partial); }),
                         {"ran internode v2", "forwarding slots", "whole route_map()"});

        // A forward entry naming the other node's rank (this rank forwarded a row to rank 1 - rank's slot 0).
        const int other = 1 - rank;
        map[own_words] = int32_t(other * op.capacity());
        void* crafted = comm.device().allocate(map.size() * 4);
        comm.device().copy_to_device(crafted, map.data(), map.size() * 4);
        std::unique_ptr<Routing> forged = op.make_routing();
        f += expectParts("forward route off the node",
                         thrown([&] { op.load_routing(*forged, {crafted, DType::I32, {int64_t(map.size())}}, n); }),
                         {"forward route", "a rank of this rank's node"});
        comm.device().release(crafted);

        // An entry naming the other node's rank at a slot past what was sent there.
        std::vector<int32_t> past = map;
        past.resize(own_words);
        const auto remote = std::find_if(past.begin(), past.begin() + long(n * k),
                                         [&](int32_t e) { return e >= 0 && e / op.capacity() == other; });
        if (remote == past.begin() + long(n * k)) return f + "no route entry names the other node's rank\n";
        *remote = int32_t(other * op.capacity() + op.capacity() - 1);
        void* beyond = comm.device().allocate(past.size() * 4);
        comm.device().copy_to_device(beyond, past.data(), past.size() * 4);
        f += expectParts("outbox slot past the sent tokens",
                         thrown([&] { op.load_routing(*forged, {beyond, DType::I32, {int64_t(past.size())}}, n); }),
                         {"of the outbox for rank " + std::to_string(other), "holds 2 tokens"});
        comm.device().release(beyond);

        // The whole map replays.
        std::unique_ptr<Routing> loaded = op.make_routing();
        op.load_routing(*loaded, whole, n);
        op.combine(op.dispatch_replay(input, weights, std::nullopt, indices, *loaded).tokens);
        op.check();
        return f;
      },
      1);
  EXPECT_EQ(failures, "");
}

TEST(EpOpErrors, InternodeTransportIsOneThatExists) {
  EpCase c = smallCase();
  c.world = 2;
  c.gpu_per_node = 1;
  const ScopedEnvironment transport("EPJIT_INTERNODE_TRANSPORT", "carrier-pigeon");
  const std::string failures = runRanks(
      2, Ranks::Threads, testCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        return expectParts("transport", thrown([&] { EpDispatchCombineOp(configFor(c, rank), comm, {&cache, nullptr}); }),
                           {"EPJIT_INTERNODE_TRANSPORT=carrier-pigeon", "host or nccl"});
      },
      1);
  EXPECT_EQ(failures, "");
}

// What crosses between nodes is checked where it lands: rank 1 builds its op,
// then, instead of dispatching, answers rank 0's transfers with bytes of the
// right sizes whose row count claims a million rows. Rank 0 reads none of
// them (not a byte past its inbox) and check() names the count; reset()
// recovers. v2_ll's ingest and v2's forward alike.
class InternodeCounts : public ::testing::TestWithParam<InternodeKernel> {};

TEST_P(InternodeCounts, AnOffNodeCountBeyondTheSlotsIsRefused) {
  EpCase c = smallCase();
  c.world = 2;
  c.gpu_per_node = 1;
  c.internode_kernel = GetParam();
  const bool v2 = GetParam() == InternodeKernel::V2;
  const std::string failures = runRanks(
      2, Ranks::Threads, testCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        std::string f;
        EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
        const EpDispatchCombineConfig& config = op.config();
        const size_t rows = size_t(std::min(config.max_tokens_per_rank_padded(), config.total_recv_tokens()));
        const size_t k = size_t(c.topk);
        if (rank == 1) {
          // Dispatch's transfer: the count, then rows of tokens, weights, indices, origins (no scales).
          std::vector<uint8_t> crafted(4 + rows * (config.dispatch_token_bytes() + 4 * k + 4 * k + 8), 0x5a);
          const int32_t million = 1'000'000;
          std::memcpy(crafted.data(), &million, 4);
          comm.alltoall({crafted, {}});
          // Combine's: rows of expert outputs (v2: f32 node partials) and their weights.
          const size_t row_bytes = v2 ? size_t(config.hidden_dim) * 4 : config.combine_token_bytes();
          comm.alltoall({std::vector<uint8_t>(rows * (row_bytes + 4 * k), 0), {}});
          comm.allgather({});  // reset()'s vote (nothing: go ahead) and its barrier
          comm.barrier();
          return f;
        }
        Buffers b(comm.device());
        const int64_t n = 3, hidden = c.hidden;
        std::vector<int32_t> experts = {0, 4, 1, 5, 2, 7};  // every token to both ranks
        comm.device().copy_to_device(b.pointers[2], experts.data(), experts.size() * 4);
        const DispatchResult d = op.dispatch({b.pointers[0], DType::BF16, {n, hidden}},
                                             {b.pointers[1], DType::F32, {n, int64_t(k)}}, std::nullopt,
                                             {b.pointers[2], DType::I32, {n, int64_t(k)}});
        op.combine(d.tokens);
        f += expectParts("count", thrown([&] { op.check(); }),
                         {"rank 0", "more rows than its " + std::to_string(rows) + " slots", "reset()"});
        op.stream().synchronize();
        int32_t received = -1;
        comm.device().copy_to_host(&received, d.total_recv.data, 4);
        if (received != 3) f += "rank 0 received " + std::to_string(received) + " rows, expected its own 3\n";
        op.reset();
        return f;
      },
      1);
  EXPECT_EQ(failures, "");
}

INSTANTIATE_TEST_SUITE_P(Kernels, InternodeCounts,
                         ::testing::Values(InternodeKernel::V2LowLatency, InternodeKernel::V2),
                         [](const ::testing::TestParamInfo<InternodeKernel>& info) {
                           return info.param == InternodeKernel::V2 ? std::string("v2") : std::string("v2_ll");
                         });

TEST(EpOpErrors, ConstructionRejectsConfigsThatDoNotFitTheCommunicatorOrDevice) {
  const EpCase c = smallCase();
  const std::string failures = runRanks(2, Ranks::Threads, testCache(), [&](int rank, Communicator& comm,
                                                                             KernelCache& cache) {
    std::string f;
    EpCase two = c;
    two.world = 2;
    EpDispatchCombineConfig config = configFor(two, rank);
    config.rank = 1 - rank;
    f += expectParts("rank mismatch", thrown([&] { EpDispatchCombineOp(config, comm, {&cache, nullptr}); }),
                     {"do not match the communicator"});
    config = configFor(two, rank);
    config.target = "gfx942";
    f += expectParts("GPU target on host", thrown([&] { EpDispatchCombineOp(config, comm, {&cache, nullptr}); }),
                     {"does not run on the host device", "host-gfx942"});
    config = configFor(two, rank);
    config.gpu_per_node = 1;
    f += expectParts("node mismatch", thrown([&] { EpDispatchCombineOp(config, comm, {&cache, nullptr}); }),
                     {"gpu_per_node = 1", "communicator's node of 2 ranks"});
    config = configFor(two, rank);
    config.hidden_dim = 60;  // 120 bytes
    f += expectParts("validation", thrown([&] { EpDispatchCombineOp(config, comm, {&cache, nullptr}); }),
                     {"hidden_dim = 60", "multiple of 16 bytes"});
    return f;
  });
  EXPECT_EQ(failures, "");
}

// The communicator groups one rank per node; a config that leaves gpu_per_node
// unset (one node of world_size) does not match it.
TEST(EpOpErrors, GpuPerNodeMustMatchTheCommunicatorsNodes) {
  EpCase c = smallCase();
  c.world = 2;
  const std::string failures = runRanks(
      2, Ranks::Threads, testCache(),
      [&](int rank, Communicator& comm, KernelCache& cache) {
        return expectParts("node grouping",
                           thrown([&] { EpDispatchCombineOp(configFor(c, rank), comm, {&cache, nullptr}); }),
                           {"gpu_per_node = 2", "node of 1 ranks"});
      },
      1);
  EXPECT_EQ(failures, "");
}

// Both overflow tests: world 2, room for 5 received rows, and an op on each
// rank (`body(op, comm, buffers, rank)` reports what is wrong) whose first
// call routes all 16 top-k entries of both ranks to rank 0, so at least one
// sender overflows; the indices stay in buffer 2 for the later calls.
template <typename Body>
std::string afterAnOverflow(Body&& body, ReceiveOrder order = ReceiveOrder::Arrival) {
  EpCase c = smallCase();
  c.world = 2;
  return runRanks(2, Ranks::Threads, testCache(), [&](int rank, Communicator& comm, KernelCache& cache) {
    EpDispatchCombineConfig config = configFor(c, rank);
    config.max_total_recv_tokens = 5;
    config.receive_order = order;
    EpDispatchCombineOp op(config, comm, {&cache, nullptr});
    Buffers b(comm.device());
    const int32_t to_rank0[16] = {0, 1, 1, 2, 2, 3, 3, 0, 0, 2, 1, 3, 2, 0, 3, 1};
    comm.device().copy_to_device(b.pointers[2], to_rank0, sizeof to_rank0);
    op.dispatch({b.pointers[0], DType::BF16, {8, 64}}, {b.pointers[1], DType::F32, {8, 2}}, std::nullopt,
                {b.pointers[2], DType::I32, {8, 2}});
    op.combine({b.pointers[3], DType::BF16, {5, 64}});
    return body(op, comm, b, rank);
  });
}

// On world 2, after a reset(): two tokens of each rank whose indices (the
// buffers' first four) all name rank 0's experts, dispatched and combined;
// "" when check() is clean and rank 0 received the four.
std::string twoTokensEachToRankZero(EpDispatchCombineOp& op, Communicator& comm, Buffers& b, int rank,
                                    const std::string& what) {
  const DispatchResult result = op.dispatch({b.pointers[0], DType::BF16, {2, 64}}, {b.pointers[1], DType::F32, {2, 2}},
                                            std::nullopt, {b.pointers[2], DType::I32, {2, 2}});
  op.combine({b.pointers[3], DType::BF16, {op.capacity(), 64}});
  std::string f = expectParts(what, thrown([&] { op.check(); }).empty() ? "ok" : "failed", {"ok"});
  int32_t total = -1;
  comm.device().copy_to_host(&total, result.total_recv.data, 4);
  if (total != (rank == 0 ? 4 : 0))
    f += what + ": rank " + std::to_string(rank) + " received " + std::to_string(total) + "\n";
  return f;
}

// Dispatch on world 2 with every token of both ranks routed to rank 0 and a
// receive capacity of 5: the senders report the overflow, reset() recovers,
// and the next calls are right again.
TEST(EpOpErrors, CapacityOverflowIsReportedAndResetRecovers) {
  const std::string failures = afterAnOverflow([](EpDispatchCombineOp& op, Communicator& comm, Buffers& b, int rank) {
    std::string f;
    // 16 tokens for 5 slots: at least one sender overflows; a receiver that had none sees nothing.
    const std::string message = thrown([&] { op.check(); });
    const auto reports = comm.allgather({uint8_t(!message.empty())});
    if (reports[0][0] + reports[1][0] == 0) f += "no rank reported the overflow\n";
    if (!message.empty()) f += expectParts("overflow", message, {"receive capacity of 5", "max_total_recv_tokens"});
    op.reset();
    f += twoTokensEachToRankZero(op, comm, b, rank, "after reset");
    op.close();
    return f;
  });
  EXPECT_EQ(failures, "");
}

// Source order decides which rows fit: rank 0's first five tokens, every
// run; the rest are reported as an overflow, and reset() recovers.
TEST(EpOpErrors, SourceOrderKeepsTheFirstRowsInSourceOrderOnAnOverflow) {
  const std::string failures = afterAnOverflow(
      [](EpDispatchCombineOp& op, Communicator& comm, Buffers& b, int rank) {
        std::string f;
        const std::string message = thrown([&] { op.check(); });
        const auto reports = comm.allgather({uint8_t(!message.empty())});
        if (reports[0][0] + reports[1][0] == 0) f += "no rank reported the overflow\n";
        // Again after a reset, reading where the rows went.
        op.reset();
        const DispatchResult again =
            op.dispatch({b.pointers[0], DType::BF16, {8, 64}}, {b.pointers[1], DType::F32, {8, 2}}, std::nullopt,
                        {b.pointers[2], DType::I32, {8, 2}});
        op.combine({b.pointers[3], DType::BF16, {5, 64}});
        if (thrown([&] { op.check(); }).empty() && rank == 0) f += "the second overflow went unreported\n";
        if (rank == 0) {
          std::vector<int32_t> got(10);
          comm.device().copy_to_host(got.data(), again.origins.data, got.size() * 4);
          for (int32_t row = 0; row < 5; ++row)
            if (got[size_t(row) * 2] != row)
              f += "row " + std::to_string(row) + " has origin " + std::to_string(got[size_t(row) * 2]) +
                   ", expected rank 0's token " + std::to_string(row) + "\n";
        }
        op.reset();
        f += twoTokensEachToRankZero(op, comm, b, rank, "after reset");
        op.close();
        return f;
      },
      ReceiveOrder::Source);
  EXPECT_EQ(failures, "");
}

// reset() and close() meet every rank. One rank whose stream captures
// refuses them; the other rank used to wait at the meeting until the
// communicator's timeout (60 s here). Now both fail at once, the refusing
// rank with its own error and the other naming it and why, nothing of the
// call done: the ops still dispatch and combine, and the calls run once the
// capture is over.
TEST(EpOpErrors, ACollectiveCallRefusedOnOneRankFailsOnEveryRankAtOnce) {
  EpCase c = smallCase();
  c.world = 2;
  const std::string failures = runRanks(2, Ranks::Threads, testCache(), [&](int rank, Communicator& comm,
                                                                               KernelCache& cache) {
    EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
    Buffers b(comm.device());
    const int32_t to_rank0[4] = {0, 3, 2, 1};
    comm.device().copy_to_device(b.pointers[2], to_rank0, sizeof to_rank0);
    std::string f;
    CapturingStream capturing;
    for (const auto& [call, body] : std::initializer_list<std::pair<std::string, std::function<void()>>>{
             {"reset", [&] { op.reset(); }}, {"close", [&] { op.close(); }}}) {
      if (rank == 0) op.set_stream(&capturing);
      const auto start = std::chrono::steady_clock::now();
      const std::string message = thrown(body);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (seconds > 10) f += call + " on rank " + std::to_string(rank) + " failed after " + std::to_string(seconds) +
                             " s: it waited for the meeting's timeout\n";
      if (rank == 0)
        f += expectParts(call + " on the capturing rank", message,
                         {call + " while the op's stream is capturing a graph"});
      else
        f += expectParts(call + " on the other rank", message,
                         {call + "() on rank 1 did not run: rank 0 refused it",
                          call + " while the op's stream is capturing a graph", "no rank began it",
                          "rank 0: end the capture, launch the graph, then call " + call + "()",
                          "then call " + call + "() on every rank again"});
      op.set_stream(nullptr);
      f += twoTokensEachToRankZero(op, comm, b, rank, "a call after the refused " + call);
    }
    if (capturing.waited) f += "a refused call waited for the capturing stream\n";
    op.reset();
    f += twoTokensEachToRankZero(op, comm, b, rank, "a call after reset");
    op.close();
    f += expectParts("a call after close", thrown([&] { op.check(); }), {"check on a closed EpDispatchCombineOp"});
    return f;
  });
  EXPECT_EQ(failures, "");
}

// A capacity overflow is a data error: it voids its call, but later calls
// still meet. Rank 1 comes late to the call after the overflow (no reset()
// between them): rank 0's dispatch must wait for it, so rank 0 counts rank
// 1's tokens too. (A wait used to give up on any error code in the word, so
// rank 0 left the meeting at once, counted only its own rows and cleared its
// counter while rank 1 was still taking slots on it: two of rank 1's rows
// could land in one slot, which ThreadSanitizer caught now and then.)
TEST(EpOpErrors, ACapacityOverflowDoesNotEndLaterMeetings) {
  const std::string failures = afterAnOverflow([](EpDispatchCombineOp& op, Communicator& comm, Buffers& b, int rank) {
    std::string f;
    op.stream().synchronize();
    comm.barrier();
    // Rank 0 is at its next meeting well before rank 1 arrives, and cannot
    // leave it before rank 1 has dispatched: a finish much sooner than rank
    // 1's delay means the meeting did not wait.
    constexpr auto kLate = std::chrono::milliseconds(300);
    const auto start = std::chrono::steady_clock::now();
    if (rank == 1) std::this_thread::sleep_for(kLate);
    const DispatchResult result = op.dispatch({b.pointers[0], DType::BF16, {2, 64}},
                                              {b.pointers[1], DType::F32, {2, 2}}, std::nullopt,
                                              {b.pointers[2], DType::I32, {2, 2}});
    op.combine({b.pointers[3], DType::BF16, {5, 64}});
    op.stream().synchronize();
    const auto waited = std::chrono::steady_clock::now() - start;
    if (rank == 0 && waited < kLate / 2)
      f += "rank 0 finished the call after the overflow in " +
           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) +
           " ms, before rank 1 (300 ms late) had dispatched: its meetings did not wait\n";
    int32_t total = -1;
    comm.device().copy_to_host(&total, result.total_recv.data, 4);
    if (total != (rank == 0 ? 4 : 0))
      f += "the call after the overflow: rank " + std::to_string(rank) + " received " + std::to_string(total) +
           " rows, expected " + std::to_string(rank == 0 ? 4 : 0) + "\n";
    // The overflow stays reported until reset(); no timeout joined it.
    const std::string message = thrown([&] { op.check(); });
    if (message.find("within the peer timeout") != std::string::npos) f += "a timeout was reported: " + message + "\n";
    op.reset();
    op.close();
    return f;
  });
  EXPECT_EQ(failures, "");
}

// Two ranks with a peer timeout of kTwoRankTimeout s, each with two tokens
// whose experts {0, 5} and {6, 1} are on both ranks.
constexpr double kTwoRankTimeout = 1.5;

struct TwoTokenCall {
  Buffers& b;
  TensorRef input, weights, indices;
  void dispatch(EpDispatchCombineOp& op) const { op.dispatch(input, weights, std::nullopt, indices); }
  void combine(EpDispatchCombineOp& op) const { op.combine({b.pointers[3], DType::BF16, {16, 64}}); }
};

// "" when check() reports the peer timeout and the failure came after the
// timeout (not a spin count), within 2 s more (calls queued behind it fail at once).
std::string expectTimeoutAfter(const std::string& what, EpDispatchCombineOp& op,
                               std::chrono::steady_clock::time_point start) {
  std::string f = expectParts(what, thrown([&] { op.check(); }),
                              {"a peer did not arrive", "within the peer timeout of 1500 ms", "reset()"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (seconds < kTwoRankTimeout || seconds > kTwoRankTimeout + 2)
    f += what + " failed after " + std::to_string(seconds) + " s; expected the one timeout of " +
         std::to_string(kTwoRankTimeout) + " s\n";
  return f;
}

// Runs `body(op, call, rank)` on two ranks of the small case (with the
// given combine protocol), then reset() on both and one more call, which
// must succeed: what a failed call leaves, reset() recovers.
template <typename Body>
std::string withAPeerTimeout(std::optional<bool> low_latency, Body&& body) {
  EpCase c = smallCase();
  c.world = 2;
  c.low_latency_combine = low_latency;
  return runRanks(2, Ranks::Threads, testCache(), [&](int rank, Communicator& comm, KernelCache& cache) {
    EpDispatchCombineConfig config = configFor(c, rank);
    config.peer_timeout_s = kTwoRankTimeout;
    EpDispatchCombineOp op(config, comm, {&cache, nullptr});
    Buffers b(comm.device());
    const int32_t experts[4] = {0, 5, 6, 1};
    comm.device().copy_to_device(b.pointers[2], experts, sizeof experts);
    const TwoTokenCall call{b, {b.pointers[0], DType::BF16, {2, 64}}, {b.pointers[1], DType::F32, {2, 2}},
                            {b.pointers[2], DType::I32, {2, 2}}};
    std::string f = body(op, call, rank);
    op.stream().synchronize();
    comm.barrier();
    op.reset();
    call.dispatch(op);
    call.combine(op);
    f += expectParts("after reset", thrown([&] { op.check(); }).empty() ? "ok" : "failed", {"ok"});
    op.close();
    return f;
  });
}

// Rank 1 never dispatches: rank 0's wait ends in the timeout error after the
// configured peer timeout instead of a hang, the calls queued behind it fail
// at once (not one timeout each), the error stays until reset(), and after
// reset() on both ranks they run together again.
TEST(EpOpErrors, APeerThatNeverArrivesIsATimeoutNotAHang) {
  constexpr int kQueuedRounds = 4;
  EXPECT_EQ(withAPeerTimeout(std::nullopt, [&](EpDispatchCombineOp& op, const TwoTokenCall& call, int rank) {
              std::string f;
              if (rank != 0) return f;
              const auto start = std::chrono::steady_clock::now();
              for (int round = 0; round < kQueuedRounds; ++round) {
                call.dispatch(op);
                call.combine(op);
              }
              f += expectTimeoutAfter("queued rounds", op, start);
              f += expectParts("sticky until reset", thrown([&] { op.check(); }), {"a peer did not arrive"});
              return f;
            }),
            "");
}

// The low-latency combine's inboxes hold lines flagged with a dispatch's
// epoch, and reset() starts the epochs over: it must clear the inboxes too,
// or a line of the call before it passes for one of the call after it. Rank
// 0's two tokens go to rank 1 alone (one contribution each); rank 1 combines
// rows of 1.0 before the reset and of 2.0, 300 ms late, after it: rank 0 must
// wait for the 2.0s.
TEST(EpOpErrors, ResetClearsTheLowLatencyInboxes) {
  EpCase c = smallCase();
  c.world = 2;
  c.low_latency_combine = true;
  const std::string failures = runRanks(2, Ranks::Threads, testCache(), [&](int rank, Communicator& comm,
                                                                             KernelCache& cache) {
    std::string f;
    EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
    Buffers b(comm.device());
    const int32_t to_rank1[4] = {4, 5, 6, 7};
    comm.device().copy_to_device(b.pointers[2], to_rank1, sizeof to_rank1);
    const int64_t tokens = rank == 0 ? 2 : 0;
    const TensorRef input{b.pointers[0], DType::BF16, {tokens, 64}}, weights{b.pointers[1], DType::F32, {tokens, 2}},
        indices{b.pointers[2], DType::I32, {tokens, 2}};
    auto call = [&](uint16_t row_bits, std::chrono::milliseconds late) {
      const std::vector<uint16_t> rows(16 * 64, row_bits);
      comm.device().copy_to_device(b.pointers[3], rows.data(), rows.size() * 2);
      op.dispatch(input, weights, std::nullopt, indices);
      op.stream().synchronize();
      std::this_thread::sleep_for(late);
      const CombineResult result = op.combine({b.pointers[3], DType::BF16, {16, 64}});
      op.stream().synchronize();
      std::vector<uint16_t> out(size_t(tokens) * 64, 0);
      if (tokens) comm.device().copy_to_host(out.data(), result.tokens.data, out.size() * 2);
      return out;
    };
    const std::vector<uint16_t> before = call(0x3F80, std::chrono::milliseconds(0));  // 1.0
    if (rank == 0 && before != std::vector<uint16_t>(2 * 64, 0x3F80)) f += "before reset: rank 0's sums are not 1.0\n";
    op.reset();
    const std::vector<uint16_t> after = call(0x4000, std::chrono::milliseconds(rank == 1 ? 300 : 0));  // 2.0
    if (rank == 0 && after != std::vector<uint16_t>(2 * 64, 0x4000))
      f += "after reset: rank 0 summed lines of the call before it (" + std::to_string(decode_bf16(after[0])) +
           ", not 2.0): reset() left the flagged inboxes\n";
    f += expectParts("after reset", thrown([&] { op.check(); }).empty() ? "ok" : "failed", {"ok"});
    op.close();
    return f;
  });
  EXPECT_EQ(failures, "");
}

// A peer that dispatches but never combines: the low-latency combine's
// waits for its lines (and for its arrival) end in the timeout error after
// the peer timeout instead of a hang, and reset() on both ranks recovers.
TEST(EpOpErrors, ALowLatencyCombinePeerThatNeverComesIsATimeout) {
  EXPECT_EQ(withAPeerTimeout(true, [&](EpDispatchCombineOp& op, const TwoTokenCall& call, int rank) {
              call.dispatch(op);
              if (rank != 0) return std::string();
              const auto start = std::chrono::steady_clock::now();
              call.combine(op);
              return expectTimeoutAfter("the combine", op, start);
            }),
            "");
}

TEST(EpOpErrors, PeerTimeoutsOutsideTheirRangeAreRefused) {
  EpCase c = smallCase();
  for (const double seconds : {-1.0, 0.0001, 1e9, std::numeric_limits<double>::quiet_NaN()}) {
    EpDispatchCombineConfig config = configFor(c, 0);
    config.world_size = 1;
    config.peer_timeout_s = seconds;
    config.target = "host";
    EXPECT_NE(thrown([&] { config.validate(); }).find("peer_timeout_s"), std::string::npos) << seconds;
  }
  EpDispatchCombineConfig config = configFor(c, 0);
  config.world_size = 1;
  config.target = "host";
  for (const char* text : {"5abc", "nan", "inf", "-3", "0", "1e10"}) {
    ScopedEnvironment timeout("EPJIT_PEER_TIMEOUT_S", text);
    EXPECT_NE(thrown([&] { config.validate(); }).find("EPJIT_PEER_TIMEOUT_S"), std::string::npos) << text;
  }
  ScopedEnvironment timeout("EPJIT_PEER_TIMEOUT_S", "2.5");
  EXPECT_EQ(config.peer_timeout_ms(), 2500);
  config.peer_timeout_s = 0.25;
  EXPECT_EQ(config.peer_timeout_ms(), 250);
}

// An op serves one call at a time: a call that overlaps another thread's on
// the same op is refused, and the call it overlapped goes on. Rank 0's reset()
// waits at its barrier for rank 1 while another thread of rank 0 calls
// check(), twice; then rank 1 resets, and both ranks' next calls are right.
TEST(EpOpErrors, ACallOverlappingAnotherThreadsCallOnTheOpIsRefused) {
  EpCase c = smallCase();
  c.world = 2;
  std::atomic<bool> overlap_refused{false};
  const std::string failures = runRanks(2, Ranks::Threads, testCache(), [&](int rank, Communicator& comm,
                                                                            KernelCache& cache) {
    EpDispatchCombineOp op(configFor(c, rank), comm, {&cache, nullptr});
    Buffers b(comm.device());
    std::string f;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    const auto before_deadline = [&] { return std::chrono::steady_clock::now() < deadline; };
    if (rank == 0) {
      std::string reset_failure = "reset() never ran";
      std::thread resetting([&] {
        // This thread's reset() may find the other thread's check() running: again, until it runs.
        while (before_deadline()) {
          reset_failure = thrown([&] { op.reset(); });
          if (reset_failure.find("reset on rank 0 while another thread's check runs") == std::string::npos) return;
        }
      });
      std::vector<std::string> refusals;
      while (refusals.size() < 2 && before_deadline()) {
        std::string message = thrown([&] { op.check(); });
        if (!message.empty()) refusals.push_back(std::move(message));
      }
      overlap_refused = true;
      resetting.join();
      if (refusals.size() < 2) f += "check() was refused " + std::to_string(refusals.size()) + " times, not twice\n";
      for (const std::string& refusal : refusals)
        f += expectParts("overlapping check()", refusal,
                         {"check on rank 0 while another thread's reset runs on the same op", "one call at a time",
                          "give each thread its own op"});
      if (!reset_failure.empty()) f += "the overlapped reset(): " + reset_failure + "\n";
    } else {
      while (!overlap_refused && before_deadline()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      op.reset();
    }
    f += twoTokensEachToRankZero(op, comm, b, rank, "after the refusals");
    op.close();
    return f;
  });
  EXPECT_EQ(failures, "");
}

}  // namespace
}  // namespace epjit::testing
