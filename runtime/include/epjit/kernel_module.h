// A kernel binary loaded with its interface record: kernels are bound by the
// names the template gives them and launched with arguments set by parameter
// name, each checked against the kernel's signature, so a launch never
// depends on a hand-kept argument order.
//
//   KernelModule module(device, cache.get(spec));
//   const Kernel& dispatch = module.kernel("ep_dispatch");
//   device.launch(dispatch, geometry, LaunchArgs(dispatch).set("tokens", n).set(...).build(), stream);
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "epjit/cache.h"
#include "epjit/device.h"
#include "epjit/kernel_interface.h"
#include "epjit/targets/common/window.h"

namespace epjit {

// Throws epjit::Error when `pointer` (unless null) is not a multiple of the
// alignment the kernel's pointer parameter `param` needs (its record's
// "align"): a misaligned 16-byte access faults the device, so the bad
// argument is refused before the launch. The message names it as the
// caller does, "CALL: ARGUMENT" ("dispatch: input"); it is built only
// then, so a call may check on every launch.
void require_pointer_alignment(const Kernel& kernel, std::string_view param, const void* pointer,
                               std::string_view call, std::string_view argument);
// Whether `pointer` is null or aligned as the parameter needs (true for a
// parameter the kernel does not have).
bool pointer_aligned_for(const Kernel& kernel, std::string_view param, const void* pointer);

// The arguments of one launch of a kernel with a signature, set by name.
class LaunchArgs {
 public:
  // Throws epjit::Error when the kernel has no signature (a bare Module's).
  explicit LaunchArgs(const Kernel& kernel);

  // Pointers go to pointer parameters (aligned as the parameter needs), the
  // window table (epjit::Window, by value) to the window parameter, integers
  // to index, i32 and i64 ones (range-checked), floats to f32 ones. A name
  // the kernel does not have, a value of the wrong kind, out of range or
  // misaligned, or a parameter set twice is an epjit::Error naming the
  // kernel and the parameter.
  LaunchArgs& set(std::string_view name, const Window& window) {
    set_window(name, window);
    return *this;
  }
  template <typename T>
  LaunchArgs& set(std::string_view name, T value) {
    if constexpr (std::is_pointer_v<T> || std::is_null_pointer_v<T>) {
      set_pointer(name, const_cast<void*>(static_cast<const void*>(value)));
    } else if constexpr (std::is_same_v<T, bool>) {
      set_unsigned(name, value ? 1u : 0u);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      set_signed(name, int64_t(value));
    } else if constexpr (std::is_integral_v<T>) {
      set_unsigned(name, uint64_t(value));
    } else {
      static_assert(std::is_same_v<T, float>, "kernel arguments are pointers, integers or float");
      set_float(name, value);
    }
    return *this;
  }

  // The values in the kernel's parameter order; throws naming every parameter left unset.
  KernelArgs build() const;

 private:
  // A window table is 768 bytes: it is kept once in windows_ (Value holds
  // its index), not in every parameter's slot, since the launch path of a
  // small call waits for this host work one for one.
  struct Value {
    enum class Kind : uint8_t { Pointer, Unsigned, Signed, Float, Window } kind;
    void* pointer = nullptr;
    uint64_t unsigned_value = 0;
    int64_t signed_value = 0;
    float float_value = 0;
    size_t window_index = 0;
  };
  size_t index_of(std::string_view name) const;
  [[noreturn]] void mismatch(const KernelParam& param, const std::string& given) const;
  void set_pointer(std::string_view name, void* value);
  void set_unsigned(std::string_view name, uint64_t value);
  void set_signed(std::string_view name, int64_t value);
  void set_float(std::string_view name, float value);
  void set_window(std::string_view name, const Window& window);
  void store(size_t index, Value value);

  const Kernel* kernel_;
  std::vector<std::optional<Value>> values_;
  std::vector<Window> windows_;
};

class KernelModule {
 public:
  // Loads the artifact's binary on `device` and binds every kernel its
  // interface names; throws epjit::Error when the interface is for another
  // kind of device or the binary lacks one of them.
  KernelModule(Device& device, std::shared_ptr<const KernelArtifact> artifact);

  const ModuleInterface& interface() const { return *artifact_->interface; }
  // The kernel `name` with its signature; throws naming the kernels that exist.
  const Kernel& kernel(std::string_view name) const;

 private:
  std::shared_ptr<const KernelArtifact> artifact_;  // keeps the interface the kernels point into
  std::unique_ptr<Module> module_;
  std::map<std::string, Kernel, std::less<>> kernels_;
};

}  // namespace epjit
