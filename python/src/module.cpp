// _epjit: the nanobind extension behind `import epjit`. Arrays cross as
// arrays.h says: any producer (torch, numpy, ...) in; out, numbers naming
// views of the op's memory, which `view()` turns into arrays once. C++ work
// runs with the GIL released, so ranks can be Python threads.
// python/epjit/__init__.py adds the framework conveniences (bf16 from numpy,
// torch outputs, keyword configs).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "rank.h"

#include "epjit/cache.h"
#include "epjit/comm/communicator.h"
#include "epjit/device.h"
#include "epjit/ep/op.h"
#include "epjit/error.h"
#include "epjit/version.h"

#include <cstdlib>
#include <cstring>
#include <deque>

namespace nb = nanobind;
using namespace nb::literals;
using namespace epjit;
using namespace epjit::ep;
using epjit::python::ArgumentArray;
using epjit::python::import_argument;
using epjit::python::PyCommunicator;
using epjit::python::view;

using ScheduleTuple = std::tuple<std::optional<int64_t>, int, int, int, int>;

namespace {

EpDispatchCombineOp::ExpertCountRule count_rule(bool every_entry) {
  return every_entry ? EpDispatchCombineOp::ExpertCountRule::EveryEntry
                     : EpDispatchCombineOp::ExpertCountRule::DistinctPerToken;
}

KernelCache& module_cache() {
  static KernelCache cache;
  return cache;
}

// On the host device calls run on a stream thread after they return, so
// the op holds the caller's input arrays until the stream has passed the
// call that reads them (GPU streams follow torch's contract instead: inputs
// live until the stream passes the call; docs/PYTHON.md). Held and dropped
// with the GIL.
struct HeldInputs {
  std::unique_ptr<Event> passed;
  std::vector<ArgumentArray> arrays;
};

// The views of op memory a call names, by number: a result's buffers are the
// same every call (the window's rows; combine's output per token count), so
// Python wraps each once and hands the wrapped tensor out again, instead of a
// DLPack import per output per call.
class IssuedViews {
 public:
  // t's number (None where t has no data), the same for the same memory, type and shape.
  nb::object id_of(const TensorRef& t) {
    if (!t.data) return nb::none();
    auto [entry, added] = ids_.try_emplace(Key{uintptr_t(t.data), t.dtype, t.shape}, int64_t(views_.size()));
    if (added) views_.push_back(t);
    return nb::int_(entry->second);
  }
  const TensorRef& at(int64_t id) const {
    if (id < 0 || id >= int64_t(views_.size()))
      throw Error("view " + std::to_string(id) + " was never handed out by this op",
                  "a number in [0, " + std::to_string(views_.size()) + ") from this op's calls",
                  "pass the numbers the op's calls returned");
    return views_[size_t(id)];
  }

 private:
  using Key = std::tuple<uintptr_t, DType, std::vector<int64_t>>;
  std::map<Key, int64_t> ids_;
  std::vector<TensorRef> views_;
};

// Declared so the op goes first when a PyOp dies: its release waits on its
// stream, which may be a wrapped framework stream, and the stream may still
// read held inputs.
struct PyOp {
  PyCommunicator* comm;
  std::map<uintptr_t, std::unique_ptr<Stream>> foreign_streams;  // wrapped framework streams
  std::deque<HeldInputs> held;
  // A split call's inputs between its halves: held from its receive half on
  // (its receive reads them too: combine_recv a rank's own rows in place).
  std::vector<ArgumentArray> split_inputs;
  // A dispatch's token count on the device, read by its combine too: held
  // with the combine's inputs.
  std::vector<ArgumentArray> token_count;
  IssuedViews views;
  std::unique_ptr<EpDispatchCombineOp> op;

