// What the SIMT targets (AMD, NVIDIA) share above their primitives. The
// including device header defines, in namespace epjit, before this header:
// `lane_id()`, `broadcast_first_lane(T)` (lane 0's value in every lane) and
// `WaitClock` (common/base.h's lane_wait_until clock).
#pragma once

#include "epjit/targets/common/base.h"

namespace epjit {

// ep.wait: lane 0 waits (lane_wait_until) and its outcome reaches every lane.
// On timeout the error word is written at system scope so the host reads it.
template <Until U, Scope S, typename T>
EPJIT_DEVICE bool warp_wait_until(T* flag, T value, int32_t* error, int32_t code, int32_t timeout_ms) {
  int ok = 0;
  if (lane_id() == 0) ok = lane_wait_until<WaitClock, U, S>(flag, value, error, code, timeout_ms);
  return broadcast_first_lane(ok) != 0;
}

}  // namespace epjit
