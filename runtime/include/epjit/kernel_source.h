// Where generated source comes from: the one narrow interface between the
// runtime and the compiler. The MLIR-backed provider is a shared library
// (libepjit_kernel_source.so, built with the compiler half) loaded when
// present; a deployment with a warmed cache needs neither it nor LLVM/MLIR.
#pragma once

#include <memory>
#include <string>

#include "epjit/kernel_spec.h"

namespace epjit {

// What the compiler produces for a specialization: the target's source (HIP,
// CUDA or host C++) and the module's interface record (JSON, kernel_interface.h).
struct GeneratedSource {
  std::string source;
  std::string interface;
};

class KernelSource {
 public:
  virtual ~KernelSource() = default;
  // Throws epjit::Error with the compiler's diagnostics.
  virtual GeneratedSource generate(const KernelSpec& spec) const = 0;
  // Where this provider came from, for logs and manifests.
  virtual std::string describe() const = 0;
};

// The MLIR-backed provider: EPJIT_KERNEL_SOURCE_LIBRARY when set, else
// libepjit_kernel_source.so next to the running program (../lib) or in the
// build tree. nullptr when absent, with the places looked at in `why_not`.
std::shared_ptr<KernelSource> load_compiler_source(std::string* why_not = nullptr);

}  // namespace epjit
