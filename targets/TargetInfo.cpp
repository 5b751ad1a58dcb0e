#include "epjit/targets/TargetInfo.h"

#include <array>

namespace epjit {
namespace {

constexpr int64_t KiB = 1024;
// AMD's realtime counter (s_memrealtime, __builtin_readsteadycounter): 100 MHz
// on every CDNA and RDNA part.
constexpr uint64_t kAmdRealtimeCounterHz = 100'000'000;

// Tuning tables: small batches want few blocks (latency), large ones fill the
// GPU; wave64 targets carry twice the lanes per warp, so half the warps.
constexpr ScheduleRow kWave64Schedule[] = {{128, 32, 8, 32, 8}, {1024, 64, 8, 64, 8}, {0, 128, 8, 128, 8}};
constexpr ScheduleRow kWave32Schedule[] = {{128, 32, 16, 32, 16}, {1024, 64, 16, 64, 16}, {0, 128, 16, 128, 16}};
// sm90, from a sweep on 2 x H200 (EP2, hidden 7168, top-8; docs/PERFORMANCE.md):
// a block per SM at every size (fewer blocks were slower from 128 tokens on,
// by up to 3.6x at 8192 with 16 blocks); 8-warp dispatch blocks for small
// calls (18.0 vs 18.6 us at 128 tokens), 16 warps otherwise. A one-token call
// took 13.5-13.9 us at every geometry tried. Up to 32 tokens, 256 dispatch
// blocks of 4 warps: a block per top-k entry at top-8 (a tiny dispatch: the
// row split over the block's warps, loaded across the slot atomic), which on
// 1 x H200 (EP1, ncu) took 32 tokens from 7.27 to 6.40 us and left 16 tokens
// at 6.3 (264 blocks of 8 warps: 7.00 at 32, 6.8 at 16); 4 warps still load
// a 14336-byte row in one round.
constexpr ScheduleRow kSm90Schedule[] = {{32, 256, 4, 128, 16}, {128, 128, 8, 128, 16}, {0, 128, 16, 128, 16}};
// sm100 (B200: 148 SMs, 227 KiB of shared memory per block): sm90's block
// counts, but no block of more than 8 warps. One binary serves every row, its
// launch bounds set by the largest block, and ptxas 13.0 plans the combines
// for sm_100a at 158 (gather) to 197 (scatter with fp8 quant) registers: in
// 16-warp blocks (128 registers a thread) they spilled 116 and 260 bytes to
// local memory. Large dispatches take twice the 8-warp blocks instead (two
// per SM at 114 registers). Unmeasured on a Blackwell.
constexpr ScheduleRow kSm100Schedule[] = {{32, 256, 4, 128, 8}, {128, 128, 8, 128, 8}, {0, 256, 8, 128, 8}};
// The host runs a warp per CPU thread: a few of them per rank.
constexpr ScheduleRow kHostSchedule[] = {{64, 1, 4, 1, 4}, {0, 2, 4, 2, 4}};

// LDS is what one block may allocate: 64 KiB on gfx942 and gfx1200, 160 KiB
// on gfx950, 320 KiB on gfx1250, 227 KiB of shared memory per block on sm90
// and sm100.
constexpr TargetInfo kGfx942{
    .name = "gfx942",
    .arch = "gfx942",
    .prelude = "epjit/targets/amdgcn/prelude.h",
    .vendor = Vendor::Amd,
    .lanes = LaneExecution::Simt,
    .wave_size = 64,
    .fp8_e4m3 = Fp8Format::E4M3FNUZ,
    .fp8_e5m2 = Fp8Format::E5M2FNUZ,
    .fp8_conversion = Fp8Conversion::AmdgcnPk,
    .fp4 = Fp4Support::None,
    .lds_bytes = 64 * KiB,
    .copy_loads_in_flight = 4,
    .toolchain = DefaultToolchain::HipRtcOrClang,
    .numerics_of = "gfx942",
    .steady_counter_hz = kAmdRealtimeCounterHz,
    .schedule = kWave64Schedule,
};

constexpr TargetInfo kGfx950{
    .name = "gfx950",
    .arch = "gfx950",
    .prelude = "epjit/targets/amdgcn/prelude.h",
    .vendor = Vendor::Amd,
    .lanes = LaneExecution::Simt,
    .wave_size = 64,
    .fp8_conversion = Fp8Conversion::AmdgcnPk,
    .fp4 = Fp4Support::Pack2,
    .lds_bytes = 160 * KiB,
    .copy_loads_in_flight = 4,
    .toolchain = DefaultToolchain::HipRtcOrClang,
    .numerics_of = "gfx950",
    .steady_counter_hz = kAmdRealtimeCounterHz,
    .schedule = kWave64Schedule,
};

constexpr TargetInfo kGfx1250{
    .name = "gfx1250",
    .arch = "gfx1250",
    .prelude = "epjit/targets/amdgcn/prelude.h",
    .vendor = Vendor::Amd,
    .lanes = LaneExecution::Simt,
    .wave_size = 32,
    .fp8_conversion = Fp8Conversion::AmdgcnPk,
    .fp4 = Fp4Support::Pack8,
    .lds_bytes = 320 * KiB,
    .copy_loads_in_flight = 4,
    .toolchain = DefaultToolchain::HipRtcOrClang,
    .numerics_of = "gfx1250",
    .steady_counter_hz = kAmdRealtimeCounterHz,
    .schedule = kWave32Schedule,
};

// RDNA4: wave32, OCP fp8 through v_cvt_pk_fp8_f32, no FP4 conversions.
constexpr TargetInfo kGfx1200{
    .name = "gfx1200",
    .arch = "gfx1200",
    .prelude = "epjit/targets/amdgcn/prelude.h",
    .vendor = Vendor::Amd,
    .lanes = LaneExecution::Simt,
    .wave_size = 32,
    .fp8_conversion = Fp8Conversion::AmdgcnPk,
    .fp4 = Fp4Support::None,
    .lds_bytes = 64 * KiB,
    .copy_loads_in_flight = 4,
    .toolchain = DefaultToolchain::HipRtcOrClang,
    .numerics_of = "gfx1200",
    .steady_counter_hz = kAmdRealtimeCounterHz,
    .schedule = kWave32Schedule,
};

constexpr TargetInfo kSm90{
    .name = "sm90",
    .arch = "sm_90",
    .prelude = "epjit/targets/sm90/prelude.h",
    .vendor = Vendor::Nvidia,
    .lanes = LaneExecution::Simt,
    .wave_size = 32,
    .fp8_conversion = Fp8Conversion::PtxSatfinite,
    // No FP4 instructions: the numerics.h codec, the same bits as every target.
    .fp4 = Fp4Support::Software,
    .lds_bytes = 227 * KiB,
    .copy_loads_in_flight = 8,
    .dependent_launch = true,
    .toolchain = DefaultToolchain::Nvrtc,
    .numerics_of = "sm90",
    .cuda_capability = 90,
    .schedule = kSm90Schedule,
};

// Blackwell (B200/GB200). sm_100a, not sm_100: the FP4 conversions are
// architecture-specific instructions, so its cubins run on compute
// capability 10.0 alone. Loads in flight and dependent launch as on sm90
// (unmeasured on Blackwell).
constexpr TargetInfo kSm100{
    .name = "sm100",
    .arch = "sm_100a",
    .prelude = "epjit/targets/sm100/prelude.h",
    .vendor = Vendor::Nvidia,
    .lanes = LaneExecution::Simt,
    .wave_size = 32,
    .fp8_conversion = Fp8Conversion::PtxSatfinite,
    .fp4 = Fp4Support::PtxPair,
    .lds_bytes = 227 * KiB,
    .copy_loads_in_flight = 8,
    .dependent_launch = true,
    .toolchain = DefaultToolchain::Nvrtc,
    .numerics_of = "sm100",
    .cuda_capability = 100,
    .schedule = kSm100Schedule,
};

constexpr TargetInfo kHost{
    .name = "host",
    .arch = "native",
    .prelude = "epjit/targets/host/prelude.h",
    .vendor = Vendor::Cpu,
    .lanes = LaneExecution::Lanes,
    .wave_size = 32,
    .fp8_conversion = Fp8Conversion::Software,
    .fp4 = Fp4Support::Software,
    .lds_bytes = 1024 * 1024 * KiB,
    // As sm90: the host runs the unrolled copies and sums the GPUs run.
    .copy_loads_in_flight = 8,
    .toolchain = DefaultToolchain::HostCxx,
    .numerics_of = "host",
    .schedule = kHostSchedule,
};

// A host target carrying a GPU's numerics: the host's execution with the
// GPU's wave width and fp8 formats, and FP4 in software where the GPU has it.
constexpr TargetInfo host_variant_of(const TargetInfo& gpu, std::string_view name) {
  TargetInfo host = kHost;
  host.name = name;
  host.wave_size = gpu.wave_size;
  host.fp8_e4m3 = gpu.fp8_e4m3;
  host.fp8_e5m2 = gpu.fp8_e5m2;
  host.fp4 = gpu.has_fp4() ? Fp4Support::Software : Fp4Support::None;
  host.numerics_of = gpu.name;
  host.copy_loads_in_flight = gpu.copy_loads_in_flight;
  return host;
}

constexpr std::array kTargets = {
    kGfx942,
    kGfx950,
    kGfx1250,
    kGfx1200,
    kSm90,
    kSm100,
    kHost,
    host_variant_of(kGfx942, "host-gfx942"),
    host_variant_of(kGfx950, "host-gfx950"),
    host_variant_of(kGfx1250, "host-gfx1250"),
    host_variant_of(kSm100, "host-sm100"),
};

std::string opt_flag(const char* prefix, int opt_level) {
  return prefix + std::to_string(opt_level < 0 ? 0 : opt_level > 3 ? 3 : opt_level);
}

}  // namespace

std::string_view TargetInfo::vendor_name() const { return epjit::vendor_name(vendor); }

std::string_view vendor_name(Vendor vendor) {
  switch (vendor) {
    case Vendor::Amd: return "amd";
    case Vendor::Nvidia: return "nvidia";
    case Vendor::Cpu: return "cpu";
  }
  return "cpu";
}

std::string_view TargetInfo::source_extension() const {
  switch (vendor) {
    case Vendor::Amd: return ".hip";
    case Vendor::Nvidia: return ".cu";
    case Vendor::Cpu: return ".cpp";
  }
  return ".cpp";
}

std::string_view TargetInfo::binary_extension() const {
  switch (vendor) {
    case Vendor::Amd: return ".co";
    case Vendor::Nvidia: return ".cubin";
    case Vendor::Cpu: return ".so";
  }
  return ".bin";
}

std::vector<PreludeDefine> TargetInfo::prelude_defines() const {
  std::vector<PreludeDefine> defines{{"EPJIT_WAVE_SIZE", std::to_string(wave_size)}};
  if (steady_counter_hz) defines.push_back({"EPJIT_STEADY_COUNTER_HZ", std::to_string(steady_counter_hz) + "ull"});
  if (fp4 == Fp4Support::Pack2) defines.push_back({"EPJIT_FP4_PACK", "2"});
  if (fp4 == Fp4Support::Pack8) defines.push_back({"EPJIT_FP4_PACK", "8"});
  return defines;
}

std::vector<std::string> TargetInfo::kernel_specifiers(int64_t threads) const {
  if (is_host()) return {};
  // NVIDIA: one resident block per SM is what the kernels are launched for;
  // without saying so ptxas budgets registers for two (64 at 512 threads)
  // and spills. AMD's second bound means waves per EU, so it is left out.
  if (is_nvidia()) return {"__global__", "__launch_bounds__(" + std::to_string(threads) + ", 1)"};
  return {"__global__", "__launch_bounds__(" + std::to_string(threads) + ")"};
}

std::span<const TargetInfo> all_targets() { return kTargets; }

const TargetInfo* find_target(std::string_view name) {
  for (const TargetInfo& target : kTargets) {
    if (target.name == name) return &target;
  }
  return nullptr;
}

std::string target_names() {
  return target_names_where([](const TargetInfo&) { return true; });
}

const TargetInfo* target_for_cuda_capability(int major, int minor) {
  for (const TargetInfo& target : kTargets)
    if (target.is_nvidia() && target.cuda_capability == major * 10 + minor) return &target;
  return nullptr;
}

const TargetInfo* target_for_amd_arch(std::string_view gcn_arch_name) {
  const std::string_view processor = gcn_arch_name.substr(0, gcn_arch_name.find(':'));
  for (const TargetInfo& target : kTargets)
    if (target.is_amd() && target.arch == processor) return &target;
  return nullptr;
}

std::string device_targets_of(Vendor vendor) {
  std::string names;
  for (const TargetInfo& target : kTargets) {
    if (target.vendor != vendor) continue;
    if (!names.empty()) names += ", ";
    names += target.name;
    if (target.is_nvidia())
      names += " (compute capability " + std::to_string(target.cuda_capability / 10) + "." +
               std::to_string(target.cuda_capability % 10) + ")";
  }
  return names;
}

std::vector<std::string> compile_flags(const TargetInfo& target, Compiler compiler, int opt_level) {
  const std::string arch(target.arch);
  switch (compiler) {
    case Compiler::Clang:
      return {"-x", "hip", "-std=c++20", "--offload-arch=" + arch, "-nogpuinc", "-nogpulib", "--cuda-device-only",
              "--no-gpu-bundle-output", opt_flag("-O", opt_level)};
    case Compiler::HipRtc: return {"--gpu-architecture=" + arch, "-std=c++20", opt_flag("-O", opt_level)};
    case Compiler::Nvrtc: return {"--gpu-architecture=" + arch, "-std=c++20", opt_flag("-Xptxas=-O", opt_level)};
    case Compiler::Nvcc:
      return {"-x", "cu", "--gpu-architecture=" + arch, "-std=c++20", opt_flag("-Xptxas=-O", opt_level)};
    case Compiler::HostCxx: return {"-x", "c++", "-std=c++20", opt_flag("-O", opt_level), "-fPIC", "-shared"};
  }
  return {};
}

}  // namespace epjit
