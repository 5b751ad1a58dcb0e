// The host target's prelude: generated kernels run on the CPU. A warp is one
// CPU thread; lane work was lowered to loops of the carried target's wave
// width (ep-lower-warp-ops, lanes mode), so nothing here is per lane. The
// launcher calls NAME__epjit_host_entry(args, warp) once per warp, on the
// thread that runs that warp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include "epjit/targets/common/chunks.h"

namespace epjit {

namespace host {

// Where the calling warp is. The launcher owns the block barrier: every warp
// of a block calls arrive_and_wait(barrier) at an ep.block_barrier, and the
// block's vote word (ep.block_any), which the warps touch only between
// barriers. New members go last: a kernel built against an older prelude
// reads only the ones before them.
struct WarpContext {
  uint32_t block;
  uint32_t blocks;
  uint32_t warp;
  uint32_t warps_per_block;
  void* barrier;
  void (*arrive_and_wait)(void* barrier);
  int32_t* block_vote;
};

inline thread_local WarpContext current_warp{};

inline void enter(const WarpContext* warp) { current_warp = *warp; }

// Argument i of a launch, from the array of pointers to argument values.
template <typename T>
inline T arg(void** args, int index) {
  std::remove_const_t<T> value;
  std::memcpy(&value, args[index], sizeof(T));
  return value;
}

constexpr std::memory_order memory_order(Order order) {
  switch (order) {
    case Order::Relaxed: return std::memory_order_relaxed;
    case Order::Acquire: return std::memory_order_acquire;
    case Order::Release: return std::memory_order_release;
    case Order::AcqRel: return std::memory_order_acq_rel;
  }
  return std::memory_order_seq_cst;
}

// ThreadSanitizer does not model std::atomic_thread_fence, so a release
// fence before a relaxed flag store (and a relaxed load before an acquire
// fence) orders nothing it can see, and it reports the data they publish as
// raced. Built with it (the sanitizer runs of the e2e tests), every atomic
// access takes the strongest order of its kind instead: what a fence pairs
// with then carries the ordering itself. That only adds ordering (the same
// results), and data that no atomic publishes is still reported.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kFencesInvisible = true;
#else
inline constexpr bool kFencesInvisible = false;
#endif
constexpr std::memory_order load_order(Order order) {
  return kFencesInvisible ? std::memory_order_acquire : memory_order(order);
}
constexpr std::memory_order store_order(Order order) {
  return kFencesInvisible ? std::memory_order_release : memory_order(order);
}
constexpr std::memory_order rmw_order(Order order) {
  return kFencesInvisible ? std::memory_order_acq_rel : memory_order(order);
}

}  // namespace host

inline size_t warp_index() { return host::current_warp.warp; }
inline size_t block_index() { return host::current_warp.block; }
inline size_t block_count() { return host::current_warp.blocks; }
inline size_t global_warp_index() {
  return size_t(host::current_warp.block) * host::current_warp.warps_per_block + host::current_warp.warp;
}
inline size_t global_warp_count() {
  return size_t(host::current_warp.blocks) * host::current_warp.warps_per_block;
}

inline void block_barrier() {
  if (host::current_warp.arrive_and_wait) host::current_warp.arrive_and_wait(host::current_warp.barrier);
}

// ep.block_any, as on AMD: warp 0 clears the block's word once every warp
// has read the previous vote, the voters set it, and all read it after the
// third barrier (std::barrier orders each phase's writes before the next).
inline bool block_any(bool predicate) {
  const host::WarpContext& warp = host::current_warp;
  std::atomic_ref<int32_t> vote(*warp.block_vote);
  block_barrier();
  if (warp.warp == 0) vote.store(0, std::memory_order_relaxed);
  block_barrier();
  if (predicate) vote.store(1, std::memory_order_relaxed);
  block_barrier();
  return vote.load(std::memory_order_relaxed) != 0;
}

// A warp's lanes run one after another in its thread: nothing to wait for.
inline void warp_barrier() {}

// Scopes do not matter between CPU threads: every atomic is system-wide.
template <Scope S, Order O, typename T>
inline T warp_atomic_add(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value, host::rmw_order(O));
}

template <Scope S, Order O, typename T>
inline T warp_atomic_max(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (old < value && !ref.compare_exchange_weak(old, value, host::rmw_order(O), std::memory_order_relaxed)) {
  }
  return old;
}

template <Scope S, Order O, typename T>
inline T warp_atomic_exchange(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value, host::rmw_order(O));
}

// A warp-uniform load (ep.load): the warp is one thread.
template <typename T>
inline T warp_load(const T* address) {
  return *address;
}

// ep.prefetch: the compiler's hint (the warp is one thread).
template <typename T>
inline void warp_prefetch(const T* address) {
  __builtin_prefetch(address);
}

template <Scope S, Order O, typename T>
inline T atomic_load(T* address) {
  return std::atomic_ref<T>(*address).load(host::load_order(O));
}

template <Scope S, Order O, typename T>
inline void warp_atomic_store(T* address, T value) {
  std::atomic_ref<T>(*address).store(value, host::store_order(O));
}

template <Scope S, Order O>
inline void fence() {
  std::atomic_thread_fence(host::memory_order(O));
}

namespace host {
// What lane_wait_until needs: a warp is a CPU thread, so it yields now and
// then to let the warps it waits for run.
struct WaitClock {
  template <Scope, typename T>
  static T load_acquire(T* flag) { return std::atomic_ref<T>(*flag).load(std::memory_order_acquire); }
  static int32_t load_error(int32_t* error) { return std::atomic_ref<int32_t>(*error).load(std::memory_order_relaxed); }
  static void store_error(int32_t* error, int32_t code) {
    if (load_error(error) != code) std::atomic_ref<int32_t>(*error).store(code, std::memory_order_release);
  }
  static uint64_t now_ns() {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch()).count());
  }
  static void pause(unsigned poll) {
    if (poll % 64 == 0) std::this_thread::yield();
  }
};
}  // namespace host

template <Until U, Scope S, typename T>
inline bool warp_wait_until(T* flag, T value, int32_t* error, int32_t code, int32_t timeout_ms) {
  return lane_wait_until<host::WaitClock, U, S>(flag, value, error, code, timeout_ms);
}

// Flagged rows' lines (common/flagged.h): two 8-byte relaxed atomics each,
// so a line's data and its flag are one atomic object per half.
inline Vec16 load_line(const Vec16* line) {
  auto* half = reinterpret_cast<uint64_t*>(const_cast<Vec16*>(line));
  const uint64_t low = std::atomic_ref<uint64_t>(half[0]).load(std::memory_order_relaxed);
  const uint64_t high = std::atomic_ref<uint64_t>(half[1]).load(std::memory_order_relaxed);
  return Vec16{{uint32_t(low), uint32_t(low >> 32), uint32_t(high), uint32_t(high >> 32)}};
}
inline void store_line(Vec16* line, const Vec16& v) {
  auto* half = reinterpret_cast<uint64_t*>(line);
  std::atomic_ref<uint64_t>(half[0]).store(uint64_t(v.w[0]) | (uint64_t(v.w[1]) << 32), std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(half[1]).store(uint64_t(v.w[2]) | (uint64_t(v.w[3]) << 32), std::memory_order_relaxed);
}
using WaitClock = host::WaitClock;  // what common/flagged.h builds on

}  // namespace epjit

#include "epjit/targets/common/flagged.h"
