// TargetInfo: every per-target fact, in one table, and every question about
// targets answered from it: which target a device is, which compiler flags
// build for it, which geometry a call uses, what it can convert. Passes, the
// runtime and the tools ask it; nothing else compares target names.
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
  None,      // no conversion instructions (gfx942, gfx1200) and no emulation
  Pack2,     // gfx950 v_cvt_scalef32_pk_fp4_f32: two values per instruction
  Pack8,     // gfx1250 v_cvt_scalef32_pk8_fp4_f32: eight values per instruction
  PtxPair,   // sm100a cvt.rn.satfinite.e2m1x2.f32 / cvt.rn.f16x2.e2m1x2: two values per instruction
  Software,  // numerics.h codec (host targets, and sm90, which has no FP4 instructions)
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

// "amd", "nvidia", "cpu".
std::string_view vendor_name(Vendor vendor);

// The compilers that build generated source; compile_flags() gives each one's flags.
enum class Compiler : uint8_t {
  Clang,    // clang++ -x hip for AMD code objects (the runtime's fallback, the offline tools)
  HipRtc,   // hipRTC, in process
  Nvrtc,    // NVRTC, in process
  Nvcc,     // nvcc, for the offline tools' PTX and ptxas resource report
  HostCxx,  // the host C++ compiler: a shared object
};

// One geometry variant of a target's tuning table: used for calls of at most
// max_tokens tokens (0: any larger call; the last row).
struct ScheduleRow {
  int64_t max_tokens = 0;
  int dispatch_blocks = 0;
  int dispatch_warps = 0;
  int combine_blocks = 0;
  int combine_warps = 0;
};

// Token counts where the runtime switches between two ways of doing a call
// that give the same bits. Measured on H200 (sm90); every other target takes
// the same values until its GPU is measured.
struct Crossovers {
  // Auto's low-latency combine serves ops of at most this many tokens per
  // rank and call. A flagged line carries 8 data bytes in 16, so it trades
  // twice the bytes on the link for the round trip of a pull after a meeting
  // (about 1.5 us on H200 NVLink); at 32 tokens the doubled bytes of
  // DeepSeek-V3's rows cost about as much (1.3 us at 350 GB/s).
  int64_t low_latency_combine_max_tokens = 32;
  // A kept call (MORI's return_routing) of at most this many tokens has its
  // origins copied by the dispatch kernel's last block, a larger one by a
  // copy after it. What keeping added on 1 x H200 at capacity 8192:
  //   tokens                1-128   512      1024     2048     8192
  //   the block             1.8-3.3 0.9-1.1  1.3-1.4  1.5-1.6  1.9-2.4 us
  //   a copy after it       4.0-7.3 1.7-7.4  2.2-2.5  0.9-1.4  0.7-1.1 us
  // A small call's GPU waits for the copy's launch; by 2048 tokens the host
  // is ahead and the copy engine beats one block.
  int64_t kernel_kept_origins_max_tokens = 1024;
};

// A macro the emitted code defines before it includes the target's prelude.
struct PreludeDefine {
  std::string_view name;
  std::string value;
};

