// The symmetric window as kernels see it: region r of rank p's copy starts at
// peer_base[p] + region_offset[r]. The runtime fills it from the module's
// interface record (regions in declaration order); emitted code indexes it
// with the region's number. runtime_param[i] is the value of the record's
// i-th runtime parameter (ep.runtime_param): a limit such as the op's
// max_tokens, which one module then serves for every value. Shared by
// device code, the runtime and the compiler.
#pragma once

#include "epjit/numerics.h"  // the fixed-width types, under NVRTC too

namespace epjit {

inline constexpr int kMaxWindowRegions = 32;
inline constexpr int kMaxWindowPeers = 64;
inline constexpr int kMaxRuntimeParams = 4;

struct Window {
  uint64_t region_offset[kMaxWindowRegions];
  char* peer_base[kMaxWindowPeers];
  uint64_t runtime_param[kMaxRuntimeParams];
};

}  // namespace epjit
