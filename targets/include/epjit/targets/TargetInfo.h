// TargetInfo: every per-target fact, in one table. Passes, the runtime and the
// tools ask it questions; nothing else compares target names.
//
// Plain C++ with no exceptions and no LLVM/MLIR, so the compiler half (built
// with LLVM's flags) and the runtime link the same table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epjit/numerics.h"

namespace epjit {

enum class Vendor : uint8_t { Amd, Nvidia, Cpu };

// How a warp's lane work is lowered: SIMT (each lane takes its slice) on GPUs,
// lane loops on the host (a warp is one CPU thread).
enum class LaneExecution : uint8_t { Simt, Lanes };

// How FP4 (E2M1) conversions are done.
enum class Fp4Support : uint8_t {
  None,      // no conversion instructions (gfx942) and no emulation
  Pack2,     // gfx950 v_cvt_scalef32_pk_fp4_f32: two values per instruction
  Pack8,     // gfx1250 v_cvt_scalef32_pk8_fp4_f32: eight values per instruction
  Software,  // numerics.h codec (host targets that carry such numerics)
};

// How FP8 conversions are done.
enum class Fp8Conversion : uint8_t {
  AmdgcnPk,      // v_cvt_pk_fp8_f32 with an explicit fmed3 clamp
  PtxSatfinite,  // cvt.rn.satfinite.e4m3x2.f32 / e5m2x2
  Software,      // numerics.h codec
};

enum class DefaultToolchain : uint8_t {
  HipRtcOrClang,  // AMD: hipRTC when it loads and knows the arch, else clang
  Nvrtc,          // NVIDIA: NVRTC (cubin)
  HostCxx,        // CPU: the host C++ compiler (shared object)
};

struct TargetInfo {
  std::string_view name;       // "gfx950", "host-gfx950"
  std::string_view arch;       // what the toolchain is told: "gfx950", "sm_90", "native"
  std::string_view prelude;    // the header emitted code includes
  Vendor vendor;
  LaneExecution lanes;
  int wave_size;
  Fp8Format fp8_e4m3;          // "the target's fp8"
  Fp8Format fp8_e5m2;
  Fp8Conversion fp8_conversion;
  Fp4Support fp4;
  bool fp4_software_fallback;  // a template may ask for the numerics.h codec instead
  int64_t lds_bytes;           // shared memory per block available to a kernel
  int vector_bytes;            // widest per-lane global load/store
  DefaultToolchain toolchain;
  std::string_view numerics_of;  // the hardware whose numerics this target carries

  bool has_fp4() const { return fp4 != Fp4Support::None; }
  // How a kernel is declared after extern "C": the GPU qualifier and launch
  // bounds for a block of `threads`; nothing on the host.
  std::vector<std::string> kernel_specifiers(int64_t threads) const {
    if (vendor == Vendor::Cpu) return {};
    return {"__global__", "__launch_bounds__(" + std::to_string(threads) + ")"};
  }
  bool is_host() const { return vendor == Vendor::Cpu; }
};

// Every target, in a fixed order (AMD, NVIDIA, host variants).
std::span<const TargetInfo> all_targets();

// The target named `name`, or nullptr.
const TargetInfo* find_target(std::string_view name);

// "gfx942, gfx950, gfx1250, sm90, host, host-gfx942, host-gfx950, host-gfx1250"
std::string target_names();

// Names of the targets for which `has(target)` holds, comma-separated, e.g.
// the targets with hardware FP4 conversions for a diagnostic.
template <typename Predicate>
std::string target_names_where(Predicate has) {
  std::string names;
  for (const TargetInfo& target : all_targets()) {
    if (!has(target)) continue;
    if (!names.empty()) names += ", ";
    names += target.name;
  }
  return names;
}

}  // namespace epjit
