// A kernel specialization: template, parameter bindings, target. It alone
// determines the generated source, so it (with the toolchain) keys the cache.
#pragma once

#include <concepts>
#include <map>
#include <string>
#include <string_view>

namespace epjit {

struct KernelSpec {
  std::string template_name;
  std::map<std::string, std::string> params;  // parameter -> value as the compiler reads it, sorted
  std::string target;

  // Typed bindings: integers in decimal, booleans as true/false, names (a
  // parameter's enumeration words, element types such as bf16) as given.
  template <std::integral T>
  KernelSpec& set(const std::string& name, T value) {
    if constexpr (std::is_same_v<T, bool>) params[name] = value ? "true" : "false";
    else params[name] = std::to_string(value);
    return *this;
  }
  KernelSpec& set(const std::string& name, std::string_view word) {
    params[name] = std::string(word);
    return *this;
  }

  // "quantize_mxfp4(hidden=7168)@gfx950": stable, for keys and messages.
  std::string canonical() const;
};

}  // namespace epjit
