#include "epjit/targets/TargetInfo.h"

#include <array>

namespace epjit {
namespace {

constexpr int64_t KiB = 1024;

// The facts, one row per target. LDS is what one block may allocate: 64 KiB
// on gfx942, 160 KiB on gfx950, 320 KiB on gfx1250, 227 KiB of shared memory
// per block on sm90; the host has no such limit worth stating (1 GiB).
constexpr std::array kTargets = {
    TargetInfo{"gfx942", "gfx942", "epjit/targets/gfx942/prelude.h", Vendor::Amd, LaneExecution::Simt, 64,
               Fp8Format::E4M3FNUZ, Fp8Format::E5M2FNUZ, Fp8Conversion::AmdgcnPk, Fp4Support::None, false,
               64 * KiB, 16, DefaultToolchain::HipRtcOrClang, "gfx942"},
    TargetInfo{"gfx950", "gfx950", "epjit/targets/gfx950/prelude.h", Vendor::Amd, LaneExecution::Simt, 64,
               Fp8Format::E4M3FN, Fp8Format::E5M2, Fp8Conversion::AmdgcnPk, Fp4Support::Pack2, false,
               160 * KiB, 16, DefaultToolchain::HipRtcOrClang, "gfx950"},
    TargetInfo{"gfx1250", "gfx1250", "epjit/targets/gfx1250/prelude.h", Vendor::Amd, LaneExecution::Simt, 32,
               Fp8Format::E4M3FN, Fp8Format::E5M2, Fp8Conversion::AmdgcnPk, Fp4Support::Pack8, false,
               320 * KiB, 16, DefaultToolchain::HipRtcOrClang, "gfx1250"},
    TargetInfo{"sm90", "sm_90", "epjit/targets/sm90/prelude.h", Vendor::Nvidia, LaneExecution::Simt, 32,
               Fp8Format::E4M3FN, Fp8Format::E5M2, Fp8Conversion::PtxSatfinite, Fp4Support::None, true,
               227 * KiB, 16, DefaultToolchain::Nvrtc, "sm90"},
    TargetInfo{"host", "native", "epjit/targets/host/prelude.h", Vendor::Cpu, LaneExecution::Lanes, 32,
               Fp8Format::E4M3FN, Fp8Format::E5M2, Fp8Conversion::Software, Fp4Support::Software, false,
               1024 * 1024 * KiB, 16, DefaultToolchain::HostCxx, "host"},
    TargetInfo{"host-gfx942", "native", "epjit/targets/host/prelude.h", Vendor::Cpu, LaneExecution::Lanes, 64,
               Fp8Format::E4M3FNUZ, Fp8Format::E5M2FNUZ, Fp8Conversion::Software, Fp4Support::None, false,
               1024 * 1024 * KiB, 16, DefaultToolchain::HostCxx, "gfx942"},
    TargetInfo{"host-gfx950", "native", "epjit/targets/host/prelude.h", Vendor::Cpu, LaneExecution::Lanes, 64,
               Fp8Format::E4M3FN, Fp8Format::E5M2, Fp8Conversion::Software, Fp4Support::Software, false,
               1024 * 1024 * KiB, 16, DefaultToolchain::HostCxx, "gfx950"},
    TargetInfo{"host-gfx1250", "native", "epjit/targets/host/prelude.h", Vendor::Cpu, LaneExecution::Lanes, 32,
               Fp8Format::E4M3FN, Fp8Format::E5M2, Fp8Conversion::Software, Fp4Support::Software, false,
               1024 * 1024 * KiB, 16, DefaultToolchain::HostCxx, "gfx1250"},
};

}  // namespace

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

}  // namespace epjit
