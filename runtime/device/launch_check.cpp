// What every device checks before a launch, so a wrong argument list is an
// epjit::Error naming the kernel and the parameter rather than a fault.
#include <string>

#include "epjit/device.h"
#include "epjit/error.h"
#include "epjit/targets/common/window.h"

namespace epjit {
namespace {

const char* kind_name(KernelArgs::Kind kind) {
  switch (kind) {
    case KernelArgs::Kind::Pointer: return "a pointer";
    case KernelArgs::Kind::Integer: return "an integer";
    case KernelArgs::Kind::Float: return "a float";
    case KernelArgs::Kind::Other: return "a struct";
  }
  return "a value";
}

bool matches(const KernelParam& param, const KernelArgs::Slot& slot) {
  switch (param.kind) {
    case ParamKind::Pointer: return slot.kind == KernelArgs::Kind::Pointer;
    case ParamKind::Window: return slot.kind == KernelArgs::Kind::Other && slot.bytes == sizeof(Window);
    case ParamKind::Index:
    case ParamKind::I32:
    case ParamKind::I64: return slot.kind == KernelArgs::Kind::Integer && slot.bytes == param.value_bytes;
    case ParamKind::F32: return slot.kind == KernelArgs::Kind::Float && slot.bytes == 4;
  }
  return false;
}

}  // namespace

void check_launch(const Kernel& kernel, LaunchGeometry geometry, const KernelArgs& args) {
  if (geometry.blocks == 0 || geometry.warps_per_block == 0)
    throw Error("launch of " + kernel.name + " with an empty grid (" + std::to_string(geometry.blocks) + " blocks of " +
                    std::to_string(geometry.warps_per_block) + " warps)",
                "at least one block of one warp", "fix the geometry (the schedule or the block/warp fields)");
  const KernelSignature* signature = kernel.signature;
  if (!signature) return;
  if (geometry.warps_per_block > uint32_t(signature->warps_per_block))
    throw Error("launch of " + kernel.name + " with " + std::to_string(geometry.warps_per_block) +
                    " warps per block, beyond the " + std::to_string(signature->warps_per_block) +
                    " it was compiled for",
                "at most warps_per_block = " + std::to_string(signature->warps_per_block),
                "lower the launch's warps, or build the kernel for more (the spec's warps_per_block)");
  if (args.size() != signature->params.size())
    throw Error("launch of " + kernel.name + " with " + std::to_string(args.size()) + " arguments",
                std::to_string(signature->params.size()) + " arguments: " + signature->describe(),
                "pass one argument per parameter, in order (LaunchArgs sets them by name)");
  for (size_t i = 0; i < args.size(); ++i) {
    const KernelParam& param = signature->params[i];
    const KernelArgs::Slot& slot = args.slot(i);
    if (!matches(param, slot))
      throw Error("launch of " + kernel.name + ": argument " + std::to_string(i) + " ('" + param.name + "') is " +
                      kind_name(slot.kind) + " of " + std::to_string(slot.bytes) + " bytes",
                  "'" + param.name + "' of type " + param.type + " (" + signature->describe() + ")",
                  "pass a value of the parameter's type");
  }
}

uint32_t block_threads(const Kernel& kernel, LaunchGeometry geometry, int device_wave_size) {
  return geometry.warps_per_block * uint32_t(kernel.wave_size > 0 ? kernel.wave_size : device_wave_size);
}

std::unique_ptr<Device> make_device(std::string_view kind, int ordinal) {
  if (kind == "host") return make_host_device();
  if (kind == "cuda") return make_cuda_device(ordinal);
  if (kind == "hip") return make_hip_device(ordinal);
  throw Error("device kind '" + std::string(kind) + "' is not known", "host, cuda or hip",
              "pick host (CPU ranks), cuda (NVIDIA GPUs) or hip (AMD GPUs)");
}

}  // namespace epjit
