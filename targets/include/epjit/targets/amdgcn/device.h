// AMD GPU primitives (SIMT): geometry, cross-lane reductions, warp-uniform
// atomics, fences, bounded waits and the block barrier, from clang's AMDGPU
// builtins alone (no HIP headers: code objects build with -nogpuinc).
// The emitted code defines EPJIT_WAVE_SIZE and EPJIT_STEADY_COUNTER_HZ from
// TargetInfo before it includes the prelude (amdgcn/prelude.h).
#pragma once

#include "epjit/targets/common/chunks.h"

// Kernel attributes, for builds without the HIP headers (-nogpuinc); hipRTC
// and hipcc define them already.
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(threads) __attribute__((amdgpu_flat_work_group_size(1, threads)))
#endif

#if !defined(EPJIT_WAVE_SIZE) || !defined(EPJIT_STEADY_COUNTER_HZ)
#error "EPJIT_WAVE_SIZE and EPJIT_STEADY_COUNTER_HZ come before this header, from TargetInfo::prelude_defines (emitted code has them)"
#endif

namespace epjit {

inline constexpr int kWaveSize = EPJIT_WAVE_SIZE;

EPJIT_DEVICE size_t lane_id() { return __builtin_amdgcn_workitem_id_x() % kWaveSize; }
EPJIT_DEVICE size_t warp_index() { return __builtin_amdgcn_workitem_id_x() / kWaveSize; }
EPJIT_DEVICE size_t warps_per_block() { return __builtin_amdgcn_workgroup_size_x() / kWaveSize; }
EPJIT_DEVICE size_t block_index() { return __builtin_amdgcn_workgroup_id_x(); }
EPJIT_DEVICE size_t block_count() {
  return __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x();
}
EPJIT_DEVICE size_t global_warp_index() { return block_index() * warps_per_block() + warp_index(); }
EPJIT_DEVICE size_t global_warp_count() { return block_count() * warps_per_block(); }

namespace amdgcn {

EPJIT_DEVICE float shuffle_xor(float value, int mask) {
  const int source = int(lane_id()) ^ mask;
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(source << 2, __builtin_bit_cast(int, value)));
}

template <typename T>
EPJIT_DEVICE T broadcast_first_lane(T value) {
  if constexpr (sizeof(T) == 8) {
    const uint64_t bits = __builtin_bit_cast(uint64_t, value);
    const uint32_t lo = __builtin_amdgcn_readfirstlane(uint32_t(bits));
    const uint32_t hi = __builtin_amdgcn_readfirstlane(uint32_t(bits >> 32));
    return __builtin_bit_cast(T, (uint64_t(hi) << 32) | lo);
  } else {
    return __builtin_bit_cast(T, __builtin_amdgcn_readfirstlane(__builtin_bit_cast(int32_t, value)));
  }
}

template <Scope S>
constexpr int hip_scope() {
  return S == Scope::Workgroup ? __HIP_MEMORY_SCOPE_WORKGROUP
                               : (S == Scope::Agent ? __HIP_MEMORY_SCOPE_AGENT : __HIP_MEMORY_SCOPE_SYSTEM);
}

template <Order O>
constexpr int c_order() {
  return O == Order::Relaxed ? __ATOMIC_RELAXED
                             : (O == Order::Acquire ? __ATOMIC_ACQUIRE
                                                    : (O == Order::Release ? __ATOMIC_RELEASE : __ATOMIC_ACQ_REL));
}

}  // namespace amdgcn

// Butterfly over aligned groups of Group lanes: lane i combines with i ^ h for
// h = Group/2, ..., 1, so every lane of a group ends with the same value.
template <Reduce K, int Group>
EPJIT_DEVICE float lane_reduce(float value) {
#pragma unroll
  for (int h = Group / 2; h > 0; h /= 2) value = combine<K>(value, amdgcn::shuffle_xor(value, h));
  return value;
}

