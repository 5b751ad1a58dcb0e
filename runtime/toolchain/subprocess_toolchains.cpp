// Toolchains that run a compiler as a subprocess: the host C++ compiler
// (shared objects) and clang for AMD code objects. The device headers come
// from the runtime's embedded copy, written out once per process.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "../core/subprocess.h"
#include "../source/embedded.h"
#include "epjit/error.h"
#include "epjit/toolchain.h"

namespace epjit {
namespace {

namespace fs = std::filesystem;

std::string environment_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

// A private scratch directory for one compile, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/epjit-compile-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      throw Error("cannot create a scratch directory for compiling", "a writable TMPDIR",
                  "set TMPDIR to a writable directory");
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The first line a tool prints for --version, or throws naming the tool.
std::string version_line(const std::string& tool, const std::string& variable) {
  ProcessResult result = run_process({tool, "--version"});
  if (result.exit_code != 0) {
    throw Error("the compiler '" + tool + "' could not be run: " + result.output, "an executable compiler",
                "install it or set " + variable + " to its path");
  }
  return result.output.substr(0, result.output.find('\n'));
}

class SubprocessToolchain : public Toolchain {
 public:
  SubprocessToolchain(std::string tool, std::string variable)
      : tool_(std::move(tool)), identity_(version_line(tool_, variable)) {}

  const std::string& identity() const override { return identity_; }

  CompiledBinary compile(const CompileRequest& request) const override {
    ScratchDir scratch;
    const fs::path source = scratch.path() / request.name;
    const fs::path output = scratch.path() / "kernel.bin";
    std::ofstream(source, std::ios::binary) << request.source;
    std::vector<std::string> argv = {tool_};
    for (std::string& option : options(request)) argv.push_back(std::move(option));
    argv.insert(argv.end(), {"-I", materialized_header_dir(), "-o", output.string(), source.string()});
    ProcessResult result = run_process(argv);
    if (result.exit_code != 0) {
      throw Error("compiling " + request.name + " for " + std::string(request.target->name) + " with " +
                      std::string(name()) + " failed:\n" + result.output + "command: " + command_line(argv),
                  "source the compiler accepts", "report the log above; it names the failing line");
    }
    return {read_bytes(output), result.output, result.seconds};
  }

 protected:
  std::string tool_;
  std::string identity_;
};

class HostCxxToolchain final : public SubprocessToolchain {
 public:
  HostCxxToolchain() : SubprocessToolchain(environment_or("EPJIT_HOST_CXX", "c++"), "EPJIT_HOST_CXX") {}
  std::string_view name() const override { return "host-c++"; }
  bool supports(const TargetInfo& target) const override { return target.is_host(); }
  // EPJIT_HOST_CXXFLAGS adds flags (e.g. -fsanitize=thread, so sanitizer runs
  // see inside the kernels); they are options, so they enter the cache key.
  std::vector<std::string> options(const CompileRequest& request) const override {
    std::vector<std::string> flags = compile_flags(*request.target, Compiler::HostCxx, request.opt_level);
    std::istringstream extra(environment_or("EPJIT_HOST_CXXFLAGS", ""));
    for (std::string flag; extra >> flag;) flags.push_back(flag);
    return flags;
  }
};

class ClangToolchain final : public SubprocessToolchain {
 public:
  ClangToolchain() : SubprocessToolchain(environment_or("EPJIT_CLANG", "clang++-22"), "EPJIT_CLANG") {}
  std::string_view name() const override { return "clang"; }
  bool supports(const TargetInfo& target) const override { return target.is_amd(); }
  std::vector<std::string> options(const CompileRequest& request) const override {
    return compile_flags(*request.target, Compiler::Clang, request.opt_level);
  }
};

}  // namespace

std::unique_ptr<Toolchain> make_host_cxx_toolchain() { return std::make_unique<HostCxxToolchain>(); }
std::unique_ptr<Toolchain> make_clang_toolchain() { return std::make_unique<ClangToolchain>(); }

}  // namespace epjit
