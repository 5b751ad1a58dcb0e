#include "epjit/kernel_module.h"

#include <cstdio>
#include <limits>

#include "epjit/error.h"

namespace epjit {

namespace {

std::string hex_address(const void* pointer) {
  char text[2 + 2 * sizeof(uintptr_t) + 1];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(pointer)));
  return text;
}

bool misaligned(const KernelParam& param, const void* pointer) {
  return pointer && param.alignment > 1 && reinterpret_cast<uintptr_t>(pointer) % param.alignment != 0;
}

[[noreturn]] void refuse_misaligned(const Kernel& kernel, const KernelParam& param, const void* pointer,
                                    std::string_view what) {
  const std::string bytes = std::to_string(param.alignment);
  const bool vectors = param.alignment >= kDefaultPointerAlignment;
  throw Error(std::string(what) + " is at " + hex_address(pointer) + ", which is not a multiple of " + bytes +
                  " bytes (" + std::to_string(reinterpret_cast<uintptr_t>(pointer) % param.alignment) +
                  " past one)",
              "an address aligned to " + bytes + " bytes: " + kernel.name + " accesses '" + param.name + "' " +
                  (vectors ? "with 16-byte vector loads and stores" : "one " + bytes + "-byte element at a time"),
              "pass a tensor whose data starts on a " + bytes +
                  "-byte boundary: a fresh allocation, or a copy of the view (a view keeps its base's offset, so "
                  "one that starts mid-row can start mid-line)");
}

}  // namespace

void require_pointer_alignment(const Kernel& kernel, std::string_view param, const void* pointer,
                               std::string_view call, std::string_view argument) {
  const KernelParam* entry = kernel.signature ? kernel.signature->find(param) : nullptr;
  if (entry && misaligned(*entry, pointer))
    refuse_misaligned(kernel, *entry, pointer, std::string(call) + ": " + std::string(argument));
}

bool pointer_aligned_for(const Kernel& kernel, std::string_view param, const void* pointer) {
  const KernelParam* entry = kernel.signature ? kernel.signature->find(param) : nullptr;
  return !entry || !misaligned(*entry, pointer);
}

LaunchArgs::LaunchArgs(const Kernel& kernel) : kernel_(&kernel) {
  if (!kernel.signature)
    throw Error("LaunchArgs for kernel " + kernel.name + ", which has no signature",
                "a kernel bound by a KernelModule (with the module's interface record)",
                "bind the kernel through KernelModule::kernel(), or add positional KernelArgs");
  values_.resize(kernel.signature->params.size());
}

size_t LaunchArgs::index_of(std::string_view name) const {
  const std::vector<KernelParam>& params = kernel_->signature->params;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return i;
  throw Error("kernel " + kernel_->name + " has no parameter '" + std::string(name) + "'",
              "one of " + kernel_->signature->describe(), "set the parameters the kernel declares");
}

void LaunchArgs::mismatch(const KernelParam& param, const std::string& given) const {
  throw Error("kernel " + kernel_->name + ": parameter '" + param.name + "' is given " + given,
              "a value of type " + param.type + " (" + kernel_->signature->describe() + ")",
              "pass a value of the parameter's type");
}

void LaunchArgs::store(size_t index, Value value) {
  if (values_[index])
    throw Error("kernel " + kernel_->name + ": parameter '" + kernel_->signature->params[index].name + "' set twice",
                "each parameter set once", "build a new LaunchArgs for each launch");
  values_[index] = value;
}

void LaunchArgs::set_pointer(std::string_view name, void* value) {
  const size_t index = index_of(name);
  const KernelParam& param = kernel_->signature->params[index];
  if (param.kind != ParamKind::Pointer) mismatch(param, "a pointer");
  if (misaligned(param, value))
    refuse_misaligned(*kernel_, param, value, "kernel " + kernel_->name + ": parameter '" + param.name + "'");
  store(index, {Value::Kind::Pointer, value});
}

void LaunchArgs::set_window(std::string_view name, const Window& window) {
  const size_t index = index_of(name);
  const KernelParam& param = kernel_->signature->params[index];
  if (param.kind != ParamKind::Window) mismatch(param, "a window table");
  Value value{Value::Kind::Window};
  value.window_index = windows_.size();
  store(index, value);
  windows_.push_back(window);
}

