// A kernel specialization: template, parameter bindings, target. It alone
// determines the generated source, so it (with the toolchain) keys the cache.
#pragma once

#include <map>
#include <string>

namespace epjit {

struct KernelSpec {
  std::string template_name;
  std::map<std::string, std::string> params;  // parameter -> value, sorted
  std::string target;

  // "quantize_mxfp4(hidden=7168)@gfx950": stable, for keys and messages.
  std::string canonical() const;
};

}  // namespace epjit
