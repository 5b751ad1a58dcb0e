// libepjit_kernel_source.so: the compiler behind the runtime's KernelSource
// interface, as a C ABI. Nothing throws across it (the compiler is built
// without exceptions); strings are malloc'd and freed by the library.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SHA256.h"

#include "epjit/Compiler/Pipeline.h"
#include "epjit/build_info.h"
#include "epjit/interface_schema.h"

namespace {

char* copy(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

}  // namespace

// The functions epjit/interface_schema.h declares.
extern "C" __attribute__((visibility("default"))) int EPJIT_PROVIDER_GENERATE(
    const char* template_name, const char* bindings, const char* target, char** source, char** interface,
    char** diagnostics) {
  *source = nullptr;
  *interface = nullptr;
  *diagnostics = nullptr;
  const epjit::compiler::Template* entry = epjit::compiler::findTemplate(template_name);
  if (!entry) {
    *diagnostics = copy(std::string("unknown template '") + template_name + "'");
    return 1;
  }
  epjit::compiler::CompileOptions options;
  options.target = target;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(bindings).split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) options.bindings.push_back(line.str());
  epjit::compiler::CompileOutput output;
  std::string error;
  const std::string name = std::string(entry->name) + ".mlir";
  if (!epjit::compiler::compile(llvm::StringRef(entry->source.data(), entry->source.size()), name, options, output,
                                error)) {
    *diagnostics = copy(error);
    return 1;
  }
  *source = copy(output.source);
  *interface = copy(output.interface);
  return *source && *interface ? 0 : 1;
}

extern "C" __attribute__((visibility("default"))) void EPJIT_PROVIDER_FREE(char* text) { std::free(text); }

// What this provider generates from: the compiler's sources (the digest the
// build info carries) and every template, hashed as the runtime hashes its
// copy (runtime/source/embedded.cpp, all_templates_digest). The runtime
// refuses a provider whose identity differs from its own: the kernels it
// generates would be cached under keys that name other sources.
extern "C" __attribute__((visibility("default"))) const char* EPJIT_PROVIDER_IDENTITY() {
  static const std::string identity = [] {
    llvm::ArrayRef<epjit::compiler::Template> builtin = epjit::compiler::builtinTemplates();
    std::vector<epjit::compiler::Template> templates(builtin.begin(), builtin.end());
    std::sort(templates.begin(), templates.end(),
              [](const epjit::compiler::Template& a, const epjit::compiler::Template& b) { return a.name < b.name; });
    llvm::SHA256 hash;
    const llvm::StringRef nul("\0", 1);
    for (const epjit::compiler::Template& entry : templates) {
      hash.update(llvm::StringRef(entry.name.data(), entry.name.size()));
      hash.update(nul);
      hash.update(llvm::StringRef(entry.source.data(), entry.source.size()));
      hash.update(nul);
    }
    return epjit::schema::provider_identity(EPJIT_COMPILER_DIGEST, llvm::toHex(hash.final(), true));
  }();
  return identity.c_str();
}