void LaunchArgs::set_unsigned(std::string_view name, uint64_t value) {
  const size_t index = index_of(name);
  const KernelParam& param = kernel_->signature->params[index];
  const bool fits = param.kind == ParamKind::Index ||
                    (param.kind == ParamKind::I32 && value <= uint64_t(std::numeric_limits<int32_t>::max())) ||
                    (param.kind == ParamKind::I64 && value <= uint64_t(std::numeric_limits<int64_t>::max()));
  if (!fits) mismatch(param, "the integer " + std::to_string(value));
  store(index, {Value::Kind::Unsigned, nullptr, value});
}

void LaunchArgs::set_signed(std::string_view name, int64_t value) {
  if (value >= 0) return set_unsigned(name, uint64_t(value));
  const size_t index = index_of(name);
  const KernelParam& param = kernel_->signature->params[index];
  const bool fits = param.kind == ParamKind::I64 ||
                    (param.kind == ParamKind::I32 && value >= int64_t(std::numeric_limits<int32_t>::min()));
  if (!fits) mismatch(param, "the integer " + std::to_string(value));
  store(index, {Value::Kind::Signed, nullptr, 0, value});
}

void LaunchArgs::set_float(std::string_view name, float value) {
  const size_t index = index_of(name);
  const KernelParam& param = kernel_->signature->params[index];
  if (param.kind != ParamKind::F32) mismatch(param, "a float");
  store(index, {Value::Kind::Float, nullptr, 0, 0, value});
}

KernelArgs LaunchArgs::build() const {
  const std::vector<KernelParam>& params = kernel_->signature->params;
  std::string unset;
  for (size_t i = 0; i < params.size(); ++i)
    if (!values_[i]) unset += (unset.empty() ? "" : ", ") + params[i].name;
  if (!unset.empty())
    throw Error("kernel " + kernel_->name + ": parameters left unset: " + unset,
                "every parameter of " + kernel_->signature->describe(), "set each of them before launching");
  KernelArgs args;
  size_t bytes = 0;
  for (const KernelParam& param : params) bytes += param.value_bytes + alignof(std::max_align_t);
  args.reserve(params.size(), bytes);
  for (size_t i = 0; i < params.size(); ++i) {
    const Value& value = *values_[i];
    const uint64_t bits = value.kind == Value::Kind::Signed ? uint64_t(value.signed_value) : value.unsigned_value;
    switch (params[i].kind) {
      case ParamKind::Pointer: args.add(value.pointer); break;
      case ParamKind::Window: args.add(windows_[value.window_index]); break;
      case ParamKind::Index: args.add(uint64_t(bits)); break;
      case ParamKind::I32: args.add(int32_t(int64_t(bits))); break;
      case ParamKind::I64: args.add(int64_t(bits)); break;
      case ParamKind::F32: args.add(value.float_value); break;
    }
  }
  return args;
}

KernelModule::KernelModule(Device& device, std::shared_ptr<const KernelArtifact> artifact)
    : artifact_(std::move(artifact)) {
  const ModuleInterface& record = *artifact_->interface;
  if (record.target.vendor != vendor_name(device.vendor()))
    throw Error(artifact_->spec.canonical() + " is built for " + record.target.name + " (" + record.target.vendor +
                    "), which the " + std::string(device.kind()) + " device does not run",
                "a kernel for the device's own kind of target", "build the kernel for the device's target");
  module_ = device.load_module(artifact_->binary);
  for (const KernelSignature& signature : record.kernels) {
    Kernel kernel = module_->kernel(signature.name);
    kernel.signature = &signature;
    kernel.wave_size = record.target.wave_size;
    kernel.dependent_launch = record.target.dependent_launch;
    kernels_.emplace(signature.name, std::move(kernel));
  }
}

const Kernel& KernelModule::kernel(std::string_view name) const {
  if (auto it = kernels_.find(name); it != kernels_.end()) return it->second;
  return kernels_.at(std::string(interface().kernel(name).name));  // throws naming the kernels that exist
}

}  // namespace epjit
