// What the kernel cache tests share: options for a cache in a scratch
// directory, and a quick host kernel to put in it.
#pragma once

#include <string>

#include "epjit/cache.h"

namespace epjit::testing {

inline CacheOptions optionsFor(const std::string& dir) {
  CacheOptions options;
  options.dir = dir;
  options.opt_level = 1;  // quick host compiles; the level is part of the key
  return options;
}

inline KernelSpec hostKernel(int hidden, const std::string& target = "host") {
  return {"quantize_fp8_direct", {{"hidden", std::to_string(hidden)}}, target};
}

}  // namespace epjit::testing
