// Loads the MLIR-backed KernelSource (libepjit_kernel_source.so) through its
// C ABI: nothing throws across it and no LLVM/MLIR type crosses it.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>

#include "../core/dynamic_library.h"
#include "embedded.h"
#include "epjit/error.h"
#include "epjit/interface_schema.h"
#include "epjit/kernel_source.h"
#include "epjit/version.h"

namespace epjit {
namespace {

// The provider's C ABI is epjit/interface_schema.h's.
using GenerateFn = decltype(&EPJIT_PROVIDER_GENERATE);
using FreeFn = decltype(&EPJIT_PROVIDER_FREE);
using IdentityFn = decltype(&EPJIT_PROVIDER_IDENTITY);
constexpr const char* kGenerateSymbol = EPJIT_PROVIDER_SYMBOL(EPJIT_PROVIDER_GENERATE);
constexpr const char* kFreeSymbol = EPJIT_PROVIDER_SYMBOL(EPJIT_PROVIDER_FREE);
constexpr const char* kIdentitySymbol = EPJIT_PROVIDER_SYMBOL(EPJIT_PROVIDER_IDENTITY);

// What this runtime's cache keys name: its compiler's sources and its
// templates. A provider built from others would generate kernels that are
// then cached, and served from then on, under keys that do not describe them.
std::string expected_identity() { return schema::provider_identity(compiler_digest(), all_templates_digest()); }

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

class CompilerSource final : public KernelSource {
 public:
  explicit CompilerSource(DynamicLibrary library) : library_(std::move(library)) {
    if (!library_.find(kGenerateSymbol))
      throw Error(library_.path() + " is a compiler provider without " + std::string(kGenerateSymbol) +
                      " (an older epjit's: it cannot state the modules' interfaces)",
                  "libepjit_kernel_source.so of this epjit version", "install or point EPJIT_KERNEL_SOURCE_LIBRARY at "
                                                                     "the provider this epjit built");
    library_.bind(generate_, kGenerateSymbol);
    library_.bind(free_, kFreeSymbol);
    std::string stated;
    if (library_.find(kIdentitySymbol)) {
      IdentityFn identity = nullptr;
      library_.bind(identity, kIdentitySymbol);
      if (const char* text = identity()) stated = text;
    }
    if (stated != expected_identity())
      throw Error(library_.path() + " was built from other compiler sources or templates than this runtime (" +
                      (stated.empty() ? "an older provider: it states none" : "it states \"" + one_line(stated) + "\"") +
                      ", this runtime \"" + one_line(expected_identity()) +
                      "\"): its kernels would be cached under keys that do not describe them",
                  "the libepjit_kernel_source.so built together with this runtime",
                  "point EPJIT_KERNEL_SOURCE_LIBRARY at the provider of this build (or unset it to use the one "
                  "installed beside epjit), or rebuild both");
  }

  GeneratedSource generate(const KernelSpec& spec) const override {
    std::string bindings;
    for (const auto& [key, value] : spec.params) bindings += key + "=" + value + "\n";
    char* source = nullptr;
    char* interface = nullptr;
    char* diagnostics = nullptr;
    std::lock_guard lock(mutex_);  // one MLIR context at a time keeps memory flat
    const int status = generate_(spec.template_name.c_str(), bindings.c_str(), spec.target.c_str(), &source,
                                 &interface, &diagnostics);
    std::unique_ptr<char, FreeFn> owned_source(source, free_), owned_interface(interface, free_),
        owned_diagnostics(diagnostics, free_);
    if (status != 0) {
      throw Error("generating " + spec.canonical() + " failed:\n" + (diagnostics ? diagnostics : "(no diagnostics)"),
                  "a template, bindings and target the compiler accepts",
                  "fix the parameters named above (epjit-compile --template list shows them)");
    }
    if (!source || !interface)
      throw Error("the compiler provider " + library_.path() + " returned no " + (source ? "interface" : "source") +
                      " for " + spec.canonical(),
                  "both the source and the interface record", "report this as a bug");
    return {source, interface};
  }

  std::string describe() const override { return library_.path(); }

 private:
  DynamicLibrary library_;
  GenerateFn generate_ = nullptr;
  FreeFn free_ = nullptr;
  mutable std::mutex mutex_;
};

std::vector<std::string> candidates() {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  if (const char* explicit_path = std::getenv("EPJIT_KERNEL_SOURCE_LIBRARY"); explicit_path && *explicit_path) {
    paths.push_back(explicit_path);
    return paths;
  }
  // Beside the library this code is in (libepjit.so of an install), then
  // beside or below the executable (the tools, a program linking the static runtime).
  Dl_info self{};
  if (dladdr(reinterpret_cast<const void*>(&candidates), &self) != 0 && self.dli_fname) {
    const fs::path library = fs::path(self.dli_fname);
    if (library.filename().string().starts_with("libepjit"))
      paths.push_back((library.parent_path() / "libepjit_kernel_source.so").string());
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back((exe.parent_path() / "../lib/libepjit_kernel_source.so").lexically_normal().string());
    paths.push_back((exe.parent_path() / "libepjit_kernel_source.so").string());
  }
  return paths;
}

}  // namespace

std::shared_ptr<KernelSource> load_compiler_source(std::string* why_not) {
  try {
    return std::make_shared<CompilerSource>(DynamicLibrary::open_first(
        candidates(), "the epjit compiler (libepjit_kernel_source.so)",
        "build epjit with the compiler half (LLVM/MLIR 22), set EPJIT_KERNEL_SOURCE_LIBRARY, or import a warmed "
        "cache bundle (epjit-warm --import)"));
  } catch (const Error& error) {
    if (why_not) *why_not = error.what();
    return nullptr;
  }
}

}  // namespace epjit
