#include "op_impl.h"

#include "../core/environment.h"

namespace epjit::ep {

KernelCache& process_cache() {
  static KernelCache cache;
  return cache;
}

uint64_t new_op_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

std::string shape_text(std::span<const int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

DType tensor_type_of(DataType type, const TargetInfo& target) {
  switch (type) {
    case DataType::BF16: return DType::BF16;
    case DataType::F32: return DType::F32;
    case DataType::FP8: return target.fp8_e4m3 == Fp8Format::E4M3FNUZ ? DType::FP8_E4M3FNUZ : DType::FP8_E4M3FN;
    case DataType::FP4: return DType::FP4_E2M1;
  }
  return DType::BF16;
}

// `expected` is a list, not a vector: every call checks its tensors this
// way, and a small call's latency includes the host's own work one for one.
void expect_tensor(const char* call, const char* what, const TensorRef& tensor, DType dtype,
                   std::initializer_list<int64_t> expected, bool at_least_rows) {
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

int32_t read_word(Device& device, Stream& stream, const void* base, size_t byte_offset) {
  int32_t value = 0;
  device.copy_to_host(&value, static_cast<const char*>(base) + byte_offset, 4, stream);
  return value;
}

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
      .set("combine_mode", name_of(config.combine_mode))
      .set("quant", name_of(config.quant_type))
      .set("std_moe", config.enable_std_moe)
      .set("low_latency", config.uses_low_latency_combine())
      .set("source_order", config.receive_order == ReceiveOrder::Source)
      .set("entry_combine", config.enable_std_moe && config.std_moe_combine == StdMoeCombine::WeightedEntries)
      .set("std_moe_quant", name_of(config.enable_std_moe ? config.std_moe_quant : StdMoeQuant::None))
      .set("combine_elem", name_of(config.combine_type()))
      .set("warps_per_block", warps_per_block);
  // The op's limits are runtime parameters of the template (the kernels read
  // them from the window table), so ops that differ only in them share one
  // module. Compiled in instead, each limit is its own module: kept for the
  // A/B of what constants buy (docs/PERFORMANCE.md).
  if (specialize_limits())
    for (const auto& [name, value] : runtime_limits(config)) spec.set(name, int64_t(value));
  return spec;
}

std::map<std::string, uint64_t, std::less<>> runtime_limits(const EpDispatchCombineConfig& config) {
  return {{"max_tokens", uint64_t(config.max_num_inp_token_per_rank)},
          {"capacity", uint64_t(config.total_recv_tokens())},
          {"forward_route_rows", uint64_t(forward_route_rows(config))}};
}

bool specialize_limits() {
  return environment_switch("EPJIT_SPECIALIZE_LIMITS", false,
                            "read max_tokens and capacity at run time, one module for every limit");
}

namespace {
constexpr ElementType kElementTypes[] = {
    {DType::BF16, "bf16", "bfloat16", 16, DataType::BF16, std::nullopt},
    {DType::F32, "f32", "float32", 32, DataType::F32, std::nullopt},
    {DType::I32, "i32", "int32", 32, std::nullopt, std::nullopt},
    {DType::U8, "u8", "uint8", 8, std::nullopt, std::nullopt},
    {DType::FP8_E4M3FN, "float8_e4m3fn", "float8_e4m3fn", 8, DataType::FP8, Fp8Format::E4M3FN},
    {DType::FP8_E4M3FNUZ, "float8_e4m3fnuz", "float8_e4m3fnuz", 8, DataType::FP8, Fp8Format::E4M3FNUZ},
    {DType::FP4_E2M1, "float4_e2m1", "float4_e2m1fn_x2", 4, DataType::FP4, std::nullopt},
    {DType::I64, "i64", "int64", 64, std::nullopt, std::nullopt},
};
}  // namespace

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < std::size(kElementTypes); ++i)
    if (size_t(kElementTypes[i].dtype) != i) return false;
  return std::size(kElementTypes) == size_t(DType::I64) + 1;
}
static_assert(rows_in_enum_order(), "kElementTypes has one row per DType, in enum order");

std::span<const ElementType> element_types() { return kElementTypes; }
const ElementType& element_type(DType type) { return kElementTypes[size_t(type)]; }

Routing::Routing(Device& device, Stream& stream, size_t route_bytes, uint64_t op_id)
    : device_(device), op_id_(op_id) {
  route_ = device_.allocate(route_bytes);
  device_.fill_zero(route_, route_bytes, stream);  // a map of a routing never dispatched reads as "nothing sent"
}
Routing::~Routing() {
  device_.release(route_);
  device_.release(kept_);
}

EpDispatchCombineOp::EpDispatchCombineOp(EpDispatchCombineConfig config, Communicator& comm, OpOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), comm, options)) {}

EpDispatchCombineOp::~EpDispatchCombineOp() = default;

const EpDispatchCombineConfig& EpDispatchCombineOp::config() const { return impl_->config; }
Stream& EpDispatchCombineOp::stream() { return *impl_->stream; }
void EpDispatchCombineOp::set_stream(Stream* stream) {
  const OneCallAtATime one_call = impl_->one_call("set_stream");
  impl_->stream = stream ? stream : impl_->default_stream;
}
Stream& EpDispatchCombineOp::default_stream() { return *impl_->default_stream; }
void EpDispatchCombineOp::wait_for(Event& event) {
  const OneCallAtATime one_call = impl_->one_call("wait_for");
  impl_->require_open("wait_for");
  event.enqueue_wait(*impl_->stream);
}
void EpDispatchCombineOp::record(Event& event) {
  const OneCallAtATime one_call = impl_->one_call("record");
  impl_->require_open("record");
  event.record(*impl_->stream);
}
int64_t EpDispatchCombineOp::capacity() const { return impl_->capacity(); }
double EpDispatchCombineOp::kernel_fetch_seconds() const { return impl_->fetch_seconds; }
const ModuleInterface& EpDispatchCombineOp::interface() const { return impl_->record; }

}  // namespace epjit::ep
