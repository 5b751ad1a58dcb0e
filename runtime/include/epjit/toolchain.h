// Toolchains turn generated source into a loadable binary: hipRTC and clang
// for AMD code objects, NVRTC for sm90 cubins, the host C++ compiler for host
// shared objects. Each reports an exact identity that enters the cache key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "epjit/targets/TargetInfo.h"

namespace epjit {

struct CompileRequest {
  std::string source;
  std::string name;  // the kernel file's name, for logs ("quantize_mxfp4.hip")
  const TargetInfo* target = nullptr;
  int opt_level = 3;
};

struct CompiledBinary {
  std::vector<uint8_t> bytes;
  std::string log;
  double seconds = 0;
};

class Toolchain {
 public:
  virtual ~Toolchain() = default;
  virtual std::string_view name() const = 0;  // "hiprtc", "clang", "nvrtc", "host-c++"
  // Name, version and build, e.g. "nvrtc 13.0" or the compiler's --version line; not its path,
  // so a warmed cache is valid wherever the same compiler is installed.
  virtual const std::string& identity() const = 0;
  virtual bool supports(const TargetInfo& target) const = 0;
  // The options a compile of `request` uses, for the cache key and manifest.
  virtual std::vector<std::string> options(const CompileRequest& request) const = 0;
  // Compiles; throws epjit::Error whose message holds the compiler's log.
  virtual CompiledBinary compile(const CompileRequest& request) const = 0;
};

// Each throws epjit::Error naming what was looked for when the tool is absent.
std::unique_ptr<Toolchain> make_host_cxx_toolchain();  // EPJIT_HOST_CXX, default c++
std::unique_ptr<Toolchain> make_clang_toolchain();     // EPJIT_CLANG, default clang++-22
std::unique_ptr<Toolchain> make_nvrtc_toolchain();     // dlopen libnvrtc.so
std::unique_ptr<Toolchain> make_hiprtc_toolchain();    // dlopen libhiprtc.so, else libamdhip64.so

// Whether the installed hipRTC (its comgr) can compile for the target.
bool hiprtc_knows(const TargetInfo& target);

// The target's default: host-c++ for host targets, NVRTC for sm90, and for AMD
// hipRTC when it loads and knows the target, else clang.
std::unique_ptr<Toolchain> default_toolchain(const TargetInfo& target);

}  // namespace epjit
