// In-process runtime compilers loaded with dlopen: NVRTC (sm90 cubins) and
// hipRTC (AMD code objects). The device headers are handed over from the
// runtime's embedded copy, so nothing needs to be installed beside them.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <functional>
#include <mutex>
#include <vector>

#include "../core/dynamic_library.h"
#include "../source/embedded.h"
#include "epjit/error.h"
#include "epjit/logging.h"
#include "epjit/toolchain.h"

namespace epjit {
namespace {

// NVRTC and hipRTC share one shape of C API; Api names the functions of one.
struct RtcApi {
  using Program = void*;
  int (*version)(int*, int*) = nullptr;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*code_size)(Program, size_t*) = nullptr;
  int (*code)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  const char* (*error_string)(int) = nullptr;
};

struct RtcNames {
  const char* version;
  const char* create;
  const char* compile;
  const char* log_size;
  const char* log;
  const char* code_size;
  const char* code;
  const char* destroy;
  const char* error_string;
};

constexpr RtcNames kNvrtc = {"nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram",
                             "nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcGetCUBINSize",
                             "nvrtcGetCUBIN", "nvrtcDestroyProgram", "nvrtcGetErrorString"};
constexpr RtcNames kHiprtc = {"hiprtcVersion", "hiprtcCreateProgram", "hiprtcCompileProgram",
                              "hiprtcGetProgramLogSize", "hiprtcGetProgramLog", "hiprtcGetCodeSize",
                              "hiprtcGetCode", "hiprtcDestroyProgram", "hiprtcGetErrorString"};

class RtcToolchain : public Toolchain {
 public:
  RtcToolchain(std::string name, DynamicLibrary library, const RtcNames& names)
      : name_(std::move(name)), library_(std::move(library)) {
    library_.bind(api_.version, names.version);
    library_.bind(api_.create, names.create);
    library_.bind(api_.compile, names.compile);
    library_.bind(api_.log_size, names.log_size);
    library_.bind(api_.log, names.log);
    library_.bind(api_.code_size, names.code_size);
    library_.bind(api_.code, names.code);
    library_.bind(api_.destroy, names.destroy);
    library_.bind(api_.error_string, names.error_string);
    int major = 0, minor = 0;
    api_.version(&major, &minor);
    // Version only: the same compiler at another path keys the same entries (warmed caches travel).
    identity_ = name_ + " " + std::to_string(major) + "." + std::to_string(minor);
  }

  std::string_view name() const override { return name_; }
  const std::string& identity() const override { return identity_; }

  CompiledBinary compile(const CompileRequest& request) const override {
    const auto start = std::chrono::steady_clock::now();
    std::vector<const char*> header_texts, header_names;
    for (const EmbeddedFile& file : embedded_headers()) {
      header_names.push_back(file.name.data());
      header_texts.push_back(file.text.data());
    }
    // The embedded views are NUL-terminated (string literals), as the APIs need.
    RtcApi::Program program = nullptr;
    check(api_.create(&program, request.source.c_str(), request.name.c_str(), int(header_texts.size()),
                      header_texts.data(), header_names.data()),
          "create a program", request);
    std::unique_ptr<void, std::function<void(void*)>> guard(program, [this](void* p) { api_.destroy(&p); });
    const std::vector<std::string> opts = options(request);
    std::vector<const char*> argv;
    for (const std::string& option : opts) argv.push_back(option.c_str());
    const int status = api_.compile(program, int(argv.size()), argv.data());
    size_t log_size = 0;
    api_.log_size(program, &log_size);
    std::string log(log_size, '\0');
    if (log_size) api_.log(program, log.data());
    while (!log.empty() && log.back() == '\0') log.pop_back();
    if (status != 0) {
      throw Error("compiling " + request.name + " for " + std::string(request.target->name) + " with " + name_ +
                      " failed (" + api_.error_string(status) + "):\n" + log,
                  "source the compiler accepts", "report the log above; it names the failing line");
    }
    size_t size = 0;
    check(api_.code_size(program, &size), "get the binary's size", request);
    CompiledBinary binary;
    binary.bytes.resize(size);
    check(api_.code(program, reinterpret_cast<char*>(binary.bytes.data())), "get the binary", request);
    binary.log = std::move(log);
    binary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return binary;
  }