struct TargetInfo {
  std::string_view name;         // "gfx950", "host-gfx950"
  std::string_view arch;         // what the toolchain is told: "gfx950", "sm_90", "native"
  std::string_view prelude;      // the header emitted code includes
  Vendor vendor = Vendor::Cpu;
  LaneExecution lanes = LaneExecution::Lanes;
  int wave_size = 32;
  Fp8Format fp8_e4m3 = Fp8Format::E4M3FN;  // "the target's fp8"
  Fp8Format fp8_e5m2 = Fp8Format::E5M2;
  Fp8Conversion fp8_conversion = Fp8Conversion::Software;
  Fp4Support fp4 = Fp4Support::None;
  int64_t lds_bytes = 0;               // shared memory per block available to a kernel
  int vector_bytes = 16;               // widest per-lane global load/store
  // 16-byte loads a lane issues before its first store when it copies a row:
  // what keeps dispatch's token copies from waiting out each load's latency
  // (sm90: 8, measured on H200 against 4; AMD: 4, a wave64 step moves twice
  // the bytes, unmeasured).
  int copy_loads_in_flight = 1;
  // Programmatic dependent launch: a kernel may be launched while the one
  // before it on the stream still runs, and waits at its entry for that one
  // to finish and flush (sm90: griddepcontrol.wait, launched with
  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION). What it hides is
  // the launch and block scheduling of the next kernel. AMD has no such
  // launch; the host runs launches in order on one thread.
  bool dependent_launch = false;
  DefaultToolchain toolchain = DefaultToolchain::HostCxx;
  std::string_view numerics_of;        // the hardware whose numerics this target carries
  int cuda_capability = 0;             // NVIDIA: major * 10 + minor of the GPUs it runs on
  // Ticks per second of the counter a bounded wait reads (AMD's realtime
  // counter, 100 MHz on every CDNA and RDNA part); 0 where the prelude reads
  // nanoseconds directly (NVIDIA's globaltimer, the host's steady_clock).
  uint64_t steady_counter_hz = 0;
  std::span<const ScheduleRow> schedule;  // geometry by token count, smallest bound first
  Crossovers crossovers;

  // ------------------------------------------------ capability predicates
  constexpr bool is_host() const { return vendor == Vendor::Cpu; }
  constexpr bool is_amd() const { return vendor == Vendor::Amd; }
  constexpr bool is_nvidia() const { return vendor == Vendor::Nvidia; }
  constexpr bool is_simt() const { return lanes == LaneExecution::Simt; }
  // Any FP4 (E2M1) conversion, in hardware or the numerics.h codec.
  constexpr bool has_fp4() const { return fp4 != Fp4Support::None; }
  constexpr bool converts_fp4_in_hardware() const {
    return fp4 == Fp4Support::Pack2 || fp4 == Fp4Support::Pack8 || fp4 == Fp4Support::PtxPair;
  }
  // True when the target's hardware converts `format` (false for host
  // targets, which convert everything in software).
  constexpr bool converts_fp8_in_hardware(Fp8Format format) const {
    return fp8_conversion != Fp8Conversion::Software && (fp8_e4m3 == format || fp8_e5m2 == format);
  }

  // ------------------------------------------------ files and kernels
  std::string_view vendor_name() const;      // "amd", "nvidia", "cpu"
  std::string_view source_extension() const;  // ".hip", ".cu", ".cpp"
  std::string_view binary_extension() const;  // ".co", ".cubin", ".so"
  // How a kernel is declared after extern "C": the GPU qualifier and launch
  // bounds for a block of `threads`; nothing on the host.
  std::vector<std::string> kernel_specifiers(int64_t threads) const;
  // The target's facts the prelude reads, in the order emitted: EPJIT_WAVE_SIZE
  // always, EPJIT_STEADY_COUNTER_HZ where the wait clock counts ticks,
  // EPJIT_FP4_PACK (2 or 8) where FP4 converts in hardware.
  std::vector<PreludeDefine> prelude_defines() const;
};

// Every target, in a fixed order (AMD, NVIDIA, host variants).
std::span<const TargetInfo> all_targets();

// The target named `name`, or nullptr.
const TargetInfo* find_target(std::string_view name);

// "gfx942, gfx950, gfx1250, gfx1200, sm90, sm100, host, host-gfx942, host-gfx950,
// host-gfx1250, host-sm100"
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

// ------------------------------------------------ from a device to a target

// The target of an NVIDIA GPU of compute capability major.minor, or nullptr.
const TargetInfo* target_for_cuda_capability(int major, int minor);

// The target of an AMD GPU from HIP's gcnArchName ("gfx942:sramecc+:xnack-";
// the feature suffixes do not change the target), or nullptr.
const TargetInfo* target_for_amd_arch(std::string_view gcn_arch_name);

// "sm90 (compute capability 9.0)" or "gfx942, gfx950, ...": what a device of
// `vendor` can be, for the message that refuses one that matches nothing.
std::string device_targets_of(Vendor vendor);

// ------------------------------------------------ compilers

// The flags `compiler` builds generated source for `target` with at
// `opt_level` (0-3), without include directories, inputs and outputs. The
// runtime's toolchains and the offline tools both use these.
std::vector<std::string> compile_flags(const TargetInfo& target, Compiler compiler, int opt_level);

}  // namespace epjit