// Warp-uniform atomics: lane 0 performs the one atomic, every lane gets its result.
namespace amdgcn {
template <typename T, typename Atomic>
EPJIT_DEVICE T on_first_lane(Atomic atomic) {
  T old = 0;
  if (lane_id() == 0) old = atomic();
  return broadcast_first_lane(old);
}
}  // namespace amdgcn

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_add(T* address, T value) {
  return amdgcn::on_first_lane<T>(
      [&] { return __hip_atomic_fetch_add(address, value, amdgcn::c_order<O>(), amdgcn::hip_scope<S>()); });
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_max(T* address, T value) {
  return amdgcn::on_first_lane<T>(
      [&] { return __hip_atomic_fetch_max(address, value, amdgcn::c_order<O>(), amdgcn::hip_scope<S>()); });
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_exchange(T* address, T value) {
  return amdgcn::on_first_lane<T>(
      [&] { return __hip_atomic_exchange(address, value, amdgcn::c_order<O>(), amdgcn::hip_scope<S>()); });
}

// Warp-uniform loads (ep.load, ep.atomic_load): every lane reads the same
// element; the first lane's value is made the warp's (an SGPR), so what is
// computed from it stays scalar and branches on it are uniform.
template <typename T>
EPJIT_DEVICE T warp_load(const T* address) {
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) return amdgcn::broadcast_first_lane(*address);
  else return *address;
}

// ep.prefetch: CDNA3 (gfx942, gfx950) has no prefetch instruction, and
// llvm.prefetch becomes nothing there; gfx12 targets may lower it to one.
template <typename T>
EPJIT_DEVICE void warp_prefetch(const T* address) {
  __builtin_prefetch(address);
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T atomic_load(T* address) {
  return amdgcn::broadcast_first_lane(__hip_atomic_load(address, amdgcn::c_order<O>(), amdgcn::hip_scope<S>()));
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE void warp_atomic_store(T* address, T value) {
  if (lane_id() == 0) __hip_atomic_store(address, value, amdgcn::c_order<O>(), amdgcn::hip_scope<S>());
}

template <Scope S, Order O>
EPJIT_DEVICE void fence() {
  if constexpr (S == Scope::Workgroup) __builtin_amdgcn_fence(amdgcn::c_order<O>(), "workgroup");
  else if constexpr (S == Scope::Agent) __builtin_amdgcn_fence(amdgcn::c_order<O>(), "agent");
  else __builtin_amdgcn_fence(amdgcn::c_order<O>(), "");
}

namespace amdgcn {
// What lane_wait_until needs. The steady counter is the constant-rate
// realtime clock (s_memrealtime, or s_sendmsg_rtn on gfx11+), which the
// including prelude states the rate of.
struct WaitClock {
  template <Scope S, typename T>
  static EPJIT_DEVICE T load_acquire(T* flag) { return __hip_atomic_load(flag, __ATOMIC_ACQUIRE, hip_scope<S>()); }
  static EPJIT_DEVICE int32_t load_error(int32_t* error) {
    return __hip_atomic_load(error, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  }
  static EPJIT_DEVICE void store_error(int32_t* error, int32_t code) {
    if (load_error(error) != code) __hip_atomic_store(error, code, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
  }
  static EPJIT_DEVICE uint64_t now_ns() {
    static_assert(1000000000ull % EPJIT_STEADY_COUNTER_HZ == 0, "a steady counter whose tick is whole nanoseconds");
    return __builtin_readsteadycounter() * (1000000000ull / EPJIT_STEADY_COUNTER_HZ);
  }
  static EPJIT_DEVICE void pause(unsigned) { __builtin_amdgcn_s_sleep(1); }
};
}  // namespace amdgcn

EPJIT_DEVICE void block_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// ep.block_any: one word of LDS between three barriers. Warp 0 clears it
// only after every warp has read the previous vote (the first barrier), the
// voters set it after the clear (the second), and all read it after every
// vote (the third). Only kernels that vote have the word.
EPJIT_DEVICE bool block_any(bool predicate) {
  __attribute__((shared)) static int vote;
  block_barrier();
  if (warp_index() == 0 && lane_id() == 0) vote = 0;
  block_barrier();
  if (predicate && lane_id() == 0) vote = 1;
  block_barrier();
  return vote != 0;
}

// A wavefront runs in lockstep; the fences keep the compiler and the memory
// counters from moving a lane's reads above the others' writes.
EPJIT_DEVICE void warp_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}

}  // namespace epjit

namespace epjit {

// Flagged rows' lines (common/flagged.h): two 8-byte relaxed atomics at
// system scope each (RCCL's LL moves its lines as such halves), global
// address space so they count on vmcnt alone.
typedef __attribute__((address_space(1))) uint64_t GlobalHalf;
EPJIT_DEVICE Vec16 load_line(const Vec16* line) {
  auto* half = (GlobalHalf*)line;  // an addrspacecast
  const uint64_t low = __hip_atomic_load(half, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  const uint64_t high = __hip_atomic_load(half + 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  return Vec16{{uint32_t(low), uint32_t(low >> 32), uint32_t(high), uint32_t(high >> 32)}};
}
EPJIT_DEVICE void store_line(Vec16* line, const Vec16& v) {
  auto* half = (GlobalHalf*)line;
  __hip_atomic_store(half, uint64_t(v.w[0]) | (uint64_t(v.w[1]) << 32), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
  __hip_atomic_store(half + 1, uint64_t(v.w[2]) | (uint64_t(v.w[3]) << 32), __ATOMIC_RELAXED,
                     __HIP_MEMORY_SCOPE_SYSTEM);
}
// What common/simt.h and common/flagged.h build on.
using WaitClock = amdgcn::WaitClock;
using amdgcn::broadcast_first_lane;

}  // namespace epjit

#include "epjit/targets/common/flagged.h"
#include "epjit/targets/common/simt.h"
