// The contract between the compiler half and the runtime, written once and
// included by both: the interface record's format version and vocabulary
// (compiler/lib/Interface.cpp writes it, runtime/core/kernel_interface.cpp
// reads it; docs/DSL.md, "The interface record"), and the C ABI of the
// compiler provider libepjit_kernel_source.so (its symbols, their
// signatures and the identity it states). Header-only, no dependencies: the
// compiler half is built without exceptions or RTTI, the runtime without LLVM.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace epjit::schema {

// The record's layout version; a reader refuses every other. 2: buffers
// (ep.buffer_part) and each kernel's when(...). 3: runtime parameters (a
// count's "count_per"), and buffer parts placed by the reader from their
// "align" (place_part) instead of stated offsets.
inline constexpr int kInterfaceFormat = 3;

// Where a buffer part starts: the first multiple of its alignment at or
// after `end`, where the part before it ends (the compiler's placement of
// ep.buffer_part, and the runtime's once it knows the counts).
constexpr unsigned long long place_part(unsigned long long end, unsigned long long align) {
  return (end + align - 1) / align * align;
}

// Element words of the record ("ptr<ELEMENT>", a region's or a buffer
// part's "element") and their sizes in bytes.
struct ElementWord {
  std::string_view name;
  size_t bytes;
};
inline constexpr ElementWord kElementWords[] = {
    {"i8", 1}, {"i16", 2}, {"i32", 4}, {"i64", 8}, {"bf16", 2}, {"f16", 2}, {"f32", 4},
};
// Bytes of one element named `name`; 0 when the record has no such word.
constexpr size_t element_bytes(std::string_view name) {
  for (const ElementWord& word : kElementWords)
    if (word.name == name) return word.bytes;
  return 0;
}

// Parameter type words other than "ptr<ELEMENT>".
inline constexpr std::string_view kWindowType = "window";  // the symmetric window table, by value
inline constexpr std::string_view kIndexType = "index";    // an unsigned 64-bit count
inline constexpr std::string_view kPointerPrefix = "ptr<";

// What a provider states it generates from: its compiler sources' digest and
// its templates' (hashed name, NUL, text, NUL in name order). The runtime
// refuses a provider whose identity differs from the one it computes.
inline std::string provider_identity(std::string_view compiler_digest, std::string_view templates_digest) {
  return "compiler " + std::string(compiler_digest) + "\ntemplates " + std::string(templates_digest) + "\n";
}

}  // namespace epjit::schema

// The provider's C ABI. Nothing throws across it and no LLVM/MLIR type
// crosses it; strings it returns are malloc'd and freed by its free function.
// The provider defines these functions; the runtime looks them up by
// EPJIT_PROVIDER_SYMBOL(...) and calls them through decltype pointers, so a
// signature changed here fails to compile on both sides.
#define EPJIT_PROVIDER_GENERATE epjit_kernel_source_generate_v2
#define EPJIT_PROVIDER_FREE epjit_kernel_source_free_v2
#define EPJIT_PROVIDER_IDENTITY epjit_kernel_source_identity_v1
#define EPJIT_PROVIDER_SYMBOL_TEXT(name) #name
#define EPJIT_PROVIDER_SYMBOL(name) EPJIT_PROVIDER_SYMBOL_TEXT(name)

extern "C" {
// The source and the interface record of `template_name` specialized by
// `bindings` (KEY=VALUE lines) for `target`; 0 on success, else diagnostics.
int EPJIT_PROVIDER_GENERATE(const char* template_name, const char* bindings, const char* target, char** source,
                            char** interface, char** diagnostics);
void EPJIT_PROVIDER_FREE(char* text);
// schema::provider_identity of what the provider was built from.
const char* EPJIT_PROVIDER_IDENTITY();
}
