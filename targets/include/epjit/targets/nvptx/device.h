// NVIDIA GPU primitives (SIMT, warp 32) for NVRTC and nvcc: geometry,
// cross-lane reductions, warp-uniform atomics, fences, bounded waits and the
// block barrier, from CUDA's built-in device functions and PTX (no headers
// needed). Atomics, loads and stores carry the PTX memory model's scope and
// order themselves (atom.acq_rel.sys, ld.acquire.sys, st.release.sys); a
// fence is fence.acq_rel at its scope, never a sequentially consistent one.
#pragma once

#include "epjit/targets/common/chunks.h"

// A warp is 32 lanes on every NVIDIA GPU; the emitted code states its
// target's wave size (TargetInfo::prelude_defines), which must agree.
#if defined(EPJIT_WAVE_SIZE) && EPJIT_WAVE_SIZE != 32
#error "EPJIT_WAVE_SIZE is 32 on NVIDIA targets: fix the target's TargetInfo row"
#endif

namespace epjit {

inline constexpr int kWaveSize = 32;
inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

EPJIT_DEVICE size_t lane_id() { return threadIdx.x % kWaveSize; }
EPJIT_DEVICE size_t warp_index() { return threadIdx.x / kWaveSize; }
EPJIT_DEVICE size_t block_index() { return blockIdx.x; }
EPJIT_DEVICE size_t block_count() { return gridDim.x; }
EPJIT_DEVICE size_t global_warp_index() { return size_t(blockIdx.x) * (blockDim.x / kWaveSize) + warp_index(); }
EPJIT_DEVICE size_t global_warp_count() { return size_t(gridDim.x) * (blockDim.x / kWaveSize); }

// Programmatic dependent launch (TargetInfo::dependent_launch; the
// ep-to-emitc pass inserts both calls). A kernel's first call lets the next
// kernel on the stream be launched at once (that kernel's blocks wait in
// their own wait); the next kernel launches only once every block of this
// one has passed here, so all of this grid is resident first: a kernel that
// waits on its own grid keeps its co-residency. For a kernel launched
// without the attribute both instructions do nothing.
EPJIT_DEVICE void launch_dependent_grids() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// Waits until the kernel before this one has finished and its writes are
// visible: called before the kernel's first memory access, after what reads
// only its parameters (the window table's peer addresses among them), so
// those constant-cache misses overlap the kernel before instead of following it.
EPJIT_DEVICE void wait_for_prior_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

template <Reduce K, int Group>
EPJIT_DEVICE float lane_reduce(float value) {
#pragma unroll
  for (int h = Group / 2; h > 0; h /= 2) value = combine<K>(value, __shfl_xor_sync(kFullMask, value, h));
  return value;
}

// The PTX spelling of every (order, scope) pair, for instructions that take both.
#define EPJIT_PTX_SCOPES(O_TEXT, S, BODY)                  \
  if constexpr ((S) == Scope::Workgroup) {                 \
    BODY(O_TEXT, "cta");                                   \
  } else if constexpr ((S) == Scope::Agent) {              \
    BODY(O_TEXT, "gpu");                                   \
  } else {                                                 \
    BODY(O_TEXT, "sys");                                   \
  }
#define EPJIT_PTX_ORDERS(O, S, BODY)                       \
  if constexpr ((O) == Order::Relaxed) {                   \
    EPJIT_PTX_SCOPES("relaxed", S, BODY)                   \
  } else if constexpr ((O) == Order::Acquire) {            \
    EPJIT_PTX_SCOPES("acquire", S, BODY)                   \
  } else if constexpr ((O) == Order::Release) {            \
    EPJIT_PTX_SCOPES("release", S, BODY)                   \
  } else {                                                 \
    EPJIT_PTX_SCOPES("acq_rel", S, BODY)                   \
  }

template <Scope S, Order O>
EPJIT_DEVICE void fence() {
#define EPJIT_FENCE(SEM, SCOPE) asm volatile("fence.acq_rel." SCOPE ";" ::: "memory")
  EPJIT_PTX_SCOPES("", S, EPJIT_FENCE)
#undef EPJIT_FENCE
}

namespace nvptx {

// Loads (relaxed or acquire) and stores (relaxed or release) at a scope.
template <Scope S, Order O, typename T>
EPJIT_DEVICE T load(const T* p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "scoped loads of 32- and 64-bit words");
  constexpr Order kOrder = O == Order::Relaxed ? Order::Relaxed : Order::Acquire;
  if constexpr (sizeof(T) == 4) {
    unsigned int bits;
#define EPJIT_LOAD(SEM, SCOPE) asm volatile("ld." SEM "." SCOPE ".b32 %0, [%1];" : "=r"(bits) : "l"(p) : "memory")
    EPJIT_PTX_ORDERS(kOrder, S, EPJIT_LOAD)
#undef EPJIT_LOAD
    return __builtin_bit_cast(T, bits);
  } else {
    unsigned long long bits;
#define EPJIT_LOAD(SEM, SCOPE) asm volatile("ld." SEM "." SCOPE ".b64 %0, [%1];" : "=l"(bits) : "l"(p) : "memory")
    EPJIT_PTX_ORDERS(kOrder, S, EPJIT_LOAD)
#undef EPJIT_LOAD
    return __builtin_bit_cast(T, bits);
  }
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE void store(T* p, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "scoped stores of 32- and 64-bit words");
  constexpr Order kOrder = O == Order::Relaxed ? Order::Relaxed : Order::Release;
  if constexpr (sizeof(T) == 4) {
    const unsigned int bits = __builtin_bit_cast(unsigned int, value);
#define EPJIT_STORE(SEM, SCOPE) asm volatile("st." SEM "." SCOPE ".b32 [%0], %1;" ::"l"(p), "r"(bits) : "memory")
    EPJIT_PTX_ORDERS(kOrder, S, EPJIT_STORE)
#undef EPJIT_STORE
  } else {
    const unsigned long long bits = __builtin_bit_cast(unsigned long long, value);
#define EPJIT_STORE(SEM, SCOPE) asm volatile("st." SEM "." SCOPE ".b64 [%0], %1;" ::"l"(p), "l"(bits) : "memory")
    EPJIT_PTX_ORDERS(kOrder, S, EPJIT_STORE)
#undef EPJIT_STORE
  }
}

// Read-modify-writes at a scope and order: OP is add, max or exch.
#define EPJIT_DEFINE_ATOM(NAME, OP32, OP64)                                                                     \
  template <Scope S, Order O, typename T>                                                                      \
  EPJIT_DEVICE T NAME(T* p, T value) {                                                                         \
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 32- and 64-bit words");                        \
    if constexpr (sizeof(T) == 4) {                                                                            \
      int old;                                                                                                 \
      const int v = __builtin_bit_cast(int, value);                                                            \
      EPJIT_PTX_ORDERS(O, S, EPJIT_ATOM32_##NAME)                                                              \
      return __builtin_bit_cast(T, old);                                                                       \
    } else {                                                                                                   \
      long long old;                                                                                           \
      const long long v = __builtin_bit_cast(long long, value);                                                \
      EPJIT_PTX_ORDERS(O, S, EPJIT_ATOM64_##NAME)                                                              \
      return __builtin_bit_cast(T, old);                                                                       \
    }                                                                                                          \
  }
#define EPJIT_ATOM32_atom_add(SEM, SCOPE) \
  asm volatile("atom." SEM "." SCOPE ".add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory")
#define EPJIT_ATOM64_atom_add(SEM, SCOPE) \
  asm volatile("atom." SEM "." SCOPE ".add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory")
#define EPJIT_ATOM32_atom_max(SEM, SCOPE) \
  asm volatile("atom." SEM "." SCOPE ".max.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory")
#define EPJIT_ATOM64_atom_max(SEM, SCOPE) \
  asm volatile("atom." SEM "." SCOPE ".max.s64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory")
#define EPJIT_ATOM32_atom_exch(SEM, SCOPE) \
  asm volatile("atom." SEM "." SCOPE ".exch.b32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory")
#define EPJIT_ATOM64_atom_exch(SEM, SCOPE) \
  asm volatile("atom." SEM "." SCOPE ".exch.b64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory")
EPJIT_DEFINE_ATOM(atom_add, add, add)
EPJIT_DEFINE_ATOM(atom_max, max, max)
EPJIT_DEFINE_ATOM(atom_exch, exch, exch)

template <typename T>
EPJIT_DEVICE T broadcast_lane0(T value) {
  if constexpr (sizeof(T) == 8) {
    return static_cast<T>(__shfl_sync(kFullMask, static_cast<long long>(value), 0));
  } else {
    return static_cast<T>(__shfl_sync(kFullMask, static_cast<int>(value), 0));
  }
}

}  // namespace nvptx

namespace nvptx {
// Lane 0 performs the one atomic; every lane gets its result.
template <typename T, typename Atomic>
EPJIT_DEVICE T on_lane0(Atomic atomic) {
  T old = 0;
  if (lane_id() == 0) old = atomic();
  return broadcast_lane0(old);
}
}  // namespace nvptx

// NVRTC compiles no unannotated lambdas: the atomics are function objects.
namespace nvptx {
template <Scope S, Order O, typename T>
struct Add {
  T* p;
  T v;
  EPJIT_DEVICE T operator()() const { return atom_add<S, O>(p, v); }
};
template <Scope S, Order O, typename T>
struct Max {
  T* p;
  T v;
  EPJIT_DEVICE T operator()() const { return atom_max<S, O>(p, v); }
};
template <Scope S, Order O, typename T>
struct Exchange {
  T* p;
  T v;
  EPJIT_DEVICE T operator()() const { return atom_exch<S, O>(p, v); }
};
}  // namespace nvptx

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_add(T* address, T value) {
  return nvptx::on_lane0<T>(nvptx::Add<S, O, T>{address, value});
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_max(T* address, T value) {
  return nvptx::on_lane0<T>(nvptx::Max<S, O, T>{address, value});
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T warp_atomic_exchange(T* address, T value) {
  return nvptx::on_lane0<T>(nvptx::Exchange<S, O, T>{address, value});
}

// A warp-uniform load (ep.load): every lane reads the same element.
template <typename T>
EPJIT_DEVICE T warp_load(const T* address) {
  return *address;
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE T atomic_load(T* address) {
  return nvptx::load<S, O>(address);
}

// ep.prefetch: the line into L1, issued by one lane (every lane names it).
template <typename T>
EPJIT_DEVICE void warp_prefetch(const T* address) {
  if (lane_id() == 0) asm volatile("prefetch.global.L1 [%0];" ::"l"(__cvta_generic_to_global(address)));
}

template <Scope S, Order O, typename T>
EPJIT_DEVICE void warp_atomic_store(T* address, T value) {
  if (lane_id() == 0) nvptx::store<S, O>(address, value);
}

namespace nvptx {
// What lane_wait_until needs: %globaltimer counts nanoseconds on every GPU
// since Volta (updated about every microsecond).
struct WaitClock {
  template <Scope S, typename T>
  static EPJIT_DEVICE T load_acquire(T* flag) { return nvptx::load<S, Order::Acquire>(flag); }
  static EPJIT_DEVICE int32_t load_error(int32_t* error) { return nvptx::load<Scope::System, Order::Relaxed>(error); }
  static EPJIT_DEVICE void store_error(int32_t* error, int32_t code) {
    if (load_error(error) != code) nvptx::store<Scope::System, Order::Release>(error, code);
  }
  static EPJIT_DEVICE uint64_t now_ns() {
    uint64_t ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
  }
  static EPJIT_DEVICE void pause(unsigned) { __nanosleep(32); }
};
}  // namespace nvptx

EPJIT_DEVICE void block_barrier() { __syncthreads(); }
// ep.block_any: the barrier's own vote (bar.red.or), no shared memory.
EPJIT_DEVICE bool block_any(bool predicate) { return __syncthreads_or(predicate) != 0; }
// Lanes are scheduled independently: __syncwarp() orders each lane's
// writes before the others' later reads.
EPJIT_DEVICE void warp_barrier() { __syncwarp(kFullMask); }

}  // namespace epjit

namespace epjit {

// Flagged rows' lines (common/flagged.h): one 16-byte volatile access each,
// whose 8-byte halves NVLink and the L2 deliver whole (NCCL's LL protocol
// relies on the same). The load has no memory clobber: a lane issues all of
// its lines before it looks at the first.
EPJIT_DEVICE Vec16 load_line(const Vec16* line) {
  Vec16 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(__cvta_generic_to_global(line)));
  return v;
}
EPJIT_DEVICE void store_line(Vec16* line, const Vec16& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(line)),
               "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
               : "memory");
}
// What common/simt.h and common/flagged.h build on.
using WaitClock = nvptx::WaitClock;
template <typename T>
EPJIT_DEVICE T broadcast_first_lane(T value) {
  return __shfl_sync(kFullMask, value, 0);
}

}  // namespace epjit

#include "epjit/targets/common/flagged.h"
#include "epjit/targets/common/simt.h"