  bool holds_inputs() const { return comm->device->vendor() == Vendor::Cpu; }
  void hold(std::vector<ArgumentArray> arrays) {
    if (!holds_inputs()) return;
    HeldInputs entry{comm->device->create_event(EventUse::completion), std::move(arrays)};
    entry.passed->record(op->stream());
    held.push_back(std::move(entry));
  }
  // Drops what the stream has passed (everything, after a synchronize).
  void drop_passed(bool synchronized = false) {
    while (!held.empty() && (synchronized || held.front().passed->completed())) held.pop_front();
  }
  ArgumentArray import(nb::handle value, const char* argument, std::optional<DType> expected) const {
    return import_argument(value, argument, *comm, expected);
  }
  // A combine-like call: `input` (as `name`, of `dtype`) and optional f32
  // weights in, run without the GIL, held until the stream has read them;
  // returns the view numbers of (tokens, weights), None for what went to the
  // caller's `output` (of `dtype`) or `output_weights`: the caller has those
  // already, and numbering every caller tensor would grow the views without end.
  // A split call's send half (send_only) keeps them for its receive half.
  template <typename Call>
  nb::tuple combine_call(nb::handle input, const char* name, DType dtype, nb::handle weights, bool send_only,
                         Call&& call, nb::handle indices = nb::none(), nb::handle output = nb::none(),
                         nb::handle output_weights = nb::none()) {
    std::vector<ArgumentArray> inputs{import(input, name, dtype)};
    std::optional<TensorRef> w, idx, out, out_w;
    if (!weights.is_none()) w = inputs.emplace_back(import(weights, "weights", DType::F32)).ref;
    if (!indices.is_none()) idx = inputs.emplace_back(import(indices, "indices", DType::I32)).ref;
    if (!output.is_none()) out = inputs.emplace_back(import(output, "output", dtype)).ref;
    if (!output_weights.is_none())
      out_w = inputs.emplace_back(import(output_weights, "output_weights", DType::F32)).ref;
    const TensorRef in = inputs.front().ref;
    CombineResult r;
    drop_passed();
    {
      nb::gil_scoped_release release;
      r = call(in, w, idx, out, out_w);
    }
    for (ArgumentArray& count : token_count) inputs.push_back(std::move(count));
    token_count.clear();
    if (send_only) split_inputs = std::move(inputs);
    else hold(std::move(inputs));
    return nb::make_tuple(out ? nb::none() : views.id_of(r.tokens), out_w ? nb::none() : views.id_of(r.weights));
  }
  // A split call's receive half, then its inputs held until the stream passes it.
  template <typename Call>
  void receive_half(Call&& call) {
    {
      nb::gil_scoped_release release;
      call();
    }
    hold(std::move(split_inputs));
    split_inputs.clear();
  }
  // Runs a call that synchronizes the stream without the GIL, then drops
  // every held input (the stream has passed them, whether or not it throws).
  template <typename Body>
  void synchronized(Body&& body) {
    try {
      nb::gil_scoped_release release;
      body();
    } catch (...) {
      drop_passed(true);
      throw;
    }
    drop_passed(true);
  }
};

// An event of the op's device (EventUse::completion), for ordering streams.
struct PyEvent {
  std::unique_ptr<Event> event;
};

}  // namespace

