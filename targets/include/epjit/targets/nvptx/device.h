// NVIDIA GPU primitives (SIMT, warp 32) for NVRTC and nvcc: geometry,
// cross-lane reductions, warp-uniform atomics, fences, bounded waits and the
// block barrier, from CUDA's built-in device functions (no headers needed).
// Scoped orders are fences around relaxed scoped atomics: acquire after,
// release before; a fence is __threadfence_{block,,system}.
#pragma once

#include "epjit/targets/common/chunks.h"

namespace epjit {

inline constexpr int kWaveSize = 32;
inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

EPJIT_DEVICE size_t lane_id() { return threadIdx.x % kWaveSize; }
EPJIT_DEVICE size_t warp_index() { return threadIdx.x / kWaveSize; }
EPJIT_DEVICE size_t block_index() { return blockIdx.x; }
EPJIT_DEVICE size_t block_count() { return gridDim.x; }
EPJIT_DEVICE size_t global_warp_index() { return size_t(blockIdx.x) * (blockDim.x / kWaveSize) + warp_index(); }
EPJIT_DEVICE size_t global_warp_count() { return size_t(gridDim.x) * (blockDim.x / kWaveSize); }

template <Reduce K, int Group>
EPJIT_DEVICE float lane_reduce(float value) {
#pragma unroll
  for (int h = Group / 2; h > 0; h /= 2) value = combine<K>(value, __shfl_xor_sync(kFullMask, value, h));
  return value;
}

template <Scope S, Order O>
EPJIT_DEVICE void fence() {
  if constexpr (S == Scope::Workgroup) __threadfence_block();
  else if constexpr (S == Scope::Agent) __threadfence();
  else __threadfence_system();
}

namespace nvptx {

template <Scope S, Order O>
EPJIT_DEVICE void release_fence() {
  if constexpr (O == Order::Release || O == Order::AcqRel) fence<S, O>();
}
template <Scope S, Order O>
EPJIT_DEVICE void acquire_fence() {
  if constexpr (O == Order::Acquire || O == Order::AcqRel) fence<S, O>();
}

template <typename T>
EPJIT_DEVICE T broadcast_lane0(T value) {
  if constexpr (sizeof(T) == 8) {
    return static_cast<T>(__shfl_sync(kFullMask, static_cast<long long>(value), 0));
  } else {
    return static_cast<T>(__shfl_sync(kFullMask, static_cast<int>(value), 0));
  }
}

// Relaxed atomics at a scope, for 32- and 64-bit signed integers.
template <Scope S>
EPJIT_DEVICE int atomic_add(int* p, int v) {
  if constexpr (S == Scope::Workgroup) return atomicAdd_block(p, v);
  else if constexpr (S == Scope::Agent) return atomicAdd(p, v);
  else return atomicAdd_system(p, v);
}
template <Scope S>
EPJIT_DEVICE long long atomic_add(long long* p, long long v) {
  auto* u = reinterpret_cast<unsigned long long*>(p);
  const auto w = static_cast<unsigned long long>(v);
  if constexpr (S == Scope::Workgroup) return static_cast<long long>(atomicAdd_block(u, w));
  else if constexpr (S == Scope::Agent) return static_cast<long long>(atomicAdd(u, w));
  else return static_cast<long long>(atomicAdd_system(u, w));
}
template <Scope S, typename T>
EPJIT_DEVICE T atomic_max(T* p, T v) {
  if constexpr (S == Scope::Workgroup) return atomicMax_block(p, v);
  else if constexpr (S == Scope::Agent) return atomicMax(p, v);
  else return atomicMax_system(p, v);
}
template <Scope S>
EPJIT_DEVICE int atomic_exchange(int* p, int v) {
  if constexpr (S == Scope::Workgroup) return atomicExch_block(p, v);
  else if constexpr (S == Scope::Agent) return atomicExch(p, v);
  else return atomicExch_system(p, v);
}
template <Scope S>
EPJIT_DEVICE long long atomic_exchange(long long* p, long long v) {
  auto* u = reinterpret_cast<unsigned long long*>(p);
  const auto w = static_cast<unsigned long long>(v);
  if constexpr (S == Scope::Workgroup) return static_cast<long long>(atomicExch_block(u, w));
  else if constexpr (S == Scope::Agent) return static_cast<long long>(atomicExch(u, w));
  else return static_cast<long long>(atomicExch_system(u, w));
}

// int32_t/int64_t spelled as the types CUDA's atomics take.
template <int Bytes>
struct AtomicIntOf;
template <>
struct AtomicIntOf<4> {
  using type = int;
};
template <>
struct AtomicIntOf<8> {
  using type = long long;
};
template <typename T>
using AtomicInt = typename AtomicIntOf<int(sizeof(T))>::type;

}  // namespace nvptx

namespace nvptx {
// Lane 0 performs the one atomic between the order's fences; every lane gets its result.
template <Scope S, Order O, typename T, typename Atomic>
EPJIT_DEVICE T on_lane0(T* address, T value, Atomic atomic) {
  T old = 0;
  if (lane_id() == 0) {
    release_fence<S, O>();
    old = static_cast<T>(atomic(reinterpret_cast<AtomicInt<T>*>(address), static_cast<AtomicInt<T>>(value)));
    acquire_fence<S, O>();
  }
  return broadcast_lane0(old);
}
}  // namespace nvptx

namespace nvptx {
// The atomics as function objects (NVRTC compiles no unannotated lambdas).
template <Scope S>
struct AtomicAdd {
  template <typename P, typename V>
  EPJIT_DEVICE V operator()(P* p, V v) const { return atomic_add<S>(p, v); }
};
template <Scope S>
struct AtomicMax {
  template <typename P, typename V>
  EPJIT_DEVICE V operator()(P* p, V v) const { return atomic_max<S>(p, v); }
};
template <Scope S>
struct AtomicExchange {
  template <typename P, typename V>
  EPJIT_DEVICE V operator()(P* p, V v) const { return atomic_exchange<S>(p, v); }
};
}  // namespace nvptx

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_add(T* address, T value) {
  return nvptx::on_lane0<S, O>(address, value, nvptx::AtomicAdd<S>{});
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_max(T* address, T value) {
  return nvptx::on_lane0<S, O>(address, value, nvptx::AtomicMax<S>{});
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_exchange(T* address, T value) {
  return nvptx::on_lane0<S, O>(address, value, nvptx::AtomicExchange<S>{});
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T atomic_load(T* address) {
  const T value = *const_cast<volatile T*>(address);
  nvptx::acquire_fence<S, O>();
  return value;
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE void warp_atomic_store(T* address, T value) {
  if (lane_id() == 0) {
    nvptx::release_fence<S, O>();
    *const_cast<volatile T*>(address) = value;
  }
}

template <Until U, Scope S, long long MaxSpins, typename T>
EPJIT_DEVICE bool warp_wait_until(T* flag, T value, int32_t* error, int32_t code) {
  int ok = 0;
  if (lane_id() == 0) {
    for (long long spin = 0; spin < MaxSpins && !ok; ++spin) {
      const T seen = *const_cast<volatile T*>(flag);
      ok = (U == Until::EQ && seen == value) || (U == Until::NE && seen != value) || (U == Until::GE && seen >= value);
      if (!ok) __nanosleep(32);
    }
    fence<S, Order::Acquire>();
    if (!ok) {
      *const_cast<volatile int32_t*>(error) = code;
      __threadfence_system();
    }
  }
  return __shfl_sync(kFullMask, ok, 0) != 0;
}

EPJIT_DEVICE void block_barrier() { __syncthreads(); }

}  // namespace epjit
