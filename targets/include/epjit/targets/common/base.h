// Shared by every target prelude: attributes, the enums emitted code names,
// the symmetric window, reductions and the scale rules (numerics.h).
#pragma once

#include "epjit/numerics.h"  // also the fixed-width types, under NVRTC too
#include "epjit/targets/common/window.h"

// Functions that run on the device only (GPU preludes) or on host and device.
#if defined(__NVCC__) || defined(__CUDACC_RTC__)
#define EPJIT_DEVICE __device__ __forceinline__
#elif defined(__HIP__) || defined(__CUDA__)
#define EPJIT_DEVICE __attribute__((device)) __attribute__((always_inline)) inline
#else
#define EPJIT_DEVICE inline
#endif
#define EPJIT_HD EPJIT_HOST_DEVICE inline
// A slow path kept out of line on NVIDIA, so its registers and code do not
// weigh on the fast path it branches from (a flagged line's wait: inlined
// at each of its 16 lines, ep_combine_low_latency spilled 578 bytes on
// sm90). AMD keeps it inline: a call there takes a scratch frame.
#if defined(__NVCC__) || defined(__CUDACC_RTC__)
#define EPJIT_HD_COLD EPJIT_HOST_DEVICE inline __noinline__
#elif defined(__AMDGCN__)
#define EPJIT_HD_COLD EPJIT_HD
#else
#define EPJIT_HD_COLD EPJIT_HOST_DEVICE inline __attribute__((noinline))
#endif

// How a kernel takes the window table: by value, so its reads hit the
// constant (NVIDIA: a __grid_constant__ parameter, whose address may be taken
// without a copy) or scalar (AMD: the kernarg segment) cache.
#if defined(__NVCC__) || defined(__CUDACC_RTC__)
#define EPJIT_WINDOW_PARAM const __grid_constant__ epjit::Window
#else
#define EPJIT_WINDOW_PARAM const epjit::Window
#endif

// One explicit fused multiply-add (NVRTC has no __builtin_fmaf).
#if defined(__NVCC__) || defined(__CUDACC_RTC__)
#define EPJIT_FMAF(a, b, c) __fmaf_rn(a, b, c)
#else
#define EPJIT_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#endif