NB_MODULE(_epjit, m) {
  m.doc() = "epjit: JIT-generated expert-parallel dispatch/combine kernels";
  // At interpreter exit nanobind reports this module's objects still alive as
  // leaks. What a framework still holds then (a torch.compile'd function's
  // guards keep an op and its bound methods) the exiting process abandons on
  // purpose: its memory, devices and shared segments go with the process, and
  // an op's close() is collective, so no rank can run it alone at exit. The
  // report is for finding reference bugs: EPJIT_PYTHON_LEAK_WARNINGS=1 keeps it.
  const char* leak_warnings = std::getenv("EPJIT_PYTHON_LEAK_WARNINGS");
  const std::string leak_value = leak_warnings ? leak_warnings : "";
  if (leak_value != "" && leak_value != "0" && leak_value != "1")
    throw Error("EPJIT_PYTHON_LEAK_WARNINGS = '" + leak_value + "'",
                "1 (report objects alive at interpreter exit) or 0 / unset (do not)", "set it to 0 or 1, or unset it");
  nb::set_leak_warnings(leak_value == "1");
  m.attr("__version__") = std::string(version());
  m.def("git_revision", [] { return std::string(git_revision()); });

  nb::exception<Error>(m, "Error", PyExc_RuntimeError);

  nb::class_<PyCommunicator>(m, "Communicator")
      .def_static("get_unique_id", [] {
        const UniqueId id = Communicator::get_unique_id();
        return nb::bytes(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
      })
      .def_static(
          "init",
          [](int world_size, int rank, nb::bytes unique_id, const std::string& device, int device_ordinal,
             double timeout_seconds, std::optional<int> gpu_per_node) {
            UniqueId id;
            if (unique_id.size() != id.bytes.size())
              throw Error("unique_id has " + std::to_string(unique_id.size()) + " bytes",
                          std::to_string(id.bytes.size()) + " bytes from Communicator.get_unique_id()",
                          "pass the bytes get_unique_id() returned, unchanged");
            std::memcpy(id.bytes.data(), unique_id.c_str(), id.bytes.size());
            auto result = std::make_unique<PyCommunicator>();
            result->device_kind = device;
            nb::gil_scoped_release release;
            result->device_ordinal = device == "host" ? 0 : (device_ordinal < 0 ? rank : device_ordinal);
            result->device = make_device(device, result->device_ordinal);
            CommOptions options;
            options.timeout_seconds = timeout_seconds;
            options.gpu_per_node = gpu_per_node;
            result->comm = Communicator::init(world_size, rank, id, *result->device, options);
            return result;
          },
          "world_size"_a, "rank"_a, "unique_id"_a, "device"_a = "host", "device_ordinal"_a = -1,
          "timeout_seconds"_a = 0.0, "gpu_per_node"_a = nb::none())
      .def_prop_ro("rank", [](PyCommunicator& c) { return c.comm->rank(); })
      .def_prop_ro("world_size", [](PyCommunicator& c) { return c.comm->world_size(); })
      .def_prop_ro("node_size", [](PyCommunicator& c) { return c.comm->node().size(); })
      .def_prop_ro("symmetric_bytes", [](PyCommunicator& c) { return c.comm->symmetric_bytes(); })
      .def_prop_ro("device", [](PyCommunicator& c) { return c.device_kind; })
      .def_prop_ro("default_target", [](PyCommunicator& c) { return c.device->default_target(); })
      .def("barrier", [](PyCommunicator& c) { c.comm->barrier(); }, nb::call_guard<nb::gil_scoped_release>())
      .def("destroy", [](PyCommunicator& c) { c.comm->destroy(); }, nb::call_guard<nb::gil_scoped_release>());

  nb::class_<EpDispatchCombineConfig>(m, "_Config")
      .def(nb::init<>())
      .def_rw("rank", &EpDispatchCombineConfig::rank)
      .def_rw("world_size", &EpDispatchCombineConfig::world_size)
      .def_rw("hidden_dim", &EpDispatchCombineConfig::hidden_dim)
      .def_rw("max_num_inp_token_per_rank", &EpDispatchCombineConfig::max_num_inp_token_per_rank)
      .def_rw("num_experts_per_rank", &EpDispatchCombineConfig::num_experts_per_rank)
      .def_rw("num_experts_per_token", &EpDispatchCombineConfig::num_experts_per_token)
      .def_rw("scale_dim", &EpDispatchCombineConfig::scale_dim)
      .def_rw("scale_type_size", &EpDispatchCombineConfig::scale_type_size)
      .def_rw("enable_std_moe", &EpDispatchCombineConfig::enable_std_moe)
      .def_rw("max_total_recv_tokens", &EpDispatchCombineConfig::max_total_recv_tokens)
      .def_rw("kernel_backend", &EpDispatchCombineConfig::kernel_backend)
      .def_rw("gpu_per_node", &EpDispatchCombineConfig::gpu_per_node)
      .def_rw("internode_auto_ll_max_tokens", &EpDispatchCombineConfig::internode_auto_ll_max_tokens)
      .def_rw("low_latency_combine", &EpDispatchCombineConfig::low_latency_combine)
      .def_prop_ro("uses_low_latency_combine", &EpDispatchCombineConfig::uses_low_latency_combine)
      .def_rw("peer_timeout_s", &EpDispatchCombineConfig::peer_timeout_s)
      .def_rw("target", &EpDispatchCombineConfig::target)
      .def_rw("dispatch_block_num", &EpDispatchCombineConfig::dispatch_block_num)
      .def_rw("combine_block_num", &EpDispatchCombineConfig::combine_block_num)
      .def_rw("warp_num_per_block", &EpDispatchCombineConfig::warp_num_per_block)
      .def_rw("combine_warp_num_per_block", &EpDispatchCombineConfig::combine_warp_num_per_block)
      .def_rw("send_block_num", &EpDispatchCombineConfig::send_block_num)
      .def_rw("recv_block_num", &EpDispatchCombineConfig::recv_block_num)
      .def("set_data_type", [](EpDispatchCombineConfig& c, const std::string& v) { c.data_type = parse_data_type(v); })
      .def("set_leg_types",
           [](EpDispatchCombineConfig& c, const std::string& dispatch, const std::string& combine) {
             c.dispatch_data_type = parse_data_type(dispatch, "dispatch_data_type");
             c.combine_data_type = parse_data_type(combine, "combine_data_type");
           })
      .def("set_combine_mode", [](EpDispatchCombineConfig& c, const std::string& v) { c.combine_mode = parse_combine_mode(v); })
      .def("set_quant_type", [](EpDispatchCombineConfig& c, const std::string& v) { c.quant_type = parse_quant_type(v); })
      .def("set_internode_kernel",
           [](EpDispatchCombineConfig& c, const std::string& v) { c.internode_kernel = parse_internode_kernel(v); })
      .def("set_receive_order",
           [](EpDispatchCombineConfig& c, const std::string& v) { c.receive_order = parse_receive_order(v); })
      .def_prop_ro("receive_order", [](EpDispatchCombineConfig& c) { return std::string(name_of(c.receive_order)); })
      .def("set_std_moe_combine",
           [](EpDispatchCombineConfig& c, const std::string& v) { c.std_moe_combine = parse_std_moe_combine(v); })
      .def_prop_ro("std_moe_combine",
                   [](EpDispatchCombineConfig& c) { return std::string(name_of(c.std_moe_combine)); })
      .def("set_std_moe_quant",
           [](EpDispatchCombineConfig& c, const std::string& v) { c.std_moe_quant = parse_std_moe_quant(v); })
      .def_prop_ro("std_moe_quant",
                   [](EpDispatchCombineConfig& c) { return std::string(name_of(c.std_moe_quant)); })
      .def_prop_ro("data_type", [](EpDispatchCombineConfig& c) { return std::string(name_of(c.data_type)); })
      .def_prop_ro("dispatch_type", [](EpDispatchCombineConfig& c) { return std::string(name_of(c.dispatch_type())); })
      .def_prop_ro("combine_type", [](EpDispatchCombineConfig& c) { return std::string(name_of(c.combine_type())); })
      .def_prop_ro("combine_mode", [](EpDispatchCombineConfig& c) { return std::string(name_of(c.combine_mode)); })
      .def_prop_ro("quant_type", [](EpDispatchCombineConfig& c) { return std::string(name_of(c.quant_type)); })
      // Schedules as (max_tokens or None, dispatch blocks, dispatch warps, combine blocks, combine warps).
      .def("set_schedule",
           [](EpDispatchCombineConfig& c, const std::vector<ScheduleTuple>& rows) {
             c.schedule.clear();
             for (const auto& [max_tokens, dispatch_blocks, dispatch_warps, combine_blocks, combine_warps] : rows)
               c.schedule.push_back({max_tokens, dispatch_blocks, dispatch_warps, combine_blocks, combine_warps});
           })
      .def("resolved_schedule",
           [](const EpDispatchCombineConfig& c) {
             std::vector<ScheduleTuple> rows;
             for (const ScheduleEntry& e : c.resolved_schedule())
               rows.emplace_back(e.max_tokens, e.dispatch_blocks, e.dispatch_warps, e.combine_blocks, e.combine_warps);
             return rows;
           })
      .def("validate", &EpDispatchCombineConfig::validate);

  nb::class_<Routing>(m, "Routing")
      .def_prop_ro("tokens", &Routing::tokens)
      .def_prop_ro("runs_internode_v2", [](const Routing& r) { return r.runs_internode_v2(); });

  nb::class_<PyEvent>(m, "Event")
      .def("synchronize", [](PyEvent& self) { self.event->synchronize(); }, nb::call_guard<nb::gil_scoped_release>())
      .def_prop_ro("completed", [](PyEvent& self) { return self.event->completed(); });

  nb::class_<PyOp>(m, "_Op")
      .def("__init__",
           [](PyOp* self, const EpDispatchCombineConfig& config, PyCommunicator& comm) {
             new (self) PyOp{.comm = &comm};
             nb::gil_scoped_release release;
             self->op = std::make_unique<EpDispatchCombineOp>(config, *comm.comm, OpOptions{&module_cache(), nullptr});
           },
           "config"_a, "comm"_a, nb::keep_alive<1, 3>())
      .def(
          "dispatch",
          [](PyOp& self, nb::handle input, nb::handle weights, nb::handle scales, nb::handle indices,
             Routing* record, const Routing* replay, std::optional<int64_t> max_tokens_across_ranks, bool keep_call,
             bool send_only, nb::handle token_count) {
            const EpDispatchCombineConfig& config = self.op->config();
            std::vector<ArgumentArray> inputs;
            inputs.reserve(4);
            const TensorRef in =
                inputs.emplace_back(self.import(input, "input", tensor_type_of(config.dispatch_type(), config.target_info())))
                    .ref;
            const TensorRef w = inputs.emplace_back(self.import(weights, "weights", DType::F32)).ref;
            const TensorRef idx = inputs.emplace_back(self.import(indices, "indices", DType::I32)).ref;
            std::optional<TensorRef> s;
            if (!scales.is_none()) s = inputs.emplace_back(self.import(scales, "scales", DType::U8)).ref;
            std::vector<ArgumentArray> count;
            if (!token_count.is_none()) {
              const TensorRef& c = count.emplace_back(self.import(token_count, "token_count", DType::I32)).ref;
              int64_t elements = 1;
              std::string shape;
              for (int64_t d : c.shape) {
                elements *= d;
                shape += (shape.empty() ? "" : ", ") + std::to_string(d);
              }
              if (elements != 1)
                throw Error("dispatch: token_count has shape [" + shape + "]",
                            "one int32 (a [] or [1] tensor): the rows of input the call moves",
                            "pass the batch's token count as a one-element int32 tensor on the op's device");
            }
            DispatchResult r;
            self.drop_passed();
            {
              nb::gil_scoped_release release;
              const DispatchOptions options{.max_tokens_across_ranks = max_tokens_across_ranks,
                                            .keep_call = keep_call,
                                            .token_count = count.empty() ? nullptr : count.front().ref.data};
              if (replay) r = self.op->dispatch_replay(in, w, s, idx, *replay);
              else if (send_only) r = self.op->dispatch_send(in, w, s, idx, record, options);
              else r = self.op->dispatch(in, w, s, idx, record, options);
            }
            if (send_only) self.split_inputs = std::move(inputs);
            else self.hold(std::move(inputs));
            self.token_count = std::move(count);
            return nb::make_tuple(self.views.id_of(r.tokens), self.views.id_of(r.weights),
                                  self.views.id_of(r.scales), self.views.id_of(r.indices),
                                  self.views.id_of(r.total_recv), self.views.id_of(r.origins));
          },
          "input"_a.none(), "weights"_a.none(), "scales"_a.none(), "indices"_a.none(), "record"_a.none() = nb::none(),
          "replay"_a.none() = nb::none(), "max_tokens_across_ranks"_a.none() = nb::none(), "keep_call"_a = false,
          "send_only"_a = false, "token_count"_a.none() = nb::none())
      .def("dispatch_recv", [](PyOp& self) { self.receive_half([&] { self.op->dispatch_recv(); }); })
      .def(
          "combine",
          [](PyOp& self, nb::handle input, nb::handle weights, bool send_only, nb::handle output,
             nb::handle output_weights) {
            const EpDispatchCombineConfig& config = self.op->config();
            if (send_only && (!output.is_none() || !output_weights.is_none()))
              throw Error("combine_send with output tensors", "output and output_weights on the one-phase combine",
                          "call combine(), or copy combine_recv()'s result");
            return self.combine_call(
                input, "input", tensor_type_of(config.combine_type(), config.target_info()), weights, send_only,
                [&](const TensorRef& in, const std::optional<TensorRef>& w, const std::optional<TensorRef>&,
                    const std::optional<TensorRef>& out, const std::optional<TensorRef>& out_w) {
                  if (!send_only) return self.op->combine(in, w, out, out_w);
                  self.op->combine_send(in, w);
                  return CombineResult{};
                },
                nb::none(), output, output_weights);
          },
          "input"_a.none(), "weights"_a.none() = nb::none(), "send_only"_a = false, "output"_a.none() = nb::none(),
          "output_weights"_a.none() = nb::none())
      .def("combine_recv",
           [](PyOp& self) {
             CombineResult r;
             self.receive_half([&] { r = self.op->combine_recv(); });
             return nb::make_tuple(self.views.id_of(r.tokens), self.views.id_of(r.weights));
           })
      .def("std_moe_pack",
           [](PyOp& self) {
             StdMoeResult r;
             {
               nb::gil_scoped_release release;
               r = self.op->std_moe_pack();
             }
             return nb::make_tuple(self.views.id_of(r.tokens), self.views.id_of(r.counts),
                                   self.views.id_of(r.sources));
           })
      .def("std_moe_outputs",
           [](PyOp& self) {
             const StdMoeResult r = self.op->std_moe_outputs();
             return nb::make_tuple(self.views.id_of(r.tokens), self.views.id_of(r.counts),
                                   self.views.id_of(r.sources));
           })
      .def("std_moe_fp8",
           [](PyOp& self) {
             const StdMoeResult r = self.op->std_moe_outputs();
             if (!r.codes.data)
               throw Error("std_moe_fp8() on an op without std_moe_quant",
                           "std_moe_quant = deepep_fp8, deepep_fp8_pow2 or deepep_fp8_ue8m0 (the pack then also "
                           "writes fp8 codes and their scales)",
                           "build the op with std_moe_quant set");
             return nb::make_tuple(self.views.id_of(r.codes), self.views.id_of(r.scales));
           })
      .def(
          "std_moe_combine",
          [](PyOp& self, nb::handle expert_out, nb::handle weights, bool send_only, nb::handle indices,
             nb::handle output) {
            return self.combine_call(
                expert_out, "expert_out", DType::BF16, weights, send_only,
                [&](const TensorRef& in, const std::optional<TensorRef>& w, const std::optional<TensorRef>& idx,
                    const std::optional<TensorRef>& out, const std::optional<TensorRef>&) {
                  if (!send_only) return self.op->std_moe_combine(in, w, idx, out);
                  self.op->std_moe_combine_send(in, w, idx, out);
                  return CombineResult{};
                },
                indices, output);
          },
          "expert_out"_a.none(), "weights"_a.none() = nb::none(), "send_only"_a = false,
          "indices"_a.none() = nb::none(), "output"_a.none() = nb::none())
      .def(
          "local_expert_counts_device",
          [](PyOp& self, bool every_entry) {
            return self.views.id_of(self.op->local_expert_counts_device(count_rule(every_entry)));
          },
          "every_entry"_a = false)
      .def(
          "received_counts",
          [](PyOp& self, bool every_entry, int64_t expert_alignment) {
            EpDispatchCombineOp::ReceivedCounts counts;
            self.synchronized(
                [&] { counts = self.op->received_counts(count_rule(every_entry), expert_alignment); });
            return nb::make_tuple(counts.total, counts.per_expert);
          },
          "every_entry"_a = false, "expert_alignment"_a = 1)
      .def(
          "dispatch_layout",
          [](PyOp& self, nb::handle indices, nb::handle per_rank, nb::handle per_expert, nb::handle in_rank,
             nb::handle per_node) {
            std::vector<ArgumentArray> arrays;
            arrays.reserve(5);
            const TensorRef idx = arrays.emplace_back(self.import(indices, "indices", DType::I64)).ref;
            const TensorRef ranks = arrays.emplace_back(self.import(per_rank, "per_rank", DType::I32)).ref;
            const TensorRef experts = arrays.emplace_back(self.import(per_expert, "per_expert", DType::I32)).ref;
            const TensorRef cells = arrays.emplace_back(self.import(in_rank, "in_rank", DType::U8)).ref;
            std::optional<TensorRef> nodes;
            if (!per_node.is_none()) nodes = arrays.emplace_back(self.import(per_node, "per_node", DType::I32)).ref;
            self.drop_passed();
            {
              nb::gil_scoped_release release;
              self.op->dispatch_layout(idx, ranks, experts, cells, nodes);
            }
            self.hold(std::move(arrays));
          },
          "indices"_a.none(), "per_rank"_a.none(), "per_expert"_a.none(), "in_rank"_a.none(),
          "per_node"_a.none() = nb::none())
      .def(
          "deliver_received",
          [](PyOp& self, nb::handle tokens, nb::handle scales, nb::handle local_experts, nb::handle weights) {
            const EpDispatchCombineConfig& config = self.op->config();
            std::vector<ArgumentArray> outputs;
            outputs.reserve(4);
            EpDispatchCombineOp::ReceivedRows rows;
            rows.tokens = outputs
                              .emplace_back(self.import(tokens, "tokens",
                                                        tensor_type_of(config.dispatch_type(), config.target_info())))
                              .ref;
            if (!local_experts.is_none())
              rows.local_experts = outputs.emplace_back(self.import(local_experts, "local_experts", DType::I64)).ref;
            if (!scales.is_none()) rows.scales = outputs.emplace_back(self.import(scales, "scales", DType::U8)).ref;
            if (!weights.is_none()) rows.weights = outputs.emplace_back(self.import(weights, "weights", DType::F32)).ref;
            self.drop_passed();
            {
              nb::gil_scoped_release release;
              self.op->deliver_received(rows);
            }
            self.hold(std::move(outputs));
          },
          "tokens"_a.none(), "scales"_a.none(), "local_experts"_a.none(), "weights"_a.none())
      .def("combine_input", [](PyOp& self) { return self.views.id_of(self.op->combine_input()); })
      .def("std_moe_combine_input", [](PyOp& self) { return self.views.id_of(self.op->std_moe_combine_input()); })
      // The array behind a view number the op's calls returned; it keeps the op alive.
      .def(
          "view",
          [](nb::handle self_handle, int64_t id) {
            PyOp& self = nb::cast<PyOp&>(self_handle);
            return view(self.views.at(id), *self.comm, self_handle);
          },
          "id"_a)
      // A framework stream by its handle; 0 is the legacy default stream (torch's
      // default), which orders with everything else on the device.
      .def("use_stream",
           [](PyOp& self, uintptr_t handle) {
             auto& stream = self.foreign_streams[handle];
             if (!stream) stream = self.comm->device->wrap_stream(reinterpret_cast<void*>(handle));
             self.op->set_stream(stream.get());
           },
           "handle"_a)
      .def("use_own_stream", [](PyOp& self) { self.op->set_stream(nullptr); })
      .def_prop_ro("own_stream_handle",
                   [](PyOp& self) { return uintptr_t(self.op->default_stream().native_handle()); })
      // The event keeps the op (and so its device) alive.
      .def(
          "record_event",
          [](PyOp& self) {
            PyEvent recorded{self.comm->device->create_event(EventUse::completion)};
            self.op->record(*recorded.event);
            return recorded;
          },
          nb::keep_alive<0, 1>())
      .def("wait_event", [](PyOp& self, PyEvent& event) { self.op->wait_for(*event.event); }, "event"_a)
      .def("capturing", [](PyOp& self) { return self.op->stream().capturing(); })
      // A Routing frees its map through the op's device: it keeps the op (and so
      // the communicator that owns the device) alive.
      .def("make_routing", [](PyOp& self) { return self.op->make_routing(); }, nb::keep_alive<0, 1>())
      .def("route_map",
           [](PyOp& self, const Routing& routing) { return self.views.id_of(self.op->route_map(routing)); })
      .def("recorded_call",
           [](PyOp& self, const Routing& routing) {
             const RecordedCall kept = self.op->recorded_call(routing);
             return nb::make_tuple(self.views.id_of(kept.total_recv), self.views.id_of(kept.origins),
                                   self.views.id_of(kept.indices));
           })
      .def("load_routing",
           [](PyOp& self, Routing& routing, nb::handle map, int64_t tokens,
              std::optional<int64_t> max_tokens_across_ranks) {
             const ArgumentArray loaded = self.import(map, "map", DType::I32);
             nb::gil_scoped_release release;
             self.op->load_routing(routing, loaded.ref, tokens, {.max_tokens_across_ranks = max_tokens_across_ranks});
           },
           "routing"_a, "map"_a.none(), "tokens"_a, "max_tokens_across_ranks"_a.none() = nb::none())
      .def(
          "local_expert_counts",
          [](PyOp& self, bool every_entry) { return self.op->local_expert_counts(count_rule(every_entry)); },
          "every_entry"_a = false, nb::call_guard<nb::gil_scoped_release>())
      .def("check", [](PyOp& self) { self.synchronized([&] { self.op->check(); }); })
      .def("reset", [](PyOp& self) { self.synchronized([&] { self.op->reset(); }); })
      // Memory stays until the op and every view of its results are gone: a
      // view read after close() (the quick start's pattern) reads what the
      // last call left.
      .def(
          "close",
          [](PyOp& self, bool keep_memory) {
            self.synchronized([&] {
              self.op->close(keep_memory ? EpDispatchCombineOp::Memory::KeepUntilDestroyed
                                         : EpDispatchCombineOp::Memory::Release);
            });
          },
          "keep_memory"_a = true)
      .def("synchronize", [](PyOp& self) { self.synchronized([&] { self.op->stream().synchronize(); }); })
      .def("buffer_parts",
           [](PyOp& self, const std::string& name) {
             nb::dict parts;
             for (const BufferPartInfo& part : self.op->interface().buffer(name).parts)
               parts[part.name.c_str()] = nb::make_tuple(part.element_offset(), part.count, part.meaning);
             return parts;
           })
      .def_prop_ro("capacity", [](PyOp& self) { return self.op->capacity(); })
      .def_prop_ro("target", [](PyOp& self) { return self.op->config().target; });

  m.def("cache_stats", [] {
    const CacheStats s = module_cache().stats();
    return std::map<std::string, double>{{"memory_hits", double(s.memory_hits)}, {"disk_hits", double(s.disk_hits)},
                                         {"readonly_hits", double(s.readonly_hits)}, {"misses", double(s.misses)},
                                         {"compiles", double(s.compiles)}, {"compile_seconds", s.compile_seconds},
                                         {"sources_generated", double(s.sources_generated)}};
  });
  m.def(
      "cache_get",
      [](const std::string& template_name, const std::map<std::string, std::string>& params, const std::string& target) {
        KernelSpec spec{template_name, params, target};
        nb::gil_scoped_release release;
        module_cache().get(spec);
        return module_cache().key(spec);
      },
      "template"_a, "params"_a, "target"_a);
  m.def("cache_dir", [] { return module_cache().options().dir; });
  m.def("element_types", [] {
    // The element-type table (ep::element_types), for the Python layers.
    nb::list rows;
    for (const ep::ElementType& type : ep::element_types()) {
      nb::dict row;
      row["name"] = type.name;
      row["framework_name"] = type.framework_name;
      row["bits"] = type.bits;
      row["payload"] = type.payload ? nb::object(nb::str(ep::name_of(*type.payload))) : nb::none();
      row["fp8"] = type.fp8 ? nb::object(nb::str(fp8_format_name(*type.fp8))) : nb::none();
      rows.append(row);
    }
    return rows;
  });
  m.def("data_type_spellings", [] {
    nb::list spellings;
    for (const auto& [spelling, type] : ep::data_type_spellings())
      spellings.append(nb::make_tuple(spelling, ep::name_of(type)));
    return spellings;
  });
  m.def("targets", [] {
    // TargetInfo's table: what Python needs to choose a device for a target.
    std::vector<std::map<std::string, std::string>> rows;
    for (const TargetInfo& target : all_targets())
      rows.push_back({{"name", std::string(target.name)},
                      {"vendor", std::string(target.vendor_name())},
                      {"arch", std::string(target.arch)},
                      {"wave_size", std::to_string(target.wave_size)},
                      {"fp8", fp8_format_name(target.fp8_e4m3)},
                      {"numerics_of", std::string(target.numerics_of)}});
    return rows;
  });
  m.def(
      "warm_op",
      [](const EpDispatchCombineConfig& config) {
        const KernelSpec spec = kernel_spec(config);
        nb::gil_scoped_release release;
        module_cache().get(spec);
        return module_cache().key(spec);
      },
      "config"_a);
}