 protected:
  void check(int status, const char* what, const CompileRequest& request) const {
    if (status == 0) return;
    throw Error(name_ + " could not " + what + " for " + request.name + ": " + api_.error_string(status),
                "a working " + name_, "check the " + name_ + " installation");
  }

  std::string name_;
  DynamicLibrary library_;
  RtcApi api_;
  std::string identity_;
};

class NvrtcToolchain final : public RtcToolchain {
 public:
  NvrtcToolchain()
      : RtcToolchain("nvrtc",
                     DynamicLibrary::open_first({"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                                 "/usr/local/cuda/lib64/libnvrtc.so"},
                                                "NVRTC", "install the CUDA toolkit's NVRTC or add it to LD_LIBRARY_PATH"),
                     kNvrtc) {}
  bool supports(const TargetInfo& target) const override { return target.is_nvidia(); }
  std::vector<std::string> options(const CompileRequest& request) const override {
    return compile_flags(*request.target, Compiler::Nvrtc, request.opt_level);
  }
};

// The ISAs comgr (the code object manager under hipRTC) can target, e.g.
// "amdgcn-amd-amdhsa--gfx90a"; empty when comgr is absent. Asked before
// hipRTC is loaded: compiling a probe is unsafe (some hipRTC builds abort on
// an unknown arch), and loading a HIP runtime that will not be used would
// bring its own LLVM into the process for nothing.
const std::vector<std::string>& comgr_isa_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> isas;
    try {
      // Kept loaded for the process: unloading comgr (and the LLVM it carries)
      // and loading it again with hipRTC breaks LLVM's static option registry.
      static DynamicLibrary comgr = DynamicLibrary::open_first(
          {"libamd_comgr.so.3", "libamd_comgr.so.2", "libamd_comgr.so"}, "comgr", "install ROCm's libamd_comgr");
      int (*count)(size_t*) = nullptr;
      int (*name)(size_t, const char**) = nullptr;
      comgr.bind(count, "amd_comgr_get_isa_count");
      comgr.bind(name, "amd_comgr_get_isa_name");
      size_t n = 0;
      if (count(&n) != 0) return isas;
      for (size_t i = 0; i < n; ++i) {
        const char* isa = nullptr;
        if (name(i, &isa) == 0 && isa) isas.emplace_back(isa);
      }
    } catch (const Error&) {
    }
    return isas;
  }();
  return names;
}

bool comgr_knows(const TargetInfo& target) {
  const std::string suffix = "--" + std::string(target.arch);
  for (const std::string& isa : comgr_isa_names())
    if (isa.size() >= suffix.size() && isa.compare(isa.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  return false;
}

class HiprtcToolchain final : public RtcToolchain {
 public:
  HiprtcToolchain()
      : RtcToolchain("hiprtc",
                     DynamicLibrary::open_first({"libhiprtc.so", "libhiprtc.so.6", "libamdhip64.so",
                                                 "libamdhip64.so.6", "libamdhip64.so.5"},
                                                "hipRTC", "install ROCm's hipRTC (libhiprtc.so or libamdhip64.so)"),
                     kHiprtc) {}
  bool supports(const TargetInfo& target) const override { return target.is_amd(); }
  std::vector<std::string> options(const CompileRequest& request) const override {
    return compile_flags(*request.target, Compiler::HipRtc, request.opt_level);
  }
};

}  // namespace

std::unique_ptr<Toolchain> make_nvrtc_toolchain() { return std::make_unique<NvrtcToolchain>(); }
std::unique_ptr<Toolchain> make_hiprtc_toolchain() { return std::make_unique<HiprtcToolchain>(); }

bool hiprtc_knows(const TargetInfo& target) { return comgr_knows(target); }

std::unique_ptr<Toolchain> default_toolchain(const TargetInfo& target) {
  switch (target.toolchain) {
    case DefaultToolchain::HostCxx: return make_host_cxx_toolchain();
    case DefaultToolchain::Nvrtc: return make_nvrtc_toolchain();
    case DefaultToolchain::HipRtcOrClang: {
      if (comgr_knows(target)) {
        try {
          return std::make_unique<HiprtcToolchain>();
        } catch (const Error& error) {
          log().info("hipRTC unavailable ({}); compiling {} with clang", error.problem(), target.arch);
        }
      } else {
        log().info("hipRTC/comgr here do not know {}: compiling with clang (same generated code)", target.arch);
      }
      return make_clang_toolchain();
    }
  }
  return make_host_cxx_toolchain();
}

}  // namespace epjit