namespace epjit {

// a * b rounded once, never fused with a following add: GPU compilers
// contract a * b + c across statements (NVRTC's --fmad, clang's HIP default),
// which would round differently from the host and the reference.
#if defined(__NVCC__) || defined(__CUDACC_RTC__)
EPJIT_DEVICE float mul_rn(float a, float b) { return __fmul_rn(a, b); }
#elif defined(__clang__)
EPJIT_HD float mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
#else
EPJIT_HD float mul_rn(float a, float b) { return a * b; }  // ISO C++ mode: GCC does not contract
#endif

enum class Scope : int { Workgroup, Agent, System };
enum class Order : int { Relaxed, Acquire, Release, AcqRel };
// AbsMaxNum: absmax with NaN ignored (fmaxf), DeepEP's amax.
enum class Reduce : int { Max, AbsMax, Sum, AbsMaxNum };
enum class Until : int { EQ, NE, GE };

template <Until U, typename T>
EPJIT_HD bool until_holds(T seen, T value) {
  return (U == Until::EQ && seen == value) || (U == Until::NE && seen != value) || (U == Until::GE && seen >= value);
}

// The one bounded wait every target runs on one lane (a GPU warp's lane 0, a
// host warp's thread). Clock supplies the target's primitives: acquire loads
// at a scope, a relaxed system-scope load and store of the error word, a
// steady clock in nanoseconds and a short pause. The clock and the error
// word are read every kPollsPerCheck polls: a wait gives up when
// `timeout_ms` has passed (storing `code` over whatever the word held: a
// data error there must not hide the failure that stops the op) or as soon
// as an earlier wait has failed the same way (the word holds `code`), so
// calls queued behind a failed one fail at once.
inline constexpr unsigned kWaitPollsPerCheck = 64;

template <typename Clock, Until U, Scope S, typename T>
EPJIT_HD bool lane_wait_until(T* flag, T value, int32_t* error, int32_t code, int32_t timeout_ms) {
  // Only a wait that failed the same way (`code`) ends this one at once: a
  // data error in the same word (a capacity overflow, a bad expert) leaves
  // the meetings intact, or a rank would leave a meeting its peers have not
  // reached and clear what they are still writing.
  if (Clock::load_error(error) == code) return false;
  const uint64_t limit_ns = uint64_t(timeout_ms < 1 ? 1 : timeout_ms) * 1000000ull;
  const uint64_t start_ns = Clock::now_ns();
  for (unsigned poll = 1;; ++poll) {
    if (until_holds<U>(Clock::template load_acquire<S>(flag), value)) return true;
    Clock::pause(poll);
    if (poll % kWaitPollsPerCheck != 0) continue;
    if (Clock::load_error(error) == code) return false;
    if (Clock::now_ns() - start_ns >= limit_ns) {
      Clock::store_error(error, code);
      return false;
    }
  }
}

// The kernel's window parameter, for the helpers that take a pointer.
EPJIT_HD const Window* window_address(const Window& window) { return &window; }

// ep.peer_ptr is warp-uniform: every lane names the same rank. On AMD the
// first lane's copy makes that known to the compiler (a rank computed with
// vector instructions, such as a 64-bit division, lives in a VGPR), so the
// window table is read with a scalar load, counted apart from the vector
// loads: a wait for the peer's address does not also wait for a row's loads
// in flight (vmcnt counts in order).
EPJIT_HD size_t uniform_rank(size_t rank) {
#if defined(__AMDGCN__)
  return __builtin_amdgcn_readfirstlane(uint32_t(rank));
#else
  return rank;
#endif
}

// ep.runtime_param: the kernel's window table is a by-value parameter, so
// this reads the constant cache.
template <int Index>
EPJIT_HD size_t runtime_param(const Window* window) {
  return size_t(window->runtime_param[Index]);
}

template <typename T, int Region>
EPJIT_HD T* peer_ptr(const Window* window, size_t rank, size_t offset) {
  return reinterpret_cast<T*>(window->peer_base[uniform_rank(rank)] + window->region_offset[Region]) + offset;
}

template <Reduce K>
EPJIT_HD float reduce_identity() {
  return K == Reduce::Max ? numerics_detail::float_of(0xFF800000u) : 0.0f;  // -inf, or 0
}

// Combines two partial reductions. max and absmax propagate NaN (a NaN
// anywhere makes the result NaN), like numerics.h's block_amax.
template <Reduce K>
EPJIT_HD float combine(float a, float b) {
  if constexpr (K == Reduce::Sum) {
    return a + b;
  } else if constexpr (K == Reduce::AbsMaxNum) {
    return b > a ? b : a;  // a NaN b compares false; `a` starts at 0 and never is NaN
  } else {
    return (b > a || numerics_detail::is_nan(b)) ? b : a;
  }
}

template <MxElement E>
EPJIT_HD int8_t mx_scale_byte(float amax) {
  return static_cast<int8_t>(mx_scale_from_amax(amax, E));
}

template <Fp8Format F>
EPJIT_HD float blockwise_scale(float amax) {
  return fp8_blockwise_scale_from_amax(amax, F);
}

// DeepEP's per-128 cast (numerics.h deepep_fp8_scale) from an AbsMaxNum
// amax, floored at 1e-4 as DeepEP starts its fmaxf from it.
EPJIT_HD DeepEpFp8Scale deepep_scale(float amax, bool round) {
  return deepep_fp8_scale(amax > 1e-4f ? amax : 1e-4f, round);
}
template <bool Round>
EPJIT_HD float deepep_scale_inv(float amax) {
  return deepep_scale(amax, Round).scale_inv;
}
template <bool Round>
EPJIT_HD float deepep_factor(float amax) {
  return deepep_scale(amax, Round).multiplier;
}
EPJIT_HD int8_t deepep_ue8m0_scale(float amax) { return static_cast<int8_t>(ue8m0_of(deepep_scale(amax, true).scale_inv)); }

// Row elements: bf16 rows are uint16_t bit patterns.
EPJIT_HD float load_value(const uint16_t* p, size_t i) { return decode_bf16(p[i]); }
EPJIT_HD float load_value(const float* p, size_t i) { return p[i]; }
EPJIT_HD void store_value(uint16_t* p, size_t i, float v) { p[i] = encode_bf16(v); }
EPJIT_HD void store_value(float* p, size_t i, float v) { p[i] = v; }

EPJIT_HD float e8m0_as_float(int8_t scale) { return decode_e8m0(static_cast<uint8_t>(scale)); }
EPJIT_HD bool e8m0_is_nan(int8_t scale) { return static_cast<uint8_t>(scale) == kE8M0NaN; }

}  // namespace epjit
